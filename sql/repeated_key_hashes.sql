-- repeated_key_hashes: the ledger msg_id hashes (key_hash, see src/udf.rs) that occur more
-- than once — the uniqueness check of a cluster engine, where only these few rows leave
-- the executors (in process, every hash of ledger_key_hashes.sql is sorted instead).
SELECT h
FROM (SELECT key_hash(msg_id) AS h FROM ledger) AS hashes
GROUP BY h
HAVING count(*) > 1
