-- compensation_tasks: one task per open (BREAK) finding, NEW and PERSISTING, sorted like
-- discrepancies; the same task_id every night, attempt = the finding's runs_open.
--   EXECUTE_EFFECT for the four missing classes: command = the rule's compensation;
--     reopen_msg_id = the evidence msg_id for SKIPPED_BUT_DUE and REVIEW_STALLED.
--   REVERSE_EFFECT for DUPLICATE_EFFECT: every SUCCEEDED receipt up to the cut but the
--     first, in (created_at, receipt_id) order; for UNREVERSED_EFFECT every one of them
--     (DESIGN §10.1), from receipts_in_play.sql. command = the rule's reversal (NULL on a
--     rule without one).
--   INVESTIGATE for ORPHAN_EFFECT.
-- Outside their own action, command, reopen_msg_id and reverse_receipt_ids are NULL.
-- idempotency_key is the key of the effect, not of the finding (DESIGN §10.2): the same
-- text on every path and every night, whatever the class: '{effect}:{order_id}' to
-- execute, with ':reverse' or ':investigate' appended for the other two actions.
-- A finding not re-checked on this snapshot (rechecked = false) keeps the previous run's
-- task as it was, with attempt updated and its key made from its own columns.
WITH breaks AS (
    SELECT * FROM discrepancies WHERE verdict = 'BREAK' AND rechecked
),
receipts_to_reverse AS (
    SELECT effect, order_id, receipt_id, created_at
    FROM (
        SELECT x.effect, x.order_id, x.receipt_id, x.created_at, b.class,
               row_number() OVER (PARTITION BY x.effect, x.order_id ORDER BY x.created_at, x.receipt_id) AS position
        FROM receipts_in_play x
        JOIN breaks b ON b.effect = x.effect AND b.order_id = x.order_id
                     AND b.class IN ('DUPLICATE_EFFECT', 'UNREVERSED_EFFECT')
    )
    WHERE position > 1 OR class = 'UNREVERSED_EFFECT'
),
reversals AS (
    SELECT effect, order_id, array_agg(receipt_id ORDER BY created_at, receipt_id) AS receipt_ids
    FROM receipts_to_reverse
    GROUP BY effect, order_id
)
SELECT b.finding_id AS task_id,
       b.effect, b.order_id, b.class,
       CASE b.class
           WHEN 'DUPLICATE_EFFECT' THEN 'REVERSE_EFFECT'
           WHEN 'UNREVERSED_EFFECT' THEN 'REVERSE_EFFECT'
           WHEN 'ORPHAN_EFFECT' THEN 'INVESTIGATE'
           ELSE 'EXECUTE_EFFECT'
       END AS action,
       CASE WHEN b.class IN ('SKIPPED_BUT_DUE', 'DONE_NO_RECEIPT', 'REVIEW_STALLED', 'NO_LEDGER_ENTRY')
                THEN r.compensation
            WHEN b.class IN ('DUPLICATE_EFFECT', 'UNREVERSED_EFFECT') THEN r.reversal
       END AS command,
       CASE WHEN b.class IN ('SKIPPED_BUT_DUE', 'REVIEW_STALLED') THEN b.msg_id END AS reopen_msg_id,
       v.receipt_ids AS reverse_receipt_ids,
       b.priority,
       b.effect || ':' || CAST(b.order_id AS VARCHAR) || CASE b.class
           WHEN 'DUPLICATE_EFFECT' THEN ':reverse'
           WHEN 'UNREVERSED_EFFECT' THEN ':reverse'
           WHEN 'ORPHAN_EFFECT' THEN ':investigate'
           ELSE ''
       END AS idempotency_key,
       b.runs_open AS attempt
FROM breaks b
JOIN rules r ON r.effect = b.effect
LEFT JOIN reversals v ON v.effect = b.effect AND v.order_id = b.order_id
                     AND b.class IN ('DUPLICATE_EFFECT', 'UNREVERSED_EFFECT')
UNION ALL
SELECT t.task_id, t.effect, t.order_id, t.class, t.action, t.command, t.reopen_msg_id,
       t.reverse_receipt_ids, t.priority,
       t.effect || ':' || CAST(t.order_id AS VARCHAR) || CASE t.action
           WHEN 'REVERSE_EFFECT' THEN ':reverse'
           WHEN 'INVESTIGATE' THEN ':investigate'
           ELSE ''
       END AS idempotency_key,
       d.runs_open AS attempt
FROM discrepancies d
JOIN previous_tasks t ON t.task_id = d.finding_id
WHERE NOT d.rechecked
ORDER BY effect, order_id, class
