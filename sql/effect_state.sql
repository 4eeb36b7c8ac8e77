-- effect_state: what was owed and what happened, per (rule_id, order_id) up to the cut:
--   due_at   : earliest change to the rule's due status (NULL: never due);
--   voided   : the order reached one of the rule's void statuses, whenever: void_at is
--              set (every change kept passed `changed_at <= $cut`, so it has a time);
--   void_at  : the earliest such change (DESIGN §10.1: when an effect must be undone);
--   ok_count : SUCCEEDED receipts of the effect (FAILED and REVERSED do not count,
--              effects no rule names are ignored); first_at: the earliest of them;
--   receipt_rows : receipts of the effect in any status (a reversal leaves its row);
--   watched  : a SKIPPED ledger row of the rule's trigger event was decided in the window
--              ($since, $cut] (its skip verdict needs this state), or the pair is in
--              watched.sql (an open finding or a carried skip of the previous run).
-- One aggregation over status changes, receipts and skipped ledger rows together rather
-- than joins of large relations: no large hash table is built, and aggregations spill
-- under a memory limit. Grouped by the rule's integer id: integer keys hash faster.
-- Only orders in [$lo, $hi]: a large day is aggregated one order_id range at a time, each
-- range reading only its own row groups of the order_id-sorted files.
SELECT rule_id,
       order_id,
       min(due_at) AS due_at,
       min(void_at) IS NOT NULL AS voided,
       min(void_at) AS void_at,
       sum(ok) AS ok_count,
       min(receipt_at) AS first_at,
       sum(receipt_row) AS receipt_rows,
       bool_or(is_watched) AS watched
FROM (
    SELECT s.rule_id, h.order_id,
           CASE WHEN s.is_due THEN h.changed_at END AS due_at,
           CASE WHEN s.is_void THEN h.changed_at END AS void_at,
           0 AS ok,
           NULL AS receipt_at,
           0 AS receipt_row,
           false AS is_watched
    FROM status_history h
    JOIN rule_statuses s ON s.status = h.status
    WHERE h.changed_at <= $cut AND h.order_id BETWEEN $lo AND $hi
    UNION ALL
    SELECT u.rule_id, r.order_id,
           NULL AS due_at,
           NULL AS void_at,
           CASE WHEN r.status = 'SUCCEEDED' THEN 1 ELSE 0 END AS ok,
           CASE WHEN r.status = 'SUCCEEDED' THEN r.created_at END AS receipt_at,
           1 AS receipt_row,
           false AS is_watched
    FROM receipts r
    JOIN rules u ON u.effect = r.effect
    WHERE r.created_at <= $cut AND r.order_id BETWEEN $lo AND $hi
    UNION ALL
    SELECT u.rule_id, l.order_id,
           NULL AS due_at,
           NULL AS void_at,
           0 AS ok,
           NULL AS receipt_at,
           0 AS receipt_row,
           true AS is_watched
    FROM ledger l
    JOIN rules u ON u.trigger_event = l.event_type
    WHERE l.action = 'SKIPPED' AND l.decided_at > $since AND l.decided_at <= $cut
      AND l.order_id BETWEEN $lo AND $hi
    UNION ALL
    SELECT w.rule_id, w.order_id,
           NULL AS due_at,
           NULL AS void_at,
           0 AS ok,
           NULL AS receipt_at,
           0 AS receipt_row,
           true AS is_watched
    FROM watched w
    WHERE w.order_id BETWEEN $lo AND $hi
)
GROUP BY rule_id, order_id
