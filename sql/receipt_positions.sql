-- receipt_positions: of each pair in receipts_in_play.sql, its first two SUCCEEDED
-- receipts up to the cut in (created_at, receipt_id) order: first_receipt_id closes an
-- open finding as RECEIPT (resolved.sql), second_at is when a DUPLICATE breaks
-- (candidates.sql). Aggregates rather than a sort, as first_at is known: the first
-- receipt is the smallest receipt_id at first_at, and the second is another receipt at
-- first_at or else the earliest after it.
SELECT effect, order_id,
       min(CASE WHEN created_at = first_at THEN receipt_id END) AS first_receipt_id,
       CASE
           WHEN sum(CASE WHEN created_at = first_at THEN 1 ELSE 0 END) >= 2 THEN min(first_at)
           ELSE min(CASE WHEN created_at > first_at THEN created_at END)
       END AS second_at
FROM receipts_in_play
GROUP BY effect, order_id
