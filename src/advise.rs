//! `advise`: from a real snapshot (and optionally a run of it), how late the consumers
//! decide, how often they decide out of order, how many skips were wrong, and from these
//! a `grace` per rule and an N for PENDING_REVIEW, with the arithmetic shown and written
//! as a suggested rules file (docs/REVERSIBLE-SKIPS.md).
//!
//! Everything is read with DataFusion SQL over the snapshot's tables (`sql/advise_*.sql`,
//! filtered to the cut as `run` does); quantiles are exact (nearest rank) over the lags
//! the SQL returns.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Int32Type, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;

use crate::config::{Rule, RuleSet};
use crate::engine::queries;
use crate::engine::session::SessionOptions;
use crate::error::Result;
use crate::snapshot::Snapshot;
use crate::stats::LagQuantiles;
use crate::storage::Location;
use crate::time::{format_approx_hours, format_duration, Micros, MINUTE_MICROS, SECOND_MICROS};
use crate::vocabulary::{LedgerAction, ReorderMechanism, SkipVerdict};

/// A validated request.
#[derive(Debug, Clone)]
pub struct AdvisePlan {
    /// The snapshot.
    pub snapshot: Location,
    /// A run of it, for the share of WRONG skips.
    pub run: Option<Location>,
    /// The rules whose graces are advised.
    pub rules: RuleSet,
    /// A row decided this long after a partition changed consumer counts as "after a
    /// rebalance".
    pub rebalance_window: Micros,
}

/// Messages and out-of-order ones in one group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reorders {
    /// Ledger rows.
    pub messages: u64,
    /// Of those, rows decided after a row of the same order and partition with a larger
    /// offset (the §5 `reorder_suspected` fingerprint).
    pub reordered: u64,
}

impl Reorders {
    /// reordered / messages.
    pub fn rate(&self) -> f64 {
        self.reordered as f64 / self.messages.max(1) as f64
    }

    fn add(&mut self, other: Reorders) {
        self.messages += other.messages;
        self.reordered += other.reordered;
    }
}

/// SKIPPED rows by what the handler saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkipKinds {
    /// The status seen was before the announced one: the message was ahead of the status
    /// (a stale read, a publish before commit). Re-checking after N can fix these.
    pub behind: u64,
    /// The status seen was past the announced one (the rebalance incident). Re-checking
    /// the current status never fixes these; judging the history does.
    pub ahead: u64,
    /// The order was cancelled or refunded: a correct skip.
    pub voided: u64,
    /// Anything else (unknown statuses).
    pub other: u64,
    /// Decision lag of the `behind` skips.
    pub behind_lag: LagQuantiles,
}

/// The grace advised for one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraceAdvice {
    /// The rule's effect.
    pub effect: String,
    /// Its grace now.
    pub current: Micros,
    /// From the due status change to the first done receipt (SUCCEEDED or REVERSED since), before any void.
    pub done_lag: LagQuantiles,
    /// The advised grace.
    pub advised: Micros,
    /// How it was computed.
    pub arithmetic: String,
}

/// What `advise` found.
#[derive(Debug, Clone, Default)]
pub struct Advice {
    /// The snapshot's cut.
    pub cut: Micros,
    /// Decision lag per event type.
    pub lags: BTreeMap<String, LagQuantiles>,
    /// Reorders per partition.
    pub by_partition: BTreeMap<i32, Reorders>,
    /// Reorders per consumer.
    pub by_consumer: BTreeMap<String, Reorders>,
    /// Reorders within the rebalance window after a partition changed consumer.
    pub after_rebalance: Reorders,
    /// Reorders elsewhere.
    pub steady: Reorders,
    /// Reordered rows by the mechanism their fingerprint points to (and producer-reordered
    /// rows, which are no reorder of the consumers').
    pub mechanisms: BTreeMap<ReorderMechanism, u64>,
    /// The rebalance window used.
    pub rebalance_window: Micros,
    /// SKIPPED rows by kind.
    pub skips: SkipKinds,
    /// Skip verdicts of the run, when one was given.
    pub verdicts: Option<BTreeMap<String, u64>>,
    /// Grace per rule.
    pub graces: Vec<GraceAdvice>,
    /// The advised N of PENDING_REVIEW, and how.
    pub pending_n: (Micros, String),
    /// The advised scan TTL, and how (with `--run`: from the run's WRONG skips).
    pub scan_ttl: Option<(Micros, String)>,
    /// The suggested rules file.
    pub rules_toml: String,
}

