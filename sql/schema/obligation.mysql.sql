-- Recommended obligation table for MySQL 8.0 and MariaDB (docs/OBLIGATIONS.md): the side
-- effects an order OWES, one row per (order_id, effect), written by the status change that
-- makes the effect due. No consumer compares "current status = expected" any more, so
-- there is no skip to make reversible: a message is only a hint to work the order's rows now.
-- tests/it/handler.rs runs exactly these statements under 24 partitions, 8 consumers,
-- rebalances and zombie consumers (it binds its logical clock where these say NOW(6)), on
-- MariaDB 10.11; InnoDB's locking rules used below are MySQL 8.0's too, but the tests do not
-- run a MySQL 8.0 server.
--
-- The protocol, step by step (`?` are bound parameters):
--
-- 1. DUE, in the SAME transaction as the status change (e.g. UPDATE orders SET status =
--    'PAID' ...), one row per effect that status makes due:
--
--      INSERT INTO effect_obligation (order_id, effect, state, business_key, due_at, next_attempt_at)
--      VALUES (?, ?, 'OWED', ?, NOW(6), NOW(6))
--      ON DUPLICATE KEY UPDATE order_id = order_id;    -- the row exists: a VOIDED tombstone wins
--
-- 2. VOID, in the SAME transaction as CANCELLED / REFUNDED, for every effect the status voids:
--    a tombstone first, so a due INSERT that comes later (a late payment callback, a replay)
--    is a no-op; then the row's own transition. A row a worker ever claimed may have been
--    performed (a lost response looks like a failure), so it is reversed, not just voided:
--
--      INSERT INTO effect_obligation (order_id, effect, state, business_key, voided_at)
--      VALUES (?, ?, 'VOIDED', ?, NOW(6))
--      ON DUPLICATE KEY UPDATE order_id = order_id;
--      UPDATE effect_obligation SET state = 'VOIDED', generation = generation + 1,
--             lease_until = NULL, next_attempt_at = NULL, voided_at = NOW(6)
--       WHERE order_id = ? AND effect = ? AND state = 'OWED' AND attempts = 0;
--      UPDATE effect_obligation SET state = 'REVERSE_OWED', generation = generation + 1,
--             lease_until = NULL, next_attempt_at = NOW(6), voided_at = NOW(6)
--       WHERE order_id = ? AND effect = ?
--         AND (state IN ('CLAIMED', 'DONE', 'FAILED') OR (state = 'OWED' AND attempts > 0));
--      -- an effect that is not reversed on void (the waybill): instead of the two UPDATEs
--      UPDATE effect_obligation SET state = 'VOIDED', generation = generation + 1,
--             lease_until = NULL, next_attempt_at = NULL, voided_at = NOW(6)
--       WHERE order_id = ? AND effect = ? AND state IN ('OWED', 'CLAIMED', 'FAILED');
--
-- 3. CLAIM, by any worker (a consumer woken by any message of the order, or the sweeper),
--    each statement on its own (autocommit): read the candidates without locking, then
--    compare-and-set on the generation read. 1 row: the claim is yours, with generation + 1.
--    0 rows: someone else claimed it, or a void came first. Nothing stays locked.
--
--      SELECT effect, state, generation FROM effect_obligation             -- on a message
--       WHERE order_id = ? AND next_attempt_at <= NOW(6);
--      SELECT order_id, effect, state, generation FROM effect_obligation   -- the sweeper
--       WHERE next_attempt_at <= NOW(6) - INTERVAL 30 SECOND
--       ORDER BY next_attempt_at LIMIT 100;
--      UPDATE effect_obligation
--         SET state = ?,                          -- CLAIMED (OWED, CLAIMED) or REVERSING
--             claimed_by = ?, generation = generation + 1, attempts = attempts + 1,
--             lease_until = NOW(6) + INTERVAL 30 SECOND,
--             next_attempt_at = NOW(6) + INTERVAL 30 SECOND
--       WHERE order_id = ? AND effect = ? AND generation = ? AND next_attempt_at <= NOW(6);
--
-- 4. FENCE, then CALL the provider OUTSIDE any transaction, with the business key. Call only
--    while the lease has at least the call's timeout (here 10 s) left:
--
--      SELECT generation FROM effect_obligation
--       WHERE order_id = ? AND effect = ? AND claimed_by = ? AND generation = ?
--         AND lease_until > NOW(6) + INTERVAL 10 SECOND;      -- no row: fenced, stop here
--      grant('points_grant:8821')  or  reverse('points_grant:8821', key 'points_grant:8821:reverse')
--
-- 5. FINISH with an UPDATE guarded on the claim; 0 rows = fenced (a newer claim or a void
--    took the row): do nothing more, the newer owner finishes it.
--
--      UPDATE effect_obligation SET state = 'DONE', receipt_id = ?,
--             lease_until = NULL, next_attempt_at = NULL, done_at = NOW(6)
--       WHERE order_id = ? AND effect = ? AND claimed_by = ? AND generation = ?;
--      UPDATE effect_obligation SET state = 'REVERSED', reversal_receipt_id = ?,
--             lease_until = NULL, next_attempt_at = NULL, done_at = NOW(6)
--       WHERE order_id = ? AND effect = ? AND claimed_by = ? AND generation = ?;
--      -- a failed call: back to OWED (or REVERSE_OWED), to be claimed again after a back-off
--      UPDATE effect_obligation SET state = ?, lease_until = NULL,
--             next_attempt_at = NOW(6) + INTERVAL 1 SECOND, last_error = ?
--       WHERE order_id = ? AND effect = ? AND claimed_by = ? AND generation = ?;
--
-- MySQL 8.0 / MariaDB points (default isolation REPEATABLE READ):
-- * Never lock a row that may not exist. `SELECT ... FOR UPDATE` of a missing key takes a
--   GAP lock (the gap where the key would go; past the last key, the supremum). Gap locks
--   do not conflict with each other, so two consumers handling one message (a redelivery
--   and a zombie), or two messages whose keys fall in one gap, both get one; each INSERT
--   then waits for the other's gap lock: deadlock, error 1213, one transaction rolled back.
--   Every statement here locks an existing row by its full PRIMARY KEY: a record lock, no gap.
-- * Claim by INSERT: a ledger that must claim a key that may not exist yet inserts it on its
--   own (`INSERT INTO idempotent_msg (msg_id, action) VALUES (?, 'PROCESSING')`) and treats
--   the duplicate-key error 1062 as "claimed by someone else" (then reads the row, without
--   FOR UPDATE). Here the rows are inserted by the status change, and a duplicate means "the
--   row is already there" (ON DUPLICATE KEY UPDATE on the PRIMARY KEY takes an exclusive
--   RECORD lock on the duplicate; on a secondary UNIQUE key it would be a next-key lock,
--   even under READ COMMITTED: that is why (order_id, effect) is the primary key).
-- * No network call inside a transaction: the claim commits before the call and the finish
--   is a new statement after it. A transaction open across an HTTP call holds its locks and
--   its connection for the call's whole duration, and its rollback cannot undo the call.
--
-- The columns:
-- * order_id, effect: the PRIMARY KEY; the order first, so an order's rows are adjacent
--   (the status change and the message path touch one key prefix).
-- * state: OWED → CLAIMED → DONE; VOIDED (a tombstone, or voided before any claim);
--   REVERSE_OWED → REVERSING → REVERSED (voided after it may have been performed); FAILED
--   (dead-lettered after K attempts, for a person: an alert on it, `reopen` sets it OWED).
-- * business_key: '{effect}:{order_id}' (docs/OUTPUTS.md, compensation_tasks): the same text
--   on every path that can perform the effect (this worker, the compensation executor, a
--   hand repair), so a provider deduplicating on it performs the effect once; the reversal
--   sends '{business_key}:reverse'.
-- * generation: the fencing token. +1 on every claim and on every void; the fence, the
--   finish and the release are guarded on it, so a zombie that wakes after its lease
--   expired, or after a void, changes nothing and calls nothing.
-- * attempts: claims so far (back-off, dead-lettering; > 0 means "may have been performed").
-- * claimed_by: the worker holding (or last holding) the lease, e.g. consumer-3: who to look at.
-- * lease_until: the claim is valid until then; set at the claim, NULL once released.
-- * next_attempt_at: when a worker may take the row next: the due (or void) instant, the
--   lease's end while claimed (an expired lease is claimable again), now + back-off after a
--   failure; NULL once closed (DONE, VOIDED, REVERSED, FAILED). The one column both claim
--   queries range over.
-- * due_at, voided_at, done_at: when it became due (NULL for a tombstone), was voided, closed.
-- * receipt_id, reversal_receipt_id: the provider's receipts (the T+1 join to its statement).
-- * last_error: the last failed call's message.
--
-- Indexes:
-- * PRIMARY KEY (order_id, effect): the due/void writes, the message path's claim, every
--   guarded UPDATE (a single record lock each).
-- * ix_effect_obligation_next (next_attempt_at): the sweeper's claim query and the alert on
--   stuck rows (`WHERE next_attempt_at <= NOW(6) - INTERVAL 30 MINUTE`) are one range scan
--   in index order; closed rows hold NULL, which sorts first and is outside every `<=` range,
--   so the scan reads only the open rows that are due (InnoDB has no partial index).
-- * ix_effect_obligation_updated_at (updated_at): incremental exports and archiving.
--
-- Partitioning (optional, for retention): MySQL requires every UNIQUE key, the PRIMARY KEY
-- included, to contain every column of the partitioning expression. The key is (order_id,
-- effect), so partition by order_id: RANGE (order_id) when ids grow with time (snowflake
-- ids: one partition a day), HASH (order_id) otherwise. Partitioning by a date column would
-- need it in the primary key, and (order_id, effect) would then be unique only per
-- partition: a late due INSERT landing in another partition than its tombstone would
-- succeed. Drop a range partition once all its rows are closed and older than the T+1
-- lookback (30 days); without time-ordered ids, archive closed rows by updated_at instead.
--
--   ALTER TABLE effect_obligation PARTITION BY RANGE (order_id) (
--       PARTITION p20261129 VALUES LESS THAN (<first order_id of 2026-11-30>),
--       PARTITION p20261130 VALUES LESS THAN (<first order_id of 2026-12-01>),
--       PARTITION pmax      VALUES LESS THAN MAXVALUE);   -- REORGANIZE pmax every day

