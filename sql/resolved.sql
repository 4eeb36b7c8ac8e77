-- resolved: the previous run's open findings that this run closes, one row each with
-- why (rejudged.sql): RECEIPT, VOIDED, REVERSED, NOW_DUE, RECLASSIFIED or EXPIRED.
-- runs_open is the previous run's; receipt_id (RECEIPT only) is the first SUCCEEDED
-- receipt up to the cut by (created_at, receipt_id) (receipt_positions.sql). Sorted by
-- effect, order_id, class.
WITH closed AS (
    SELECT * FROM rejudged WHERE outcome NOT IN ('PERSISTING', 'UNCHECKED')
)
SELECT c.finding_id, c.effect, c.order_id, c.class, c.first_seen_run, c.first_break_on,
       c.runs_open, c.outcome AS resolution,
       CASE WHEN c.outcome = 'RECEIPT' THEN r.first_receipt_id END AS receipt_id
FROM closed c
LEFT JOIN receipt_positions r ON r.effect = c.effect AND r.order_id = c.order_id
ORDER BY c.effect, c.order_id, c.class
