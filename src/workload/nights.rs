//! `gen --nights N`: N consecutive snapshots of one continuing simulated world, one day
//! apart, each with its `truth.parquet` of docs/SEMANTICS.md for the chain of runs
//! (night 1 without a previous run, each later night following the one before).
//!
//! Layout: `<out>/snapshot=<cut as YYYYMMDDTHHMMSSZ>/`; the **last** cut is the plan's
//! cut (default [`super::DEFAULT_CUT`]), the others one, two, ... days before it. Each
//! snapshot holds what an export with `lookback` would: rows in
//! `(coverage_from, cut]` with `coverage_from = cut - 1 day - lookback` (written in its
//! manifest), receipts only once loaded, receipt statuses as of the cut.
//!
//! The world is the single-night world of the plan, with orders created from two days
//! before the first cut on (so `--orders` counts every order of the whole run of nights).
//! Between nights, [`super::operations`] acts on the night's open findings and PENDING
//! skips; a few receipts arrive late. Each order's whole life is simulated, judged and
//! acted on night after night before the next order, so memory stays bounded and the
//! output depends only on the plan.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lifecycle::{Carry, Night, NightJudge, NightRow};
use super::night_truth::{self, NightContext, NightTruthColumns};
use super::operations::{Facts, OperationRates, Operations};
use super::sinks::{rows_by_table, TableSinks, TruthSink};
use super::world::OrderRows;
use super::{WorkloadPlan, BLOCK_ORDERS, CREATED_BY};
use crate::config::RuleSet;
use crate::error::{Error, Result};
use crate::snapshot::SnapshotWriter;
use crate::time::{format_compact, format_instant, Micros, DAY_MICROS};
use crate::vocabulary::Lifecycle;

/// The most nights one call generates.
pub const MAX_NIGHTS: usize = 60;

/// A validated request to generate several nights.
#[derive(Debug, Clone)]
pub struct NightsPlan {
    /// The world and the last cut; `gen.out` is the root the snapshots go under.
    pub workload: WorkloadPlan,
    /// Number of nights (snapshots).
    pub nights: usize,
    /// The export's lookback: each snapshot holds rows newer than `cut - 1 day - lookback`.
    pub lookback: Micros,
    /// `--late-horizon` of the runs the truth is for.
    pub late_horizon: Micros,
    /// `--max-age` of the runs the truth is for.
    pub max_age: Micros,
    /// What operations do between nights.
    pub operations: OperationRates,
}

impl NightsPlan {
    /// `nights` nights of `gen`'s world, with the defaults: lookback 30d, late horizon
    /// 2d, max age 30d.
    pub fn new(workload: WorkloadPlan, nights: usize) -> Self {
        NightsPlan {
            workload,
            nights,
            lookback: 30 * DAY_MICROS,
            late_horizon: 2 * DAY_MICROS,
            max_age: 30 * DAY_MICROS,
            operations: OperationRates::default(),
        }
    }

    /// Checks the numbers before any work starts.
    pub fn validate(&self) -> Result<()> {
        self.workload.validate()?;
        if self.nights == 0 || self.nights > MAX_NIGHTS {
            return Err(Error::argument("--nights", format!("must be between 1 and {MAX_NIGHTS}")));
        }
        if self.lookback < self.late_horizon {
            return Err(Error::argument(
                "--lookback",
                "must be at least the late horizon, or every chained run is INCOMPLETE",
            ));
        }
        if self.late_horizon < 0 || self.max_age <= 0 {
            return Err(Error::argument("--max-age", "durations must be positive"));
        }
        Ok(())
    }

    /// The cuts, first to last, one day apart; the last one is the plan's cut.
    pub fn cuts(&self) -> Vec<Micros> {
        let n = self.nights as Micros;
        (0..n).map(|k| self.workload.cut - (n - 1 - k) * DAY_MICROS).collect()
    }

    /// The folder of the snapshot of `cut`, relative to the root: `snapshot=<id>`.
    pub fn snapshot_folder(cut: Micros) -> String {
        format!("snapshot={}", format_compact(cut))
    }

    /// The lower bound of the rows the snapshot of `cut` holds.
    pub fn coverage_from(&self, cut: Micros) -> Micros {
        cut - DAY_MICROS - self.lookback
    }

