-- duplicate_msg_ids: ledger msg_ids that occur more than once (the ledger's key must be
-- unique); the first few, for the error message.
SELECT msg_id, count(*) AS copies
FROM ledger
GROUP BY msg_id
HAVING count(*) > 1
ORDER BY msg_id
LIMIT 3
