//! `simulate`: one generated world run under several consumer policies side by side
//! (docs/REVERSIBLE-SKIPS.md), with each policy's costs, lost and wrong effects, time to
//! correct, and the T+1 net: that policy's snapshot reconciled by [`crate::recon::run`]
//! and verified against that policy's own truth.
//!
//! Every policy sees the same world for a seed (see [`crate::workload::world::Policy`]);
//! `skip` is `gen` itself.

mod chart;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::config::RuleSet;
use crate::engine::session::SessionOptions;
use crate::error::{Error, Result};
use crate::events::Events;
use crate::recon::lifecycle::PreviousChoice;
use crate::recon::{self, RunPlan};
use crate::run_folder::run_folder;
use crate::stats::LagQuantiles;
use crate::storage::Location;
use crate::text::{csv_row, text_table};
use crate::time::{format_approx, Micros, HOUR_MICROS, SECOND_MICROS};
use crate::verify::{self, VerifyPlan};
use crate::vocabulary::{Class, Verdict};
use crate::workload::truth::TRUTH_FILE;
use crate::workload::world::{
    Fault, Lag, OrderRows, Policy, PolicyOutcome, World, REBALANCE_PERIOD,
};
use crate::workload::{self, WorkloadPlan};

pub use chart::{policies_svg, sweep_svg, time_to_correct_svg};

/// The policies compared by default, in the order the answer page lists them.
pub const DEFAULT_POLICIES: &str =
    "skip,pending-review:5s,pending-review:60s,rereview-event,scan:5m,state-machine";

/// The policies that remove the skip or prevent the reorder, beside `skip` and the
/// recommended repair (docs/REVERSIBLE-SKIPS.md, "The policies re-ranked").
pub const PREVENTION_POLICIES: &str =
    "skip,state-machine+scan:5m:2h,fenced,fenced+state-machine,versioned:10m,obligation";

/// N of the `pending-review` sweep.
pub const SWEEP_N: [&str; 10] =
    ["1s", "2s", "5s", "10s", "30s", "60s", "120s", "300s", "600s", "1h"];
/// INTERVAL of the `scan` sweep.
pub const SWEEP_INTERVAL: [&str; 6] = ["30s", "1m", "5m", "15m", "1h", "6h"];

/// A validated request.
#[derive(Debug, Clone)]
pub struct SimPlan {
    /// Orders, seed, cut, topic layout, fault rates (`out` is unused).
    pub workload: WorkloadPlan,
    /// The policies, each with the text it was given as.
    pub policies: Vec<(String, Policy)>,
    /// Rebalances of the consumer group per hour (`None`: one every 3 hours); the reorder
    /// and compensated fault rates scale with it.
    pub rebalances_per_hour: Option<f64>,
    /// Consumer lag distribution.
    pub lag: Lag,
    /// The status read replica's lag (0: the primary).
    pub read_lag: Micros,
    /// Consumers restart at every rebalance and handle nothing for this long (0: none).
    pub restart_backlog: Micros,
    /// Providers deduplicate on the business key `{effect}:{order_id}`.
    pub provider_dedup: bool,
    /// Where each policy's snapshot and run go for the T+1 net (`None`: no net).
    pub net: Option<Location>,
}

impl SimPlan {
    /// A plan of `orders` orders, seed `seed`, with the incident planted, no net.
    pub fn new(orders: u64, seed: u64, policies: &str) -> Result<SimPlan> {
        let mut workload =
            WorkloadPlan::new(Location::parse("/tmp/effect-recon-simulate-unused")?, orders)?;
        workload.seed = seed;
        workload.incident = true;
        Ok(SimPlan {
            workload,
            policies: parse_policies(policies)?,
            rebalances_per_hour: None,
            lag: Lag::default(),
            read_lag: 0,
            restart_backlog: 0,
            provider_dedup: false,
            net: None,
        })
    }

    /// The world every policy runs in.
    pub fn world(&self, rules: &RuleSet) -> Result<World> {
        let world = self
            .gen_plan()
            .world(rules)
            .with_lag(self.lag)
            .with_read_lag(self.read_lag)
            .with_restart_backlog(self.restart_backlog)
            .with_provider_dedup(self.provider_dedup)
            .with_rebalance_period(self.rebalance_period());
        Ok(world)
    }

    /// The time between two rebalances: `--rebalances-per-hour`, else the world's default.
    fn rebalance_period(&self) -> Micros {
        self.rebalances_per_hour
            .map_or(REBALANCE_PERIOD, |rate| (HOUR_MICROS as f64 / rate).round() as Micros)
    }

