//! `watch` against a database written while it runs (SQLite always; MariaDB when
//! `EFFECT_RECON_TEST_MYSQL_URL` is set): a generated day dumped two hours ago, a night
//! over it, then faults planted between cycles. Every planted finding is alerted exactly
//! once across cycles (quiet cycles post nothing), survives a cycle killed before its
//! manifest, and is not NEW again at night; the long-running loop posts once for a new
//! fault, says how it stops, and refuses a job it cannot read incrementally.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use effect_recon::db::load;
use effect_recon::storage::Location;
use effect_recon::time::{format_instant, now_micros, Micros, SECOND_MICROS};
use sqlx::Connection;

use super::common::{command, read_output, text};
use super::databases::{env_url, mysql_database, MYSQL_ENV};
use super::notify::webhook_receiver;
use super::reliability::job_file;

const MINUTE: Micros = 60 * SECOND_MICROS;

/// A database holding a generated day dumped two hours ago (its cut eight hours ago), and its job.
struct Live {
    url: String,
    job: PathBuf,
    root: PathBuf,
    dir: tempfile::TempDir,
}

impl Live {
    async fn new(url: String) -> Live {
        let dir = tempfile::tempdir().unwrap();
        let job = job_file(dir.path(), &url, None);
        let day = dir.path().join("day");
        let location = Location::parse(day.to_str().unwrap()).unwrap();
        let mut plan = effect_recon::workload::WorkloadPlan::new(location.clone(), 300).unwrap();
        let now = now_micros();
        // The generator dumps its databases 6 hours after the cut: every row and every
        // grace is then over before the test starts, so only planted faults change.
        plan.cut = now - now.rem_euclid(SECOND_MICROS) - 8 * 60 * MINUTE;
        effect_recon::workload::generate(&plan).await.unwrap();
        load::load_snapshot(&location, &url, &load::LoadOptions::default()).await.unwrap();
        Live { url, job, root: dir.path().join("recon"), dir }
    }

    /// A day in a fresh SQLite database.
    async fn sqlite() -> Live {
        let dir = tempfile::tempdir().unwrap().keep();
        Live::new(format!("sqlite:{}", dir.join("fulfilment.db").display())).await
    }

    /// A day in a fresh MariaDB database `name`, when the server's variable is set.
    async fn mariadb(name: &str) -> Option<Live> {
        let base = env_url(MYSQL_ENV)?;
        Some(Live::new(mysql_database(&base, name).await).await)
    }

    /// An order paid 50 minutes ago whose ORDER_PAID was skipped: two MISSING_EFFECT
    /// findings (points and WMS), already past their 30-minute grace.
    async fn plant(&self, order: i64) {
        let at = chrono::DateTime::from_timestamp_micros(now_micros() - 50 * MINUTE).unwrap();
        let at = format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f"));
        let sql = format!(
            "INSERT INTO idempotent_msg (msg_id, order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at) \
             VALUES ('live-{order}', {order}, 'ORDER_PAID', 'PAID', 'SKIPPED', 'SHIPPED', 'order-event', 5, {order}, 'c5', {at});\n\
             INSERT INTO order_status_history (order_id, status, changed_at) VALUES ({order}, 'PAID', {at})"
        );
        if self.url.starts_with("mysql") {
            let mut conn = sqlx::MySqlConnection::connect(&self.url).await.unwrap();
            sqlx::raw_sql("SET time_zone = '+00:00'").execute(&mut conn).await.unwrap();
            sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
        } else {
            let mut conn = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
            sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
        }
    }

    fn watch_once(&self, webhook: &str, env: &[(&str, &str)]) -> Output {
        let job = self.job.to_str().unwrap();
        let mut cmd = command(&["watch", "--config", job, "--once", "--alert-webhook", webhook]);
        cmd.envs(env.iter().copied());
        cmd.output().unwrap()
    }

    fn nightly(&self, cut: Micros, webhook: &str) -> Output {
        let (job, cut) = (self.job.to_str().unwrap(), format_instant(cut));
        command(&["nightly", "--config", job, "--cut", &cut, "--alert-webhook", webhook, "-q"])
            .output()
            .unwrap()
    }

