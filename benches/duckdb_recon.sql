-- duckdb_recon.sql: docs/SEMANTICS.md written independently for DuckDB, as a reference
-- implementation and an equality check for `effect-recon run` (benches/compare.py).
--
-- compare.py provides, before this file runs:
--   views   ledger, status_history, receipts   over the Parquet files the snapshot's
--                                              manifest.json lists (receipts: all sources)
--   tables  rules(effect, trigger_event, due_status, grace INTERVAL, compensation, priority,
--                 reverse_on_void BOOLEAN,     false when the rules file omits it
--                 reversal)                    NULL when the rules file omits it
--           rule_voids(effect, status)         one row per void status of a rule
--   variables cut, since (TIMESTAMPTZ)         the window is (since, cut]
-- and after it, writes the three result views `discrepancies`, `compensation_tasks` and
-- `skip_verdicts` to Parquet in their documented sort order.
--
-- Statements are separated by a ';' at the end of a line.

-- The ledger's key must be unique (the run refuses such a snapshot; so do we).
CREATE OR REPLACE TEMP TABLE duplicate_msg_ids AS
SELECT msg_id, count(*) AS copies
FROM ledger
GROUP BY msg_id
HAVING count(*) > 1
LIMIT 3;

-- owed: per (effect, order) whose order reached the rule's due status up to the cut, the
-- first time it did (due_at), and the first time it reached one of the rule's void
-- statuses up to the cut (void_at; NULL: not voided).
CREATE OR REPLACE TEMP TABLE owed AS
WITH first_change AS (
    SELECT order_id, status, min(changed_at) AS first_at
    FROM status_history
    WHERE changed_at <= getvariable('cut')
    GROUP BY order_id, status
),
voids AS (
    SELECT v.effect, f.order_id, min(f.first_at) AS void_at
    FROM first_change f
    JOIN rule_voids v ON v.status = f.status
    GROUP BY v.effect, f.order_id
)
SELECT r.effect, f.order_id, f.first_at AS due_at, v.void_at
FROM rules r
JOIN first_change f ON f.status = r.due_status
LEFT JOIN voids v ON v.effect = r.effect AND v.order_id = f.order_id;

-- happened: per (effect, order), the SUCCEEDED receipts up to the cut of effects some
-- rule names: how many, and the first and second by (created_at, receipt_id).
CREATE OR REPLACE TEMP TABLE happened AS
SELECT effect, order_id, ok, firsts[1].at AS first_at, firsts[2].at AS second_at
FROM (
    SELECT x.effect, x.order_id, count(*) AS ok,
           min(struct_pack(at := x.created_at, id := x.receipt_id), 2) AS firsts
    FROM receipts x
    WHERE x.status = 'SUCCEEDED'
      AND x.created_at <= getvariable('cut')
      AND x.effect IN (SELECT effect FROM rules)
    GROUP BY x.effect, x.order_id
);

-- state: every (effect, order) that was owed or got a receipt.
CREATE OR REPLACE TEMP TABLE state AS
SELECT coalesce(o.effect, h.effect) AS effect,
       coalesce(o.order_id, h.order_id) AS order_id,
       o.due_at,
       o.void_at,
       (o.void_at IS NOT NULL) AS voided,
       coalesce(h.ok, 0) AS ok,
       h.first_at,
       h.second_at
FROM owed o
FULL OUTER JOIN happened h ON h.effect = o.effect AND h.order_id = o.order_id;

