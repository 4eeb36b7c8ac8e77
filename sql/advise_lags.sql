-- advise_lags: (`effect-recon advise`) every ledger row decided by the cut with its
-- decision lag, decided_at minus the earliest changed_at of the status its event
-- announces (expected_status, else the event type without its ORDER_ prefix), in
-- microseconds, and what the handler saw (to sort SKIPPED rows into behind / ahead / voided).
-- $cut: the snapshot's cut in microseconds since the epoch (Int64).
WITH changes AS (
    SELECT order_id, status, min(CAST(changed_at AS BIGINT)) AS changed_at
    FROM status_history
    WHERE CAST(changed_at AS BIGINT) <= $cut
    GROUP BY order_id, status
)
SELECT l.event_type,
       CAST(l.decided_at AS BIGINT) - c.changed_at AS lag,
       l.action,
       coalesce(l.observed_status, '') AS observed,
       c.status AS expected
FROM ledger l
JOIN changes c
  ON c.order_id = l.order_id
 AND c.status = coalesce(l.expected_status, substr(l.event_type, 7))
WHERE CAST(l.decided_at AS BIGINT) <= $cut