/// Reads the snapshot (and run) and works out the advice.
pub async fn advise(plan: &AdvisePlan) -> Result<Advice> {
    let ctx = crate::engine::session::build(&SessionOptions::default())?;
    let snapshot = Snapshot::open(&plan.snapshot).await?;
    snapshot.register(&ctx).await?;
    let cut = snapshot.cut();
    let mut advice = Advice { cut, rebalance_window: plan.rebalance_window, ..Advice::default() };
    lags(&ctx, cut, &mut advice).await?;
    reorders(&ctx, cut, plan.rebalance_window, &mut advice).await?;
    mechanisms(&ctx, cut, &mut advice).await?;
    if let Some(run) = &plan.run {
        crate::run_folder::reader::register(&ctx, run).await?;
        let batches = queries::collect(&ctx, queries::ADVISE_SKIP_VERDICTS, &[]).await?;
        let mut verdicts = BTreeMap::new();
        for b in &batches {
            let v = queries::string_column(b, "verdict")?;
            let n = b.column(1).as_primitive::<Int64Type>();
            for i in 0..b.num_rows() {
                verdicts.insert(v.value(i).to_string(), n.value(i) as u64);
            }
        }
        advice.verdicts = Some(verdicts);
        let mut gaps = Vec::new();
        for b in
            queries::collect(&ctx, queries::ADVISE_WRONG_SKIP_GAPS, &[("cut", int(cut))]).await?
        {
            let gap = b.column(0).as_primitive::<Int64Type>();
            gaps.extend((0..b.num_rows()).filter(|&i| gap.is_valid(i)).map(|i| gap.value(i)));
        }
        advice.scan_ttl = Some(advise_scan_ttl(&gaps, &advice.skips));
    }
    for rule in &plan.rules.rules {
        let mut sample = done_lags(&ctx, cut, rule).await?;
        let done_lag = LagQuantiles::of(&mut sample);
        let trigger = advice.lags.get(&rule.trigger_event).copied().unwrap_or_default();
        let (advised, arithmetic) = advise_grace(&done_lag, &trigger, &rule.trigger_event);
        advice.graces.push(GraceAdvice {
            effect: rule.effect.clone(),
            current: rule.grace_micros,
            done_lag,
            advised,
            arithmetic,
        });
    }
    advice.pending_n = advise_n(&advice);
    advice.rules_toml = rules_toml(&plan.rules, &advice);
    RuleSet::parse(&advice.rules_toml, "suggested rules")?;
    Ok(advice)
}

fn int(value: Micros) -> ScalarValue {
    ScalarValue::Int64(Some(value))
}

fn text(value: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(value.to_string()))
}

fn status_rank(status: &str) -> Option<i32> {
    ["CREATED", "PAID", "SHIPPED", "DELIVERED", "COMPLETED"]
        .iter()
        .position(|s| *s == status)
        .map(|p| p as i32)
}

/// Decision lag per event type, and the SKIPPED rows by kind.
async fn lags(ctx: &SessionContext, cut: Micros, advice: &mut Advice) -> Result<()> {
    let mut samples: BTreeMap<String, Vec<Micros>> = BTreeMap::new();
    let mut behind = Vec::new();
    for b in queries::collect(ctx, queries::ADVISE_LAGS, &[("cut", int(cut))]).await? {
        let event = queries::string_column(&b, "event_type")?;
        let lag = b.column(1).as_primitive::<Int64Type>();
        let action = queries::string_column(&b, "action")?;
        let observed = queries::string_column(&b, "observed")?;
        let expected = queries::string_column(&b, "expected")?;
        for i in 0..b.num_rows() {
            samples.entry(event.value(i).to_string()).or_default().push(lag.value(i));
            if action.value(i) != LedgerAction::Skipped.as_str() {
                continue;
            }
            let (seen, wanted) = (observed.value(i), expected.value(i));
            match (status_rank(seen), status_rank(wanted)) {
                _ if seen == "CANCELLED" || seen == "REFUNDED" => advice.skips.voided += 1,
                (Some(s), Some(w)) if s < w => {
                    advice.skips.behind += 1;
                    behind.push(lag.value(i));
                }
                (Some(s), Some(w)) if s > w => advice.skips.ahead += 1,
                _ => advice.skips.other += 1,
            }
        }
    }
    advice.skips.behind_lag = LagQuantiles::of(&mut behind);
    advice.lags = samples.into_iter().map(|(k, mut v)| (k, LagQuantiles::of(&mut v))).collect();
    Ok(())
}

