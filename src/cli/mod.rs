//! Command-line front end: one file per subcommand, each turning its clap arguments into
//! a validated plan of the library before any work starts.

mod advise;
#[cfg(feature = "ballista")]
mod cluster;
mod compact;
mod demo;
mod explain;
mod export;
mod gc;
mod history;
mod load;
mod nightly;
mod notify;
mod progress;
mod publish;
mod reopen;
mod report;
mod run;
mod simulate;
mod sql;
mod stop;
mod verify;
mod watch;
mod workload;

use effect_recon::time::Micros;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// effect-recon finds side effects (points, WMS locks, waybills) that were owed but never
/// happened, or happened twice or without cause, and lists how to compensate them.
#[derive(Debug, Parser)]
#[command(name = "effect-recon", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// A cluster node serves jobs until stopped; every other command runs one job and exits.
    pub(crate) fn serves_until_stopped(&self) -> bool {
        #[cfg(feature = "ballista")]
        return matches!(self.command, Command::Cluster(_));
        #[cfg(not(feature = "ballista"))]
        false
    }

    /// The `--memory-limit` the command was given, which bounds the whole process.
    pub(crate) fn memory_limit(&self) -> Option<usize> {
        match &self.command {
            Command::Run(args) => args.engine.memory_limit,
            Command::Nightly(args) => args.engine.memory_limit,
            Command::Watch(args) => args.engine.memory_limit,
            Command::Sql(args) => args.engine.memory_limit,
            _ => None,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Reconcile a snapshot: write discrepancies, compensation tasks and skip verdicts.
    Run(run::RunArgs),
    /// Query a snapshot (and a run's outputs) with read-only SQL.
    Sql(sql::SqlArgs),
    /// Generate a synthetic snapshot with planted faults and its ground truth.
    Gen(workload::WorkloadArgs),
    /// Check a run against the ground truth of gen.
    Verify(verify::VerifyArgs),
    /// The main job on the embedded default: a generated day in SQLite, nightly (export, run), verify.
    Demo(demo::DemoArgs),
    /// Export database sources (MySQL, PostgreSQL, SQLite) into a Parquet snapshot.
    Export(export::ExportArgs),
    /// The scheduled job: export into <root>/snapshot=<cut>/, then run into <root>/run=<id>/.
    Nightly(nightly::NightlyArgs),
    /// Every few minutes: export what changed and run the same SQL on the intraday chain; alert on NEW findings.
    Watch(watch::WatchArgs),
    /// The runs under an output root, one line each: NEW, PERSISTING, resolved, open backlog.
    History(history::HistoryArgs),
    /// Rewrite the head of an incremental snapshot chain into one base segment (no database).
    Compact(compact::CompactArgs),
    /// Delete snapshot files no retained snapshot references; a dry run unless --apply.
    Gc(gc::GcArgs),
    /// Load a snapshot into a database with the recommended schema (tests, demos, benches).
    Load(load::LoadArgs),
    /// Publish a run's compensation tasks into the team's task table (idempotent).
    Publish(publish::PublishArgs),
    /// Reopen the ledger rows of wrong skips (SKIPPED -> REVOKED), audited; dry run unless --apply.
    Reopen(reopen::ReopenArgs),
    /// One order's story in time order: statuses, ledger decisions, receipts, findings, tasks.
    Explain(explain::ExplainArgs),
    /// One generated world under several consumer skip policies side by side: costs, lost
    /// and wrong effects, time to correct, and what the T+1 run still catches.
    Simulate(simulate::SimulateArgs),
    /// Advise a grace per rule and the N of PENDING_REVIEW from a snapshot's real lags.
    Advise(advise::AdviseArgs),
    /// The morning report of a run: one self-contained HTML page with counts, charts, tasks.
    Report(report::ReportArgs),
    /// A node of a Ballista cluster for `run --engine ballista://…`: scheduler or executor.
    #[cfg(feature = "ballista")]
    Cluster(cluster::ClusterArgs),
}

/// How a successful command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing to report: exit 0.
    Clean,
    /// BREAK findings exist and the user asked to fail on them: exit 1.
    Breaks,
    /// The run published but a self-check failed (INCOMPLETE): exit 3, whatever else.
    Incomplete,
}

