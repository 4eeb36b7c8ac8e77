-- receipt_positions: the first two SUCCEEDED receipts up to the cut, ordered by
-- (created_at, receipt_id), of the pairs that need them, from one pass over receipts:
--   * DUPLICATE pairs: the second receipt is when they break (candidates.sql), second_at;
--   * the previous run's open findings of a missing class that now have a SUCCEEDED
--     receipt: the first closes them as RECEIPT (resolved.sql), first_receipt_id.
-- first_at (effects_in_play.sql) is the first receipt's created_at, so both are
-- aggregates rather than a sort: the first receipt is the smallest receipt_id at
-- first_at, and the second is another receipt at first_at or else the earliest after it.
WITH wanted AS (
    SELECT s.effect, s.order_id, s.first_at
    FROM effects_in_play s
    LEFT JOIN (
        SELECT DISTINCT effect, order_id
        FROM previous_open
        WHERE class IN ('SKIPPED_BUT_DUE', 'DONE_NO_RECEIPT', 'REVIEW_STALLED', 'NO_LEDGER_ENTRY')
    ) p ON p.effect = s.effect AND p.order_id = s.order_id
    WHERE s.kind = 'DUPLICATE' OR (s.receipt_count >= 1 AND p.order_id IS NOT NULL)
)
SELECT x.effect, x.order_id,
       min(CASE WHEN x.created_at = w.first_at THEN x.receipt_id END) AS first_receipt_id,
       CASE
           WHEN sum(CASE WHEN x.created_at = w.first_at THEN 1 ELSE 0 END) >= 2 THEN min(w.first_at)
           ELSE min(CASE WHEN x.created_at > w.first_at THEN x.created_at END)
       END AS second_at
FROM receipts x
JOIN wanted w ON w.effect = x.effect AND w.order_id = x.order_id
WHERE x.status = 'SUCCEEDED' AND x.created_at <= $cut
GROUP BY x.effect, x.order_id
