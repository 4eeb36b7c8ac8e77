-- mariadb_indexes.sql: the natural indexes, built after the load (faster than during it).
ALTER TABLE ledger         ADD INDEX ledger_order (order_id), ADD INDEX ledger_decided (decided_at);
ALTER TABLE status_history ADD INDEX history_order (order_id), ADD INDEX history_changed (changed_at);
ALTER TABLE receipts       ADD INDEX receipts_order (order_id), ADD INDEX receipts_created (created_at);
ANALYZE TABLE ledger, status_history, receipts, rules, rule_voids;