impl Outcome {
    /// The process exit code.
    pub(crate) fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Clean => ExitCode::SUCCESS,
            Outcome::Breaks => ExitCode::from(1),
            Outcome::Incomplete => ExitCode::from(3),
        }
    }

    /// The outcome of a published run: INCOMPLETE wins over BREAK findings.
    pub(crate) fn of_run(
        summary: &effect_recon::run_folder::summary::Summary,
        fail_on_breaks: bool,
    ) -> Self {
        use effect_recon::vocabulary::RunStatus;
        if summary.status == RunStatus::Incomplete {
            eprintln!(
                "exit 3: the run is INCOMPLETE ({} failed self-checks)",
                summary.reasons.len()
            );
            Outcome::Incomplete
        } else if fail_on_breaks && summary.breaks() > 0 {
            let noun = if summary.breaks() == 1 { "finding" } else { "findings" };
            eprintln!("exit 1: {} BREAK {noun} (--fail-on-breaks)", summary.breaks());
            Outcome::Breaks
        } else {
            Outcome::Clean
        }
    }
}

/// Runs the parsed command.
pub(crate) async fn execute(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Run(args) => run::execute(args).await,
        Command::Sql(args) => sql::execute(args).await,
        Command::Gen(args) => workload::execute(args).await,
        Command::Verify(args) => verify::execute(args).await,
        Command::Demo(args) => demo::execute(args).await,
        Command::Export(args) => export::execute(args).await,
        Command::Nightly(args) => nightly::execute(args).await,
        Command::Watch(args) => watch::execute(args).await,
        Command::Load(args) => load::execute(args).await,
        Command::History(args) => history::execute(args).await,
        Command::Compact(args) => compact::execute(args).await,
        Command::Gc(args) => gc::execute(args).await,
        Command::Publish(args) => publish::execute(args).await,
        Command::Reopen(args) => reopen::execute(args).await,
        Command::Explain(args) => explain::execute(args).await,
        Command::Simulate(args) => simulate::execute(args).await,
        Command::Advise(args) => advise::execute(args).await,
        Command::Report(args) => report::execute(args).await,
        #[cfg(feature = "ballista")]
        Command::Cluster(args) => cluster::execute(args).await,
    }
}

/// An error and its causes on one line, each cause once.
///
/// anyhow's `{:#}` appends every source to its parent, but our variants, DataFusion's and
/// object_store's errors already include their source's text in their own message, so a
/// plain `{:#}` prints the same cause two to four times. A cause whose text is already in
/// the line is left out.
pub(crate) fn render_error(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || said(&line, text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    line
}

/// Whether `line` already says `cause`: the whole text, or its text after a generic label
/// such as `sql parser error: ` (a label without paths or numbers, so a cause that names
/// another file is never dropped).
fn said(line: &str, cause: &str) -> bool {
    let mut rest = cause;
    loop {
        // A short tail ("not found") says too little to count as the same cause.
        if line.contains(rest) && (rest.len() == cause.len() || rest.len() >= 16) {
            return true;
        }
        match rest.split_once(": ") {
            Some((label, tail))
                if label.len() <= 40
                    && !label.contains(|c: char| c == '/' || c == '.' || c.is_ascii_digit()) =>
            {
                rest = tail;
            }
            _ => return false,
        }
    }
}

/// How to call this binary in a printed hint: `effect-recon` when that name on the PATH is
/// this very binary, else the binary's full path, so every printed command line runs as it
/// is pasted.
pub(crate) fn self_command() -> String {
    let Ok(me) = std::env::current_exe() else { return "effect-recon".into() };
    let me = std::fs::canonicalize(&me).unwrap_or(me);
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("effect-recon"))
            .find(|candidate| candidate.is_file())
    });
    match on_path {
        Some(found) if std::fs::canonicalize(&found).is_ok_and(|found| found == me) => {
            "effect-recon".into()
        }
        _ => me.display().to_string(),
    }
}

/// Parses sizes such as `2GiB`, `512MiB`, `1G`, `300M`, `1048576`.
pub(crate) fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 =
        number.parse().map_err(|_| format!("'{text}' is not a size (e.g. 2GiB, 512MiB)"))?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("'{text}' has an unknown unit (use KiB, MiB, GiB)")),
    };
    Ok((number * multiplier) as usize)
}

/// Parses a duration argument (`2d`, `1h 30m`).
pub(crate) fn parse_duration_arg(text: &str) -> Result<i64, String> {
    effect_recon::time::parse_duration(text)
}

/// Parses a fraction in [0, 1].
pub(crate) fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("'{text}' is not a fraction between 0 and 1 (e.g. 0.5)")),
    }
}

