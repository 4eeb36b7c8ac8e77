//! `effect-recon sql`: read-only SQL over a snapshot and, optionally, a run's outputs.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use effect_recon::config::RuleSet;
use effect_recon::datafusion;
use effect_recon::datafusion::prelude::SessionContext;
use effect_recon::inspect;
use effect_recon::storage::Location;

use super::{EngineArgs, Outcome};

/// Output formats of `sql`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// An aligned text table.
    Table,
    /// CSV with a header row.
    Csv,
    /// One JSON object per line.
    Json,
    /// A Parquet file (needs --output).
    Parquet,
}

/// Run read-only SQL over the tables ledger, status_history, receipts, rules and, with
/// --run, discrepancies, compensation_tasks and skip_verdicts.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples (after ./scripts/demo):\n  \
effect-recon sql --snapshot fixtures/tiny/snapshot -c \"SELECT action, count(*) FROM ledger GROUP BY action\"\n  \
effect-recon sql --run demo/recon/run=20261129T160000Z -c \"SELECT * FROM discrepancies LIMIT 10\"\n  \
effect-recon sql --snapshot fixtures/tiny/snapshot -c \"SELECT count(*) FROM ledger; SELECT count(*) FROM receipts\"\n  \
effect-recon sql --snapshot fixtures/tiny/snapshot          (interactive: end each statement with ';')")]
pub(super) struct SqlArgs {
    /// Snapshot folder (directory, file:// or s3:// URL); default: the one --run judged.
    #[arg(long, value_name = "DIR|URL", required_unless_present = "run")]
    snapshot: Option<String>,
    /// A run folder (<out>/run=<id>) whose outputs to register as well.
    #[arg(long, value_name = "DIR|URL")]
    run: Option<String>,
    /// Rules TOML for the `rules` table (default: the embedded fixtures/rules.toml).
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// The statements to run; several, separated by ';', run in order, each result labelled.
    #[arg(short = 'c', long = "command", value_name = "SQL", conflicts_with = "file")]
    command: Option<String>,
    /// A file of statements separated by ';'.
    #[arg(short = 'f', long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the result of one statement here instead of standard output (required for parquet).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
}

/// Runs `effect-recon sql`.
pub(super) async fn execute(args: SqlArgs) -> anyhow::Result<Outcome> {
    if args.format == Format::Parquet && args.output.is_none() {
        bail!("--format parquet needs --output FILE");
    }
    let statements = match (&args.command, &args.file) {
        (Some(sql), _) => Some(split_statements(sql)),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--file {}", path.display()))?;
            Some(split_statements(&text))
        }
        (None, None) => None,
    };
    if let (Some(statements), Some(path)) = (&statements, &args.output) {
        if statements.len() > 1 {
            bail!(
                "--output {} takes the result of one statement; got {}",
                path.display(),
                statements.len()
            );
        }
    }
    let run = args.run.as_deref().map(Location::parse).transpose()?;
    let snapshot = match (&args.snapshot, &run) {
        (Some(snapshot), _) => Location::parse(snapshot)?,
        (None, Some(run)) => Location::parse(&inspect::sql::judged_snapshot(run).await?)?,
        (None, None) => bail!("--snapshot or --run is required"),
    };
    let rules = RuleSet::load(args.rules.as_deref())?;
    let options = match args.engine.memory_limit {
        Some(_) => args.engine.options(),
        None => args.engine.options().with_memory_limit(inspect::sql::DEFAULT_MEMORY_LIMIT),
    };
    let ctx = inspect::sql::open(&snapshot, run.as_ref(), &rules, &options).await?;
    let limit = options.memory_limit.unwrap_or(inspect::sql::DEFAULT_MEMORY_LIMIT);
    match statements {
        Some(statements) => {
            let label = statements.len() > 1;
            for (index, statement) in statements.iter().enumerate() {
                if label {
                    println!("{}-- {}", if index > 0 { "\n" } else { "" }, one_line(statement));
                }
                run_statement(&ctx, statement, &args, limit).await?;
            }
        }
        None => interactive(&ctx, &args, limit).await?,
    }
    Ok(Outcome::Clean)
}

/// A statement on one line, for its label.
fn one_line(statement: &str) -> String {
    let code = statement.lines().filter(|line| !line.trim_start().starts_with("--"));
    code.flat_map(str::split_whitespace).collect::<Vec<_>>().join(" ")
}

