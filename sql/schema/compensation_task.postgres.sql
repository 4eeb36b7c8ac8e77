-- Recommended table for `effect-recon publish` on PostgreSQL: the team's
-- compensation task list, one row per task (= finding) across every night.
--
-- * task_id is the key: the same finding gets the same task_id every night, so publishing
--   a run twice changes nothing and a later run updates the rows it saw before.
-- * state: OPEN (published, not yet acted on), DONE / FAILED (set by the executor after it
--   ran `command` with `idempotency_key`), RESOLVED (a later run found the finding gone;
--   `resolution` says why: RECEIPT, VOIDED, REVERSED, NOW_DUE, RECLASSIFIED, EXPIRED).
--   publish never moves DONE back to OPEN: a DONE task whose finding persists is reported
--   as "done but still missing".
-- * first_run / last_run: ids of the first and latest run that listed the task; last_cut
--   is the latest run's cut (a run older than last_cut never overwrites a newer one).
-- * reverse_receipt_ids is a JSON array of receipt ids (REVERSE_EFFECT only), else NULL.
-- `--table NAME` renames the table and its indexes.

CREATE TABLE IF NOT EXISTS compensation_task (
    task_id             VARCHAR(64)  NOT NULL PRIMARY KEY,
    effect              VARCHAR(64)  NOT NULL,
    order_id            BIGINT       NOT NULL,
    class               VARCHAR(32)  NOT NULL,
    action              VARCHAR(32)  NOT NULL,   -- EXECUTE_EFFECT, REVERSE_EFFECT, INVESTIGATE
    command             VARCHAR(128) NULL,
    reopen_msg_id       VARCHAR(64)  NULL,
    reverse_receipt_ids TEXT         NULL,
    priority            INTEGER      NOT NULL,
    idempotency_key     VARCHAR(128) NOT NULL,
    state               VARCHAR(16)  NOT NULL,   -- OPEN, DONE, FAILED, RESOLVED
    resolution          VARCHAR(16)  NULL,
    first_run           VARCHAR(64)  NOT NULL,
    last_run            VARCHAR(64)  NOT NULL,
    last_cut            TIMESTAMPTZ  NOT NULL,
    attempt             INTEGER      NOT NULL,
    updated_at          TIMESTAMPTZ  NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_compensation_task_state ON compensation_task (state, priority);
CREATE INDEX IF NOT EXISTS ix_compensation_task_order ON compensation_task (order_id);
