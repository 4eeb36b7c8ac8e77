//! Killed while writing to the team's database, rerun, same tables. `reopen --apply` and
//! `publish --create` are killed with SIGKILL (`EFFECT_RECON_CRASH_AT`, src/testing.rs)
//! right after a batch committed (`reopen-batch:n`, `publish-batch:n`) or inside one, after
//! its statements ran and before its COMMIT (`reopen-before-commit:n`,
//! `publish-before-commit:n`), at the first and last batch and at seeded ones; on SQLite
//! always and on MariaDB / PostgreSQL when their variables are set. The data: two chained
//! nights of `gen --nights`, run; the second night's ledger loaded into a fresh database
//! per case for its run's reopen. Required, and asserted per case:
//!
//! * reopen: the ledger rows changed by the killed apply are exactly those of its committed
//!   batches (none of the batch it died in), each with exactly one audit row from the action
//!   it had to the one it has, and no audit row lacks its change;
//! * the rerun converges: its ledger equals an uninterrupted apply's on a second fresh
//!   copy, still with one audit row per changed row;
//! * `--undo <the killed apply's id>` (read from the audit table) restores exactly the rows
//!   that apply changed, and the undo of the rerun's apply the rest: the ledger as loaded;
//! * publish (a first run into an empty table, and the next night's run, with updates and
//!   RESOLVED marks, over the first's): the task table holds exactly the committed batches,
//!   every other task as before the publish, and the rerun leaves it equal to an
//!   uninterrupted publish's (`updated_at`, the wall clock, aside).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use effect_recon::db::load::{self, LoadOptions, LoadTable};
use effect_recon::run_folder::reader::RunOutputs;
use effect_recon::snapshot::Table;
use sqlx::{Connection, Row};
use tokio::runtime::Runtime;

use super::super::common::{self, location, text};
use super::super::databases::{env_url, mysql_database, pg_schema, MYSQL_ENV, PG_ENV};
use super::{say, seed, soak, Rng};

/// Messages per reopen transaction.
const REOPEN_BATCH: usize = 3;
/// Tasks per publish transaction.
const PUBLISH_BATCH: usize = 5;
/// The generated world: orders, and the rates of the faults reopen acts on (wrong skips,
/// stalled reviews) raised so that the second night reopens dozens of messages.
const GEN: [&str; 8] =
    ["--orders", "2000", "--seed", "3", "--reorder-rate", "0.03", "--stalled-rate", "0.015"];
/// Seeded kill points per suite and database (ten times as many in the soak).
const SEEDED: usize = 4;
/// The task table's columns compared (all but `updated_at`, the wall clock of the write).
const TASK_COLUMNS: [&str; 16] = [
    "task_id",
    "effect",
    "order_id",
    "class",
    "action",
    "command",
    "reopen_msg_id",
    "reverse_receipt_ids",
    "priority",
    "idempotency_key",
    "state",
    "resolution",
    "first_run",
    "last_run",
    "last_cut",
    "attempt",
];

// ---------------------------------------------------------------- the data

/// Two chained nights of one generated world, run, and the second night's ledger.
struct World {
    runs: [PathBuf; 2],
    outputs: [RunOutputs; 2],
    ledger: LoadTable,
}

/// Made once per test binary.
fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let (nights, runs) = (dir.join("nights"), dir.join("runs"));
        let nights_arg = nights.to_str().unwrap();
        let mut args = vec!["gen", "--nights", "2", "--out", nights_arg];
        args.extend(GEN);
        succeeded(&args);
        let snapshots = folders(&nights, "snapshot=");
        assert_eq!(snapshots.len(), 2, "{snapshots:?}");
        for snapshot in &snapshots {
            let snapshot = snapshot.to_str().unwrap();
            succeeded(&["run", "--snapshot", snapshot, "--out", runs.to_str().unwrap(), "-q"]);
        }
        let run_folders = folders(&runs, "run=");
        let runs: [PathBuf; 2] = run_folders.try_into().unwrap();
        common::block_on(async {
            let (first, second) = (location(&runs[0]), location(&runs[1]));
            let outputs =
                [RunOutputs::read(&first).await.unwrap(), RunOutputs::read(&second).await.unwrap()];
            let tables = load::read_snapshot(&location(&snapshots[1])).await.unwrap();
            let ledger = tables.into_iter().find(|t| t.table == Table::Ledger).unwrap();
            World { runs, outputs, ledger }
        })
    })
}

