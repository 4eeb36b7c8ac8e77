//! `gen`: a synthetic fulfilment day on a 24-partition `order-event` topic, with faults
//! planted by the simulation itself, written as a snapshot exactly like `export` writes
//! one, plus its ground truth (`truth.parquet`).
//!
//! * [`world`] — the simulation: order lifecycles, messages, a rebalancing consumer group
//!   running the conditional-skip handler, providers and their receipts, the faults.
//! * [`truth`] — docs/SEMANTICS.md computed per order from the simulated rows, and the truth file.
//! * [`columns`] — Arrow builders of the snapshot tables.
//! * [`rng`] — the deterministic PRNG.
//! * [`nights`] — `gen --nights`: consecutive snapshots of one continuing world;
//!   [`operations`] acts between nights, [`lifecycle`] is the §9 truth of the chain of
//!   runs and [`night_truth`] its file.
//!
//! Invariants: the same plan gives byte-identical files; orders are simulated in blocks of
//! [`BLOCK_ORDERS`] in `order_id` order, so every table is sorted by `order_id` and memory
//! stays bounded whatever the size; `manifest.json` is written last.

mod columns;
pub mod lifecycle;
pub mod live;
pub mod night_truth;
pub mod nights;
pub mod operations;
mod rng;
mod sinks;
pub mod truth;
pub mod world;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::config::RuleSet;
use crate::error::{Error, Result};
use crate::snapshot::SnapshotWriter;
use crate::storage::Location;
use crate::time::Window;
use crate::time::{format_instant, parse_instant, Micros, DAY_MICROS, MINUTE_MICROS};
use sinks::{rows_by_table, TableSinks, TruthSink};
use truth::{Judge, TruthColumns, TruthRow, TRUTH_FILE};
use world::{Fault, OrderRows, Policy, PolicyOutcome, Provider, World, INCIDENT_ORDER};

/// Orders simulated (and rows held in memory) per block.
pub const BLOCK_ORDERS: usize = 64 * 1024;

/// The default cut of generated snapshots (a fixed instant, for reproducibility).
pub const DEFAULT_CUT: &str = "2026-11-29T16:00:00Z";

/// `created_by` of generated snapshot manifests.
pub const CREATED_BY: &str = "effect-recon gen";

/// Per-order probabilities of each planted fault (an order carries at most one): one per
/// fault of [`Fault::ALL`], by default each fault's [`Fault::default_rate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultRates([f64; Fault::COUNT]);

impl Default for FaultRates {
    fn default() -> Self {
        FaultRates(Fault::ALL.map(Fault::default_rate))
    }
}

impl FaultRates {
    /// No fault at all: a clean day, which a correct run finds nothing wrong with.
    pub fn none() -> Self {
        FaultRates([0.0; Fault::COUNT])
    }

    /// The rate of `fault` (0 for [`Fault::Incident`], which is never drawn).
    pub fn rate(&self, fault: Fault) -> f64 {
        self.0.get(fault.index()).copied().unwrap_or(0.0)
    }

    /// Sets the rate of `fault`.
    ///
    /// # Panics
    ///
    /// On [`Fault::Incident`], which is never drawn at a rate (`--incident` plants it).
    pub fn set(&mut self, fault: Fault, rate: f64) {
        let Some(slot) = self.0.get_mut(fault.index()) else {
            panic!("{} is not drawn at a rate", fault.name());
        };
        *slot = rate;
    }

    /// The same rates with `fault`'s set to `rate` (see [`FaultRates::set`]).
    pub fn with(mut self, fault: Fault, rate: f64) -> Self {
        self.set(fault, rate);
        self
    }

    /// Each fault of [`Fault::ALL`] with its rate, in draw order.
    pub fn iter(&self) -> impl Iterator<Item = (Fault, f64)> {
        Fault::ALL.into_iter().zip(self.0)
    }

    /// The fault of an order drawing `u` uniform in `[0, 1)`.
    pub fn pick(&self, u: f64) -> Option<Fault> {
        let mut cumulative = 0.0;
        for (fault, rate) in self.iter() {
            cumulative += rate;
            if u < cumulative {
                return Some(fault);
            }
        }
        None
    }

