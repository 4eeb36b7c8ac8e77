//! Across nights (docs/SEMANTICS.md): the previous run a run follows, its outputs as session
//! tables, the chain's bounds, and the self-checks that keep a broken input from
//! passing as green.
//!
//! Only the previous run's outputs are read (through its manifest), never its snapshot.
//! The re-judging itself is SQL (`sql/previous_open.sql` … `sql/resolved.sql`); this
//! module only puts the previous tables in the session and decides the bounds.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::{ParquetReadOptions, SessionContext};

use crate::error::{Error, Result};
use crate::run_folder::summary::Summary;
use crate::run_folder::OutputTable;
use crate::run_folder::{complete_runs, read_run_manifest, read_run_summary, RunManifest, SUMMARY};
use crate::snapshot::SnapshotStats;
use crate::storage::Location;
use crate::time::{format_instant, parse_instant, Micros};

/// Session table of the previous run's discrepancies.
pub const PREVIOUS_DISCREPANCIES: &str = "previous_discrepancies";
/// Session table of the previous run's compensation tasks.
pub const PREVIOUS_TASKS: &str = "previous_tasks";
/// Session table of the previous run's skip verdicts.
pub const PREVIOUS_SKIP_VERDICTS: &str = "previous_skip_verdicts";

/// The previous tables and the output each one is read from.
const PREVIOUS_TABLES: [(&str, OutputTable); 3] = [
    (PREVIOUS_DISCREPANCIES, OutputTable::Discrepancies),
    (PREVIOUS_TASKS, OutputTable::CompensationTasks),
    (PREVIOUS_SKIP_VERDICTS, OutputTable::SkipVerdicts),
];

/// Which previous run a run follows.
#[derive(Debug, Clone, Default)]
pub enum PreviousChoice {
    /// The complete run under `--out` whose cut is the greatest one before this cut.
    #[default]
    Latest,
    /// This run folder (`--previous`).
    Folder(Location),
    /// None: the run starts a chain (`--no-previous`).
    None,
}

/// A complete earlier run, validated for following.
#[derive(Debug, Clone)]
pub struct PreviousRun {
    /// Its folder.
    pub folder: Location,
    /// Its manifest.
    pub manifest: RunManifest,
    /// Its summary (rows read per table, for the self-checks).
    pub summary: Summary,
    /// Its cut.
    pub cut: Micros,
    /// The origin of its chain.
    pub origin: Micros,
}

impl PreviousRun {
    /// Resolves `choice` for a run with cut `cut` writing under `out`.
    pub async fn choose(
        choice: &PreviousChoice,
        out: &Location,
        cut: Micros,
    ) -> Result<Option<PreviousRun>> {
        let previous = match choice {
            PreviousChoice::None => return Ok(None),
            PreviousChoice::Folder(folder) => PreviousRun::open(folder).await?,
            PreviousChoice::Latest => match latest_before(out, cut).await? {
                Some(folder) => PreviousRun::open(&folder).await.map_err(|e| match e {
                    Error::PreviousRun { location, message } => Error::PreviousRun {
                        location,
                        message: format!(
                            "{message} (it is the latest run under --out; pass --previous \
                             RUN_FOLDER or --no-previous to start a new chain)"
                        ),
                    },
                    other => other,
                })?,
                None => return Ok(None),
            },
        };
        if previous.cut >= cut {
            return Err(previous.fail(format!(
                "its cut {} is not before this run's cut {}",
                previous.manifest.cut,
                format_instant(cut)
            )));
        }
        Ok(Some(previous))
    }