/// The sub-folders of `dir` whose names start with `prefix`, sorted (= in cut order).
fn folders(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

// ---------------------------------------------------------------- the databases

/// Where the fresh databases of one kind come from.
enum Server {
    Sqlite(tempfile::TempDir),
    MySql(String),
    Postgres(String),
}

impl Server {
    fn name(&self) -> &'static str {
        match self {
            Server::Sqlite(_) => "sqlite",
            Server::MySql(_) => "mariadb",
            Server::Postgres(_) => "postgres",
        }
    }

    /// A fresh, empty database `name` (replacing an earlier one of that name); its URL.
    async fn fresh(&self, name: &str) -> String {
        match self {
            Server::Sqlite(dir) => {
                let path = dir.path().join(format!("{name}.db"));
                for suffix in ["", "-journal", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
                format!("sqlite://{}?mode=rwc", path.display())
            }
            Server::MySql(base) => mysql_database(base, name).await,
            Server::Postgres(base) => pg_schema(base, name).await,
        }
    }

    /// A fresh database holding the world's ledger (and the recommended schema).
    async fn fresh_ledger(&self, name: &str) -> String {
        let url = self.fresh(name).await;
        let ledger = std::slice::from_ref(&world().ledger);
        load::load_tables(&url, ledger, &LoadOptions::default()).await.unwrap();
        url
    }
}

/// The rows of `sql` (each column as text or NULL).
async fn rows(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    macro_rules! fetch {
        ($connection:ty) => {{
            let mut c = <$connection>::connect(url).await.unwrap();
            let rows = sqlx::query(sql).fetch_all(&mut c).await.unwrap_or_else(|e| {
                panic!("{sql}: {e}");
            });
            c.close().await.unwrap();
            rows.iter()
                .map(|r| (0..r.len()).map(|i| r.try_get::<Option<String>, _>(i).unwrap()).collect())
                .collect()
        }};
    }
    match url.split(':').next().unwrap() {
        "mysql" => fetch!(sqlx::MySqlConnection),
        "postgres" => fetch!(sqlx::PgConnection),
        _ => fetch!(sqlx::SqliteConnection),
    }
}

/// `CAST(column AS <the driver's text type>)`.
fn as_text(url: &str, column: &str) -> String {
    let text = if url.starts_with("mysql") { "CHAR" } else { "TEXT" };
    format!("CAST({column} AS {text})")
}

/// msg_id → action of every ledger row.
async fn ledger(url: &str) -> BTreeMap<String, String> {
    let sql = format!(
        "SELECT {}, {} FROM idempotent_msg",
        as_text(url, "msg_id"),
        as_text(url, "action")
    );
    let rows = rows(url, &sql).await;
    rows.into_iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap())).collect()
}

/// One row of the audit table.
#[derive(Debug, Clone)]
struct Audit {
    apply_id: String,
    batch_id: String,
    msg_id: String,
    old_action: String,
    new_action: String,
}

async fn audit(url: &str) -> Vec<Audit> {
    let columns = ["apply_id", "batch_id", "msg_id", "old_action", "new_action"];
    let list: Vec<String> = columns.iter().map(|c| as_text(url, c)).collect();
    let sql = format!("SELECT {} FROM recon_reopen_audit ORDER BY id", list.join(", "));
    let text = |v: &Option<String>| v.clone().unwrap();
    rows(url, &sql)
        .await
        .iter()
        .map(|r| Audit {
            apply_id: text(&r[0]),
            batch_id: text(&r[1]),
            msg_id: text(&r[2]),
            old_action: text(&r[3]),
            new_action: text(&r[4]),
        })
        .collect()
}

