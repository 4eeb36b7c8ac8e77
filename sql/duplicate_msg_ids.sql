-- duplicate_msg_ids: ledger msg_ids that occur more than once (the ledger's key must be
-- unique); the first few, for the error message. Grouping 64-bit hashes first keeps the
-- check fast and small; only msg_ids whose hash repeats are compared as strings.
WITH repeated_hashes AS (
    SELECT key_hash(msg_id) AS h
    FROM ledger
    GROUP BY key_hash(msg_id)
    HAVING count(*) > 1
)
SELECT msg_id, count(*) AS copies
FROM ledger
WHERE key_hash(msg_id) IN (SELECT h FROM repeated_hashes)
GROUP BY msg_id
HAVING count(*) > 1
ORDER BY msg_id
LIMIT 3