/// Reorder rates per partition, per consumer, and after a rebalance.
async fn reorders(
    ctx: &SessionContext,
    cut: Micros,
    window: Micros,
    advice: &mut Advice,
) -> Result<()> {
    let params = [("cut", int(cut)), ("window", int(window))];
    for b in queries::collect(ctx, queries::ADVISE_REORDERS, &params).await? {
        let p = b.column(0).as_primitive::<Int32Type>();
        let c = queries::string_column(&b, "consumer_id")?;
        let after = b.column(2).as_boolean();
        let messages = b.column(3).as_primitive::<Int64Type>();
        let reordered = b.column(4).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let r = Reorders {
                messages: messages.value(i) as u64,
                reordered: reordered.value(i) as u64,
            };
            advice.by_partition.entry(p.value(i)).or_default().add(r);
            advice.by_consumer.entry(c.value(i).to_string()).or_default().add(r);
            if after.value(i) {
                advice.after_rebalance.add(r);
            } else {
                advice.steady.add(r);
            }
        }
    }
    Ok(())
}

/// Reordered rows counted by mechanism.
async fn mechanisms(ctx: &SessionContext, cut: Micros, advice: &mut Advice) -> Result<()> {
    for b in queries::collect(ctx, queries::ADVISE_REORDER_MECHANISMS, &[("cut", int(cut))]).await?
    {
        let kind = queries::string_column(&b, "kind")?;
        let messages = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            // The SQL spells only the vocabulary's names; anything else is a bug here.
            let mechanism: ReorderMechanism = kind
                .value(i)
                .parse()
                .map_err(|e| crate::error::Error::Internal(format!("advise: {e}")))?;
            advice.mechanisms.insert(mechanism, messages.value(i) as u64);
        }
    }
    Ok(())
}

/// What a mechanism is, and the consumer setting that prevents it.
fn prevention(mechanism: ReorderMechanism) -> (&'static str, &'static str) {
    use ReorderMechanism::*;
    match mechanism {
        OldOwnerLate => (
            "the partition's old owner wrote after the handoff (a zombie past max.poll.interval.ms, or offsets committed before a thread pool processed them)",
            "enable.auto.commit=false and commitSync only after processing; in onPartitionsRevoked finish or abort the work in flight, then commit; size max.poll.interval.ms and max.poll.records to the slowest handler; fence the handler's writes by the consumer-group generation",
        ),
        BeforeHandoff => (
            "a later offset was decided ahead of its turn, and the skipped one went to the new owner",
            "process a partition's records in offset order (one thread per partition, or per-key ordering in a parallel consumer) and commit only processed offsets",
        ),
        SameConsumer => (
            "one consumer decided two messages of one order out of offset order",
            "serialize per key: a thread pool must keep the records of one order_id in order",
        ),
        RetryTopic => (
            "a retry topic or a dead-letter replay decided it after later messages of its order",
            "blocking retries for ordered keys, or park the whole key (its later messages wait) instead of a non-blocking retry topic",
        ),
        ProducerOrder => (
            "the producer wrote the order's messages in another order than its status changes",
            "the idempotent producer: enable.idempotence=true (the default since Kafka 3.0; check it is not overridden) or max.in.flight.requests.per.connection=1",
        ),
    }
}