    /// What each night's truth is computed for.
    pub fn contexts(&self) -> Vec<NightContext> {
        let cuts = self.cuts();
        let run_ids = Arc::new(cuts.iter().map(|&c| format_compact(c)).collect::<Vec<_>>());
        let origin = cuts[0] - DAY_MICROS;
        cuts.iter()
            .enumerate()
            .map(|(index, &cut)| {
                let since = cut - DAY_MICROS;
                let lower = if index == 0 { since } else { origin.max(since - self.late_horizon) };
                NightContext {
                    since,
                    cut,
                    origin,
                    lower,
                    late_horizon: self.late_horizon,
                    max_age: self.max_age,
                    run_ids: Arc::clone(&run_ids),
                    index,
                }
            })
            .collect()
    }
}

fn night(context: &NightContext) -> Night {
    Night {
        index: context.index,
        since: context.since,
        cut: context.cut,
        lower: context.lower,
        max_age: context.max_age,
    }
}

/// What one night holds.
#[derive(Debug, Clone, Default)]
pub struct NightReport {
    /// The snapshot folder.
    pub location: String,
    /// The cut.
    pub cut: Micros,
    /// Rows per table (`receipts/<source>` separately).
    pub rows: BTreeMap<String, u64>,
    /// Expected findings per (class, verdict).
    pub findings: BTreeMap<(String, String), u64>,
    /// Expected BREAK findings per lifecycle (`PERSISTING` split by `rechecked`).
    pub lifecycle: BTreeMap<&'static str, u64>,
    /// Expected resolved rows per resolution.
    pub resolved: BTreeMap<&'static str, u64>,
    /// Expected skip verdicts per (verdict, lifecycle).
    pub skip_verdicts: BTreeMap<(&'static str, &'static str), u64>,
}

impl NightReport {
    fn count(&mut self, rows: &[NightRow]) {
        for row in rows {
            match *row {
                NightRow::Finding { class, verdict, life, .. } => {
                    let key = (class.as_str().to_string(), verdict.as_str().to_string());
                    *self.findings.entry(key).or_default() += 1;
                    if let Some(life) = life {
                        let label = match (life.lifecycle, life.rechecked) {
                            (Lifecycle::Persisting, false) => "PERSISTING (not rechecked)",
                            (lifecycle, _) => lifecycle.as_str(),
                        };
                        *self.lifecycle.entry(label).or_default() += 1;
                    }
                }
                NightRow::Skip { verdict, lifecycle, .. } => {
                    let key = (verdict.as_str(), lifecycle.as_str());
                    *self.skip_verdicts.entry(key).or_default() += 1;
                }
                NightRow::Resolved { resolution, .. } => {
                    *self.resolved.entry(resolution.as_str()).or_default() += 1;
                }
            }
        }
    }
}

/// What `gen --nights` wrote.
#[derive(Debug, Clone, Default)]
pub struct NightsReport {
    /// The root folder.
    pub root: String,
    /// Orders simulated.
    pub orders: u64,
    /// Per night, first to last.
    pub nights: Vec<NightReport>,
    /// Wall time.
    pub elapsed: Duration,
}

impl NightsReport {
    /// A short report for the terminal: one paragraph per night.
    pub fn render(&self) -> String {
        let mut out = format!(
            "generated {} nights of {} orders under {} in {}\n",
            self.nights.len(),
            self.orders,
            self.root,
            crate::time::format_elapsed(self.elapsed)
        );
        let join = |items: Vec<String>| {
            if items.is_empty() {
                "none".to_string()
            } else {
                items.join(", ")
            }
        };
        for night in &self.nights {
            out.push_str(&format!("night {} ({})\n", format_instant(night.cut), night.location));
            let rows = night.rows.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push_str(&format!("  rows: {}\n", join(rows)));
            let findings =
                night.findings.iter().map(|((c, v), n)| format!("{c}/{v} {n}")).collect();
            out.push_str(&format!("  expected findings: {}\n", join(findings)));
            let life = night.lifecycle.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push_str(&format!("  open: {}\n", join(life)));
            let resolved = night.resolved.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push_str(&format!("  resolved: {}\n", join(resolved)));
            let skips =
                night.skip_verdicts.iter().map(|((v, l), n)| format!("{v}/{l} {n}")).collect();
            out.push_str(&format!("  skip verdicts: {}\n", join(skips)));
        }
        out
    }
}