    /// The generator plan with the fault rates scaled to the rebalance rate.
    fn gen_plan(&self) -> WorkloadPlan {
        let mut plan = self.workload.clone();
        if let Some(rate) = self.rebalances_per_hour {
            let scale = rate * 3.0;
            let rates = &mut plan.rates;
            rates.set(Fault::Reorder, (rates.rate(Fault::Reorder) * scale).min(0.5));
            rates.set(Fault::Compensated, (rates.rate(Fault::Compensated) * scale).min(0.2));
        }
        plan
    }

    /// Checks the numbers before any work starts.
    pub fn validate(&self) -> Result<()> {
        if self.policies.is_empty() {
            return Err(Error::argument("--policies", "name at least one policy"));
        }
        if let Some(rate) = self.rebalances_per_hour {
            if !(rate > 0.0 && rate <= 3600.0) {
                return Err(Error::argument(
                    "--rebalances-per-hour",
                    format!("{rate} is not in (0, 3600]"),
                ));
            }
        }
        let period = self.rebalance_period();
        if self.restart_backlog < 0 || self.restart_backlog >= period {
            return Err(Error::argument(
                "--restart-backlog",
                format!(
                    "{} must be at least 0 and shorter than the time between two rebalances ({})",
                    crate::time::format_duration(self.restart_backlog),
                    crate::time::format_duration(period)
                ),
            ));
        }
        self.gen_plan().validate()
    }
}

/// Parses a comma-separated list of policies.
pub fn parse_policies(list: &str) -> Result<Vec<(String, Policy)>> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| Policy::parse(p).map(|policy| (p.to_string(), policy)))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::argument("--policies", e))
}

/// The T+1 net of one policy: its snapshot reconciled and verified against its truth.
#[derive(Debug, Clone, Default)]
pub struct NetReport {
    /// Findings the run lists, by `class/verdict`.
    pub findings: BTreeMap<String, u64>,
    /// Skip verdicts the run lists.
    pub skip_verdicts: BTreeMap<String, u64>,
    /// Whether the run equals the policy's truth.
    pub exact: bool,
    /// Differences with the truth.
    pub mismatches: usize,
    /// The run folder.
    pub run: String,
    /// Wall time of gen + run + verify.
    pub elapsed: Duration,
}

impl NetReport {
    /// BREAK findings of the missing-effect classes: lost effects the net hands back.
    pub fn missing_breaks(&self) -> u64 {
        Class::ALL
            .iter()
            .filter(|c| c.is_missing())
            .map(|c| self.findings.get(&format!("{c}/{}", Verdict::Break)).copied().unwrap_or(0))
            .sum()
    }

    /// SKIPPED_BUT_DUE findings, any verdict.
    pub fn skipped_but_due(&self) -> u64 {
        self.findings
            .iter()
            .filter(|(k, _)| k.starts_with("SKIPPED_BUT_DUE/"))
            .map(|(_, n)| n)
            .sum()
    }
}

/// One policy's figures.
#[derive(Debug, Clone)]
pub struct PolicyReport {
    /// The policy as given.
    pub label: String,
    /// The policy.
    pub policy: Policy,
    /// Costs and outcomes (the sample of times to correct is moved to `ttc`).
    pub outcome: PolicyOutcome,
    /// Time to correct.
    pub ttc: LagQuantiles,
    /// Its sample, sorted, in microseconds.
    pub ttc_sample: Vec<Micros>,
    /// Scans over the simulated span (scan policies).
    pub scans: u64,
    /// The T+1 net, when asked for.
    pub net: Option<NetReport>,
    /// Wall time of the simulation alone.
    pub elapsed: Duration,
}

impl PolicyReport {
    /// Per 1000 `order-event` messages.
    pub fn per_1000(&self, n: u64) -> f64 {
        n as f64 * 1000.0 / self.outcome.messages.max(1) as f64
    }

    /// Ledger rows per order at the dump.
    pub fn ledger_rows_per_order(&self) -> f64 {
        self.outcome.ledger_rows as f64 / self.outcome.orders.max(1) as f64
    }

    /// SKIPPED rows touched per scan.
    pub fn rows_per_scan(&self) -> f64 {
        self.outcome.scanned_rows as f64 / self.scans.max(1) as f64
    }

    /// Effects done wrongly: after a void, or twice.
    pub fn wrong(&self) -> u64 {
        self.outcome.done_after_void + self.outcome.duplicates
    }
}

