-- ledger_key_hashes: the 64-bit hash of every ledger msg_id (key_hash, see src/udf.rs);
-- the uniqueness check collects them and compares strings only where a hash repeats.
SELECT key_hash(msg_id) AS h
FROM ledger
