-- findings: every candidate with its class, finding_id and ledger evidence (docs/SEMANTICS.md),
-- before the lifecycle: the current class of each pair, listed or not.
-- finding_id = first 8 bytes (16 hex digits) of SHA-256 of '{effect}:{order_id}:{class}'.
WITH classified AS (
    SELECT c.effect, c.order_id,
           CASE c.kind
               WHEN 'ORPHAN' THEN 'ORPHAN_EFFECT'
               WHEN 'DUPLICATE' THEN 'DUPLICATE_EFFECT'
               WHEN 'UNREVERSED' THEN 'UNREVERSED_EFFECT'
               ELSE CASE e.outcome
                        WHEN 'SKIPPED' THEN 'SKIPPED_BUT_DUE'
                        WHEN 'DONE' THEN 'DONE_NO_RECEIPT'
                        WHEN 'PENDING_REVIEW' THEN 'REVIEW_STALLED'
                        ELSE 'NO_LEDGER_ENTRY'
                    END
           END AS class,
           c.verdict, c.due_at, c.break_on,
           e.ledger_action, e.msg_id, e.observed_status, e.topic, e.kafka_partition,
           e.kafka_offset, e.consumer_id, e.decided_at,
           c.receipt_count,
           coalesce(e.reorder_suspected, false) AS reorder_suspected,
           c.priority,
           c.listed
    FROM candidates c
    LEFT JOIN trigger_evidence e ON e.order_id = c.order_id AND e.event_type = c.trigger_event
)
SELECT substr(encode(sha256(concat(effect, ':', CAST(order_id AS VARCHAR), ':', class)), 'hex'), 1, 16) AS finding_id,
       effect, order_id, class, verdict, due_at, break_on, ledger_action, msg_id,
       observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at,
       receipt_count, reorder_suspected, priority, listed
FROM classified