/// The default cut of `export`, `nightly` and `watch`: now (on the replay clock of
/// `EFFECT_RECON_CLOCK` when it is set), truncated to the second.
pub(crate) fn default_cut() -> Micros {
    let now = effect_recon::time::event_now();
    now - now.rem_euclid(effect_recon::time::SECOND_MICROS)
}

/// Parses an instant argument; a date alone is midnight UTC, and the user is told so.
pub(crate) fn parse_instant_arg(text: &str) -> Result<i64, String> {
    let instant = effect_recon::time::parse_instant(text)?;
    if chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").is_ok() {
        eprintln!(
            "note: '{}' is a date alone; read as {} (midnight UTC)",
            text.trim(),
            effect_recon::time::format_instant(instant)
        );
    }
    Ok(instant)
}

/// Engine options shared by the commands that query.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EngineArgs {
    /// Query parallelism (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub target_partitions: Option<usize>,
    /// Rows per batch inside the engine.
    #[arg(long, value_name = "ROWS", default_value_t = 8192)]
    pub batch_size: usize,
    /// Bound on the process's memory, e.g. 4GiB: the engine's pool gets what the process
    /// does not hold outside it, the largest aggregations run in passes that fit, and the
    /// process hands freed memory back (about 10% slower). Default: no bound.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<usize>,
}

impl EngineArgs {
    /// The library's session options.
    pub(crate) fn options(&self) -> effect_recon::engine::session::SessionOptions {
        let mut options = effect_recon::engine::session::SessionOptions::default();
        if let Some(n) = self.target_partitions {
            options.target_partitions = n;
        }
        options.batch_size = self.batch_size;
        match self.memory_limit {
            Some(limit) => options.with_memory_limit(limit),
            None => options,
        }
    }
}

/// Where a run's queries execute, shared by `run` and `nightly`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct QueryEngineArgs {
    /// Where the queries run: in-process, or a Ballista cluster as ballista://HOST:PORT
    /// (its executors must reach the snapshot and the output: a shared path or S3; see docs/SCALE.md).
    #[arg(long = "engine", value_name = "ENGINE", default_value = "in-process", value_parser = parse_engine)]
    pub engine: effect_recon::engine::session::Engine,
    /// With a cluster --engine: also run in process and fail (exit 2, nothing published)
    /// on any difference in the outputs.
    #[arg(long)]
    pub check_single_node: bool,
}

impl QueryEngineArgs {
    /// The engine and whether to check it against an in-process run; refuses
    /// --check-single-node without a cluster to check.
    pub(crate) fn choice(&self) -> anyhow::Result<(effect_recon::engine::session::Engine, bool)> {
        if self.check_single_node && self.engine == effect_recon::engine::session::Engine::InProcess
        {
            anyhow::bail!(
                "--check-single-node compares a cluster run with an in-process one: it needs --engine ballista://HOST:PORT"
            );
        }
        Ok((self.engine.clone(), self.check_single_node))
    }
}

fn parse_engine(text: &str) -> Result<effect_recon::engine::session::Engine, String> {
    effect_recon::engine::session::Engine::parse(text).map_err(|e| match e {
        effect_recon::Error::Argument { message, .. } => message,
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::render_error;

    fn chain(outer: &str, inner: &str) -> anyhow::Error {
        anyhow::Error::new(std::io::Error::other(inner.to_string())).context(outer.to_string())
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let e = chain(
            "snapshot /a: No such file or directory (os error 2)",
            "No such file or directory (os error 2)",
        );
        assert_eq!(render_error(&e), "snapshot /a: No such file or directory (os error 2)");
        let e = chain(
            "sql: SQL error: ParserError(\"Expected: an SQL statement, found: SELEC at Line: 1, Column: 1\")",
            "sql parser error: Expected: an SQL statement, found: SELEC at Line: 1, Column: 1",
        );
        assert_eq!(
            render_error(&e),
            "sql: SQL error: ParserError(\"Expected: an SQL statement, found: SELEC at Line: 1, Column: 1\")"
        );
    }

    #[test]
    fn a_new_cause_is_appended() {
        assert_eq!(
            render_error(&chain("--file a.sql", "permission denied")),
            "--file a.sql: permission denied"
        );
        // A cause naming another file is kept even when its tail was said.
        let e = chain("reading /a: not found", "file /b: not found");
        assert_eq!(render_error(&e), "reading /a: not found: file /b: not found");
    }
}
