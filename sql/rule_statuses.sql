-- rule_statuses: every status a rule cares about, one row per (effect, status):
-- its due status (is_due) and each of its void statuses (is_void), so that
-- status_history can be matched to rules by a plain equality join.
SELECT effect, status, bool_or(is_due) AS is_due, bool_or(is_void) AS is_void
FROM (
    SELECT effect, due_status AS status, true AS is_due, false AS is_void
    FROM rules
    UNION ALL
    SELECT effect, void_status AS status, false AS is_due, true AS is_void
    FROM (SELECT effect, unnest(void_statuses) AS void_status FROM rules)
)
GROUP BY effect, status