    /// The complete runs of a chain (`recon/` or `recon/intraday/`), oldest first.
    fn runs(&self, intraday: bool) -> Vec<PathBuf> {
        let root = if intraday { self.root.join("intraday") } else { self.root.clone() };
        let mut runs: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("run="))
            .filter(|p| p.join("manifest.json").exists())
            .collect();
        runs.sort();
        runs
    }
}

/// `20261204T094000Z` of `…/run=20261204T094000Z`.
fn run_id(run: &Path) -> String {
    run.file_name().unwrap().to_str().unwrap().trim_start_matches("run=").to_string()
}

fn summary(run: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap()
}

/// `(order_id, effect, lifecycle, first_seen_run)` of a run's BREAK findings on `order`.
fn findings_of(run: &Path, order: i64) -> Vec<(String, String, String)> {
    let batches = read_output(run, "discrepancies");
    let mut rows = Vec::new();
    for batch in &batches {
        let column = |name: &str| batch.column_by_name(name).unwrap().clone();
        let cast = |name: &str| {
            datafusion::arrow::compute::cast(
                &column(name),
                &datafusion::arrow::datatypes::DataType::Utf8,
            )
            .unwrap()
        };
        let (orders, effects, verdicts, lifecycles, first) = (
            cast("order_id"),
            cast("effect"),
            cast("verdict"),
            cast("lifecycle"),
            cast("first_seen_run"),
        );
        let s = |a: &datafusion::arrow::array::ArrayRef, i: usize| {
            datafusion::arrow::array::AsArray::as_string::<i32>(a.as_ref()).value(i).to_string()
        };
        for i in 0..batch.num_rows() {
            if s(&orders, i) == order.to_string() && s(&verdicts, i) == "BREAK" {
                rows.push((s(&effects, i), s(&lifecycles, i), s(&first, i)));
            }
        }
    }
    rows.sort();
    rows
}

/// The messages posted so far (waiting `settle` for stragglers), as JSON.
fn posted(
    received: &mpsc::Receiver<(String, Vec<u8>)>,
    settle: Duration,
) -> Vec<serde_json::Value> {
    let mut messages = Vec::new();
    while let Ok((_, body)) = received.recv_timeout(settle) {
        messages.push(serde_json::from_slice(&body).unwrap());
    }
    messages
}

fn ok(output: &Output, what: &str) {
    let (out, err) = text(output);
    assert_eq!(output.status.code(), Some(0), "{what}\nstdout: {out}\nstderr: {err}");
}