/// task_id → the compared columns of every row of the task table.
type Tasks = BTreeMap<String, Vec<Option<String>>>;

async fn tasks(url: &str) -> Tasks {
    let list: Vec<String> = TASK_COLUMNS.iter().map(|c| as_text(url, c)).collect();
    let sql = format!("SELECT {} FROM compensation_task", list.join(", "));
    rows(url, &sql).await.into_iter().map(|r| (r[0].clone().unwrap(), r)).collect()
}

// ---------------------------------------------------------------- the binary

/// The binary with `args`.
fn binary<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Command {
    let mut command = common::command(&[]);
    command.args(args);
    command
}

/// Runs the binary; asserts exit 0; returns its stdout.
fn succeeded<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let output = binary(args).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{args:?}: {:?}", text(&output));
    text(&output).0
}

/// Runs the binary with the crash hook at `kill`; asserts it died of SIGKILL.
fn killed(args: &[String], kill: &Kill) {
    let output = binary(args).env("EFFECT_RECON_CRASH_AT", kill.to_string()).output().unwrap();
    assert_eq!(output.status.signal(), Some(9), "{kill}: not killed: {:?}", text(&output));
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn reopen_args(run: &Path, url: &str) -> Vec<String> {
    let (run, batch) = (run.to_str().unwrap(), REOPEN_BATCH.to_string());
    strings(&["reopen", "--run", run, "--ledger", url, "--apply", "--create", "--batch", &batch])
}

fn undo_args(id: &str, url: &str) -> Vec<String> {
    let batch = REOPEN_BATCH.to_string();
    strings(&["reopen", "--undo", id, "--ledger", url, "--apply", "--batch", &batch])
}

fn publish_args(run: &Path, url: &str) -> Vec<String> {
    let (run, batch) = (run.to_str().unwrap(), PUBLISH_BATCH.to_string());
    strings(&["publish", "--run", run, "--to", url, "--create", "--batch", &batch])
}

// ---------------------------------------------------------------- kill points

/// Where a case dies: the `n`-th time the process reaches `stage`.
#[derive(Debug, Clone, Copy)]
struct Kill {
    stage: &'static str,
    n: usize,
}

impl std::fmt::Display for Kill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.stage, self.n)
    }
}

impl Kill {
    /// The batches committed when it dies: none of the one it dies inside.
    fn committed(&self) -> usize {
        if self.stage.ends_with("-before-commit") {
            self.n - 1
        } else {
            self.n
        }
    }
}

/// Inside the first batch, after the last one, and `SEEDED` seeded points in between.
fn kills(inside: &'static str, after: &'static str, batches: usize, rng: &mut Rng) -> Vec<Kill> {
    let mut kills = vec![Kill { stage: inside, n: 1 }, Kill { stage: after, n: batches }];
    let seeded = if soak() { SEEDED * 10 } else { SEEDED };
    for _ in 0..seeded {
        let stage = if rng.below(2) == 0 { inside } else { after };
        kills.push(Kill { stage, n: 1 + rng.below(batches as u64) as usize });
    }
    kills
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

// ---------------------------------------------------------------- reopen

/// The uninterrupted apply every case is compared with.
struct ReopenReference {
    loaded: BTreeMap<String, String>,
    expected: BTreeMap<String, String>,
    changes: usize,
}

/// Counts of a reopen suite.
#[derive(Debug, Default)]
struct ReopenTally {
    converged: usize,
    changed_by_killed: usize,
    restored_by_undo: usize,
}

/// The messages whose action differs between two ledgers.
fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    after.iter().filter(|(m, a)| before.get(*m) != Some(*a)).map(|(m, _)| m.clone()).collect()
}