-- findings: MISSING (class decided later by the ledger), ORPHAN_EFFECT, UNREVERSED_EFFECT
-- (only on a rule that reverses on void: due, voided and a receipt still standing),
-- DUPLICATE_EFFECT; the first that holds wins. BREAK when break_on is in (since, cut],
-- PENDING while it is still after the cut.
CREATE OR REPLACE TEMP TABLE findings AS
WITH kinds AS (
    SELECT s.*, r.grace, r.trigger_event, r.compensation, r.reversal, r.priority,
           CASE
               WHEN s.due_at IS NOT NULL AND NOT s.voided AND s.ok = 0 THEN 'MISSING'
               WHEN s.due_at IS NULL AND s.ok >= 1 THEN 'ORPHAN_EFFECT'
               WHEN r.reverse_on_void AND s.due_at IS NOT NULL AND s.voided AND s.ok >= 1
                   THEN 'UNREVERSED_EFFECT'
               WHEN s.due_at IS NOT NULL AND s.ok >= 2 THEN 'DUPLICATE_EFFECT'
           END AS kind
    FROM state s
    JOIN rules r ON r.effect = s.effect
),
timed AS (
    SELECT *,
           CASE kind
               WHEN 'MISSING' THEN due_at + grace
               WHEN 'ORPHAN_EFFECT' THEN first_at + grace
               -- due from whichever came last: the void or the first receipt
               WHEN 'UNREVERSED_EFFECT' THEN greatest(void_at, first_at) + grace
               WHEN 'DUPLICATE_EFFECT' THEN second_at
           END AS break_on
    FROM kinds
    WHERE kind IS NOT NULL
)
SELECT effect, order_id, kind, due_at, break_on, ok, trigger_event, compensation, reversal,
       priority,
       CASE
           WHEN break_on > getvariable('since') AND break_on <= getvariable('cut') THEN 'BREAK'
           -- a duplicate's break_on is a receipt up to the cut: it is never PENDING
           WHEN break_on > getvariable('cut') AND kind <> 'DUPLICATE_EFFECT' THEN 'PENDING'
       END AS verdict
FROM timed
WHERE (break_on > getvariable('since') AND break_on <= getvariable('cut'))
   OR (break_on > getvariable('cut') AND kind <> 'DUPLICATE_EFFECT');

-- evidence: per finding, the trigger row that gives the outcome (DONE beats SKIPPED or
-- REVOKED beats PENDING_REVIEW; unknown actions give none), earliest decided_at, then
-- smallest msg_id; plus whether a row of the same order, topic and partition with a
-- larger offset was decided earlier (any event type or action, up to the cut).
CREATE OR REPLACE TEMP TABLE evidence AS
WITH ranked AS (
    SELECT f.effect, f.order_id, l.action AS ledger_action, l.msg_id, l.observed_status,
           l.topic, l.kafka_partition, l.kafka_offset, l.consumer_id, l.decided_at,
           CASE l.action
               WHEN 'DONE' THEN 'DONE'
               WHEN 'SKIPPED' THEN 'SKIPPED'
               WHEN 'REVOKED' THEN 'SKIPPED'
               WHEN 'PENDING_REVIEW' THEN 'PENDING_REVIEW'
           END AS outcome
    FROM findings f
    JOIN ledger l ON l.order_id = f.order_id AND l.event_type = f.trigger_event
    WHERE l.decided_at <= getvariable('cut')
      AND l.action IN ('DONE', 'SKIPPED', 'REVOKED', 'PENDING_REVIEW')
    QUALIFY row_number() OVER (
        PARTITION BY f.effect, f.order_id
        ORDER BY CASE l.action WHEN 'DONE' THEN 1 WHEN 'PENDING_REVIEW' THEN 3 ELSE 2 END,
                 l.decided_at, l.msg_id
    ) = 1
)
SELECT e.*,
       EXISTS (
           SELECT 1 FROM ledger x
           WHERE x.order_id = e.order_id
             AND x.topic = e.topic
             AND x.kafka_partition = e.kafka_partition
             AND x.kafka_offset > e.kafka_offset
             AND x.decided_at < e.decided_at
             AND x.decided_at <= getvariable('cut')
       ) AS reorder_suspected
FROM ranked e;