/// Runs every policy of `plan` over the same world.
pub async fn simulate(plan: &SimPlan) -> Result<Vec<PolicyReport>> {
    plan.validate()?;
    let rules = RuleSet::default_rules()?;
    let world = plan.world(&rules)?;
    let mut reports = Vec::new();
    for (label, policy) in &plan.policies {
        let started = Instant::now();
        let mut outcome = PolicyOutcome::default();
        let net = match &plan.net {
            None => {
                simulate_world(plan, &world, policy, &mut outcome);
                None
            }
            Some(root) => Some(net(plan, &world, policy, &slug(label), root, &mut outcome).await?),
        };
        let mut sample = std::mem::take(&mut outcome.time_to_correct);
        let ttc = LagQuantiles::of(&mut sample);
        let scans = match policy {
            Policy::Scan { interval, .. } | Policy::StateMachineScan { interval, .. } => {
                ((world.horizon() - world.start()) / interval) as u64
            }
            _ => 0,
        };
        reports.push(PolicyReport {
            label: label.clone(),
            policy: *policy,
            outcome,
            ttc,
            ttc_sample: sample,
            scans,
            net,
            elapsed: started.elapsed(),
        });
    }
    Ok(reports)
}

/// The pending-review and scan sweeps (no net).
pub async fn sweep(plan: &SimPlan) -> Result<Vec<PolicyReport>> {
    let mut sweep = plan.clone();
    sweep.net = None;
    let list: Vec<String> = std::iter::once("skip".to_string())
        .chain(SWEEP_N.iter().map(|n| format!("pending-review:{n}")))
        .chain(SWEEP_INTERVAL.iter().map(|i| format!("scan:{i}")))
        .collect();
    sweep.policies = parse_policies(&list.join(","))?;
    simulate(&sweep).await
}

fn simulate_world(plan: &SimPlan, world: &World, policy: &Policy, outcome: &mut PolicyOutcome) {
    let mut offsets = vec![0i64; world.partitions() as usize];
    let mut order = OrderRows::default();
    for order_id in plan.workload.order_ids() {
        world.simulate_under(policy, order_id, &mut offsets, &mut order, outcome);
    }
}