/// Runs one statement. CSV and JSON on standard output stream batch by batch; a table,
/// Parquet or a file is collected first, and refused (naming `--memory-limit`) once the
/// result alone holds more than `limit` bytes.
async fn run_statement(
    ctx: &SessionContext,
    sql: &str,
    args: &SqlArgs,
    limit: usize,
) -> anyhow::Result<()> {
    use futures::StreamExt;
    let frame = inspect::sql::read_only_query(ctx, sql).await?;
    let failed = |e| effect_recon::Error::query("sql", e);
    let mut stream = frame.execute_stream().await.map_err(failed)?;
    if args.output.is_none() && matches!(args.format, Format::Csv | Format::Json) {
        if args.format == Format::Csv {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(std::io::stdout());
            while let Some(batch) = stream.next().await {
                writer.write(&batch.map_err(failed)?)?;
            }
        } else {
            let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(std::io::stdout());
            while let Some(batch) = stream.next().await {
                writer.write(&batch.map_err(failed)?)?;
            }
            writer.finish()?;
        }
        std::io::stdout().flush()?;
        return Ok(());
    }
    let mut batches = Vec::new();
    let mut held = 0usize;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(failed)?;
        held += batch.get_array_memory_size();
        if held > limit {
            bail!(
                "sql: the result holds more than the memory limit ({} MiB) before it is complete; \
                 add a LIMIT or an aggregate, use --format csv|json (streamed), or raise --memory-limit",
                limit >> 20
            );
        }
        batches.push(batch);
    }
    match &args.output {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("--output {}", path.display()))?;
            write_batches(file, &batches, args.format)?;
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            let noun = if rows == 1 { "row" } else { "rows" };
            eprintln!("wrote {rows} {noun} to {}", path.display());
        }
        None => write_batches(std::io::stdout(), &batches, args.format)?,
    }
    Ok(())
}

fn write_batches<W: Write + Send>(
    mut out: W,
    batches: &[RecordBatch],
    format: Format,
) -> anyhow::Result<()> {
    match format {
        Format::Table => writeln!(out, "{}", pretty_format_batches(batches)?)?,
        Format::Csv => {
            let mut writer =
                datafusion::arrow::csv::WriterBuilder::new().with_header(true).build(out);
            for batch in batches {
                writer.write(batch)?;
            }
        }
        Format::Json => {
            let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
        Format::Parquet => {
            let schema = match batches.first() {
                Some(batch) => batch.schema(),
                None => bail!("the query returned no schema to write"),
            };
            let props = effect_recon::storage::parquet_parts::writer_properties();
            let mut writer =
                datafusion::parquet::arrow::ArrowWriter::try_new(out, schema, Some(props))?;
            for batch in batches {
                writer.write(batch)?;
            }
            writer.close()?;
        }
    }
    Ok(())
}

/// Splits text at each ';' outside quotes and `--` comments.
fn split_statements(text: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut comment = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        current.push(c);
        match (quote, comment, c) {
            (_, true, '\n') => comment = false,
            (_, true, _) => {}
            (Some(q), _, c) if c == q => quote = None,
            (Some(_), _, _) => {}
            (None, _, '\'' | '"') => quote = Some(c),
            (None, _, '-') if chars.peek() == Some(&'-') => comment = true,
            (None, _, ';') => push_statement(&mut statements, &mut current),
            _ => {}
        }
    }
    push_statement(&mut statements, &mut current);
    statements
}

fn push_statement(statements: &mut Vec<String>, current: &mut String) {
    let statement = current.trim().trim_end_matches(';').trim().to_string();
    if !statement.is_empty()
        && !statement.lines().all(|l| l.trim().is_empty() || l.trim().starts_with("--"))
    {
        statements.push(statement);
    }
    current.clear();
}

/// Set by SIGINT while the interactive shell runs: Ctrl-C cancels the running statement
/// and keeps the shell.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Ctrl-C cancels the statement instead of killing the shell.
fn catch_interrupts() {
    let handler: extern "C" fn(libc::c_int) = on_interrupt;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
    }
}

/// Runs a statement until it ends or Ctrl-C cancels it (its plan is dropped, which stops
/// every task it started); `Ok(false)` when cancelled.
async fn run_cancellable(
    ctx: &SessionContext,
    sql: &str,
    args: &SqlArgs,
    limit: usize,
) -> anyhow::Result<bool> {
    use std::sync::atomic::Ordering;
    INTERRUPTED.store(false, Ordering::SeqCst);
    let interrupted = async {
        while !INTERRUPTED.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        result = run_statement(ctx, sql, args, limit) => result.map(|()| true),
        () = interrupted => Ok(false),
    }
}

async fn interactive(ctx: &SessionContext, args: &SqlArgs, limit: usize) -> anyhow::Result<()> {
    let stdin = std::io::stdin();
    let tty = stdin.is_terminal();
    catch_interrupts();
    if tty {
        eprintln!("tables: ledger, status_history, receipts, rules{}; end statements with ';', quit with \\q or Ctrl-D",
            if args.run.is_some() { ", discrepancies, compensation_tasks, skip_verdicts" } else { "" });
    }
    let mut current = String::new();
    let mut failed = false;
    loop {
        if tty {
            eprint!("{}", if current.is_empty() { "effect-recon> " } else { "          ...> " });
        }
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        if current.is_empty() && matches!(line.trim(), "\\q" | "quit" | "exit") {
            break;
        }
        current.push_str(&line);
        if line.trim_end().ends_with(';') {
            let mut statements = Vec::new();
            push_statement(&mut statements, &mut current);
            for statement in statements {
                match run_cancellable(ctx, &statement, args, limit).await {
                    Ok(true) => {}
                    Ok(false) => eprintln!("cancelled (Ctrl-C); the shell is still open"),
                    Err(e) => {
                        eprintln!("error: {}", super::render_error(&e));
                        failed = true;
                    }
                }
            }
        }
    }
    let mut rest = Vec::new();
    push_statement(&mut rest, &mut current);
    for statement in rest {
        run_statement(ctx, &statement, args, limit).await?;
    }
    if failed && !tty {
        bail!("some statements failed");
    }
    Ok(())
}
