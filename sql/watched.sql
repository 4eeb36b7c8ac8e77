-- watched: the (rule_id, order_id) pairs whose state this run must compute whatever
-- their window: the previous run's open findings (re-judged at $cut) and its PENDING skip
-- verdicts decided at or before $since (carried and judged again; a skip decided inside
-- the window is the window's own).
SELECT u.rule_id, f.order_id
FROM previous_open f
JOIN rules u ON u.effect = f.effect
UNION
SELECT u.rule_id, k.order_id
FROM previous_skip_verdicts k
JOIN rules u ON u.trigger_event = k.event_type
WHERE k.verdict = 'PENDING' AND k.decided_at <= $since