/// The scripted day: night, quiet cycle, fault A, cycle, quiet cycle, fault B, a cycle
/// killed before its manifest, the cycle that resumes, the next night.
async fn each_finding_alerted_once_and_not_new_at_night(live: Live, name: &str) {
    let (webhook, received) = webhook_receiver();
    let night0 = now_micros() / SECOND_MICROS * SECOND_MICROS - 60 * MINUTE;
    ok(&live.nightly(night0, &webhook), "the first night");
    let night_messages = posted(&received, Duration::from_millis(500));
    assert_eq!(night_messages.len(), 1, "{name}: the night alerts its day's findings once");
    let open_at_night = night_messages[0]["open"].as_u64().unwrap();

    let quiet = live.watch_once(&webhook, &[]);
    ok(&quiet, "the first cycle");
    let first_cycle = live.runs(true);
    assert_eq!(first_cycle.len(), 1);
    let s = summary(&first_cycle[0]);
    assert_eq!(
        s["previous_run"],
        run_id(&live.runs(false)[0]),
        "{name}: the first cycle follows the night"
    );
    assert_eq!(
        (s["new"].as_u64(), s["open"].as_u64()),
        (Some(0), Some(open_at_night)),
        "{name}: {s}"
    );
    assert!(
        posted(&received, Duration::from_millis(300)).is_empty(),
        "{name}: a quiet cycle posts nothing"
    );

    live.plant(900_001).await;
    ok(&live.watch_once(&webhook, &[]), "the cycle after fault A");
    let messages = posted(&received, Duration::from_millis(500));
    assert_eq!(messages.len(), 1, "{name}: one message for the cycle with findings: {messages:?}");
    assert_eq!(messages[0]["new"], 2, "{name}: {}", messages[0]["text"]);
    assert!(
        messages[0]["text"].as_str().unwrap().starts_with("effect-recon watch "),
        "{}",
        messages[0]["text"]
    );
    let run_a = run_id(live.runs(true).last().unwrap());

    ok(&live.watch_once(&webhook, &[]), "a quiet cycle");
    assert!(
        posted(&received, Duration::from_millis(300)).is_empty(),
        "{name}: A is not posted again"
    );
    let persisting = findings_of(live.runs(true).last().unwrap(), 900_001);
    assert_eq!(
        persisting,
        [
            ("points_grant".into(), "PERSISTING".into(), run_a.clone()),
            ("wms_lock".into(), "PERSISTING".into(), run_a.clone())
        ],
        "{name}"
    );

    // Fault B, and a cycle killed after its outputs but before its manifest.
    live.plant(900_002).await;
    let published = live.runs(true).len();
    let killed = live.watch_once(&webhook, &[("EFFECT_RECON_CRASH_AT", "run-before-manifest")]);
    assert_ne!(killed.status.code(), Some(0), "the crash hook kills the cycle");
    assert!(
        posted(&received, Duration::from_millis(300)).is_empty(),
        "{name}: a killed cycle posts nothing"
    );
    assert_eq!(live.runs(true).len(), published, "{name}: the killed cycle published nothing");
    let unfinished = std::fs::read_dir(live.root.join("intraday"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name().unwrap().to_str().unwrap().starts_with("run=")
                && !p.join("manifest.json").exists()
        })
        .count();
    assert_eq!(unfinished, 1, "{name}: the killed cycle's run folder is there, without a manifest");
    let resumed = live.watch_once(&webhook, &[]);
    ok(&resumed, "the cycle after the killed one");
    let messages = posted(&received, Duration::from_millis(500));
    assert_eq!(messages.len(), 1, "{name}: B is posted once, by the cycle that resumed");
    assert_eq!(
        messages[0]["new"], 2,
        "{name}: only B's two findings are new: {}",
        messages[0]["text"]
    );
    let runs = live.runs(true);
    let run_b = run_id(&runs[runs.len() - 1]);
    assert_eq!(
        summary(&runs[runs.len() - 1])["previous_run"],
        run_id(&runs[runs.len() - 2]),
        "{name}: the resumed cycle follows the last complete one"
    );

    // The night: A and B were reported during the day, so they are PERSISTING with the
    // cycles' first-seen runs, and the night posts no NEW.
    std::thread::sleep(Duration::from_millis(1100));
    let night1 = now_micros() / SECOND_MICROS * SECOND_MICROS;
    ok(&live.nightly(night1, &webhook), "the next night");
    let night = live.runs(false).last().unwrap().clone();
    let s = summary(&night);
    assert_eq!(s["new"], 0, "{name}: nothing the cycles reported is NEW at night: {s}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(night.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["intraday_run"], serde_json::Value::from(run_b.clone()), "{name}");
    assert_eq!(
        findings_of(&night, 900_001),
        [
            ("points_grant".into(), "PERSISTING".into(), run_a.clone()),
            ("wms_lock".into(), "PERSISTING".into(), run_a)
        ],
        "{name}"
    );
    assert_eq!(
        findings_of(&night, 900_002),
        [
            ("points_grant".into(), "PERSISTING".into(), run_b.clone()),
            ("wms_lock".into(), "PERSISTING".into(), run_b)
        ],
        "{name}"
    );
    let messages = posted(&received, Duration::from_millis(500));
    assert_eq!(messages.len(), 1, "{name}: the night still alerts its open findings");
    assert_eq!(messages[0]["new"], 0, "{name}");
    drop(live.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_each_finding_is_alerted_once_and_not_new_at_night() {
    each_finding_alerted_once_and_not_new_at_night(Live::sqlite().await, "SQLite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_each_finding_is_alerted_once_and_not_new_at_night() {
    let Some(live) = Live::mariadb("watch_scripted").await else { return };
    each_finding_alerted_once_and_not_new_at_night(live, "MariaDB").await;
}

/// `watch --every 1s` in the background, its stderr collected by a thread.
fn spawn_watch(live: &Live, webhook: &str) -> (Child, mpsc::Receiver<String>) {
    let job = live.job.to_str().unwrap();
    let mut child =
        command(&["watch", "--config", job, "--every", "1s", "--alert-webhook", webhook])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    (child, lines)
}

/// The lines of a child's stderr, as they come.
fn lines_of(mut stderr: std::process::ChildStderr) -> mpsc::Receiver<String> {
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = String::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut chunk) {
            if n == 0 {
                break;
            }
            buffer.push_str(&String::from_utf8_lossy(&chunk[..n]));
            while let Some(end) = buffer.find('\n') {
                let line: String = buffer.drain(..=end).collect();
                if lines.send(line.trim_end().to_string()).is_err() {
                    return;
                }
            }
        }
    });
    received
}

/// Waits for a line containing `needle`; every line seen goes into `seen`.
fn wait_for(lines: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
            let found = line.contains(needle);
            seen.push(line);
            if found {
                return;
            }
        }
    }
    panic!("no line with {needle:?} within 120 s:\n{}", seen.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_posts_once_per_cycle_with_findings_and_stops_on_sigterm() {
    let live = Live::sqlite().await;
    let (webhook, received) = webhook_receiver();
    let (mut child, lines) = spawn_watch(&live, &webhook);
    let mut seen = Vec::new();
    wait_for(&lines, "watch: cycle ", &mut seen);
    let first = posted(&received, Duration::from_millis(300));
    assert_eq!(first.len(), 1, "the first cycle (no night yet) reports the day's findings once");
    wait_for(&lines, "watch: cycle ", &mut seen);
    assert!(
        posted(&received, Duration::from_millis(300)).is_empty(),
        "a quiet cycle posts nothing:\n{}",
        seen.join("\n")
    );

    live.plant(900_003).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let message = loop {
        assert!(
            Instant::now() < deadline,
            "no message for the planted fault:\n{}",
            seen.join("\n")
        );
        if let Ok((_, body)) = received.recv_timeout(Duration::from_millis(200)) {
            break serde_json::from_slice::<serde_json::Value>(&body).unwrap();
        }
        while let Ok(line) = lines.try_recv() {
            seen.push(line);
        }
    };
    assert_eq!(message["new"], 2, "{}", message["text"]);
    // Two more cycles: the fault is not posted again.
    let cycles = seen.iter().filter(|l| l.starts_with("watch: cycle ")).count();
    while seen.iter().filter(|l| l.starts_with("watch: cycle ")).count() < cycles + 3 {
        wait_for(&lines, "watch: cycle ", &mut seen);
    }
    assert!(
        posted(&received, Duration::from_millis(300)).is_empty(),
        "posted once:\n{}",
        seen.join("\n")
    );

    // SIGTERM: the loop ends, between cycles at once or after the cycle it is in.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(stopped.elapsed() < Duration::from_secs(60), "watch did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
        seen.push(line);
    }
    assert_eq!(status.code(), Some(0), "{}", seen.join("\n"));
    assert!(seen.last().unwrap().starts_with("watch: stopped"), "{}", seen.join("\n"));
    let intraday = live.root.join("intraday");
    for entry in std::fs::read_dir(&intraday).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().starts_with("run=") {
            assert!(
                path.join("manifest.json").exists(),
                "a run folder without manifest: {}",
                path.display()
            );
        }
    }
}

