-- effect_state: what was owed and what happened, per (effect, order_id) that has a
-- relevant status change or a SUCCEEDED receipt: due_at, voided, ok_count, first_at.
-- Orders absent here were never due and got nothing.
SELECT coalesce(d.effect, k.effect) AS effect,
       coalesce(d.order_id, k.order_id) AS order_id,
       d.due_at,
       coalesce(d.voided, false) AS voided,
       coalesce(k.ok_count, 0) AS ok_count,
       k.first_at
FROM effect_due d
FULL OUTER JOIN effect_receipts k ON k.effect = d.effect AND k.order_id = d.order_id