CREATE TABLE IF NOT EXISTS effect_obligation (
    order_id            BIGINT       NOT NULL,
    effect              VARCHAR(64)  NOT NULL,
    state               VARCHAR(16)  NOT NULL,   -- OWED CLAIMED DONE VOIDED REVERSE_OWED REVERSING REVERSED FAILED
    business_key        VARCHAR(128) NOT NULL,   -- '{effect}:{order_id}', sent to the provider
    generation          BIGINT       NOT NULL DEFAULT 0,   -- fencing token: +1 per claim and per void
    attempts            INT          NOT NULL DEFAULT 0,
    claimed_by          VARCHAR(128) NULL,
    lease_until         DATETIME(6)  NULL,       -- UTC
    next_attempt_at     DATETIME(6)  NULL,       -- NULL once closed
    due_at              DATETIME(6)  NULL,
    voided_at           DATETIME(6)  NULL,
    done_at             DATETIME(6)  NULL,
    receipt_id          VARCHAR(64)  NULL,
    reversal_receipt_id VARCHAR(64)  NULL,
    last_error          VARCHAR(255) NULL,
    updated_at          DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (order_id, effect),
    KEY ix_effect_obligation_next (next_attempt_at),
    KEY ix_effect_obligation_updated_at (updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- The transactional-outbox alternative, when the effect belongs to another service: the
-- status change inserts the REQUEST (EFFECT_DUE / EFFECT_VOIDED) in the same transaction,
-- and a relay publishes it (a poller on ix_effect_outbox_unpublished, or CDC such as
-- Debezium's outbox router, which needs no published_at). It removes the skip as well, but
-- moves the state to the receiving service: that service must keep its own obligation per
-- business_key, with the same tombstone (an EFFECT_DUE that arrives after EFFECT_VOIDED is
-- a no-op) and the same fencing. No unique key here: the relay delivers at least once and
-- the receiver deduplicates on business_key.
CREATE TABLE IF NOT EXISTS effect_outbox (
    id           BIGINT       NOT NULL AUTO_INCREMENT,   -- relay order, append-only
    aggregate_id BIGINT       NOT NULL,                  -- order_id: the Kafka key
    event_type   VARCHAR(32)  NOT NULL,                  -- EFFECT_DUE, EFFECT_VOIDED
    business_key VARCHAR(128) NOT NULL,                  -- '{effect}:{order_id}'
    payload      JSON         NOT NULL,
    created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    published_at DATETIME(6)  NULL,                      -- polling relay only
    PRIMARY KEY (id),
    KEY ix_effect_outbox_unpublished (published_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
