-- Recommended source schema for MySQL 8 (also valid on MariaDB 10.11): the consumers'
-- idempotency ledger, the order status history and one receipt table per provider.
--
-- Choices:
-- * Timestamps are DATETIME(6): microseconds like the snapshot contract, no 2038 limit
--   and no silent conversion by the session time zone (TIMESTAMP has both). DATETIME is
--   zone-less: store UTC, or set `timezone` on the job's [[source]] to the zone you store.
-- * A surrogate AUTO_INCREMENT primary key keeps inserts append-only in InnoDB's clustered
--   index; msg_id and receipt_id stay UNIQUE (the idempotency check of the consumer).
-- * (decided_at), (changed_at), (created_at): the export window `t > ? AND t <= ?` is a
--   range scan. (order_id, ...): the consumers' lookups by order, and the export's
--   key-range chunks (`order_id BETWEEN ? AND ?`).
-- * updated_at is set by the database on every insert and update (ON UPDATE
--   CURRENT_TIMESTAMP(6)), with an index: an incremental night reads `updated_at >= ?`
--   (docs/JOB_CONFIG.md "Incremental nights"; key = msg_id, receipt_id, id). It holds the
--   session's wall time, like every DATETIME: let writers and the job's `timezone` agree.
--   Tables made before it: ALTER TABLE t ADD COLUMN updated_at DATETIME(6) NOT NULL
--   DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), ADD KEY (updated_at).
-- * Indexes are declared inside CREATE TABLE because MySQL 8 has no
--   CREATE INDEX IF NOT EXISTS; the whole file is idempotent.
-- * Ids and statuses use ascii/utf8mb4 with the default (case-insensitive) collations:
--   `_bin` collations make the client protocol report binary strings.

CREATE TABLE IF NOT EXISTS idempotent_msg (
    id              BIGINT       NOT NULL AUTO_INCREMENT,
    msg_id          VARCHAR(64)  NOT NULL,
    order_id        BIGINT       NOT NULL,
    event_type      VARCHAR(64)  NOT NULL,
    expected_status VARCHAR(32)  NULL,
    action          VARCHAR(32)  NOT NULL,   -- DONE, SKIPPED, PENDING_REVIEW, REVOKED
    observed_status VARCHAR(32)  NULL,
    topic           VARCHAR(128) NULL,
    kafka_partition INT          NULL,
    kafka_offset    BIGINT       NULL,
    consumer_id     VARCHAR(128) NULL,
    decided_at      DATETIME(6)  NOT NULL,
    updated_at      DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    UNIQUE KEY uk_idempotent_msg_msg_id (msg_id),
    KEY ix_idempotent_msg_decided_at (decided_at),
    KEY ix_idempotent_msg_order (order_id, event_type),
    KEY ix_idempotent_msg_updated_at (updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS order_status_history (
    id         BIGINT      NOT NULL AUTO_INCREMENT,
    order_id   BIGINT      NOT NULL,
    status     VARCHAR(32) NOT NULL,
    changed_at DATETIME(6) NOT NULL,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    KEY ix_order_status_history_changed_at (changed_at),
    KEY ix_order_status_history_order (order_id, changed_at),
    KEY ix_order_status_history_updated_at (updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS points_receipt (
    id         BIGINT      NOT NULL AUTO_INCREMENT,
    receipt_id VARCHAR(64) NOT NULL,
    order_id   BIGINT      NOT NULL,
    effect     VARCHAR(64) NOT NULL,
    msg_id     VARCHAR(64) NULL,
    status     VARCHAR(16) NOT NULL,   -- SUCCEEDED, FAILED, REVERSED
    created_at DATETIME(6) NOT NULL,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    UNIQUE KEY uk_points_receipt_receipt_id (receipt_id),
    KEY ix_points_receipt_created_at (created_at),
    KEY ix_points_receipt_order (order_id, effect),
    KEY ix_points_receipt_updated_at (updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS wms_receipt (
    id         BIGINT      NOT NULL AUTO_INCREMENT,
    receipt_id VARCHAR(64) NOT NULL,
    order_id   BIGINT      NOT NULL,
    effect     VARCHAR(64) NOT NULL,
    msg_id     VARCHAR(64) NULL,
    status     VARCHAR(16) NOT NULL,
    created_at DATETIME(6) NOT NULL,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    UNIQUE KEY uk_wms_receipt_receipt_id (receipt_id),
    KEY ix_wms_receipt_created_at (created_at),
    KEY ix_wms_receipt_order (order_id, effect),
    KEY ix_wms_receipt_updated_at (updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS logistics_receipt (
    id         BIGINT      NOT NULL AUTO_INCREMENT,
    receipt_id VARCHAR(64) NOT NULL,
    order_id   BIGINT      NOT NULL,
    effect     VARCHAR(64) NOT NULL,
    msg_id     VARCHAR(64) NULL,
    status     VARCHAR(16) NOT NULL,
    created_at DATETIME(6) NOT NULL,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    UNIQUE KEY uk_logistics_receipt_receipt_id (receipt_id),
    KEY ix_logistics_receipt_created_at (created_at),
    KEY ix_logistics_receipt_order (order_id, effect),
    KEY ix_logistics_receipt_updated_at (updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