    /// Opens a run folder and checks it can be followed: complete, with the lifecycle
    /// fields in its manifest and a readable summary.
    pub async fn open(folder: &Location) -> Result<PreviousRun> {
        let fail = |message: String| Error::PreviousRun { location: folder.to_string(), message };
        if let Some(why) = folder.not_a_folder().await {
            return Err(fail(why.to_string()));
        }
        let manifest = read_run_manifest(folder).await.map_err(|e| match e {
            Error::Run { message, .. } => fail(message),
            other => other,
        })?;
        let cut = parse_instant(&manifest.cut).map_err(|e| fail(format!("cut: {e}")))?;
        let origin = manifest.origin.as_deref().ok_or_else(|| {
            fail(
                "its manifest has no origin: a run made before the lifecycle (docs/SEMANTICS.md) \
                  cannot be followed"
                    .into(),
            )
        })?;
        let origin = parse_instant(origin).map_err(|e| fail(format!("origin: {e}")))?;
        for (_, table) in PREVIOUS_TABLES {
            if !manifest.tables.contains_key(table.name()) {
                return Err(fail(format!("its manifest lists no table {}", table.name())));
            }
        }
        let summary = read_run_summary(folder).await.map_err(|e| match e {
            Error::Run { message, .. } => fail(format!("{SUMMARY}: {message}")),
            other => other,
        })?;
        Ok(PreviousRun { folder: folder.clone(), manifest, summary, cut, origin })
    }

    /// Registers its discrepancies, compensation tasks and skip verdicts as the session
    /// tables `previous_*`, checking each has the §6/§9 schema.
    pub async fn register(&self, ctx: &SessionContext) -> Result<()> {
        self.register_as(ctx, &PREVIOUS_TABLES).await
    }

    /// Registers the outputs `tables` names as the session tables beside them, read all at
    /// once.
    pub(super) async fn register_as(
        &self,
        ctx: &SessionContext,
        tables: &[(&str, OutputTable)],
    ) -> Result<()> {
        ctx.register_object_store(self.folder.store_url(), Arc::clone(self.folder.store()));
        let reads = tables.iter().map(|&(name, table)| async move {
            Ok::<_, Error>((name, table, self.read_output(ctx, table).await?))
        });
        for (name, table, batches) in futures::future::try_join_all(reads).await? {
            crate::engine::staging::register_batches(ctx, name, table.schema(), batches).await?;
        }
        Ok(())
    }

    /// The rows of one output, as [`OutputTable::schema`] has them, after checking that its
    /// files have every column of the contract.
    async fn read_output(
        &self,
        ctx: &SessionContext,
        table: OutputTable,
    ) -> Result<Vec<RecordBatch>> {
        let files = &self.manifest.tables[table.name()].files;
        let urls: Vec<String> = files.iter().map(|f| self.folder.url(&f.path)).collect();
        let context = |e| Error::query(format!("reading {}", self.folder.display(table.name())), e);
        // The files' own schema first, so that a missing or mistyped column is named.
        let found =
            ctx.read_parquet(urls.clone(), ParquetReadOptions::default()).await.map_err(context)?;
        check_contract_columns(found.schema().as_arrow(), table).map_err(|m| self.fail(m))?;
        // Then read as the contract's types: strings come as Utf8, not as the session's
        // Utf8View, so nothing is cast or copied afterwards.
        let schema = table.schema();
        let frame = ctx
            .read_parquet(urls, ParquetReadOptions::default().schema(&schema))
            .await
            .map_err(context)?;
        let batches = frame.collect().await.map_err(context)?;
        table.conform_each(&batches)
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.manifest.run_id
    }

    fn fail(&self, message: String) -> Error {
        Error::PreviousRun { location: self.folder.to_string(), message }
    }
}

/// Whether every column of `table`'s contract is in `found` with its type (or a
/// compatible string encoding); a message naming the first that is missing or mistyped.
fn check_contract_columns(found: &Schema, table: OutputTable) -> std::result::Result<(), String> {
    for field in table.schema().fields() {
        match found.field_with_name(field.name()) {
            Ok(f) if same_type(f.data_type(), field.data_type()) => {}
            Ok(f) => {
                return Err(format!(
                    "{} column {} is {}, expected {}",
                    table.name(),
                    field.name(),
                    f.data_type(),
                    field.data_type()
                ))
            }
            Err(_) => {
                return Err(format!(
                    "{} has no column {} (a run made before the lifecycle of docs/SEMANTICS.md?)",
                    table.name(),
                    field.name()
                ))
            }
        }
    }
    Ok(())
}