/// Every row changed between `loaded` and `now` has exactly one audit row, from its loaded
/// action to its current one, and no audit row lacks its change.
fn check_audit(
    kill: &Kill,
    audit: &[Audit],
    loaded: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) {
    let mut per_message: BTreeMap<&str, usize> = BTreeMap::new();
    for row in audit {
        *per_message.entry(&row.msg_id).or_default() += 1;
        let (old, new) = (loaded.get(&row.msg_id), now.get(&row.msg_id));
        assert_eq!(Some(&row.old_action), old, "{kill}: audit row {row:?}: another old action");
        assert_eq!(Some(&row.new_action), new, "{kill}: audit row {row:?} without its change");
    }
    let twice: Vec<_> = per_message.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "{kill}: messages with several audit rows: {twice:?}");
    let audited: Vec<String> = per_message.keys().map(|m| m.to_string()).collect();
    assert_eq!(audited, changed(loaded, now), "{kill}: changed rows without an audit row");
}

fn reopen_suite(server: Server) {
    let rt = runtime();
    let run = &world().runs[1];
    let url = rt.block_on(server.fresh_ledger("er_it_wbr_ref"));
    let loaded = rt.block_on(ledger(&url));
    succeeded(&reopen_args(run, &url));
    let expected = rt.block_on(ledger(&url));
    let changes = changed(&loaded, &expected).len();
    assert!(changes >= 4 * REOPEN_BATCH, "too few reopened messages for batches: {changes}");
    let reference = ReopenReference { loaded, expected, changes };
    let batches = changes.div_ceil(REOPEN_BATCH);
    let mut rng = Rng::new(seed() ^ 0x7265_6f70_656e ^ server.name().len() as u64);
    let kills = kills("reopen-before-commit", "reopen-batch", batches, &mut rng);
    let mut tally = ReopenTally::default();
    for kill in &kills {
        reopen_case(&rt, &server, kill, &reference, &mut tally);
    }
    assert_eq!(tally.converged, kills.len());
    say(&format!(
        "writeback reopen {}: {}/{} killed applies converged ({changes} messages in {batches} \
         batches of {REOPEN_BATCH}; {} rows committed by the killed applies, each with one audit \
         row, 0 half batches; --undo of the killed apply restored exactly those {} rows)",
        server.name(),
        tally.converged,
        kills.len(),
        tally.changed_by_killed,
        tally.restored_by_undo,
    ));
}

/// One killed apply, its rerun and both undos; asserts everything the module doc requires.
fn reopen_case(
    rt: &Runtime,
    server: &Server,
    kill: &Kill,
    reference: &ReopenReference,
    tally: &mut ReopenTally,
) {
    let ReopenReference { loaded, expected, changes } = reference;
    let run = &world().runs[1];
    let url = rt.block_on(server.fresh_ledger("er_it_wbr_case"));
    assert_eq!(rt.block_on(ledger(&url)), *loaded);
    killed(&reopen_args(run, &url), kill);

    let after = rt.block_on(ledger(&url));
    let killed_audit = rt.block_on(audit(&url));
    check_audit(kill, &killed_audit, loaded, &after);
    let killed_changes = changed(loaded, &after);
    let whole = (kill.committed() * REOPEN_BATCH).min(*changes);
    assert_eq!(killed_changes.len(), whole, "{kill}: whole committed batches only");
    for msg in &killed_changes {
        assert_eq!(expected[msg], after[msg], "{kill}: {msg} is not a change the run asked for");
    }
    let mut per_batch: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &killed_audit {
        *per_batch.entry(&row.batch_id).or_default() += 1;
    }
    assert_eq!(per_batch.len(), kill.committed().min(changes.div_ceil(REOPEN_BATCH)), "{kill}");
    let applies: BTreeSet<&str> = killed_audit.iter().map(|r| r.apply_id.as_str()).collect();
    assert!(applies.len() <= 1, "{kill}: {applies:?}");
    tally.changed_by_killed += killed_changes.len();

    let out = succeeded(&reopen_args(run, &url));
    let counts = format!(": {} changed, ", changes - whole);
    assert!(out.contains(&counts), "{kill}: the rerun said {out}");
    assert_eq!(rt.block_on(ledger(&url)), *expected, "{kill}: the rerun did not converge");
    let all_audit = rt.block_on(audit(&url));
    check_audit(kill, &all_audit, loaded, expected);

    // The killed apply's id, as an operator finds it: in the audit table.
    let mut restored = expected.clone();
    if let Some(id) = applies.first() {
        succeeded(&undo_args(id, &url));
        for msg in &killed_changes {
            restored.insert(msg.clone(), loaded[msg].clone());
        }
        assert_eq!(rt.block_on(ledger(&url)), restored, "{kill}: undo {id}: not exactly");
        tally.restored_by_undo += killed_changes.len();
    }
    let rerun_apply = all_audit.iter().map(|r| r.apply_id.as_str()).find(|a| !applies.contains(a));
    if let Some(id) = rerun_apply {
        succeeded(&undo_args(id, &url));
    }
    assert_eq!(rt.block_on(ledger(&url)), *loaded, "{kill}: both undos: not as loaded");
    tally.converged += 1;
}