    /// Every rate in `[0, 1]` and their sum at most 1.
    pub fn validate(&self) -> Result<()> {
        for (fault, rate) in self.iter() {
            if !(0.0..=1.0).contains(&rate) {
                return Err(Error::argument(
                    "fault rate",
                    format!("{} rate {rate} is not in [0, 1]", fault.name()),
                ));
            }
        }
        let total: f64 = self.0.iter().sum();
        if total > 1.0 + 1e-9 {
            return Err(Error::argument("fault rate", format!("the fault rates add up to {total:.4}; an order carries at most one fault, so they must add up to at most 1")));
        }
        Ok(())
    }
}

/// A validated request to generate one snapshot.
#[derive(Debug, Clone)]
pub struct WorkloadPlan {
    /// The snapshot folder to write.
    pub out: Location,
    /// Number of orders (ids `1..=orders`).
    pub orders: u64,
    /// Partitions of `order-event`.
    pub partitions: u32,
    /// Consumer instances of the group.
    pub consumers: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// The snapshot's cut; the truth is for the window `(cut - 1 day, cut]`.
    pub cut: Micros,
    /// Fault probabilities.
    pub rates: FaultRates,
    /// Plant the canonical incident on order 8821 (added if `orders < 8821`).
    pub incident: bool,
    /// Delete whatever is in `out` first.
    pub replace: bool,
}

impl WorkloadPlan {
    /// A plan with the defaults: 24 partitions, 8 consumers, seed 42, the default cut and rates.
    pub fn new(out: Location, orders: u64) -> Result<Self> {
        let cut = parse_instant(DEFAULT_CUT).map_err(|e| Error::argument("--cut", e))?;
        Ok(WorkloadPlan {
            out,
            orders,
            partitions: 24,
            consumers: 8,
            seed: 42,
            cut,
            rates: FaultRates::default(),
            incident: false,
            replace: false,
        })
    }

    /// Checks the numbers before any work starts.
    pub fn validate(&self) -> Result<()> {
        if self.orders == 0 || self.orders > i64::MAX as u64 / 2 {
            return Err(Error::argument(
                "--orders",
                format!("{} is not a usable number of orders", self.orders),
            ));
        }
        if self.partitions == 0 || self.partitions > 100_000 {
            return Err(Error::argument("--partitions", "must be between 1 and 100000"));
        }
        if self.consumers == 0 {
            return Err(Error::argument("--consumers", "must be at least 1"));
        }
        self.rates.validate()
    }

    /// The window the truth is computed for: `(cut - 1 day, cut]`.
    pub fn window(&self) -> Window {
        Window { since: self.cut - DAY_MICROS, cut: self.cut }
    }

    /// The simulated world of this plan under `rules` (their graces place edge faults).
    pub fn world(&self, rules: &RuleSet) -> World {
        let grace = Provider::ALL
            .map(|p| rules.for_effect(p.effect()).map_or(30 * MINUTE_MICROS, |r| r.grace_micros));
        World::new(
            self.seed,
            self.partitions,
            self.consumers,
            self.cut,
            self.rates,
            self.incident,
            grace,
        )
    }

    /// The order ids, ascending: `1..=orders`, plus 8821 for the incident when beyond them.
    pub fn order_ids(&self) -> impl Iterator<Item = i64> {
        let extra =
            (self.incident && (self.orders as i64) < INCIDENT_ORDER).then_some(INCIDENT_ORDER);
        (1..=self.orders as i64).chain(extra)
    }
}

/// What `gen` wrote.
#[derive(Debug, Clone, Default)]
pub struct WorkloadReport {
    /// The snapshot folder.
    pub location: String,
    /// The truth file.
    pub truth: String,
    /// Orders simulated.
    pub orders: u64,
    /// The cut and window start of the truth.
    pub window: Option<Window>,
    /// Rows per table (`receipts/<source>` separately).
    pub rows: BTreeMap<String, u64>,
    /// Parquet files in the manifest.
    pub files: usize,
    /// Orders per planted fault.
    pub faults: BTreeMap<&'static str, u64>,
    /// Expected findings per (class, verdict).
    pub findings: BTreeMap<(String, String), u64>,
    /// Expected skip verdicts per verdict.
    pub skip_verdicts: BTreeMap<String, u64>,
    /// Wall time.
    pub elapsed: Duration,
}

