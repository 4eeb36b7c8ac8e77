-- previous_open: the open findings of the previous run (its BREAK discrepancies), each of
-- which this run re-judges (rejudged.sql) and lists again or resolves. Empty without a
-- previous run.
SELECT *
FROM previous_discrepancies
WHERE verdict = 'BREAK'
