-- effects_in_play: every (effect, order_id) this run may judge, read from effect_state
-- in one pass, with its state (due_at, voided, receipt_count, receipt_rows, first_at) and, for
-- possible findings, its kind:
--   MISSING   : due, not voided, no SUCCEEDED receipt, and due_at + grace > $list_since;
--   ORPHAN    : a SUCCEEDED receipt but never due, and first receipt + grace > $list_since;
--   UNREVERSED: on a rule with reverse_on_void, due, voided and a SUCCEEDED receipt
--               still in force (DESIGN §10.1): grace_ends = max(void_at, first receipt)
--               + grace, after the listing bound; it takes precedence over DUPLICATE;
--   DUPLICATE : due and two or more SUCCEEDED receipts (whether the second receipt
--               falls after the listing bound is decided by candidates.sql).
-- $list_since is the window start, or in a chain max(origin, $since - late_horizon).
-- Every watched state is kept too, whatever its kind (which may be NULL): skip verdicts
-- and the re-judging of the previous run's open findings read these rows alone.
-- grace_ends is NULL for DUPLICATE. The kinds exclude each other.
WITH judged AS (
    SELECT r.effect, s.order_id, s.due_at, s.voided, s.ok_count, s.first_at, s.receipt_rows, s.watched,
           r.trigger_event, r.priority,
           CASE
               WHEN s.due_at IS NOT NULL AND NOT s.voided AND s.ok_count = 0 THEN 'MISSING'
               WHEN s.due_at IS NULL AND s.ok_count >= 1 THEN 'ORPHAN'
               WHEN r.reverse_on_void AND s.due_at IS NOT NULL AND s.voided AND s.ok_count >= 1
                   THEN 'UNREVERSED'
               WHEN s.due_at IS NOT NULL AND s.ok_count >= 2 THEN 'DUPLICATE'
           END AS kind,
           CASE
               WHEN s.due_at IS NOT NULL AND NOT s.voided AND s.ok_count = 0 THEN s.due_at + r.grace
               WHEN s.due_at IS NULL AND s.ok_count >= 1 THEN s.first_at + r.grace
               WHEN r.reverse_on_void AND s.due_at IS NOT NULL AND s.voided AND s.ok_count >= 1
                   THEN greatest(s.void_at, s.first_at) + r.grace
           END AS grace_ends
    FROM effect_state s
    JOIN rules r ON r.rule_id = s.rule_id
    -- Only states that can have a kind, or are watched, go into the join with rules: most
    -- (due, one SUCCEEDED receipt, not voided) have none. The filter is what the kinds
    -- above require, reverse_on_void left out, so it drops no row this query keeps.
    WHERE s.watched
       OR (s.due_at IS NULL AND s.ok_count >= 1)
       OR (s.due_at IS NOT NULL AND (s.ok_count >= 2
                                     OR (s.voided AND s.ok_count >= 1)
                                     OR (NOT s.voided AND s.ok_count = 0)))
)
SELECT effect, order_id, kind, trigger_event, priority, ok_count AS receipt_count,
       receipt_rows, due_at, voided, grace_ends, first_at
FROM judged
WHERE kind = 'DUPLICATE'
   OR (kind IS NOT NULL AND grace_ends > $list_since)
   OR watched
