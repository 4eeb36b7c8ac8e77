-- judged_orders: the orders whose outputs this run can change (docs/SEMANTICS.md "What a
-- chained run judges"). A finding is listed only when it breaks after $list_since, and
-- every break is a row's time plus at most the longest grace: a due or void status
-- change, a receipt, a second receipt. So an order can enter an output only
--   * with a status change, receipt or ledger row after $reach = $list_since - max(grace)
--     (the window's skips, decided after $since, are among them), or
--   * through the previous run: its findings (open ones are re-judged) and skip
--     verdicts (pending ones are carried); every pair watched.sql keeps is among them.
-- Every other order of the lookback would give the same nothing it gave before.
SELECT DISTINCT order_id
FROM (
    SELECT order_id FROM status_history WHERE changed_at > $reach AND changed_at <= $cut
    UNION ALL
    SELECT order_id FROM receipts WHERE created_at > $reach AND created_at <= $cut
    UNION ALL
    SELECT order_id FROM ledger WHERE decided_at > $reach AND decided_at <= $cut
    UNION ALL
    SELECT order_id FROM previous_discrepancies
    UNION ALL
    SELECT order_id FROM previous_skip_verdicts
)
