//! One order, now (`explain --config`, `reopen --order`, `reopen --msg-id`): the order's
//! rows read live through the job config's sources decide, not last night's run; where
//! the two disagree it is said; the reopen keeps its guards, audit and undo; an unknown
//! order or message, or `--order` with `--run`, is refused with nothing written. Against
//! SQLite always and MariaDB/PostgreSQL when their variables are set.

use effect_recon::db::load::{self, LoadOptions};

use super::databases::{env_url, mysql_database, pg_schema, MYSQL_ENV, PG_ENV};
use super::publish::{demo_job, exec, outcome, query, sqlite_url};
use crate::common;

const CUT: &str = "2026-11-29T16:00:00Z";

/// The tiny fixture in the database at `url`, a nightly at the cut, then a late points
/// receipt of order 8821 (the incident): points are no longer missing, the stock lock is.
async fn order_now_story(url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let path = |p: &str| tmp.path().join(p).to_str().unwrap().to_string();
    load::load_snapshot(&common::tiny_snapshot(), url, &LoadOptions::default()).await.unwrap();
    std::fs::write(path("job.toml"), demo_job(url)).unwrap();
    let job = path("job.toml");
    let (code, _, err) = outcome(&["nightly", "--config", &job, "--cut", CUT, "-q"]);
    assert_eq!(code, Some(0), "{err}");
    exec(
        url,
        "INSERT INTO points_receipt (receipt_id, order_id, effect, msg_id, status, created_at) \
         SELECT 'pt-8821-late', 8821, 'points_grant', NULL, 'SUCCEEDED', created_at \
         FROM logistics_receipt WHERE receipt_id = 'lg-8821'",
    )
    .await;

    // explain reads the late receipt live and says where the night's run disagrees.
    let (code, out, err) = outcome(&["explain", "--config", &job, "--order", "8821", "--cut", CUT]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("pt-8821-late points_grant SUCCEEDED"), "{out}");
    assert!(out.contains("wms_lock SKIPPED_BUT_DUE BREAK"), "{out}");
    assert!(!out.contains("points_grant SKIPPED_BUT_DUE"), "{out}");
    assert!(
        err.contains(
            "disagree: run 20261129T160000Z (cut 2026-11-29T16:00:00Z) has points_grant \
             SKIPPED_BUT_DUE BREAK; the live data no longer does"
        ),
        "{err}"
    );
    assert!(err.contains("read live at 2026-11-29T16:00:00Z"), "{err}");

    // reopen --order: a dry run from the live judgment; only the stock lock's task asks.
    let order = ["reopen", "--config", &job, "--order", "8821", "--cut", CUT];
    let (code, out, err) = outcome(&order);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("msg-7391") && out.contains("would change"), "{out}");
    assert!(out.contains("dry run, nothing changed: 1 would change"), "{out}");
    assert!(
        err.contains(
            "order 8821 judged live at 2026-11-29T16:00:00Z: wms_lock SKIPPED_BUT_DUE BREAK"
        ),
        "{err}"
    );
    let points = [&order[..], &["--effect", "points_grant"]].concat();
    let (code, out, err) = outcome(&points);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("dry run, nothing changed: 0 would change"), "{out}");
    let before = query(
        url,
        "SELECT msg_id, action FROM idempotent_msg WHERE order_id = 8821 ORDER BY msg_id",
    )
    .await;
    // An order without a single receipt (a stalled review): an empty table of one order
    // is no failed export, the live run is COMPLETE and its reopen goes ahead.
    let (code, out, err) = outcome(&["reopen", "--config", &job, "--order", "1003", "--cut", CUT]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("msg-1003-p               PENDING_REVIEW -> REVOKED"), "{out}");
    assert!(!err.contains("warning") && !err.contains("self-check"), "{err}");

    // Bad input: nothing written.
    let (code, _, err) = outcome(&["reopen", "--config", &job, "--order", "424242", "--cut", CUT]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the ledger has no row of order 424242"), "{err}");
    let (code, _, err) =
        outcome(&["reopen", "--config", &job, "--msg-id", "no-such-msg", "--apply", "--create"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("has no message 'no-such-msg'; nothing written"), "{err}");
    let (code, _, err) =
        outcome(&["reopen", "--config", &job, "--order", "8821", "--run", &path("recon")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--order") && err.contains("--run"), "{err}");
    let unchanged = query(
        url,
        "SELECT msg_id, action FROM idempotent_msg WHERE order_id = 8821 ORDER BY msg_id",
    )
    .await;
    assert_eq!(unchanged, before);

    // Killed with -9 inside its one batch (updates and audit row written, not committed):
    // nothing changed, no audit row; the rerun below then applies it whole.
    let apply = [
        "reopen", "--config", &job, "--msg-id", "msg-7391", "--cut", CUT, "--apply", "--create",
        "--by", "it-test",
    ];
    let killed = common::command(&apply)
        .env("EFFECT_RECON_CRASH_AT", "reopen-before-commit")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(killed.status.signal(), Some(9), "{:?}", common::text(&killed));
    let after_kill = query(
        url,
        "SELECT msg_id, action FROM idempotent_msg WHERE order_id = 8821 ORDER BY msg_id",
    )
    .await;
    assert_eq!(after_kill, before, "a killed one-order reopen changed the ledger");
    let audited = query(url, "SELECT msg_id, run_id FROM recon_reopen_audit").await;
    assert!(audited.is_empty(), "an audit row without its change: {audited:?}");

    // reopen --msg-id --apply: the one message, guarded and audited, then undone.
    let (code, out, err) = outcome(&[
        "reopen", "--config", &job, "--msg-id", "msg-7391", "--cut", CUT, "--apply", "--create",
        "--by", "it-test",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("1 changed"), "{out}");
    let after =
        query(url, "SELECT msg_id, action FROM idempotent_msg WHERE msg_id = 'msg-7391'").await;
    assert_eq!(after, [("msg-7391".to_string(), "REVOKED".to_string())]);
    let audit = query(url, "SELECT msg_id, run_id FROM recon_reopen_audit").await;
    assert_eq!(
        audit,
        [("msg-7391".to_string(), "order-8821-20261129T160000Z".to_string())],
        "one audit row, naming the live run"
    );
    let apply_id = out
        .lines()
        .find_map(|l| l.strip_prefix("applied ").and_then(|r| r.split_whitespace().next()))
        .unwrap_or_else(|| panic!("no apply id in {out}"))
        .to_string();
    let (code, out, err) = outcome(&["reopen", "--config", &job, "--undo", &apply_id, "--apply"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let undone = query(
        url,
        "SELECT msg_id, action FROM idempotent_msg WHERE order_id = 8821 ORDER BY msg_id",
    )
    .await;
    assert_eq!(undone, before, "the undo restores exactly what the apply changed");
}

#[tokio::test]
async fn sqlite_one_order_is_judged_live_and_reopened_with_its_guards() {
    let tmp = tempfile::tempdir().unwrap();
    order_now_story(&sqlite_url(tmp.path(), "fulfilment.db")).await;
}

#[tokio::test]
async fn mysql_one_order_is_judged_live_and_reopened_with_its_guards() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    order_now_story(&mysql_database(&base, "er_it_order_now").await).await;
}

#[tokio::test]
async fn postgres_one_order_is_judged_live_and_reopened_with_its_guards() {
    let Some(base) = env_url(PG_ENV) else { return };
    order_now_story(&pg_schema(&base, "er_it_order_now").await).await;
}