/// The open writers of one night's snapshot and its truth.
struct NightSink {
    snapshot: SnapshotWriter,
    tables: TableSinks,
    truth: (NightTruthColumns, TruthSink),
}

impl NightSink {
    async fn open(plan: &NightsPlan, context: &NightContext, rules: &RuleSet) -> Result<Self> {
        let location = plan.workload.out.join(&NightsPlan::snapshot_folder(context.cut));
        let mut snapshot = SnapshotWriter::create(&location, context.cut, CREATED_BY).await?;
        snapshot.set_coverage_from(plan.coverage_from(context.cut));
        let truth = TruthSink::open(night_truth::schema_for(context, rules), &location)?;
        Ok(NightSink {
            tables: TableSinks::open(&snapshot),
            truth: (NightTruthColumns::new(Arc::clone(&context.run_ids)), truth),
            snapshot,
        })
    }

    fn push(&mut self, order: &OrderRows, rows: &[NightRow], rules: &RuleSet) {
        self.tables.push(order);
        rows.iter().for_each(|row| self.truth.0.push(order.order_id, row, rules));
    }

    /// Writes the block held in the builders.
    async fn flush(&mut self) -> Result<()> {
        self.tables.flush().await?;
        let batch = self.truth.0.finish(self.truth.1.schema())?;
        self.truth.1.write(&batch)
    }

    /// Closes every table, stores the truth, then writes the manifest (last).
    async fn close(mut self, report: &mut NightReport) -> Result<()> {
        self.tables.close(&mut self.snapshot).await?;
        let location = self.snapshot.location().clone();
        self.truth.1.store(&location).await?;
        (report.rows, _) = rows_by_table(&self.snapshot.finish().await?);
        report.location = location.to_string();
        Ok(())
    }
}

/// Generates every night's snapshot and truth; each snapshot's manifest is written last.
pub async fn generate_nights(plan: &NightsPlan) -> Result<NightsReport> {
    let started = Instant::now();
    plan.validate()?;
    if plan.workload.replace {
        plan.workload.out.delete_all().await?;
    }
    let rules = RuleSet::default_rules()?;
    let contexts = plan.contexts();
    let cuts = plan.cuts();
    let world = plan.workload.world(&rules).starting_before(cuts[0]);
    let operations = Operations::new(plan.workload.seed, plan.operations, &world, &rules, &cuts);
    let mut sinks = Vec::with_capacity(contexts.len());
    for context in &contexts {
        sinks.push(NightSink::open(plan, context, &rules).await?);
    }
    let mut judges: Vec<NightJudge<'_>> =
        contexts.iter().map(|c| NightJudge::new(&rules, night(c))).collect();
    let mut report = NightsReport {
        root: plan.workload.out.to_string(),
        nights: cuts.iter().map(|&cut| NightReport { cut, ..Default::default() }).collect(),
        ..Default::default()
    };
    let mut offsets = vec![0i64; world.partitions() as usize];
    let (mut order, mut view, mut facts, mut rows) =
        (OrderRows::default(), OrderRows::default(), Facts::default(), Vec::new());
    for order_id in plan.workload.order_ids() {
        world.simulate(order_id, &mut offsets, &mut order);
        facts.reset(&order);
        operations.plant_pending_skip(&mut facts);
        operations.plant_late(&mut facts);
        let mut carry = Carry::default();
        for (k, context) in contexts.iter().enumerate() {
            facts.view(plan.coverage_from(context.cut), context.cut, &mut view);
            rows.clear();
            let next = judges[k].judge(&view, &carry, &mut rows);
            sinks[k].push(&view, &rows, &rules);
            report.nights[k].count(&rows);
            if k + 1 < contexts.len() {
                operations.act(k, &next, &judges[k], &mut facts, &mut offsets);
            }
            carry = next;
        }
        report.orders += 1;
        if report.orders.is_multiple_of(BLOCK_ORDERS as u64) {
            for sink in &mut sinks {
                sink.flush().await?;
            }
        }
    }
    for (mut sink, night) in sinks.into_iter().zip(&mut report.nights) {
        sink.flush().await?;
        sink.close(night).await?;
    }
    report.elapsed = started.elapsed();
    Ok(report)
}
