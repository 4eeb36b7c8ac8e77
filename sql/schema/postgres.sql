-- Recommended source schema for PostgreSQL (13+): the consumers' idempotency ledger, the
-- order status history and one receipt table per provider.
--
-- Choices:
-- * Timestamps are timestamptz: an instant, microsecond precision, independent of the
--   session time zone (a `timestamp` column also works; it is read in the source's
--   `timezone`).
-- * msg_id and receipt_id are the primary keys: the consumer's idempotency check is the
--   primary-key lookup, and Postgres heaps are not clustered, so random keys cost nothing
--   on insert order.
-- * (decided_at), (changed_at), (created_at): the export window `t > $1 AND t <= $2` is an
--   index range scan. (order_id, ...): the consumers' lookups by order and the export's
--   key-range chunks (`order_id BETWEEN $3 AND $4`).
-- * text with CHECK-free statuses: unknown actions are kept and judged as unknown.
-- * updated_at: set to now() (the transaction's start) on insert and, by the trigger, on
--   every update, with an index: an incremental night reads `updated_at >= ?` from the
--   previous night's watermark, which lags the oldest transaction open at its probe
--   (docs/JOB_CONFIG.md "Incremental nights"; key = msg_id, receipt_id, id).
-- * Idempotent (IF NOT EXISTS everywhere); tables go into the first schema of search_path.

CREATE OR REPLACE FUNCTION recon_touch_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END $$;

CREATE TABLE IF NOT EXISTS idempotent_msg (
    msg_id          text        NOT NULL PRIMARY KEY,
    order_id        bigint      NOT NULL,
    event_type      text        NOT NULL,
    expected_status text        NULL,
    action          text        NOT NULL,   -- DONE, SKIPPED, PENDING_REVIEW, REVOKED
    observed_status text        NULL,
    topic           text        NULL,
    kafka_partition integer     NULL,
    kafka_offset    bigint      NULL,
    consumer_id     text        NULL,
    decided_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ix_idempotent_msg_decided_at ON idempotent_msg (decided_at);
CREATE INDEX IF NOT EXISTS ix_idempotent_msg_order ON idempotent_msg (order_id, event_type);
CREATE INDEX IF NOT EXISTS ix_idempotent_msg_updated_at ON idempotent_msg (updated_at);
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'tr_idempotent_msg_updated_at' AND tgrelid = 'idempotent_msg'::regclass) THEN
        CREATE TRIGGER tr_idempotent_msg_updated_at BEFORE UPDATE ON idempotent_msg FOR EACH ROW EXECUTE FUNCTION recon_touch_updated_at();
    END IF;
END $$;

CREATE TABLE IF NOT EXISTS order_status_history (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   bigint      NOT NULL,
    status     text        NOT NULL,
    changed_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ix_order_status_history_changed_at ON order_status_history (changed_at);
CREATE INDEX IF NOT EXISTS ix_order_status_history_order ON order_status_history (order_id, changed_at);
CREATE INDEX IF NOT EXISTS ix_order_status_history_updated_at ON order_status_history (updated_at);
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'tr_order_status_history_updated_at' AND tgrelid = 'order_status_history'::regclass) THEN
        CREATE TRIGGER tr_order_status_history_updated_at BEFORE UPDATE ON order_status_history FOR EACH ROW EXECUTE FUNCTION recon_touch_updated_at();
    END IF;
END $$;

CREATE TABLE IF NOT EXISTS points_receipt (
    receipt_id text        NOT NULL PRIMARY KEY,
    order_id   bigint      NOT NULL,
    effect     text        NOT NULL,
    msg_id     text        NULL,
    status     text        NOT NULL,   -- SUCCEEDED, FAILED, REVERSED
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ix_points_receipt_created_at ON points_receipt (created_at);
CREATE INDEX IF NOT EXISTS ix_points_receipt_order ON points_receipt (order_id, effect);
CREATE INDEX IF NOT EXISTS ix_points_receipt_updated_at ON points_receipt (updated_at);
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'tr_points_receipt_updated_at' AND tgrelid = 'points_receipt'::regclass) THEN
        CREATE TRIGGER tr_points_receipt_updated_at BEFORE UPDATE ON points_receipt FOR EACH ROW EXECUTE FUNCTION recon_touch_updated_at();
    END IF;
END $$;

CREATE TABLE IF NOT EXISTS wms_receipt (
    receipt_id text        NOT NULL PRIMARY KEY,
    order_id   bigint      NOT NULL,
    effect     text        NOT NULL,
    msg_id     text        NULL,
    status     text        NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ix_wms_receipt_created_at ON wms_receipt (created_at);
CREATE INDEX IF NOT EXISTS ix_wms_receipt_order ON wms_receipt (order_id, effect);
CREATE INDEX IF NOT EXISTS ix_wms_receipt_updated_at ON wms_receipt (updated_at);
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'tr_wms_receipt_updated_at' AND tgrelid = 'wms_receipt'::regclass) THEN
        CREATE TRIGGER tr_wms_receipt_updated_at BEFORE UPDATE ON wms_receipt FOR EACH ROW EXECUTE FUNCTION recon_touch_updated_at();
    END IF;
END $$;

CREATE TABLE IF NOT EXISTS logistics_receipt (
    receipt_id text        NOT NULL PRIMARY KEY,
    order_id   bigint      NOT NULL,
    effect     text        NOT NULL,
    msg_id     text        NULL,
    status     text        NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ix_logistics_receipt_created_at ON logistics_receipt (created_at);
CREATE INDEX IF NOT EXISTS ix_logistics_receipt_order ON logistics_receipt (order_id, effect);
CREATE INDEX IF NOT EXISTS ix_logistics_receipt_updated_at ON logistics_receipt (updated_at);
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'tr_logistics_receipt_updated_at' AND tgrelid = 'logistics_receipt'::regclass) THEN
        CREATE TRIGGER tr_logistics_receipt_updated_at BEFORE UPDATE ON logistics_receipt FOR EACH ROW EXECUTE FUNCTION recon_touch_updated_at();
    END IF;
END $$;
