-- receipt_positions: the first two SUCCEEDED receipts up to the cut, by (created_at,
-- receipt_id), of the pairs that need them, from one pass over receipts:
--   * DUPLICATE pairs: the second receipt is when they break (candidates.sql);
--   * the previous run's open findings of a missing class that now have a SUCCEEDED
--     receipt: the first closes them as RECEIPT (resolved.sql).
-- position is 1 or 2.
WITH wanted AS (
    SELECT s.effect, s.order_id
    FROM effects_in_play s
    LEFT JOIN (
        SELECT DISTINCT effect, order_id
        FROM previous_open
        WHERE class IN ('SKIPPED_BUT_DUE', 'DONE_NO_RECEIPT', 'REVIEW_STALLED', 'NO_LEDGER_ENTRY')
    ) p ON p.effect = s.effect AND p.order_id = s.order_id
    WHERE s.kind = 'DUPLICATE' OR (s.receipt_count >= 1 AND p.order_id IS NOT NULL)
)
SELECT effect, order_id, receipt_id, created_at, position
FROM (
    SELECT x.effect, x.order_id, x.receipt_id, x.created_at,
           row_number() OVER (PARTITION BY x.effect, x.order_id ORDER BY x.created_at, x.receipt_id) AS position
    FROM receipts x
    JOIN wanted w ON w.effect = x.effect AND w.order_id = x.order_id
    WHERE x.status = 'SUCCEEDED' AND x.created_at <= $cut
)
WHERE position <= 2
