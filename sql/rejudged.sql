-- rejudged: each open finding F of the previous run judged again at $cut over the whole
-- snapshot (docs/SEMANTICS.md). The pair's current class K comes from findings.sql; the first
-- rule that holds gives the outcome:
--   PERSISTING   K is F's class;
--   RECEIPT      F is a missing class and a SUCCEEDED receipt exists;
--   VOIDED       F is a missing class and the order reached a void status;
--   RECLASSIFIED K is another class (that finding is listed with its own verdict);
--   REVERSED     F is a duplicate (an orphan or unreversed), receipts of the effect for
--                the order are in the snapshot, and fewer than two (no) SUCCEEDED ones
--                remain;
--   NOW_DUE      F is an orphan and the order reached the due status;
--   EXPIRED      none of the above can be decided and F broke first at or before
--                $expire_before (= $cut - max_age);
--   UNCHECKED    none of the above: the deciding rows are older than the snapshot covers;
--                F stays open as it was.
SELECT f.finding_id, f.effect, f.order_id, f.class, f.first_seen_run, f.first_break_on,
       f.runs_open,
       CASE
           WHEN k.class = f.class THEN 'PERSISTING'
           WHEN f.class IN ('SKIPPED_BUT_DUE', 'DONE_NO_RECEIPT', 'REVIEW_STALLED', 'NO_LEDGER_ENTRY')
                AND coalesce(s.receipt_count, 0) >= 1 THEN 'RECEIPT'
           WHEN f.class IN ('SKIPPED_BUT_DUE', 'DONE_NO_RECEIPT', 'REVIEW_STALLED', 'NO_LEDGER_ENTRY')
                AND coalesce(s.voided, false) THEN 'VOIDED'
           WHEN k.class IS NOT NULL THEN 'RECLASSIFIED'
           WHEN f.class = 'DUPLICATE_EFFECT' AND coalesce(s.receipt_rows, 0) >= 1
                AND coalesce(s.receipt_count, 0) < 2 THEN 'REVERSED'
           WHEN f.class IN ('ORPHAN_EFFECT', 'UNREVERSED_EFFECT') AND coalesce(s.receipt_rows, 0) >= 1
                AND coalesce(s.receipt_count, 0) = 0 THEN 'REVERSED'
           WHEN f.class = 'ORPHAN_EFFECT' AND s.due_at IS NOT NULL THEN 'NOW_DUE'
           WHEN f.first_break_on <= $expire_before THEN 'EXPIRED'
           ELSE 'UNCHECKED'
       END AS outcome
FROM previous_open f
LEFT JOIN effects_in_play s ON s.effect = f.effect AND s.order_id = f.order_id
LEFT JOIN findings k ON k.effect = f.effect AND k.order_id = f.order_id
