-- duplicate_msg_ids: ledger msg_ids that occur more than once (the ledger's key must be
-- unique), among those whose hash repeats (the table repeated_key_hashes, filled from
-- ledger_key_hashes.sql); the first few, for the error message. Empty when the repeated
-- hashes were mere collisions.
SELECT msg_id, count(*) AS copies
FROM ledger
WHERE key_hash(msg_id) IN (SELECT h FROM repeated_key_hashes)
GROUP BY msg_id
HAVING count(*) > 1
ORDER BY msg_id
LIMIT 3