impl WorkloadReport {
    /// A short report for the terminal.
    pub fn render(&self) -> String {
        let mut out = format!(
            "generated {} orders into {} in {}\n",
            self.orders,
            self.location,
            crate::time::format_elapsed(self.elapsed)
        );
        if let Some(window) = self.window {
            out.push_str(&format!(
                "cut {}, truth window ({}, {}]\n",
                format_instant(window.cut),
                format_instant(window.since),
                format_instant(window.cut)
            ));
        }
        let rows: Vec<String> = self.rows.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!("rows: {} ({} files)\n", rows.join(", "), self.files));
        let faults: Vec<String> = self.faults.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "planted faults: {}\n",
            if faults.is_empty() { "none".into() } else { faults.join(", ") }
        ));
        let findings: Vec<String> =
            self.findings.iter().map(|((c, v), n)| format!("{c}/{v} {n}")).collect();
        out.push_str(&format!(
            "expected findings: {}\n",
            if findings.is_empty() { "none".into() } else { findings.join(", ") }
        ));
        let skips: Vec<String> =
            self.skip_verdicts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "expected skip verdicts: {}\n",
            if skips.is_empty() { "none".into() } else { skips.join(", ") }
        ));
        out.push_str(&format!("truth: {}\n", self.truth));
        out
    }
}

/// The open writers of one generated snapshot and its truth.
struct Sink {
    tables: TableSinks,
    truth: (TruthColumns, TruthSink),
}

impl Sink {
    fn open(snapshot: &SnapshotWriter, plan: &WorkloadPlan, rules: &RuleSet) -> Result<Self> {
        let truth = TruthSink::open(truth::schema_for(plan.window(), rules), &plan.out)?;
        Ok(Sink { tables: TableSinks::open(snapshot), truth: (TruthColumns::default(), truth) })
    }

