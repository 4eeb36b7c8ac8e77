-- discrepancies: the findings of this run, sorted by effect, order_id, class (docs/OUTPUTS.md,
-- with the lifecycle columns):
--   * every finding listed by the window (break_on after the listing bound);
--   * every open finding of the previous run still of its class (PERSISTING, BREAK, its
--     evidence recomputed here) and every pair reclassified since (its new finding, with
--     its own verdict, whatever its break_on);
--   * every open finding that cannot be re-checked on this snapshot (rejudged.sql
--     UNCHECKED): the previous row as it was, rechecked = false.
-- lifecycle: PERSISTING when the finding was open in the previous run, else NEW; on
-- PENDING rows lifecycle, first_seen_run and first_break_on are NULL and runs_open is 0.
WITH current AS (
    SELECT f.*, p.finding_id IS NOT NULL AS was_open,
           p.first_seen_run AS open_since_run, p.first_break_on AS open_since,
           p.runs_open AS open_runs
    FROM findings f
    LEFT JOIN previous_open p ON p.finding_id = f.finding_id
    LEFT JOIN rejudged j ON j.effect = f.effect AND j.order_id = f.order_id
    WHERE f.listed OR p.finding_id IS NOT NULL OR j.outcome = 'RECLASSIFIED'
)
SELECT finding_id, effect, order_id, class,
       CASE WHEN was_open THEN 'BREAK' ELSE verdict END AS verdict,
       due_at, break_on, ledger_action, msg_id, observed_status, topic, kafka_partition,
       kafka_offset, consumer_id, decided_at, receipt_count, reorder_suspected, priority,
       CASE WHEN was_open THEN 'PERSISTING' WHEN verdict = 'BREAK' THEN 'NEW' END AS lifecycle,
       CASE WHEN was_open THEN open_since_run WHEN verdict = 'BREAK' THEN $run_id END AS first_seen_run,
       CASE WHEN was_open THEN open_since WHEN verdict = 'BREAK' THEN break_on END AS first_break_on,
       CASE WHEN was_open THEN open_runs + 1 WHEN verdict = 'BREAK' THEN 1 ELSE 0 END AS runs_open,
       true AS rechecked
FROM current
UNION ALL
SELECT p.finding_id, p.effect, p.order_id, p.class, p.verdict, p.due_at, p.break_on,
       p.ledger_action, p.msg_id, p.observed_status, p.topic, p.kafka_partition,
       p.kafka_offset, p.consumer_id, p.decided_at, p.receipt_count, p.reorder_suspected,
       p.priority,
       'PERSISTING' AS lifecycle, p.first_seen_run, p.first_break_on,
       p.runs_open + 1 AS runs_open,
       false AS rechecked
FROM previous_open p
JOIN rejudged j ON j.finding_id = p.finding_id
WHERE j.outcome = 'UNCHECKED'
ORDER BY effect, order_id, class
