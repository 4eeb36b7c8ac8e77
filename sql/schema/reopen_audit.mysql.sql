-- Recommended audit table of `effect-recon reopen` (the ledger rollback tool) on MySQL 8 / MariaDB 10.11.
-- It lives in the LEDGER's database: every batch changes ledger rows and writes one audit
-- row per changed message in the same transaction, so a batch is either applied with its
-- audit rows or not at all.
--
-- * apply_id: one `reopen --apply` (or `--undo`) invocation; batch_id: one transaction of
--   it (`<apply_id>-b0001`). `reopen --undo <apply_id or batch_id>` restores old_action
--   from these rows, guarded by the ledger row still being new_action.
-- * run_id / task_id: the run and the compensation task(s) that asked for the change (one
--   skipped ORDER_PAID message can owe points and a WMS lock: two tasks, one message).
-- * changed_by: `--by`, else the OS user. Rows are only ever inserted.
-- `--audit-table NAME` renames the table and its indexes.
--
-- The consumer-side contract that makes REVOKED work (docs/SOP.md has the whole of it):
-- on a redelivered or republished message, DONE and SKIPPED rows stay terminal (skip,
-- commit the offset); a REVOKED row means "decide again". The handler locks the row,
-- re-decides on the order's HISTORY (the due status was reached and no void status since,
-- not "current status = expected", which is what skipped it), performs the effect with the
-- message's idempotency key, and closes the row with an update guarded on REVOKED:
--
--   BEGIN;
--   SELECT action FROM idempotent_msg WHERE msg_id = ? FOR UPDATE;   -- REVOKED: go on
--   -- owed?  EXISTS (SELECT 1 FROM order_status_history WHERE order_id = ? AND status = 'PAID')
--   --        AND NOT EXISTS (... status IN ('CANCELLED', 'REFUNDED'))
--   -- yes: call the provider with idempotency key = msg_id (a retry cannot double it), then
--   UPDATE idempotent_msg SET action = 'DONE', observed_status = ?, consumer_id = ?,
--          decided_at = ? WHERE msg_id = ? AND action = 'REVOKED';   -- must be 1 row
--   -- no (voided meanwhile): the same UPDATE with action = 'SKIPPED'
--   COMMIT;
--
-- The tool never touches DONE rows and never deletes a row.

CREATE TABLE IF NOT EXISTS recon_reopen_audit (
    id          BIGINT       NOT NULL AUTO_INCREMENT,
    apply_id    VARCHAR(64)  NOT NULL,
    batch_id    VARCHAR(80)  NOT NULL,
    msg_id      VARCHAR(64)  NOT NULL,
    run_id      VARCHAR(64)  NOT NULL,
    task_id     VARCHAR(255) NULL,       -- the run's task ids asking for it, comma-separated
    old_action  VARCHAR(32)  NOT NULL,
    new_action  VARCHAR(32)  NOT NULL,
    changed_at  DATETIME(6)  NOT NULL,   -- UTC
    changed_by  VARCHAR(128) NOT NULL,
    PRIMARY KEY (id),
    KEY ix_recon_reopen_audit_apply (apply_id),
    KEY ix_recon_reopen_audit_batch (batch_id),
    KEY ix_recon_reopen_audit_msg (msg_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
