-- trigger_evidence: per (order_id, event_type) of a candidate, the outcome of its trigger
-- rows up to the cut (DONE > SKIPPED/REVOKED > PENDING_REVIEW; unknown actions ignored)
-- and the evidence row: among the rows giving that outcome, the earliest decided_at,
-- ties broken by the smallest msg_id. reorder_suspected: another ledger row of the same
-- order, topic and partition has a larger offset but was decided earlier.
-- Both read candidate_ledger.sql: every ledger row up to the cut of a candidate's order.
WITH trigger_rows AS (
    SELECT l.msg_id, l.order_id, l.event_type, l.action, l.observed_status, l.topic,
           l.kafka_partition, l.kafka_offset, l.consumer_id, l.decided_at,
           CASE l.action
               WHEN 'DONE' THEN 1
               WHEN 'SKIPPED' THEN 2
               WHEN 'REVOKED' THEN 2
               WHEN 'PENDING_REVIEW' THEN 3
           END AS outcome_rank
    FROM candidate_ledger l
    WHERE l.action IN ('DONE', 'SKIPPED', 'REVOKED', 'PENDING_REVIEW')
      AND EXISTS (SELECT 1 FROM candidates c WHERE c.order_id = l.order_id AND c.trigger_event = l.event_type)
),
evidence AS (
    SELECT *
    FROM (
        SELECT t.*,
               row_number() OVER (PARTITION BY t.order_id, t.event_type ORDER BY t.outcome_rank, t.decided_at, t.msg_id) AS position
        FROM trigger_rows t
    )
    WHERE position = 1
)
-- reorder_suspected in the same pass over the ledger rows of the evidence rows' orders;
-- a NULL topic, partition or offset matches nothing, so such a row is never suspected.
SELECT e.order_id, e.event_type,
       CASE e.outcome_rank WHEN 1 THEN 'DONE' WHEN 2 THEN 'SKIPPED' ELSE 'PENDING_REVIEW' END AS outcome,
       e.msg_id, e.action AS ledger_action, e.observed_status, e.topic, e.kafka_partition,
       e.kafka_offset, e.consumer_id, e.decided_at,
       coalesce(bool_or(o.kafka_offset > e.kafka_offset AND o.decided_at < e.decided_at), false) AS reorder_suspected
FROM evidence e
LEFT JOIN candidate_ledger o
  ON o.order_id = e.order_id AND o.topic = e.topic AND o.kafka_partition = e.kafka_partition
GROUP BY e.order_id, e.event_type, e.outcome_rank, e.msg_id, e.action, e.observed_status, e.topic,
         e.kafka_partition, e.kafka_offset, e.consumer_id, e.decided_at