#[test]
fn a_job_without_change_columns_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let job = job_file(dir.path(), "sqlite:nowhere.db", None);
    let original = std::fs::read_to_string(&job).unwrap();
    let edited = original.replacen(
        "key            = \"receipt_id\"\nchanged_column = \"updated_at\"\n",
        "",
        1,
    );
    std::fs::write(&job, edited).unwrap();
    let output = command(&["watch", "--config", job.to_str().unwrap(), "--once"]).output().unwrap();
    let (_, err) = super::common::text(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains("watch needs incremental snapshots")
            && err.contains("receipts[points] has none"),
        "{err}"
    );
    assert!(!dir.path().join("recon").exists(), "nothing written");

    let output = command(&["watch", "--config", job.to_str().unwrap(), "--every", "200ms"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).1.contains("under a second"), "{}", text(&output).1);
}

/// `(msg_id, action)` of every ledger row.
async fn ledger_actions(url: &str) -> Vec<(String, String)> {
    let sql = "SELECT msg_id, action FROM idempotent_msg ORDER BY msg_id";
    if url.starts_with("mysql") {
        let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
        sqlx::query_as(sql).fetch_all(&mut conn).await.unwrap()
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_as(sql).fetch_all(&mut conn).await.unwrap()
    }
}

async fn set_action(url: &str, msg_id: &str, action: &str) {
    let sql = format!("UPDATE idempotent_msg SET action = '{action}' WHERE msg_id = '{msg_id}'");
    if url.starts_with("mysql") {
        let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
        sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
    }
}

