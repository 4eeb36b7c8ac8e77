-- candidates: the findings of the window ($since, $cut] before their ledger evidence.
--   MISSING   : due, not voided, no SUCCEEDED receipt; break_on = due_at + grace.
--   ORPHAN    : a SUCCEEDED receipt but never due; break_on = first receipt + grace.
--   DUPLICATE : due and two or more SUCCEEDED receipts; break_on = the second receipt.
-- BREAK when break_on is inside the window, PENDING while the grace has not passed.
-- At most one row per (effect, order_id): the three kinds exclude each other.
WITH judged AS (
    SELECT s.effect, s.order_id, s.due_at, s.ok_count, r.trigger_event, r.priority,
           CASE
               WHEN s.due_at IS NOT NULL AND NOT s.voided AND s.ok_count = 0 THEN 'MISSING'
               WHEN s.due_at IS NULL AND s.ok_count >= 1 THEN 'ORPHAN'
               WHEN s.due_at IS NOT NULL AND s.ok_count >= 2 THEN 'DUPLICATE'
           END AS kind,
           CASE
               WHEN s.due_at IS NOT NULL AND NOT s.voided AND s.ok_count = 0 THEN s.due_at + r.grace
               WHEN s.due_at IS NULL AND s.ok_count >= 1 THEN s.first_at + r.grace
           END AS grace_ends
    FROM effect_state s
    JOIN rules r ON r.effect = s.effect
),
second_receipts AS (
    -- The second SUCCEEDED receipt by (created_at, receipt_id) of each possible duplicate.
    SELECT effect, order_id, created_at AS second_at
    FROM (
        SELECT x.effect, x.order_id, x.created_at,
               row_number() OVER (PARTITION BY x.effect, x.order_id ORDER BY x.created_at, x.receipt_id) AS position
        FROM receipts x
        JOIN judged j ON j.effect = x.effect AND j.order_id = x.order_id AND j.kind = 'DUPLICATE'
        WHERE x.status = 'SUCCEEDED' AND x.created_at <= $cut
    )
    WHERE position = 2
)
SELECT j.effect, j.order_id, j.kind, j.trigger_event, j.priority, j.ok_count AS receipt_count,
       j.due_at,
       coalesce(j.grace_ends, d.second_at) AS break_on,
       CASE WHEN coalesce(j.grace_ends, d.second_at) <= $cut THEN 'BREAK' ELSE 'PENDING' END AS verdict
FROM judged j
LEFT JOIN second_receipts d ON d.effect = j.effect AND d.order_id = j.order_id
WHERE j.kind IS NOT NULL
  AND coalesce(j.grace_ends, d.second_at) > $since