// ---------------------------------------------------------------- publish

/// One publish the cases kill: a run over the table an earlier one left.
struct PublishScenario {
    name: &'static str,
    /// The run published (index into the world's runs).
    run: usize,
    /// The table before it (what the earlier runs' publishes leave).
    before: Tasks,
    /// The table after an uninterrupted publish.
    after: Tasks,
    /// The task ids each transaction writes, in order.
    batches: Vec<BTreeSet<String>>,
}

/// The task ids of each of publish's transactions: the run's tasks in chunks, then its
/// resolved findings in chunks.
fn publish_batches(outputs: &RunOutputs) -> Vec<BTreeSet<String>> {
    let ids = |chunk: &[String]| chunk.iter().cloned().collect::<BTreeSet<String>>();
    let tasks: Vec<String> = outputs.tasks.iter().map(|t| t.task_id.clone()).collect();
    let resolved: Vec<String> =
        outputs.resolved.iter().flatten().map(|r| r.finding_id.clone()).collect();
    let mut batches: Vec<BTreeSet<String>> = tasks.chunks(PUBLISH_BATCH).map(ids).collect();
    batches.extend(resolved.chunks(PUBLISH_BATCH).map(ids));
    batches
}

/// Counts of a publish suite.
#[derive(Debug, Default)]
struct PublishTally {
    converged: usize,
    batches_committed: usize,
    rows_checked: usize,
    /// Rows written by a committed batch and by one that was not (in between: skipped).
    rows_in_between: usize,
}

fn publish_suite(server: Server) {
    let rt = runtime();
    let world = world();
    let url = rt.block_on(server.fresh("er_it_wbp_ref"));
    succeeded(&publish_args(&world.runs[0], &url));
    let first = rt.block_on(tasks(&url));
    succeeded(&publish_args(&world.runs[1], &url));
    let later = rt.block_on(tasks(&url));
    assert_eq!(first.len(), world.outputs[0].tasks.len());
    let resolved = later.values().filter(|r| r[10].as_deref() == Some("RESOLVED")).count();
    assert!(resolved > 0, "the second night resolves tasks");
    let scenarios = [
        PublishScenario {
            name: "first",
            run: 0,
            before: Tasks::new(),
            after: first.clone(),
            batches: publish_batches(&world.outputs[0]),
        },
        PublishScenario {
            name: "later",
            run: 1,
            before: first,
            after: later,
            batches: publish_batches(&world.outputs[1]),
        },
    ];
    let mut rng = Rng::new(seed() ^ 0x7075_626c_6973 ^ server.name().len() as u64);
    let mut tally = PublishTally::default();
    let mut cases = 0;
    for scenario in &scenarios {
        let kills =
            kills("publish-before-commit", "publish-batch", scenario.batches.len(), &mut rng);
        for kill in &kills {
            publish_case(&rt, &server, scenario, kill, &mut tally);
        }
        cases += kills.len();
    }
    assert_eq!(tally.converged, cases);
    say(&format!(
        "writeback publish {}: {}/{cases} killed publishes converged (first run: {} tasks in {} \
         batches of {PUBLISH_BATCH}; next night: {} batches, {resolved} RESOLVED; {} batches \
         committed before the kills, 0 half batches in {} rows checked, {} rows written by a \
         committed and an uncommitted batch not compared)",
        server.name(),
        tally.converged,
        world.outputs[0].tasks.len(),
        scenarios[0].batches.len(),
        scenarios[1].batches.len(),
        tally.batches_committed,
        tally.rows_checked,
        tally.rows_in_between,
    ));
}

