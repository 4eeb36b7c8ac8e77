-- mariadb_missing.sql: the approach teams start from, over the same day in MariaDB: every
-- MISSING finding of docs/SEMANTICS.md (all three rules, all four classes, BREAK and PENDING)
-- with NOT EXISTS subqueries. Needs @cut, @since (DATETIME(6), UTC) and @lo = @since
-- minus the longest grace (lets the changed_at index bound the scan of due changes).
-- Output: effect, order_id, class, verdict.
SELECT f.effect, f.order_id,
       CASE
           WHEN EXISTS (SELECT 1 FROM ledger l
                        WHERE l.order_id = f.order_id AND l.event_type = f.trigger_event
                          AND l.decided_at <= @cut AND l.action = 'DONE')
               THEN 'DONE_NO_RECEIPT'
           WHEN EXISTS (SELECT 1 FROM ledger l
                        WHERE l.order_id = f.order_id AND l.event_type = f.trigger_event
                          AND l.decided_at <= @cut AND l.action IN ('SKIPPED', 'REVOKED'))
               THEN 'SKIPPED_BUT_DUE'
           WHEN EXISTS (SELECT 1 FROM ledger l
                        WHERE l.order_id = f.order_id AND l.event_type = f.trigger_event
                          AND l.decided_at <= @cut AND l.action = 'PENDING_REVIEW')
               THEN 'REVIEW_STALLED'
           ELSE 'NO_LEDGER_ENTRY'
       END AS class,
       CASE WHEN f.due_at + INTERVAL f.grace_us MICROSECOND <= @cut THEN 'BREAK' ELSE 'PENDING' END AS verdict
FROM (
    -- the first change of each order to a rule's due status, whose grace ends after @since
    SELECT DISTINCT r.effect, r.trigger_event, r.grace_us, d.order_id, d.changed_at AS due_at
    FROM rules r
    JOIN status_history d ON d.status = r.due_status
    WHERE d.changed_at > @lo
      AND d.changed_at <= @cut
      AND d.changed_at + INTERVAL r.grace_us MICROSECOND > @since
      AND NOT EXISTS (SELECT 1 FROM status_history e
                      WHERE e.order_id = d.order_id AND e.status = r.due_status
                        AND e.changed_at < d.changed_at)
      -- not voided up to the cut
      AND NOT EXISTS (SELECT 1 FROM status_history v
                      JOIN rule_voids rv ON rv.effect = r.effect AND rv.status = v.status
                      WHERE v.order_id = d.order_id AND v.changed_at <= @cut)
      -- no SUCCEEDED receipt up to the cut
      AND NOT EXISTS (SELECT 1 FROM receipts x
                      WHERE x.order_id = d.order_id AND x.effect = r.effect
                        AND x.status = 'SUCCEEDED' AND x.created_at <= @cut)
) f
ORDER BY f.effect, f.order_id;
