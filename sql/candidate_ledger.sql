-- candidate_ledger: the ledger rows up to the cut of the orders that have a candidate
-- finding, read in one pass over the ledger. trigger_evidence.sql reads them twice (the
-- rows of each candidate's trigger event, and every row of the order for the reorder
-- check); reading the ledger for each would decode the whole ledger twice, as the
-- candidates' orders are spread over every row group.
-- msg_id is copied out of the scanned pages (Utf8, not a view into them): this table is
-- kept until the findings are built, and its few rows of each batch would otherwise keep
-- all of the batch's pages.
SELECT arrow_cast(l.msg_id, 'Utf8') AS msg_id, l.order_id, l.event_type, l.action,
       l.observed_status, l.topic, l.kafka_partition, l.kafka_offset, l.consumer_id,
       l.decided_at
FROM ledger l
WHERE l.decided_at <= $cut
  AND l.order_id IN (SELECT order_id FROM candidates)
