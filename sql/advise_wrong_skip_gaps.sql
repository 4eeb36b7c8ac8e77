-- advise_wrong_skip_gaps: (`effect-recon advise --run`) for every WRONG skip of the run,
-- from its decision to the earliest change (by the cut) to the status its event announces
-- (expected_status, else the event type without its ORDER_ prefix), in microseconds:
-- negative when the status had been reached before the skip (the rebalance incident, or
-- a status read lagging behind it), positive when the status came only later (a message
-- ahead of its commit, a late callback). A scan must keep re-judging a skip at least as
-- long as the positive gaps, and as long as the status reads lag.
-- $cut: the snapshot's cut in microseconds since the epoch (Int64).
WITH changes AS (
    SELECT order_id, status, min(CAST(changed_at AS BIGINT)) AS changed_at
    FROM status_history
    WHERE CAST(changed_at AS BIGINT) <= $cut
    GROUP BY order_id, status
)
SELECT c.changed_at - CAST(v.decided_at AS BIGINT) AS gap
FROM skip_verdicts v
JOIN ledger l ON l.msg_id = v.msg_id
JOIN changes c
  ON c.order_id = v.order_id
 AND c.status = coalesce(l.expected_status, substr(l.event_type, 7))
WHERE v.verdict = 'WRONG'
