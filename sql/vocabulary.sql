-- vocabulary: the distinct values the rules are matched against, up to the cut: receipt
-- effects, ledger event types and order statuses, one row per (kind, value). A rule
-- naming a value absent here matches nothing, which is most often a typo (rule_check.rs).
SELECT 'effect' AS kind, effect AS value FROM receipts WHERE created_at <= $cut GROUP BY effect
UNION ALL
SELECT 'event_type' AS kind, event_type AS value FROM ledger WHERE decided_at <= $cut GROUP BY event_type
UNION ALL
SELECT 'status' AS kind, status AS value FROM status_history WHERE changed_at <= $cut GROUP BY status