    fn push(&mut self, order: &OrderRows, truth: &[TruthRow<'_>]) {
        self.tables.push(order);
        truth.iter().for_each(|row| self.truth.0.push(row));
    }

    /// Writes the block held in the builders.
    async fn flush(&mut self) -> Result<()> {
        self.tables.flush().await?;
        let batch = self.truth.0.finish(self.truth.1.schema())?;
        self.truth.1.write(&batch)
    }

    /// Closes every table into `snapshot` and stores the truth beside it.
    async fn close(self, snapshot: &mut SnapshotWriter, folder: &Location) -> Result<()> {
        self.tables.close(snapshot).await?;
        self.truth.1.store(folder).await
    }
}

/// Generates the snapshot and its truth; `manifest.json` is written last.
pub async fn generate(plan: &WorkloadPlan) -> Result<WorkloadReport> {
    plan.validate()?;
    let rules = RuleSet::default_rules()?;
    let world = plan.world(&rules);
    generate_under(plan, &world, &Policy::Skip, &mut PolicyOutcome::default()).await
}

/// Generates the snapshot and its truth of `world` (made from `plan`, perhaps with other
/// knobs) with the consumer running `policy`, adding its costs and outcomes to `outcome`.
/// Under [`Policy::Skip`] and `plan.world(..)` this is [`generate`].
pub async fn generate_under(
    plan: &WorkloadPlan,
    world: &World,
    policy: &Policy,
    outcome: &mut PolicyOutcome,
) -> Result<WorkloadReport> {
    let started = Instant::now();
    plan.validate()?;
    if plan.replace {
        plan.out.delete_all().await?;
    }
    let rules = RuleSet::default_rules()?;
    let mut snapshot = SnapshotWriter::create(&plan.out, plan.cut, CREATED_BY).await?;
    let mut sink = Sink::open(&snapshot, plan, &rules)?;
    let mut judge = Judge::new(&rules, plan.window());
    let mut report = WorkloadReport {
        location: plan.out.to_string(),
        truth: plan.out.display(TRUTH_FILE),
        window: Some(plan.window()),
        ..Default::default()
    };
    let mut offsets = vec![0i64; world.partitions() as usize];
    let mut order = OrderRows::default();
    let mut truth_rows = Vec::new();
    for order_id in plan.order_ids() {
        world.simulate_under(policy, order_id, &mut offsets, &mut order, outcome);
        truth_rows.clear();
        judge.judge(&order, &mut truth_rows);
        sink.push(&order, &truth_rows);
        count(&mut report, &order, &truth_rows);
        if report.orders.is_multiple_of(BLOCK_ORDERS as u64) {
            sink.flush().await?;
        }
    }
    sink.flush().await?;
    sink.close(&mut snapshot, &plan.out).await?;
    (report.rows, report.files) = rows_by_table(&snapshot.finish().await?);
    report.elapsed = started.elapsed();
    Ok(report)
}

fn count(report: &mut WorkloadReport, order: &OrderRows, truth: &[TruthRow<'_>]) {
    report.orders += 1;
    if let Some(fault) = order.fault {
        *report.faults.entry(fault.name()).or_default() += 1;
    }
    for row in truth {
        match *row {
            TruthRow::Finding { class, verdict, .. } => {
                let key = (class.as_str().to_string(), verdict.as_str().to_string());
                *report.findings.entry(key).or_default() += 1;
            }
            TruthRow::SkipVerdict { verdict, .. } => {
                *report.skip_verdicts.entry(verdict.as_str().to_string()).or_default() += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(rates: FaultRates, incident: bool) -> WorkloadPlan {
        let mut plan =
            WorkloadPlan::new(Location::parse("/tmp/unused-gen-plan").unwrap(), 6000).unwrap();
        plan.rates = rates;
        plan.incident = incident;
        plan
    }

    /// Simulates `plan` in memory and returns every unmet expectation and the truth counts.
    fn simulate(plan: &WorkloadPlan) -> (Vec<String>, WorkloadReport) {
        let rules = RuleSet::default_rules().unwrap();
        let world = plan.world(&rules);
        let mut judge = Judge::new(&rules, plan.window());
        let mut offsets = vec![0; plan.partitions as usize];
        let (mut order, mut rows, mut unmet, mut report) =
            (OrderRows::default(), Vec::new(), Vec::new(), WorkloadReport::default());
        for order_id in plan.order_ids() {
            world.simulate(order_id, &mut offsets, &mut order);
            rows.clear();
            judge.judge(&order, &mut rows);
            unmet.extend(truth::unmet_expectations(&order, &rows, plan.window()));
            count(&mut report, &order, &rows);
        }
        (unmet, report)
    }

    #[test]
    fn every_planted_fault_is_in_the_truth() {
        use Fault::*;
        let mut heavy = FaultRates::none();
        for (fault, rate) in [
            (Reorder, 0.06),
            (Compensated, 0.04),
            (CancelRace, 0.06),
            (LostCall, 0.06),
            (Duplicate, 0.06),
            (Orphan, 0.05),
            (Stalled, 0.05),
            (Unconsumed, 0.05),
            (Revoked, 0.05),
            (Edge, 0.08),
        ] {
            heavy.set(fault, rate);
        }
        let (unmet, report) = simulate(&plan(heavy, true));
        assert!(
            unmet.is_empty(),
            "{} unmet, first: {:#?}",
            unmet.len(),
            &unmet[..unmet.len().min(5)]
        );
        for class in [
            "SKIPPED_BUT_DUE",
            "DONE_NO_RECEIPT",
            "REVIEW_STALLED",
            "NO_LEDGER_ENTRY",
            "DUPLICATE_EFFECT",
            "ORPHAN_EFFECT",
        ] {
            assert!(
                report.findings.keys().any(|(c, v)| c == class && v == "BREAK"),
                "no {class} BREAK in {:?}",
                report.findings
            );
        }
        for verdict in ["WRONG", "PENDING", "HARMLESS", "CORRECT"] {
            assert!(
                report.skip_verdicts.contains_key(verdict),
                "no {verdict} skip in {:?}",
                report.skip_verdicts
            );
        }
    }

    #[test]
    fn a_fault_free_day_has_nothing_to_find() {
        let (unmet, report) = simulate(&plan(FaultRates::none(), false));
        assert!(unmet.is_empty());
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        assert!(!report.skip_verdicts.contains_key("WRONG"));
    }

    #[test]
    fn rates_must_fit_one_fault_per_order() {
        let mut rates = FaultRates::default();
        rates.set(Fault::Reorder, 0.995);
        assert!(rates.validate().is_err());
        rates.set(Fault::Reorder, -0.1);
        assert!(rates.validate().is_err());
        assert!(FaultRates::default().validate().is_ok());
    }
}