/// From the due status change to the first done receipt of `rule`'s effect, over the
/// orders where it was done before any void (sql/advise_done_lags.sql).
async fn done_lags(ctx: &SessionContext, cut: Micros, rule: &Rule) -> Result<Vec<Micros>> {
    let voids = rule.void_statuses.join(",");
    let params = [
        ("cut", int(cut)),
        ("due_status", text(&rule.due_status)),
        ("effect", text(&rule.effect)),
        ("void_statuses", text(&voids)),
    ];
    let mut out = Vec::new();
    for b in queries::collect(ctx, queries::ADVISE_DONE_LAGS, &params).await? {
        let lag = b.column(0).as_primitive::<Int64Type>();
        out.extend((0..b.num_rows()).filter(|&i| lag.is_valid(i)).map(|i| lag.value(i)));
    }
    Ok(out)
}

fn round_up(t: Micros, unit: Micros) -> Micros {
    (t + unit - 1).div_euclid(unit).max(1) * unit
}

/// grace = 2 x the larger of the p99.9 of the done lag (due to first receipt) and of the
/// trigger event's decision lag, rounded up to a whole minute: findings younger than that
/// are still in flight. The maximum is shown, not used: it is a compensation by hand or a
/// stuck message, and a grace covering it would hold every finding back as long.
fn advise_grace(done: &LagQuantiles, trigger: &LagQuantiles, event: &str) -> (Micros, String) {
    if done.count == 0 {
        return (
            30 * MINUTE_MICROS,
            "no effect of this rule was done in the snapshot: keep 30m".into(),
        );
    }
    let base = done.p999.max(trigger.p999);
    let advised = round_up(2 * base, MINUTE_MICROS);
    let arithmetic = format!(
        "2 x max(p99.9 due->receipt {}, p99.9 {event} decision lag {}) = {}, rounded up to a \
         minute = {} (n = {}; max due->receipt {} not used: a compensation by hand or a stuck \
         message)",
        format_approx_hours(done.p999),
        format_approx_hours(trigger.p999),
        format_approx_hours(2 * base),
        format_duration(advised),
        done.count,
        format_approx_hours(done.max)
    );
    (advised, arithmetic)
}

/// The scan's interval the TTL is advised for (docs/REVERSIBLE-SKIPS.md recommends 5m).
const SCAN_INTERVAL: Micros = 5 * MINUTE_MICROS;
/// Past one nightly window a skip is the nightly run's, whatever the scan does.
const SCAN_TTL_CAP: Micros = 24 * 60 * MINUTE_MICROS;

/// The scan TTL: a WRONG skip is taken back by the first scan that sees its status
/// reached, so the scan must keep a skip for the longest gap from the skip to its status
/// change, plus the status read's lag (bounded from below by the skips that saw a status
/// behind their message: twice their largest lag, as for N), plus one interval; rounded up
/// to 5 minutes, at most one day (the nightly run owns the rest). `gaps` are the run's
/// WRONG skips, from the decision to the status change.
fn advise_scan_ttl(gaps: &[Micros], skips: &SkipKinds) -> (Micros, String) {
    let mut late: Vec<Micros> = gaps.iter().copied().filter(|&g| g > 0).collect();
    let later = LagQuantiles::of(&mut late);
    let read_lag = (2 * skips.behind_lag.max).max(0);
    let need = later.max.max(read_lag) + SCAN_INTERVAL;
    let ttl = round_up(need, SCAN_INTERVAL).min(SCAN_TTL_CAP);
    let beyond = late.iter().filter(|&&g| g + SCAN_INTERVAL > SCAN_TTL_CAP).count();
    let mut arithmetic = format!(
        "{} WRONG skips, {} of them decided before their status change (gap p99 {}, max {}), \
         the others after it; status reads lag at least {} (2 x the largest lag of a skip \
         that saw a status behind its message); TTL = max(largest gap, read lag) + the 5m \
         interval = {}, rounded up to 5 minutes = {}",
        gaps.len(),
        later.count,
        format_approx_hours(later.p99),
        format_approx_hours(later.max),
        format_approx_hours(read_lag),
        format_approx_hours(need),
        format_duration(ttl)
    );
    if beyond > 0 {
        arithmetic.push_str(&format!(
            "; capped at one day: {beyond} WRONG skips became due later than that, the nightly run \
             and `reopen` take those back"
        ));
    }
    (ttl, arithmetic)
}

