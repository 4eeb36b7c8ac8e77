-- effect_due: per (effect, order_id), up to the cut, when the effect became owed
-- (due_at = earliest change to the rule's due status; NULL = never due) and whether
-- the order ever reached one of the rule's void statuses (voided).
SELECT s.effect,
       h.order_id,
       min(CASE WHEN s.is_due THEN h.changed_at END) AS due_at,
       bool_or(s.is_void) AS voided
FROM status_history h
JOIN rule_statuses s ON s.status = h.status
WHERE h.changed_at <= $cut
GROUP BY s.effect, h.order_id
