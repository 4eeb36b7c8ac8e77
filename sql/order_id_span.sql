-- order_id_span: the smallest and largest order_id and the number of rows over the three
-- snapshot tables (answered from Parquet statistics), to split effect_state into
-- order_id ranges that each fit in memory.
SELECT min(lo) AS lo, max(hi) AS hi, sum(n) AS rows
FROM (
    SELECT min(order_id) AS lo, max(order_id) AS hi, count(*) AS n FROM status_history
    UNION ALL
    SELECT min(order_id), max(order_id), count(*) FROM receipts
    UNION ALL
    SELECT min(order_id), max(order_id), count(*) FROM ledger
)
