-- rule_statuses: every status a rule cares about, one row per (rule_id, status): its due
-- status (is_due) and each of its void statuses (is_void), so that status_history can be
-- matched to rules by a plain equality join.
SELECT rule_id, status, bool_or(is_due) AS is_due, bool_or(is_void) AS is_void
FROM (
    SELECT rule_id, due_status AS status, true AS is_due, false AS is_void
    FROM rules
    UNION ALL
    SELECT rule_id, void_status AS status, false AS is_due, true AS is_void
    FROM (SELECT rule_id, unnest(void_statuses) AS void_status FROM rules)
)
GROUP BY rule_id, status