/// Whether a column read back has the type written: strings may come back in any string
/// encoding (the session reads Utf8 as Utf8View).
fn same_type(found: &DataType, expected: &DataType) -> bool {
    let is_string =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8);
    let is_string_list = |t: &DataType| match t {
        DataType::List(f) | DataType::LargeList(f) => is_string(f.data_type()),
        _ => false,
    };
    found == expected
        || (is_string(found) && is_string(expected))
        || (is_string_list(found) && is_string_list(expected))
}

/// Registers empty `previous_*` tables: a run without a previous run.
pub async fn register_empty(ctx: &SessionContext) -> Result<()> {
    for (name, table) in PREVIOUS_TABLES {
        let schema = table.schema();
        let empty = RecordBatch::new_empty(Arc::clone(&schema));
        crate::engine::staging::register_batches(ctx, name, schema, vec![empty]).await?;
    }
    Ok(())
}

/// Whether the session already has the `previous_*` tables.
pub fn is_registered(ctx: &SessionContext) -> bool {
    PREVIOUS_TABLES.iter().all(|(name, _)| ctx.table_exist(*name).unwrap_or(false))
}

/// The complete run under `out` with the greatest cut before `cut` (ties: the greatest
/// run id). Folders without a manifest are runs that did not finish and are skipped.
pub async fn latest_before(out: &Location, cut: Micros) -> Result<Option<Location>> {
    let runs = complete_runs(out).await?;
    Ok(runs.into_iter().rfind(|run| run.cut < cut).map(|run| run.folder))
}

/// The complete run under `out` with the greatest cut at or before `cut`.
pub async fn latest_at(out: &Location, cut: Micros) -> Result<Option<Location>> {
    let runs = complete_runs(out).await?;
    Ok(runs.into_iter().rfind(|run| run.cut <= cut).map(|run| run.folder))
}

/// The chain a run belongs to and the bounds it lists findings with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The previous run's id, if any.
    pub previous_run: Option<String>,
    /// Where the chain started: the first run's window start.
    pub origin: Micros,
    /// Findings are listed when `break_on > list_since`: the window start, or in a chain
    /// `max(origin, since - late_horizon)`.
    pub list_since: Micros,
    /// An open finding that cannot be re-checked expires when its `first_break_on` is at
    /// or before this instant (`cut - max_age`).
    pub expire_before: Micros,
}

impl Chain {
    /// The chain of a run with window start `since` and cut `cut`.
    pub fn new(
        previous: Option<&PreviousRun>,
        since: Micros,
        cut: Micros,
        late_horizon: Micros,
        max_age: Micros,
    ) -> Chain {
        match previous {
            None => Chain {
                previous_run: None,
                origin: since,
                list_since: since,
                expire_before: cut.saturating_sub(max_age),
            },
            Some(previous) => Chain {
                previous_run: Some(previous.run_id().to_string()),
                origin: previous.origin,
                list_since: previous.origin.max(since.saturating_sub(late_horizon)),
                expire_before: cut.saturating_sub(max_age),
            },
        }
    }
}

/// What the self-checks compare.
#[derive(Debug, Clone, Copy)]
pub struct SelfCheckLimits {
    /// A table below `(1 - max_drop)` times the previous run's rows is suspect.
    pub max_drop: f64,
}

