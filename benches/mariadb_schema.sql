-- mariadb_schema.sql: the snapshot loaded the way a team would keep it in MariaDB, with
-- the natural indexes (order_id on every table, plus each table's time column). compare.py
-- runs this in the database `effect_recon_bench`, then LOAD DATA LOCAL INFILE into the
-- three tables and the rules, then mariadb_indexes.sql. Times are DATETIME(6) in UTC.
CREATE TABLE ledger (
    msg_id          VARCHAR(191) NOT NULL,
    order_id        BIGINT       NOT NULL,
    event_type      VARCHAR(64)  NOT NULL,
    expected_status VARCHAR(64),
    action          VARCHAR(64)  NOT NULL,
    observed_status VARCHAR(64),
    topic           VARCHAR(191),
    kafka_partition INT,
    kafka_offset    BIGINT,
    consumer_id     VARCHAR(191),
    decided_at      DATETIME(6)  NOT NULL,
    PRIMARY KEY (msg_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE status_history (
    order_id   BIGINT      NOT NULL,
    status     VARCHAR(64) NOT NULL,
    changed_at DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE receipts (
    receipt_id VARCHAR(191) NOT NULL,
    order_id   BIGINT       NOT NULL,
    effect     VARCHAR(64)  NOT NULL,
    msg_id     VARCHAR(191),
    status     VARCHAR(32)  NOT NULL,
    created_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The rules (fixtures/rules.toml), one row per rule and one per void status.
CREATE TABLE rules (
    effect        VARCHAR(64) NOT NULL PRIMARY KEY,
    trigger_event VARCHAR(64) NOT NULL,
    due_status    VARCHAR(64) NOT NULL,
    grace_us      BIGINT      NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rule_voids (
    effect VARCHAR(64) NOT NULL,
    status VARCHAR(64) NOT NULL,
    PRIMARY KEY (effect, status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
