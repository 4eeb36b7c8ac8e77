-- bare_scan.sql: the practical floor. Reads every column the reconciliation reads from the
-- three snapshot tables (ledger: all but expected_status; receipts: all but msg_id) and
-- nothing more: one count and one max per column. Runs unchanged on DataFusion
-- (`effect-recon sql`) and on DuckDB (benches/compare.py).
SELECT *
FROM (SELECT count(*) AS ledger_rows, max(msg_id) AS l_msg_id, max(order_id) AS l_order_id,
             max(event_type) AS l_event_type, max(action) AS l_action,
             max(observed_status) AS l_observed_status, max(topic) AS l_topic,
             max(kafka_partition) AS l_kafka_partition, max(kafka_offset) AS l_kafka_offset,
             max(consumer_id) AS l_consumer_id, max(decided_at) AS l_decided_at
      FROM ledger) l
CROSS JOIN
     (SELECT count(*) AS history_rows, max(order_id) AS h_order_id, max(status) AS h_status,
             max(changed_at) AS h_changed_at
      FROM status_history) h
CROSS JOIN
     (SELECT count(*) AS receipts_rows, max(receipt_id) AS r_receipt_id, max(order_id) AS r_order_id,
             max(effect) AS r_effect, max(status) AS r_status, max(created_at) AS r_created_at
      FROM receipts) r
