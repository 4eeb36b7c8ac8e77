-- Recommended source schema for SQLite (3.35+): the consumers' idempotency ledger, the
-- order status history and one receipt table per provider.
--
-- Choices:
-- * Timestamps are TEXT 'YYYY-MM-DD HH:MM:SS.ffffff' (six fraction digits, no zone):
--   SQLite has no timestamp type, and this form sorts as text in time order, so the export
--   window `t > ? AND t <= ?` compares correctly. Store UTC, or set `timezone` on the job's
--   [[source]] to the zone you store; values with an explicit offset are also read.
-- * msg_id and receipt_id are UNIQUE (the consumer's idempotency check); the rowid stays
--   the clustered key so inserts append.
-- * (decided_at), (changed_at), (created_at): the export window is an index range scan.
--   (order_id, ...): the consumers' lookups by order and the export's key-range chunks.
-- * updated_at: UTC with milliseconds, set on insert and, by the trigger, on every update
--   that does not set it itself, with an index: an incremental night reads
--   `updated_at >= ?` (docs/JOB_CONFIG.md "Incremental nights"; key = msg_id, receipt_id,
--   id). It is UTC whatever the job's `timezone` (SQLite's 'now' is UTC).
-- * Idempotent (IF NOT EXISTS everywhere).

CREATE TABLE IF NOT EXISTS idempotent_msg (
    msg_id          TEXT    NOT NULL UNIQUE,
    order_id        INTEGER NOT NULL,
    event_type      TEXT    NOT NULL,
    expected_status TEXT    NULL,
    action          TEXT    NOT NULL,   -- DONE, SKIPPED, PENDING_REVIEW, REVOKED
    observed_status TEXT    NULL,
    topic           TEXT    NULL,
    kafka_partition INTEGER NULL,
    kafka_offset    INTEGER NULL,
    consumer_id     TEXT    NULL,
    decided_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX IF NOT EXISTS ix_idempotent_msg_decided_at ON idempotent_msg (decided_at);
CREATE INDEX IF NOT EXISTS ix_idempotent_msg_order ON idempotent_msg (order_id, event_type);
CREATE INDEX IF NOT EXISTS ix_idempotent_msg_updated_at ON idempotent_msg (updated_at);
CREATE TRIGGER IF NOT EXISTS tr_idempotent_msg_updated_at AFTER UPDATE ON idempotent_msg
FOR EACH ROW WHEN NEW.updated_at IS OLD.updated_at
BEGIN
    UPDATE idempotent_msg SET updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE rowid = NEW.rowid;
END;

CREATE TABLE IF NOT EXISTS order_status_history (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL,
    status     TEXT    NOT NULL,
    changed_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX IF NOT EXISTS ix_order_status_history_changed_at ON order_status_history (changed_at);
CREATE INDEX IF NOT EXISTS ix_order_status_history_order ON order_status_history (order_id, changed_at);
CREATE INDEX IF NOT EXISTS ix_order_status_history_updated_at ON order_status_history (updated_at);
CREATE TRIGGER IF NOT EXISTS tr_order_status_history_updated_at AFTER UPDATE ON order_status_history
FOR EACH ROW WHEN NEW.updated_at IS OLD.updated_at
BEGIN
    UPDATE order_status_history SET updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE rowid = NEW.rowid;
END;

CREATE TABLE IF NOT EXISTS points_receipt (
    receipt_id TEXT    NOT NULL UNIQUE,
    order_id   INTEGER NOT NULL,
    effect     TEXT    NOT NULL,
    msg_id     TEXT    NULL,
    status     TEXT    NOT NULL,   -- SUCCEEDED, FAILED, REVERSED
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX IF NOT EXISTS ix_points_receipt_created_at ON points_receipt (created_at);
CREATE INDEX IF NOT EXISTS ix_points_receipt_order ON points_receipt (order_id, effect);
CREATE INDEX IF NOT EXISTS ix_points_receipt_updated_at ON points_receipt (updated_at);
CREATE TRIGGER IF NOT EXISTS tr_points_receipt_updated_at AFTER UPDATE ON points_receipt
FOR EACH ROW WHEN NEW.updated_at IS OLD.updated_at
BEGIN
    UPDATE points_receipt SET updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE rowid = NEW.rowid;
END;

CREATE TABLE IF NOT EXISTS wms_receipt (
    receipt_id TEXT    NOT NULL UNIQUE,
    order_id   INTEGER NOT NULL,
    effect     TEXT    NOT NULL,
    msg_id     TEXT    NULL,
    status     TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX IF NOT EXISTS ix_wms_receipt_created_at ON wms_receipt (created_at);
CREATE INDEX IF NOT EXISTS ix_wms_receipt_order ON wms_receipt (order_id, effect);
CREATE INDEX IF NOT EXISTS ix_wms_receipt_updated_at ON wms_receipt (updated_at);
CREATE TRIGGER IF NOT EXISTS tr_wms_receipt_updated_at AFTER UPDATE ON wms_receipt
FOR EACH ROW WHEN NEW.updated_at IS OLD.updated_at
BEGIN
    UPDATE wms_receipt SET updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE rowid = NEW.rowid;
END;

CREATE TABLE IF NOT EXISTS logistics_receipt (
    receipt_id TEXT    NOT NULL UNIQUE,
    order_id   INTEGER NOT NULL,
    effect     TEXT    NOT NULL,
    msg_id     TEXT    NULL,
    status     TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX IF NOT EXISTS ix_logistics_receipt_created_at ON logistics_receipt (created_at);
CREATE INDEX IF NOT EXISTS ix_logistics_receipt_order ON logistics_receipt (order_id, effect);
CREATE INDEX IF NOT EXISTS ix_logistics_receipt_updated_at ON logistics_receipt (updated_at);
CREATE TRIGGER IF NOT EXISTS tr_logistics_receipt_updated_at AFTER UPDATE ON logistics_receipt
FOR EACH ROW WHEN NEW.updated_at IS OLD.updated_at
BEGIN
    UPDATE logistics_receipt SET updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE rowid = NEW.rowid;
END;
