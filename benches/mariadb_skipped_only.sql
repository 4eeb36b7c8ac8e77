-- mariadb_skipped_only.sql: the narrow query a team often writes first: SKIPPED (or
-- REVOKED) trigger rows of orders that reached the due status, not voided, with no
-- SUCCEEDED receipt. It can only ever see SKIPPED_BUT_DUE: a DONE row without a receipt
-- (DONE_NO_RECEIPT), a stalled review and an order with no ledger row at all
-- (NO_LEDGER_ENTRY) are invisible to it, and a DONE row alongside the skip is not
-- looked at. Same variables as mariadb_missing.sql. Output: effect, order_id.
SELECT DISTINCT r.effect, l.order_id
FROM ledger l
JOIN rules r ON r.trigger_event = l.event_type
WHERE l.action IN ('SKIPPED', 'REVOKED')
  AND l.decided_at <= @cut
  AND EXISTS (SELECT 1 FROM status_history d
              WHERE d.order_id = l.order_id AND d.status = r.due_status
                AND d.changed_at <= @cut)
  AND NOT EXISTS (SELECT 1 FROM status_history d
                  WHERE d.order_id = l.order_id AND d.status = r.due_status
                    AND d.changed_at + INTERVAL r.grace_us MICROSECOND <= @since)
  AND NOT EXISTS (SELECT 1 FROM status_history v
                  JOIN rule_voids rv ON rv.effect = r.effect AND rv.status = v.status
                  WHERE v.order_id = l.order_id AND v.changed_at <= @cut)
  AND NOT EXISTS (SELECT 1 FROM receipts x
                  WHERE x.order_id = l.order_id AND x.effect = r.effect
                    AND x.status = 'SUCCEEDED' AND x.created_at <= @cut)
ORDER BY r.effect, l.order_id;