/// A folder name for a policy: `pending-review:5s` → `pending-review_5s`.
pub fn slug(label: &str) -> String {
    label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

async fn net(
    plan: &SimPlan,
    world: &World,
    policy: &Policy,
    slug: &str,
    root: &Location,
    outcome: &mut PolicyOutcome,
) -> Result<NetReport> {
    let started = Instant::now();
    let folder = root.join(slug);
    let mut gen_plan = plan.gen_plan();
    gen_plan.out = folder.join("snapshot");
    gen_plan.replace = true;
    workload::generate_under(&gen_plan, world, policy, outcome).await?;
    let runs = folder.join("runs");
    runs.delete_all().await?;
    let mut run_plan = RunPlan::new(gen_plan.out.clone(), runs.clone(), RuleSet::default_rules()?);
    run_plan.previous = PreviousChoice::None;
    run_plan.replace = true;
    run_plan.session = SessionOptions::default();
    let run = recon::run(&run_plan, &Events::none()).await?;
    let run_location = runs.join(&run_folder(&run.summary.run_id));
    let verified = verify::verify(&VerifyPlan {
        truth_folder: gen_plan.out.clone(),
        truth_file: TRUTH_FILE.into(),
        run: run_location.clone(),
    })
    .await?;
    let findings = run.summary.findings.iter().fold(BTreeMap::new(), |mut acc, f| {
        *acc.entry(format!("{}/{}", f.class, f.verdict)).or_default() += f.count;
        acc
    });
    Ok(NetReport {
        findings,
        skip_verdicts: run.summary.skip_verdicts.clone(),
        exact: verified.is_exact(),
        mismatches: verified.mismatch_count,
        run: run_location.to_string(),
        elapsed: started.elapsed(),
    })
}

/// The per-policy table for the terminal.
pub fn render(reports: &[PolicyReport]) -> String {
    const HEADER: [&str; 17] = [
        "policy",
        "owed",
        "lost",
        "wrong",
        "reads/1k",
        "writes/1k",
        "extra msgs",
        "scans",
        "rows/scan",
        "ttc n",
        "ttc p50",
        "ttc p99",
        "ttc max",
        "ledger/order",
        "net BREAK",
        "net SBD",
        "net exact",
    ];
    let mut rows = Vec::new();
    for r in reports {
        let o = &r.outcome;
        let (ttc50, ttc99, ttcmax) = if r.ttc.count == 0 {
            ("-".into(), "-".into(), "-".into())
        } else {
            (format_approx(r.ttc.p50), format_approx(r.ttc.p99), format_approx(r.ttc.max))
        };
        let net = r.net.as_ref();
        rows.push(vec![
            r.label.clone(),
            o.owed.to_string(),
            o.lost.to_string(),
            r.wrong().to_string(),
            format!("{:.0}", r.per_1000(o.reads)),
            format!("{:.0}", r.per_1000(o.writes)),
            o.extra_messages.to_string(),
            if r.scans == 0 { "-".into() } else { r.scans.to_string() },
            if r.scans == 0 { "-".into() } else { format!("{:.1}", r.rows_per_scan()) },
            r.ttc.count.to_string(),
            ttc50,
            ttc99,
            ttcmax,
            format!("{:.3}", r.ledger_rows_per_order()),
            net.map_or("-".into(), |n| n.missing_breaks().to_string()),
            net.map_or("-".into(), |n| n.skipped_but_due().to_string()),
            net.map_or("-".into(), |n| {
                if n.exact {
                    "yes".into()
                } else {
                    format!("NO ({})", n.mismatches)
                }
            }),
        ]);
    }
    let mut out = text_table(&HEADER, &rows, |column| column > 0);
    out.push_str(
        "owed: effects due by the cut, never voided; lost: never done (whole timeline); wrong: done \
         after a cancel/refund, or twice; reads/writes per 1000 order-event messages; ttc: from the \
         status change to the effect, for messages the skip handler skips; net: the T+1 run of the \
         policy's snapshot (missing-effect BREAKs, SKIPPED_BUT_DUE any verdict, verified against its truth)\n",
    );
    out
}

/// The per-policy table as CSV.
pub fn csv(reports: &[PolicyReport]) -> String {
    let mut out = String::from(
        "policy,orders,messages,owed,lost,done_after_void,duplicates,wrong,db_reads,db_writes,\
         reads_per_1000,writes_per_1000,extra_messages,parked,revoked,scans,scanned_rows,\
         rows_per_scan,ttc_count,ttc_p50_s,ttc_p99_s,ttc_max_s,ledger_rows,ledger_rows_per_order,\
         net_missing_break,net_skipped_but_due,net_exact,net_mismatches,sim_seconds\n",
    );
    let secs = |t: Micros| format!("{:.3}", t as f64 / SECOND_MICROS as f64);
    for r in reports {
        let o = &r.outcome;
        let net = r.net.as_ref();
        let fields = [
            r.label.clone(),
            o.orders.to_string(),
            o.messages.to_string(),
            o.owed.to_string(),
            o.lost.to_string(),
            o.done_after_void.to_string(),
            o.duplicates.to_string(),
            r.wrong().to_string(),
            o.reads.to_string(),
            o.writes.to_string(),
            format!("{:.3}", r.per_1000(o.reads)),
            format!("{:.3}", r.per_1000(o.writes)),
            o.extra_messages.to_string(),
            o.parked.to_string(),
            o.revoked.to_string(),
            r.scans.to_string(),
            o.scanned_rows.to_string(),
            format!("{:.3}", r.rows_per_scan()),
            r.ttc.count.to_string(),
            secs(r.ttc.p50),
            secs(r.ttc.p99),
            secs(r.ttc.max),
            o.ledger_rows.to_string(),
            format!("{:.4}", r.ledger_rows_per_order()),
            net.map_or(String::new(), |n| n.missing_breaks().to_string()),
            net.map_or(String::new(), |n| n.skipped_but_due().to_string()),
            net.map_or(String::new(), |n| n.exact.to_string()),
            net.map_or(String::new(), |n| n.mismatches.to_string()),
            format!("{:.3}", r.elapsed.as_secs_f64()),
        ];
        out.push_str(&csv_row(&fields));
    }
    out
}

/// Every time to correct, one row per sample: `policy,seconds`.
pub fn ttc_csv(reports: &[PolicyReport]) -> String {
    let mut out = String::from("policy,ttc_seconds\n");
    for r in reports {
        for t in &r.ttc_sample {
            let seconds = format!("{:.3}", *t as f64 / SECOND_MICROS as f64);
            out.push_str(&csv_row(&[r.label.as_str(), &seconds]));
        }
    }
    out
}