/// One killed publish and its rerun; asserts everything the module doc requires.
fn publish_case(
    rt: &Runtime,
    server: &Server,
    scenario: &PublishScenario,
    kill: &Kill,
    tally: &mut PublishTally,
) {
    let world = world();
    let url = rt.block_on(server.fresh("er_it_wbp_case"));
    for run in &world.runs[..scenario.run] {
        succeeded(&publish_args(run, &url));
    }
    if scenario.run > 0 {
        assert_eq!(rt.block_on(tasks(&url)), scenario.before, "{kill}: the table before");
    }
    killed(&publish_args(&world.runs[scenario.run], &url), kill);

    let now = rt.block_on(tasks(&url));
    let (done, pending) = scenario.batches.split_at(kill.committed());
    let done: BTreeSet<&String> = done.iter().flatten().collect();
    let pending: BTreeSet<&String> = pending.iter().flatten().collect();
    let ids: BTreeSet<&String> =
        scenario.before.keys().chain(scenario.after.keys()).chain(now.keys()).collect();
    for id in ids {
        let want = match (done.contains(id), pending.contains(id)) {
            (true, false) => scenario.after.get(id),
            (false, _) => scenario.before.get(id),
            // Written by a committed batch and by one that was not: in between.
            (true, true) => {
                tally.rows_in_between += 1;
                continue;
            }
        };
        assert_eq!(now.get(id), want, "{kill} ({}): task {id}: not a whole batch", scenario.name);
        tally.rows_checked += 1;
    }
    tally.batches_committed += kill.committed();

    let out = succeeded(&publish_args(&world.runs[scenario.run], &url));
    if scenario.before.is_empty() {
        let inserted = scenario.after.len() - now.len();
        assert!(out.contains(&format!("{inserted} inserted, 0 updated")), "{kill}: {out}");
    }
    let rerun = rt.block_on(tasks(&url));
    assert!(rerun == scenario.after, "{kill} ({}): the rerun did not converge", scenario.name);
    tally.converged += 1;
}

// ---------------------------------------------------------------- the tests

fn sqlite() -> Server {
    Server::Sqlite(tempfile::tempdir().unwrap())
}

#[test]
fn sqlite_reopen_killed_at_any_batch_converges_with_one_audit_row_per_change() {
    reopen_suite(sqlite());
}

#[test]
fn mysql_reopen_killed_at_any_batch_converges_with_one_audit_row_per_change() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    reopen_suite(Server::MySql(base));
}

#[test]
fn postgres_reopen_killed_at_any_batch_converges_with_one_audit_row_per_change() {
    let Some(base) = env_url(PG_ENV) else { return };
    reopen_suite(Server::Postgres(base));
}

#[test]
fn sqlite_publish_killed_at_any_batch_converges_to_the_uninterrupted_table() {
    publish_suite(sqlite());
}

#[test]
fn mysql_publish_killed_at_any_batch_converges_to_the_uninterrupted_table() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    publish_suite(Server::MySql(base));
}

#[test]
fn postgres_publish_killed_at_any_batch_converges_to_the_uninterrupted_table() {
    let Some(base) = env_url(PG_ENV) else { return };
    publish_suite(Server::Postgres(base));
}
