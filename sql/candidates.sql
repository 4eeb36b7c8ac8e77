-- candidates: the findings of the window ($since, $cut] before their ledger evidence.
--   MISSING and ORPHAN break when their grace ends: break_on = grace_ends (effects_in_play.sql).
--   DUPLICATE breaks at the second SUCCEEDED receipt by (created_at, receipt_id):
--   break_on = its created_at, listed only when inside the window.
-- BREAK when break_on <= $cut, PENDING while the grace is still running.
WITH second_receipts AS (
    SELECT effect, order_id, created_at AS second_at
    FROM (
        SELECT x.effect, x.order_id, x.created_at,
               row_number() OVER (PARTITION BY x.effect, x.order_id ORDER BY x.created_at, x.receipt_id) AS position
        FROM receipts x
        JOIN effects_in_play s ON s.effect = x.effect AND s.order_id = x.order_id AND s.kind = 'DUPLICATE'
        WHERE x.status = 'SUCCEEDED' AND x.created_at <= $cut
    )
    WHERE position = 2
),
timed AS (
    SELECT s.effect, s.order_id, s.kind, s.trigger_event, s.priority, s.receipt_count, s.due_at,
           coalesce(s.grace_ends, d.second_at) AS break_on
    FROM effects_in_play s
    LEFT JOIN second_receipts d ON d.effect = s.effect AND d.order_id = s.order_id
    WHERE s.kind IS NOT NULL
)
SELECT effect, order_id, kind, trigger_event, priority, receipt_count, due_at, break_on,
       CASE WHEN break_on <= $cut THEN 'BREAK' ELSE 'PENDING' END AS verdict
FROM timed
WHERE break_on > $since
