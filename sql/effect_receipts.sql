-- effect_receipts: per (effect, order_id), up to the cut, the SUCCEEDED receipts of an
-- effect some rule names: how many (ok_count) and when the first one was created.
-- FAILED and REVERSED receipts, and effects no rule names, do not count.
SELECT r.effect,
       r.order_id,
       count(*) AS ok_count,
       min(r.created_at) AS first_at
FROM receipts r
WHERE r.status = 'SUCCEEDED'
  AND r.created_at <= $cut
  AND r.effect IN (SELECT effect FROM rules)
GROUP BY r.effect, r.order_id