/// N of PENDING_REVIEW: it must outlast how far a message can run ahead of the status the
/// consumer reads; the skips seen behind bound that from below.
fn advise_n(advice: &Advice) -> (Micros, String) {
    let trigger_p999 = advice
        .lags
        .iter()
        .filter(|(e, _)| e.as_str() == "ORDER_PAID" || e.as_str() == "ORDER_SHIPPED")
        .map(|(_, q)| q.p999)
        .max()
        .unwrap_or(0);
    let s = &advice.skips;
    if s.behind == 0 {
        let n = round_up(2 * trigger_p999, SECOND_MICROS);
        return (
            n,
            format!(
                "no skip saw a status behind its message ({} ahead, {} voided): PENDING_REVIEW \
                 would fix none of these skips; if used anyway, N = 2 x p99.9 trigger lag {} \
                 rounded up to a second = {}",
                s.ahead,
                s.voided,
                format_approx_hours(trigger_p999),
                format_duration(n)
            ),
        );
    }
    let n = round_up(2 * s.behind_lag.max, SECOND_MICROS);
    (
        n,
        format!(
            "{} skips saw a status behind their message, up to {} after the change: the status \
             read lags by at least that; N = 2 x {} rounded up to a second = {}; keep N well \
             below the time to the order's next status change (a re-check that sees a later \
             status skips again); the {} skips that saw a later status are not fixed by any N",
            s.behind,
            format_approx_hours(s.behind_lag.max),
            format_approx_hours(s.behind_lag.max),
            format_duration(n),
            s.ahead
        ),
    )
}

/// The rules with the advised graces, as TOML with the arithmetic in comments.
fn rules_toml(rules: &RuleSet, advice: &Advice) -> String {
    let mut out = format!(
        "# Suggested by `effect-recon advise` from the snapshot cut at {}.\n\
         # grace: from the due status change to the first done receipt, over effects done before any void.\n\
         # PENDING_REVIEW N: {} ({})\n",
        crate::time::format_instant(advice.cut),
        format_duration(advice.pending_n.0),
        advice.pending_n.1
    );
    for rule in &rules.rules {
        let grace = advice.graces.iter().find(|g| g.effect == rule.effect);
        let list: Vec<String> = rule.void_statuses.iter().map(|s| toml_string(s)).collect();
        out.push_str(&format!(
            "\n[[rule]]\neffect        = {}\ntrigger_event = {}\ndue_status    = {}\n\
             void_statuses = [{}]\n",
            toml_string(&rule.effect),
            toml_string(&rule.trigger_event),
            toml_string(&rule.due_status),
            list.join(", ")
        ));
        match grace {
            Some(g) => out.push_str(&format!(
                "# was {}; {}\ngrace         = {}\n",
                format_duration(g.current),
                g.arithmetic,
                toml_string(&format_duration(g.advised))
            )),
            None => out.push_str(&format!("grace         = {}\n", toml_string(&rule.grace))),
        }
        out.push_str(&format!(
            "compensation  = {}\npriority      = {}\n",
            toml_string(&rule.compensation),
            rule.priority
        ));
        // Kept as they are: advise suggests graces and N, never what an effect owes back.
        if rule.reverse_on_void {
            out.push_str("reverse_on_void = true\n");
        }
        if let Some(reversal) = &rule.reversal {
            out.push_str(&format!("reversal      = {}\n", toml_string(reversal)));
        }
    }
    out
}

fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

impl Advice {
    /// The reorders by mechanism, each with the consumer configuration that prevents it.
    fn render_mechanisms(&self) -> String {
        if self.mechanisms.is_empty() {
            return "\nreorders by mechanism: none found\n".into();
        }
        let mut out =
            "\nreorders by mechanism (their fingerprint in the ledger), and what prevents each\n"
                .to_string();
        for (mechanism, count) in &self.mechanisms {
            let (what, fix) = prevention(*mechanism);
            out.push_str(&format!(
                "{:<15} {count:>7}  {what}\n{:<24}prevent: {fix}\n",
                mechanism.as_str(),
                ""
            ));
        }
        out.push_str(
            "every mechanism needs a rebalance or a retry to strike: static membership (group.instance.id, \
             session.timeout.ms above a rolling restart) and the CooperativeStickyAssignor make rebalances rare\n",
        );
        out
    }