/// `watch --reopen`: a row a consumer changed between the cycle's read and the guarded
/// update is left alone, the rest are REVOKED with an audit row each and undone by
/// `reopen --undo`; a cycle over the ceiling reopens nothing, alerts and exits 2.
async fn reopen_is_guarded_capped_and_undone(live: Live, name: &str) {
    let (webhook, received) = webhook_receiver();
    let job = live.job.to_str().unwrap().to_string();
    ok(
        &live.nightly(now_micros() / SECOND_MICROS * SECOND_MICROS - 60 * MINUTE, &webhook),
        "night",
    );
    posted(&received, Duration::from_millis(300));
    live.plant(900_010).await;
    live.plant(900_011).await;
    let before = ledger_actions(&live.url).await;

    let pause = tempfile::tempdir().unwrap();
    let hook = format!("reopen-before-apply:{}", pause.path().display());
    let child = command(&[
        "watch",
        "--config",
        &job,
        "--once",
        "--reopen",
        "--max-reopen-per-cycle",
        "1000",
    ])
    .env("EFFECT_RECON_PAUSE_AT", &hook)
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pause.path().join("paused").exists() {
        assert!(Instant::now() < deadline, "{name}: the cycle never reached its reopen");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A consumer processes the redelivered ORDER_PAID of order 900011 meanwhile.
    set_action(&live.url, "live-900011", "DONE").await;
    std::fs::write(pause.path().join("resume"), "").unwrap();
    let output = child.wait_with_output().unwrap();
    ok(&output, "watch --once --reopen");
    let err = text(&output).1;

    let cycle = live.runs(true).last().unwrap().clone();
    let tasks = read_output(&cycle, "compensation_tasks");
    let mut asked: Vec<String> = Vec::new();
    for batch in &tasks {
        let column = datafusion::arrow::compute::cast(
            batch.column_by_name("reopen_msg_id").unwrap(),
            &datafusion::arrow::datatypes::DataType::Utf8,
        )
        .unwrap();
        let column = datafusion::arrow::array::AsArray::as_string::<i32>(column.as_ref()).clone();
        asked.extend(column.iter().flatten().map(str::to_string));
    }
    asked.sort();
    asked.dedup();
    assert!(
        asked.contains(&"live-900010".to_string()) && asked.contains(&"live-900011".to_string()),
        "{name}: {asked:?}"
    );
    let after = ledger_actions(&live.url).await;
    for ((msg, was), (_, now)) in before.iter().zip(&after) {
        let expected = if msg == "live-900011" {
            "DONE"
        } else if asked.contains(msg) && (was == "SKIPPED" || was == "PENDING_REVIEW") {
            "REVOKED"
        } else {
            was.as_str()
        };
        assert_eq!(now, expected, "{name}: {msg} was {was}");
    }
    let reopenable =
        |(m, a): &&(String, String)| asked.contains(m) && (a == "SKIPPED" || a == "PENDING_REVIEW");
    let changed = before.iter().filter(reopenable).filter(|(m, _)| m != "live-900011").count();
    assert!(
        err.contains(&format!(
            "watch: reopened {changed} ledger row(s), 1 changed meanwhile (left alone)"
        )),
        "{name}: {err}"
    );

    // The audit undoes it: every row back to what it was, the consumer's DONE kept.
    let undo = err.split("--undo ").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    let undone =
        command(&["reopen", "--config", &job, "--undo", &undo, "--apply"]).output().unwrap();
    ok(&undone, "reopen --undo");
    let mut expected = before.clone();
    expected.iter_mut().filter(|(m, _)| m == "live-900011").for_each(|(_, a)| *a = "DONE".into());
    assert_eq!(ledger_actions(&live.url).await, expected, "{name}: undone");

    // Over the ceiling: nothing reopened, one alert, exit 2.
    posted(&received, Duration::from_millis(300));
    let capped = command(&[
        "watch",
        "--config",
        &job,
        "--once",
        "--reopen",
        "--max-reopen-per-cycle",
        "1",
        "--alert-webhook",
        &webhook,
    ])
    .output()
    .unwrap();
    assert_eq!(capped.status.code(), Some(2), "{name}: {}", text(&capped).1);
    assert!(
        text(&capped).1.contains("over --max-reopen-per-cycle 1; nothing was reopened"),
        "{}",
        text(&capped).1
    );
    assert_eq!(
        ledger_actions(&live.url).await,
        expected,
        "{name}: nothing reopened over the ceiling"
    );
    let messages = posted(&received, Duration::from_millis(500));
    assert_eq!(
        messages.iter().filter(|m| m["state"] == "REOPEN_CEILING").count(),
        1,
        "{name}: {messages:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reopen_is_guarded_capped_and_undone() {
    reopen_is_guarded_capped_and_undone(Live::sqlite().await, "SQLite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_reopen_is_guarded_capped_and_undone() {
    let Some(live) = Live::mariadb("watch_reopen").await else { return };
    reopen_is_guarded_capped_and_undone(live, "MariaDB").await;
}

/// A generated day replayed into SQLite 3,600 times faster than it happened (`gen
/// --live`), `watch --every 30m` on the replay clock: each finding is NEW in exactly one
/// cycle, and a night at the last cycle's cut lists none of them NEW again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_day_reports_each_finding_once_and_nothing_new_at_night() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.db");
    let url = format!("sqlite:{}", db.display());
    let job = job_file(dir.path(), &url, None);
    let (day, clock) = (dir.path().join("day"), dir.path().join("clock"));
    let gen = command(&[
        "gen",
        "--out",
        day.to_str().unwrap(),
        "--orders",
        "300",
        "--seed",
        "3",
        "--incident",
        "--live",
        &url,
        "--speed",
        "3600",
        "--clock-file",
        clock.to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !clock.exists() || std::fs::read_to_string(&clock).unwrap().is_empty() {
        assert!(Instant::now() < deadline, "gen --live wrote no clock");
        std::thread::sleep(Duration::from_millis(20));
    }
    let clock = std::fs::read_to_string(&clock).unwrap();
    let mut watch = command(&[
        "watch",
        "--config",
        job.to_str().unwrap(),
        "--every",
        "30m",
        "--compact-every",
        "4",
    ])
    .env("EFFECT_RECON_CLOCK", &clock)
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let replayed = gen.wait_with_output().unwrap();
    assert_eq!(replayed.status.code(), Some(0), "gen --live");
    let replayed = String::from_utf8_lossy(&replayed.stdout).into_owned();
    assert!(
        replayed.contains("EFFECT_RECON_CLOCK=") && replayed.contains("replayed: "),
        "{replayed}"
    );
    // Two more event hours (two wall seconds), then stop.
    std::thread::sleep(Duration::from_secs(3));
    unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
    let mut err = String::new();
    watch.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(watch.wait().unwrap().code(), Some(0), "{err}");
    assert!(err.contains("watch: on the replay clock"), "{err}");

    let root = dir.path().join("recon");
    let intraday: Vec<PathBuf> = {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(root.join("intraday"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name().unwrap().to_str().unwrap().starts_with("run=")
                    && p.join("manifest.json").exists()
            })
            .collect();
        runs.sort();
        runs
    };
    assert!(intraday.len() >= 4, "{err}");
    let mut new_in: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for run in &intraday {
        for batch in read_output(run, "discrepancies") {
            let ids = datafusion::arrow::compute::cast(
                batch.column_by_name("finding_id").unwrap(),
                &datafusion::arrow::datatypes::DataType::Utf8,
            )
            .unwrap();
            let life = datafusion::arrow::compute::cast(
                batch.column_by_name("lifecycle").unwrap(),
                &datafusion::arrow::datatypes::DataType::Utf8,
            )
            .unwrap();
            let ids = datafusion::arrow::array::AsArray::as_string::<i32>(ids.as_ref()).clone();
            let life = datafusion::arrow::array::AsArray::as_string::<i32>(life.as_ref()).clone();
            for i in 0..batch.num_rows() {
                if datafusion::arrow::array::Array::is_valid(&life, i) && life.value(i) == "NEW" {
                    new_in.entry(ids.value(i).to_string()).or_default().push(run_id(run));
                }
            }
        }
    }
    assert!(new_in.len() >= 5, "the day has findings: {new_in:?}\n{err}");
    let twice: Vec<_> = new_in.iter().filter(|(_, runs)| runs.len() > 1).collect();
    assert!(twice.is_empty(), "NEW in more than one cycle: {twice:?}");

    let last = summary(intraday.last().unwrap());
    let cut = last["cut"].as_str().unwrap().to_string();
    let night = command(&["nightly", "--config", job.to_str().unwrap(), "--cut", &cut, "-q"])
        .output()
        .unwrap();
    ok(&night, "the night at the last cycle's cut");
    let night_run = root.join(format!("run={}", run_id(intraday.last().unwrap())));
    let s = summary(&night_run);
    assert_eq!(s["new"], 0, "every finding was reported by a cycle: {s}");
    assert_eq!(s["open"], last["open"], "the night and the last cycle agree on what is open");
}

/// The database goes away under a running loop: each failed cycle is one line and a
/// retry, the second failure in a row posts one FAILING alert (the third none), and the
/// first cycle that publishes again posts RECOVERED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_goes_away_backs_off_alerts_once_and_recovers() {
    let dir = tempfile::tempdir().unwrap().keep();
    let db = dir.join("fulfilment.db");
    let live = Live::new(format!("sqlite:{}", db.display())).await;
    let (webhook, received) = webhook_receiver();
    let job = live.job.to_str().unwrap().to_string();
    let mut child = command(&[
        "watch",
        "--config",
        &job,
        "--every",
        "1s",
        "--alert-after",
        "2",
        "--alert-webhook",
        &webhook,
    ])
    .stderr(Stdio::piped())
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = lines_of(stderr);
    let mut seen = Vec::new();
    wait_for(&lines, "watch: cycle ", &mut seen);
    assert_eq!(posted(&received, Duration::from_millis(300)).len(), 1, "the day's findings, once");

    let away = dir.join("fulfilment.db.away");
    std::fs::rename(&db, &away).unwrap();
    wait_for(&lines, "failed (3 in a row)", &mut seen);
    let failing = posted(&received, Duration::from_millis(300));
    assert_eq!(
        failing.len(),
        1,
        "one alert for the failures, not one each: {failing:?}\n{}",
        seen.join("\n")
    );
    assert_eq!(failing[0]["state"], "FAILING");
    assert_eq!(failing[0]["failures"], 2);
    assert!(failing[0]["error"].as_str().unwrap().contains("fulfilment"), "{}", failing[0]);

    std::fs::rename(&away, &db).unwrap();
    wait_for(&lines, "published again after", &mut seen);
    let recovered = posted(&received, Duration::from_millis(500));
    assert_eq!(recovered.iter().filter(|m| m["state"] == "RECOVERED").count(), 1, "{recovered:?}");
    assert!(
        recovered.iter().all(|m| m["state"] == "RECOVERED"),
        "no finding is new after the outage: {recovered:?}"
    );

    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
