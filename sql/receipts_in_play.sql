-- receipts_in_play: the SUCCEEDED receipts up to the cut of the pairs whose receipts a
-- later query lists, read in one pass over receipts:
--   * DUPLICATE pairs: the second receipt is when they break (receipt_positions.sql,
--     candidates.sql), and all but the first are reversed (compensation_tasks.sql);
--   * UNREVERSED pairs: every one is reversed (compensation_tasks.sql);
--   * the previous run's open findings of a missing class that now have a SUCCEEDED
--     receipt: the first closes them as RECEIPT (receipt_positions.sql, resolved.sql).
-- first_at (effects_in_play.sql) is the pair's earliest SUCCEEDED receipt time.
-- receipt_id is copied out of the scanned pages (Utf8, not a view into them): this table is
-- kept to the end of the run, and its few rows of each batch would otherwise keep all of
-- the batch's pages, and be counted as that much by the sorts that read them.
WITH wanted AS (
    SELECT s.effect, s.order_id, s.first_at
    FROM effects_in_play s
    LEFT JOIN (
        SELECT DISTINCT effect, order_id
        FROM previous_open
        WHERE class IN ('SKIPPED_BUT_DUE', 'DONE_NO_RECEIPT', 'REVIEW_STALLED', 'NO_LEDGER_ENTRY')
    ) p ON p.effect = s.effect AND p.order_id = s.order_id
    WHERE s.kind IN ('DUPLICATE', 'UNREVERSED') OR (s.receipt_count >= 1 AND p.order_id IS NOT NULL)
)
SELECT x.effect, x.order_id, arrow_cast(x.receipt_id, 'Utf8') AS receipt_id, x.created_at, w.first_at
FROM receipts x
JOIN wanted w ON w.effect = x.effect AND w.order_id = x.order_id
WHERE x.status = 'SUCCEEDED' AND x.created_at <= $cut