-- classified: findings with their class and evidence (and the rule's two commands).
CREATE OR REPLACE TEMP TABLE classified AS
WITH classed AS (
    SELECT f.*, e.ledger_action, e.msg_id, e.observed_status, e.topic, e.kafka_partition,
           e.kafka_offset, e.consumer_id, e.decided_at,
           coalesce(e.reorder_suspected, false) AS reorder_suspected,
           CASE
               WHEN f.kind <> 'MISSING' THEN f.kind
               WHEN e.outcome = 'SKIPPED' THEN 'SKIPPED_BUT_DUE'
               WHEN e.outcome = 'DONE' THEN 'DONE_NO_RECEIPT'
               WHEN e.outcome = 'PENDING_REVIEW' THEN 'REVIEW_STALLED'
               ELSE 'NO_LEDGER_ENTRY'
           END AS class
    FROM findings f
    LEFT JOIN evidence e ON e.effect = f.effect AND e.order_id = f.order_id
)
SELECT left(sha256(effect || ':' || CAST(order_id AS VARCHAR) || ':' || class), 16) AS finding_id,
       effect, order_id, class, verdict, due_at, break_on,
       ledger_action, msg_id, observed_status, topic,
       CAST(kafka_partition AS INTEGER) AS kafka_partition,
       CAST(kafka_offset AS BIGINT) AS kafka_offset,
       consumer_id, decided_at,
       CAST(ok AS BIGINT) AS receipt_count,
       reorder_suspected,
       CAST(priority AS INTEGER) AS priority,
       compensation,
       reversal
FROM classed;

CREATE OR REPLACE TEMP VIEW discrepancies AS
SELECT * EXCLUDE (compensation, reversal) FROM classified;

-- compensation_tasks: one per BREAK. Both reversing classes hand the rule's reversal (NULL
-- when it names none) the standing SUCCEEDED receipts up to the cut, in (created_at,
-- receipt_id) order: every one for an unreversed effect, all but the first for a duplicate.
CREATE OR REPLACE TEMP VIEW compensation_tasks AS
WITH breaks AS (
    SELECT *, class IN ('DUPLICATE_EFFECT', 'UNREVERSED_EFFECT') AS reverses
    FROM classified
    WHERE verdict = 'BREAK'
),
standing AS (
    SELECT x.effect, x.order_id,
           list(x.receipt_id ORDER BY x.created_at, x.receipt_id) AS receipt_ids
    FROM receipts x
    SEMI JOIN breaks b ON b.effect = x.effect AND b.order_id = x.order_id AND b.reverses
    WHERE x.status = 'SUCCEEDED' AND x.created_at <= getvariable('cut')
    GROUP BY x.effect, x.order_id
)
SELECT b.finding_id AS task_id, b.effect, b.order_id, b.class,
       CASE
           WHEN b.reverses THEN 'REVERSE_EFFECT'
           WHEN b.class = 'ORPHAN_EFFECT' THEN 'INVESTIGATE'
           ELSE 'EXECUTE_EFFECT'
       END AS action,
       CASE
           WHEN b.reverses THEN b.reversal
           WHEN b.class IN ('SKIPPED_BUT_DUE', 'DONE_NO_RECEIPT', 'REVIEW_STALLED', 'NO_LEDGER_ENTRY')
               THEN b.compensation
       END AS command,
       CASE WHEN b.class IN ('SKIPPED_BUT_DUE', 'REVIEW_STALLED') THEN b.msg_id END AS reopen_msg_id,
       CASE b.class
           WHEN 'UNREVERSED_EFFECT' THEN x.receipt_ids
           WHEN 'DUPLICATE_EFFECT' THEN x.receipt_ids[2:]
       END AS reverse_receipt_ids,
       b.priority,
       b.effect || ':' || b.order_id::VARCHAR || CASE
           WHEN b.reverses THEN ':reverse' WHEN b.class = 'ORPHAN_EFFECT' THEN ':investigate' ELSE ''
       END AS idempotency_key
FROM breaks b
LEFT JOIN standing x ON x.effect = b.effect AND x.order_id = b.order_id;

-- skip_verdicts: every SKIPPED row decided in (since, cut], over the rules its event
-- triggers (a missing state row means never due and no receipt).
CREATE OR REPLACE TEMP VIEW skip_verdicts AS
SELECT l.msg_id, l.order_id, l.event_type, l.decided_at,
       CASE
           WHEN count(r.effect) = 0 THEN 'CORRECT'
           WHEN bool_or(s.due_at IS NOT NULL AND NOT s.voided AND s.ok = 0
                        AND s.due_at + r.grace <= getvariable('cut')) THEN 'WRONG'
           WHEN bool_or(s.due_at IS NOT NULL AND NOT s.voided AND s.ok = 0) THEN 'PENDING'
           WHEN bool_and(s.due_at IS NULL)
                AND l.decided_at + max(r.grace) > getvariable('cut') THEN 'PENDING'
           WHEN bool_or(s.due_at IS NOT NULL AND NOT s.voided AND s.ok >= 1) THEN 'HARMLESS'
           ELSE 'CORRECT'
       END AS verdict
FROM ledger l
LEFT JOIN rules r ON r.trigger_event = l.event_type
LEFT JOIN state s ON s.effect = r.effect AND s.order_id = l.order_id
WHERE l.action = 'SKIPPED'
  AND l.decided_at > getvariable('since')
  AND l.decided_at <= getvariable('cut')
GROUP BY l.msg_id, l.order_id, l.event_type, l.decided_at;
