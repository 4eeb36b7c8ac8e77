-- effects_in_play: every (effect, order_id) this window may judge, read from effect_state
-- in one pass, with its state (due_at, voided, receipt_count) and, for possible findings,
-- its kind:
--   MISSING   : due, not voided, no SUCCEEDED receipt, and due_at + grace > $since;
--   ORPHAN    : a SUCCEEDED receipt but never due, and first receipt + grace > $since;
--   DUPLICATE : due and two or more SUCCEEDED receipts (whether the second receipt
--               falls in the window is decided by candidates.sql).
-- Every state with a SKIPPED ledger row of its trigger in the window is kept too (kind
-- may then be NULL): skip_verdicts.sql judges those skips from these rows alone.
-- grace_ends is NULL for DUPLICATE. The kinds exclude each other.
WITH judged AS (
    SELECT r.effect, s.order_id, s.due_at, s.voided, s.ok_count, s.skipped, r.trigger_event, r.priority,
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
    JOIN rules r ON r.rule_id = s.rule_id
)
SELECT effect, order_id, kind, trigger_event, priority, ok_count AS receipt_count, due_at, voided, grace_ends
FROM judged
WHERE kind = 'DUPLICATE'
   OR (kind IS NOT NULL AND grace_ends > $since)
   OR skipped
