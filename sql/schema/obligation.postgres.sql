-- Recommended obligation table for PostgreSQL 13+ (docs/OBLIGATIONS.md): the side effects an
-- order OWES, one row per (order_id, effect), written by the status change that makes the
-- effect due. The protocol is the one of obligation.mysql.sql (step by step there, with the
-- columns' reasons); tests/it/handler.rs runs these statements ($n bound; it binds its
-- logical clock where these say now()). The PostgreSQL spelling of each step:
--
-- 1. DUE, in the status change's transaction:
--      INSERT INTO effect_obligation (order_id, effect, state, business_key, due_at, next_attempt_at)
--      VALUES ($1, $2, 'OWED', $3, now(), now())
--      ON CONFLICT (order_id, effect) DO NOTHING;          -- a VOIDED tombstone wins
-- 2. VOID, in the void status's transaction:
--      INSERT INTO effect_obligation (order_id, effect, state, business_key, voided_at)
--      VALUES ($1, $2, 'VOIDED', $3, now())
--      ON CONFLICT (order_id, effect) DO NOTHING;
--      UPDATE effect_obligation SET state = 'VOIDED', generation = generation + 1,
--             lease_until = NULL, next_attempt_at = NULL, voided_at = now()
--       WHERE order_id = $1 AND effect = $2 AND state = 'OWED' AND attempts = 0;
--      UPDATE effect_obligation SET state = 'REVERSE_OWED', generation = generation + 1,
--             lease_until = NULL, next_attempt_at = now(), voided_at = now()
--       WHERE order_id = $1 AND effect = $2
--         AND (state IN ('CLAIMED', 'DONE', 'FAILED') OR (state = 'OWED' AND attempts > 0));
--      (an effect not reversed on void: state = 'VOIDED' WHERE state IN ('OWED', 'CLAIMED', 'FAILED'))
-- 3. CLAIM (autocommit; under READ COMMITTED a concurrent claim makes the UPDATE re-check its
--    WHERE on the new row version, so exactly one compare-and-set wins):
--      SELECT effect, state, generation FROM effect_obligation
--       WHERE order_id = $1 AND next_attempt_at <= now();
--      SELECT order_id, effect, state, generation FROM effect_obligation
--       WHERE next_attempt_at <= now() - interval '30 seconds'
--       ORDER BY next_attempt_at LIMIT 100;
--      UPDATE effect_obligation
--         SET state = $1, claimed_by = $2, generation = generation + 1, attempts = attempts + 1,
--             lease_until = now() + interval '30 seconds',
--             next_attempt_at = now() + interval '30 seconds'
--       WHERE order_id = $3 AND effect = $4 AND generation = $5 AND next_attempt_at <= now();
-- 4. FENCE, then CALL outside any transaction:
--      SELECT generation FROM effect_obligation
--       WHERE order_id = $1 AND effect = $2 AND claimed_by = $3 AND generation = $4
--         AND lease_until > now() + interval '10 seconds';
-- 5. FINISH, guarded (0 rows: fenced):
--      UPDATE effect_obligation SET state = 'DONE', receipt_id = $1,
--             lease_until = NULL, next_attempt_at = NULL, done_at = now()
--       WHERE order_id = $2 AND effect = $3 AND claimed_by = $4 AND generation = $5;
--
-- PostgreSQL has no gap locks: `SELECT ... FOR UPDATE` of a missing row locks nothing, so
-- two handlers of one message both go on (the naive handler then performs the effect twice
-- and one INSERT fails with 23505). A failed statement aborts the whole transaction, hence
-- ON CONFLICT rather than catching the duplicate. Deadlocks (40P01) need two transactions
-- locking rows in opposite orders; every statement here locks one row by its primary key.
--
-- Indexes: the PRIMARY KEY (order_id, effect) serves the writes, the message path and the
-- guarded updates; ix_effect_obligation_next is PARTIAL (open rows only), so it stays as
-- small as the backlog however many closed rows the table keeps. Partition by
-- RANGE (order_id) or HASH (order_id) if you must (a unique index on a partitioned table
-- must include the partition key, as in MySQL); for retention, deleting closed rows by
-- updated_at in batches is usually enough.

CREATE OR REPLACE FUNCTION recon_touch_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END $$;

CREATE TABLE IF NOT EXISTS effect_obligation (
    order_id            bigint      NOT NULL,
    effect              text        NOT NULL,
    state               text        NOT NULL,   -- OWED CLAIMED DONE VOIDED REVERSE_OWED REVERSING REVERSED FAILED
    business_key        text        NOT NULL,   -- '{effect}:{order_id}', sent to the provider
    generation          bigint      NOT NULL DEFAULT 0,   -- fencing token: +1 per claim and per void
    attempts            integer     NOT NULL DEFAULT 0,
    claimed_by          text        NULL,
    lease_until         timestamptz NULL,
    next_attempt_at     timestamptz NULL,       -- NULL once closed
    due_at              timestamptz NULL,
    voided_at           timestamptz NULL,
    done_at             timestamptz NULL,
    receipt_id          text        NULL,
    reversal_receipt_id text        NULL,
    last_error          text        NULL,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, effect)
);
CREATE INDEX IF NOT EXISTS ix_effect_obligation_next
    ON effect_obligation (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_effect_obligation_updated_at ON effect_obligation (updated_at);
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'tr_effect_obligation_updated_at' AND tgrelid = 'effect_obligation'::regclass) THEN
        CREATE TRIGGER tr_effect_obligation_updated_at BEFORE UPDATE ON effect_obligation FOR EACH ROW EXECUTE FUNCTION recon_touch_updated_at();
    END IF;
END $$;

-- The transactional-outbox alternative (see obligation.mysql.sql): the status change inserts
-- the request, a relay (a poller, or logical decoding / Debezium) publishes it, and the
-- receiving service keeps the obligation, tombstone and fencing per business_key.
CREATE TABLE IF NOT EXISTS effect_outbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_id bigint      NOT NULL,              -- order_id: the Kafka key
    event_type   text        NOT NULL,              -- EFFECT_DUE, EFFECT_VOIDED
    business_key text        NOT NULL,              -- '{effect}:{order_id}'
    payload      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz NULL                   -- polling relay only
);
CREATE INDEX IF NOT EXISTS ix_effect_outbox_unpublished ON effect_outbox (id) WHERE published_at IS NULL;
