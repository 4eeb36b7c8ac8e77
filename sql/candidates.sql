-- candidates: the findings this run lists, before their ledger evidence.
--   MISSING, ORPHAN and UNREVERSED break when their grace ends: break_on = grace_ends
--   (effects_in_play.sql).
--   DUPLICATE breaks at the second SUCCEEDED receipt by (created_at, receipt_id):
--   break_on = its created_at (receipt_positions.sql). No other kind lacks grace_ends.
-- BREAK when break_on <= $cut, PENDING while the grace is still running. Listed when
-- break_on > $list_since (listed = true); a pair open in the previous run is kept
-- whatever its break_on (listed = false) so that rejudged.sql sees its current class.
WITH timed AS (
    SELECT s.effect, s.order_id, s.kind, s.trigger_event, s.priority, s.receipt_count, s.due_at,
           coalesce(s.grace_ends, d.second_at) AS break_on
    FROM effects_in_play s
    LEFT JOIN receipt_positions d ON d.effect = s.effect AND d.order_id = s.order_id
    WHERE s.kind IS NOT NULL
)
SELECT t.effect, t.order_id, t.kind, t.trigger_event, t.priority, t.receipt_count, t.due_at,
       t.break_on,
       CASE WHEN t.break_on <= $cut THEN 'BREAK' ELSE 'PENDING' END AS verdict,
       t.break_on > $list_since AS listed
FROM timed t
WHERE t.break_on > $list_since
   OR EXISTS (SELECT 1 FROM previous_open p WHERE p.effect = t.effect AND p.order_id = t.order_id)