/// The reasons a run is INCOMPLETE (empty when its inputs look whole): an empty table, a
/// receipts source that vanished, a table that shrank more than `max_drop`, a snapshot
/// that does not reach back to the listing bound.
pub fn self_checks(
    stats: &SnapshotStats,
    previous: Option<&PreviousRun>,
    coverage_from: Option<Micros>,
    chain: &Chain,
    limits: SelfCheckLimits,
) -> Vec<String> {
    let mut reasons = Vec::new();
    let rows = |name: &str| stats.rows.get(name).copied().unwrap_or(0);
    for table in crate::snapshot::Table::ALL {
        if rows(table.name()) == 0 {
            reasons.push(format!("table {} has no rows", table.name()));
        }
    }
    if let Some(previous) = previous {
        let before = &previous.summary.inputs;
        for (source, then) in before.iter().filter(|(k, _)| k.starts_with("receipts/")) {
            if *then > 0 && rows(source) == 0 {
                reasons.push(format!(
                    "receipts source {} was in the previous run ({}) and is absent or empty now",
                    source.trim_start_matches("receipts/"),
                    previous.run_id()
                ));
            }
        }
        for table in crate::snapshot::Table::ALL {
            let (now, then) = (rows(table.name()), before.get(table.name()).copied().unwrap_or(0));
            if now > 0 && (now as f64) < (1.0 - limits.max_drop) * then as f64 {
                reasons.push(format!(
                    "table {} has {now} rows, below {:.0}% of the previous run's {then} \
                     (--max-drop {})",
                    table.name(),
                    (1.0 - limits.max_drop) * 100.0,
                    limits.max_drop
                ));
            }
        }
    }
    if let Some(from) = coverage_from {
        if from > chain.list_since {
            reasons.push(format!(
                "the snapshot covers rows from {} only, later than the listing bound {}: \
                 findings between them cannot be judged",
                format_instant(from),
                format_instant(chain.list_since)
            ));
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::DAY_MICROS;

    const HOUR: Micros = 3_600_000_000;

    #[test]
    fn a_first_run_lists_by_its_window_and_starts_the_chain() {
        let chain =
            Chain::new(None, 10 * DAY_MICROS, 11 * DAY_MICROS, 2 * DAY_MICROS, 30 * DAY_MICROS);
        assert_eq!(chain.origin, 10 * DAY_MICROS);
        assert_eq!(chain.list_since, 10 * DAY_MICROS);
        assert_eq!(chain.expire_before, -19 * DAY_MICROS);
    }

    #[test]
    fn a_chained_run_lists_back_to_the_late_horizon_but_never_before_the_origin() {
        let previous = |origin: Micros| PreviousRun {
            folder: Location::parse("/tmp/previous").unwrap(),
            manifest: serde_json::from_value(serde_json::json!({
                "format": "effect-recon/run@1", "run_id": "r1", "cut": "1970-01-11T00:00:00Z",
                "since": "1970-01-10T00:00:00Z", "snapshot": "s", "rules_hash": "h",
                "version": "0", "origin": "x", "tables": {},
                "summary": {"path": "summary.json", "rows": 0, "sha256": ""}
            }))
            .unwrap(),
            summary: serde_json::from_value(serde_json::json!({
                "format": "f", "run_id": "r1", "since": "s", "cut": "c", "findings": [],
                "verdicts": {}, "skip_verdicts": {}, "compensation_tasks": 0, "inputs": {},
                "timings_ms": {}
            }))
            .unwrap(),
            cut: 11 * DAY_MICROS,
            origin,
        };
        // An old chain: the late horizon (2d before S) is the bound.
        let old = previous(DAY_MICROS);
        let chain = Chain::new(
            Some(&old),
            11 * DAY_MICROS,
            12 * DAY_MICROS,
            2 * DAY_MICROS,
            30 * DAY_MICROS,
        );
        assert_eq!((chain.origin, chain.list_since), (DAY_MICROS, 9 * DAY_MICROS));
        assert_eq!(chain.previous_run.as_deref(), Some("r1"));
        // A young chain: nothing before its origin is listed.
        let young = previous(10 * DAY_MICROS + HOUR);
        let chain = Chain::new(
            Some(&young),
            11 * DAY_MICROS,
            12 * DAY_MICROS,
            2 * DAY_MICROS,
            30 * DAY_MICROS,
        );
        assert_eq!(chain.list_since, 10 * DAY_MICROS + HOUR);
        assert_eq!(chain.expire_before, -18 * DAY_MICROS);
    }
}
