-- bare_scan.sql: the practical floor. Reads and decodes every column the reconciliation
-- reads from the three snapshot tables (ledger: all but expected_status; receipts: all but
-- msg_id) and does nothing else: one cheap aggregate per column, written so that neither
-- engine can answer it from Parquet statistics (a bare max(col) or count(*) can be).
-- Runs unchanged on DataFusion (`effect-recon sql`) and on DuckDB (benches/compare.py).
SELECT *
FROM (SELECT sum(length(msg_id)) AS l_msg_id, sum(order_id) AS l_order_id,
             sum(length(event_type)) AS l_event_type, sum(length(action)) AS l_action,
             sum(length(observed_status)) AS l_observed_status, sum(length(topic)) AS l_topic,
             sum(kafka_partition) AS l_kafka_partition, sum(kafka_offset) AS l_kafka_offset,
             sum(length(consumer_id)) AS l_consumer_id, max(decided_at + INTERVAL '1 second') AS l_decided_at
      FROM ledger) l
CROSS JOIN
     (SELECT sum(order_id) AS h_order_id, sum(length(status)) AS h_status,
             max(changed_at + INTERVAL '1 second') AS h_changed_at
      FROM status_history) h
CROSS JOIN
     (SELECT sum(length(receipt_id)) AS r_receipt_id, sum(order_id) AS r_order_id,
             sum(length(effect)) AS r_effect, sum(length(status)) AS r_status,
             max(created_at + INTERVAL '1 second') AS r_created_at
      FROM receipts) r