    /// The report for the terminal.
    pub fn render(&self) -> String {
        let mut out = format!("snapshot cut {}\n\n", crate::time::format_instant(self.cut));
        out.push_str("decision lag (decided_at - changed_at of the announced status)\n");
        out.push_str(&format!(
            "{:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            "event_type", "n", "p50", "p90", "p99", "p99.9", "max"
        ));
        for (event, q) in &self.lags {
            out.push_str(&format!(
                "{:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                event,
                q.count,
                format_approx_hours(q.p50),
                format_approx_hours(q.p90),
                format_approx_hours(q.p99),
                format_approx_hours(q.p999),
                format_approx_hours(q.max)
            ));
        }
        let rate =
            |r: &Reorders| format!("{:.4}% ({} of {})", 100.0 * r.rate(), r.reordered, r.messages);
        out.push_str(&format!(
            "\nreorders (a row decided after a later offset of its order and partition)\n\
             within {} after a partition changed consumer: {}\nelsewhere: {}\n",
            format_duration(self.rebalance_window),
            rate(&self.after_rebalance),
            rate(&self.steady)
        ));
        let mut parts: Vec<(&i32, &Reorders)> = self.by_partition.iter().collect();
        parts.sort_by(|a, b| b.1.rate().total_cmp(&a.1.rate()).then(a.0.cmp(b.0)));
        let top: Vec<String> =
            parts.iter().take(5).map(|(p, r)| format!("p{p} {:.4}%", 100.0 * r.rate())).collect();
        out.push_str(&format!("per partition, highest: {}\n", top.join(", ")));
        let consumers: Vec<String> =
            self.by_consumer.iter().map(|(c, r)| format!("{c} {:.4}%", 100.0 * r.rate())).collect();
        out.push_str(&format!("per consumer: {}\n", consumers.join(", ")));
        out.push_str(&self.render_mechanisms());
        let s = &self.skips;
        out.push_str(&format!(
            "\nSKIPPED rows: {} saw a status behind the message (re-checking after N fixes these; \
             their lag p50 {} max {}), {} saw a later status (no N fixes these), {} voided \
             (correct), {} other\n",
            s.behind,
            format_approx_hours(s.behind_lag.p50),
            format_approx_hours(s.behind_lag.max),
            s.ahead,
            s.voided,
            s.other
        ));
        if let Some(verdicts) = &self.verdicts {
            let total: u64 = verdicts.values().sum();
            let wrong = verdicts.get(SkipVerdict::Wrong.as_str()).copied().unwrap_or(0);
            let all: Vec<String> = verdicts.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push_str(&format!(
                "skip verdicts of the run: {} ; WRONG share {:.2}%\n",
                all.join(", "),
                100.0 * wrong as f64 / total.max(1) as f64
            ));
        }
        out.push_str("\nadvised grace per rule\n");
        for g in &self.graces {
            out.push_str(&format!(
                "{}: {} -> {}: {}\n",
                g.effect,
                format_duration(g.current),
                format_duration(g.advised),
                g.arithmetic
            ));
        }
        out.push_str(&format!(
            "\nadvised PENDING_REVIEW N: {}: {}\n",
            format_duration(self.pending_n.0),
            self.pending_n.1
        ));
        match &self.scan_ttl {
            Some((ttl, arithmetic)) => out.push_str(&format!(
                "advised scan TTL (state-machine+scan:5m:TTL): {}: {arithmetic}; the ledger rows \
                 themselves are kept longer: at least the topic's retention.ms plus the replay \
                 window, and the nightly lookback\n",
                format_duration(*ttl)
            )),
            None => out.push_str(
                "advised scan TTL: give --run (a run of this snapshot) to derive it from the WRONG skips\n",
            ),
        }
        out
    }
}
