-- skip_verdicts: a verdict for every SKIPPED ledger row decided in ($since, $cut]
-- (lifecycle NEW) and for every PENDING skip verdict of the previous run decided at or
-- before $since (lifecycle CARRIED: judged again each night until final), over the
-- rules R triggered by its event_type (none: CORRECT):
--   WRONG    some rule is due, not voided, without receipt, and its grace has passed;
--   PENDING  some rule is due, not voided, without receipt (grace running), or no rule
--            is due at all and decided_at + max(grace) is after the cut;
--   HARMLESS some rule is due, not voided, and has a receipt;
--   CORRECT  otherwise.
-- The state of each (rule, order) comes from effects_in_play, which keeps the state of
-- every rule whose trigger was skipped in the window or carried (watched.sql); a pair
-- absent there was never due and got nothing; a skip whose event_type triggers no rule
-- has every flag false (CORRECT). Skipped rows are read once: msg_id is unique (the run
-- checks it), so each group is one skip. Sorted by order_id, decided_at, msg_id.
-- msg_id is copied out of the scanned pages (Utf8, not a view into them): the few skipped
-- rows kept of each batch would otherwise hold all of its pages while they wait for the
-- join (at 10M orders, 600 MB of views for 74k rows).
WITH skipped AS (
    SELECT arrow_cast(msg_id, 'Utf8') AS msg_id, order_id, event_type, decided_at, 'NEW' AS lifecycle
    FROM ledger
    WHERE action = 'SKIPPED' AND decided_at > $since AND decided_at <= $cut
    UNION ALL
    SELECT msg_id, order_id, event_type, decided_at, 'CARRIED' AS lifecycle
    FROM previous_skip_verdicts
    WHERE verdict = 'PENDING' AND decided_at <= $since
),
per_skip AS (
    SELECT k.msg_id, k.order_id, k.event_type, k.decided_at, k.lifecycle,
           bool_or(s.due_at IS NOT NULL AND NOT s.voided AND s.receipt_count = 0 AND s.due_at + r.grace <= $cut) AS wrong,
           bool_or(s.due_at IS NOT NULL AND NOT s.voided AND s.receipt_count = 0) AS owed,
           bool_or(s.due_at IS NOT NULL) AS any_due,
           bool_or(k.decided_at + r.grace > $cut) AS young,
           bool_or(s.due_at IS NOT NULL AND NOT s.voided AND s.receipt_count >= 1) AS done
    FROM skipped k
    LEFT JOIN rules r ON r.trigger_event = k.event_type
    LEFT JOIN effects_in_play s ON s.effect = r.effect AND s.order_id = k.order_id
    GROUP BY k.msg_id, k.order_id, k.event_type, k.decided_at, k.lifecycle
)
SELECT msg_id, order_id, event_type, decided_at,
       CASE
           WHEN coalesce(wrong, false) THEN 'WRONG'
           WHEN coalesce(owed, false) OR (NOT coalesce(any_due, false) AND coalesce(young, false)) THEN 'PENDING'
           WHEN coalesce(done, false) THEN 'HARMLESS'
           ELSE 'CORRECT'
       END AS verdict,
       lifecycle
FROM per_skip
ORDER BY order_id, decided_at, msg_id
