//! The simulated fulfilment chain: one order's life, its messages on `order-event`, the
//! consumer group's conditional-skip handler (docs/README.md) and the providers' receipts.
//!
//! Faults are not sampled as rows: a fault perturbs the *mechanism* (a zombie consumer
//! finishing a message after a rebalance, a crash between the provider call and the
//! ledger write, a provider that loses a call, a consumer lagging past the cut, ...) and
//! the handler then decides exactly as production would, on the order status it sees
//! at that instant. Every fault also records what it should make a correct run report
//! ([`Expect`]), which the tests hold the ground truth to.
//!
//! Invariants: one order's rows depend only on `(seed, order_id)` and the world's
//! settings; per partition, offsets are handed out gap-free in order-id order and, within
//! one order, in the order its messages were produced.
use super::rng::{mix, SplitMix64};
use super::FaultRates;
use crate::time::{Micros, DAY_MICROS, HOUR_MICROS, MILLI_MICROS, SECOND_MICROS};
use crate::vocabulary::ReceiptStatus;

/// The topic every message is on.
pub const TOPIC: &str = "order-event";
/// The order of the canonical incident.
pub const INCIDENT_ORDER: i64 = 8821;
/// The ORDER_PAID message of the canonical incident (handled second, wrongly SKIPPED).
pub const INCIDENT_PAID_MSG: &str = "msg-7391";
/// The ORDER_SHIPPED message of the canonical incident (handled first, after a rebalance).
pub const INCIDENT_SHIPPED_MSG: &str = "msg-7392";

/// Nothing happens in the last seconds before the cut unless a fault says so: the cut is
/// taken at a quiet point, so that a fault-free workload has no finding at all (every
/// message produced by the cut is handled, with its receipts, by the cut).
const QUIET: Micros = 5 * SECOND_MICROS;
/// Time between two rebalances of the consumer group, by default.
pub const REBALANCE_PERIOD: Micros = 3 * HOUR_MICROS;

mod expect;
mod faults;
mod model;
mod obligation;
mod policy;
mod prevent;
mod simulate;

pub use model::{
    Expect, ExpectTarget, Fault, LedgerEntry, MsgId, OrderRows, Provider, ReceiptEntry, Status,
    StatusChange,
};
pub use policy::{Charge, Policy, PolicyOutcome, Work, DEFAULT_SCAN_TTL};
use simulate::Mechanism;

/// The simulated world: time frame, topic layout, consumer group and fault rates.
#[derive(Debug, Clone)]
pub struct World {
    seed: u64,
    partitions: u32,
    consumers: u32,
    cut: Micros,
    since: Micros,
    /// Orders are created in `[start, start + span)`.
    start: Micros,
    span: Micros,
    /// The databases are dumped at this instant: later status changes have not happened.
    horizon: Micros,
    /// First rebalance boundary.
    epoch: Micros,
    rates: FaultRates,
    incident: bool,
    grace: [Micros; 3],
    rebalance_period: Micros,
    lag: Lag,
    read_lag: Micros,
    /// Consumers restart at every rebalance and handle nothing for this long (0: none).
    restart_backlog: Micros,
    /// Providers deduplicate calls on the business key `{effect}:{order_id}`.
    provider_dedup: bool,
}

/// How much faster than messages arrive a consumer works off its backlog after a restart.
const CATCH_UP: Micros = 10;

/// The distribution of a consumer's lag: from a message's production to the start of its
/// handling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lag {
    /// Uniform in `[low, high)` (the default: 5 ms to 1.5 s).
    Uniform {
        /// Lowest lag.
        low: Micros,
        /// Highest lag (excluded).
        high: Micros,
    },
    /// `low` plus an exponential tail of mean `mean`.
    Exponential {
        /// Lowest lag.
        low: Micros,
        /// Mean of the tail.
        mean: Micros,
    },
}

impl Default for Lag {
    fn default() -> Self {
        Lag::Uniform { low: 5 * MILLI_MICROS, high: 1500 * MILLI_MICROS }
    }
}

impl std::fmt::Display for Lag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |t: Micros| crate::time::format_duration(t).replace(' ', "");
        match *self {
            Lag::Uniform { low, high } => write!(f, "uniform:{}..{}", d(low), d(high)),
            Lag::Exponential { low, mean } => write!(f, "exp:{}+{}", d(low), d(mean)),
        }
    }
}

impl Lag {
    /// `uniform:LOW..HIGH` or `exp:MEAN` / `exp:LOW+MEAN` (durations as in the rules).
    pub fn parse(text: &str) -> std::result::Result<Lag, String> {
        let bad = |why: &str| {
            format!("'{text}' is not a lag distribution: {why}; use uniform:5ms..1500ms or exp:5ms+400ms")
        };
        let duration = |t: &str| crate::time::parse_duration(t).map_err(|e| bad(&e));
        match text.split_once(':') {
            Some(("uniform", range)) => {
                let (low, high) = range.split_once("..").ok_or_else(|| bad("no '..'"))?;
                let (low, high) = (duration(low)?, duration(high)?);
                if high <= low {
                    return Err(bad("the high end must be above the low end"));
                }
                Ok(Lag::Uniform { low, high })
            }
            Some(("exp", spec)) => {
                let (low, mean) = match spec.split_once('+') {
                    Some((low, mean)) => (duration(low)?, duration(mean)?),
                    None => (0, duration(spec)?),
                };
                if mean <= 0 {
                    return Err(bad("the mean must be positive"));
                }
                Ok(Lag::Exponential { low, mean })
            }
            _ => Err(bad("unknown shape")),
        }
    }

    pub(super) fn draw(&self, rng: &mut SplitMix64) -> Micros {
        match *self {
            Lag::Uniform { low, high } => rng.between(low, high),
            Lag::Exponential { low, mean } => {
                low + (-(1.0 - rng.unit()).ln() * mean as f64).round() as Micros
            }
        }
    }
}

impl World {
    /// A world with `partitions` partitions, `consumers` instances, the cut and window
    /// `(cut - 1 day, cut]`, and the graces of the rules of each provider's effect.
    pub fn new(
        seed: u64,
        partitions: u32,
        consumers: u32,
        cut: Micros,
        rates: FaultRates,
        incident: bool,
        grace: [Micros; 3],
    ) -> Self {
        let start = cut - 2 * DAY_MICROS;
        let epoch = rebalance_epoch(seed, start, REBALANCE_PERIOD);
        World {
            seed,
            partitions: partitions.max(1),
            consumers: consumers.max(1),
            cut,
            since: cut - DAY_MICROS,
            start,
            span: 2 * DAY_MICROS + 2 * HOUR_MICROS,
            horizon: cut + 6 * HOUR_MICROS,
            epoch,
            rates,
            incident,
            grace,
            rebalance_period: REBALANCE_PERIOD,
            lag: Lag::default(),
            read_lag: 0,
            restart_backlog: 0,
            provider_dedup: false,
        }
    }

    /// The same world with the consumer group rebalancing every `period` instead of
    /// every 3 hours.
    pub fn with_rebalance_period(mut self, period: Micros) -> Self {
        self.rebalance_period = period.max(SECOND_MICROS);
        self.epoch = rebalance_epoch(self.seed, self.start, self.rebalance_period);
        self
    }

    /// The same world with consumers lagging by `lag` (default: 5 ms to 1.5 s uniform).
    pub fn with_lag(mut self, lag: Lag) -> Self {
        self.lag = lag;
        self
    }

    /// The same world with consumers reading the order status from a replica `read_lag`
    /// behind (default 0): a message handled sooner than that after its change sees the
    /// status before it.
    pub fn with_read_lag(mut self, read_lag: Micros) -> Self {
        self.read_lag = read_lag.max(0);
        self
    }

    /// The same world with every rebalance a restart of the consumers, which handle
    /// nothing for `backlog` and then work off what arrived meanwhile at ten times the
    /// rate it arrives (default 0: a rebalance pauses nothing).
    pub fn with_restart_backlog(mut self, backlog: Micros) -> Self {
        self.restart_backlog = backlog.max(0);
        self
    }

    /// The same world with providers that deduplicate calls on the business key
    /// `{effect}:{order_id}` (DESIGN §10.2) on every path: a call whose key already has a
    /// grant (even one reversed since) records nothing new.
    pub fn with_provider_dedup(mut self, dedup: bool) -> Self {
        self.provider_dedup = dedup;
        self
    }

    /// The same world dumped at `horizon` instead of 6 hours after the cut.
    pub fn with_horizon(mut self, horizon: Micros) -> Self {
        self.horizon = horizon.max(self.cut);
        self
    }

    /// The cut.
    pub fn cut(&self) -> Micros {
        self.cut
    }

    /// Orders are created from this instant on.
    pub fn start(&self) -> Micros {
        self.start
    }

    /// The databases are dumped at this instant.
    pub fn horizon(&self) -> Micros {
        self.horizon
    }

    /// The rebalance period.
    pub fn rebalance_period(&self) -> Micros {
        self.rebalance_period
    }

    /// The same world with orders created from `first_cut - 2 days` on instead of
    /// `cut - 2 days`: the continuing world of `gen --nights`, whose earlier nights see
    /// it at earlier cuts. Faults placed relative to the cut (edge, unconsumed, the
    /// incident) stay relative to the last cut.
    pub fn starting_before(mut self, first_cut: Micros) -> Self {
        let start = first_cut.min(self.cut) - 2 * DAY_MICROS;
        self.span += self.start - start;
        self.start = start;
        self
    }

    /// The consumer owning `partition` at `t` (ownership rotates at every rebalance).
    pub fn owner_at(&self, partition: i32, t: Micros) -> u32 {
        self.owner(partition, t)
    }

    /// The partition of an order: `hash(order_id) % partitions`.
    pub fn partition(&self, order_id: i64) -> i32 {
        (mix(order_id as u64) % self.partitions as u64) as i32
    }

    /// The number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Simulates one order into `out`; `offsets` holds the next offset of every partition.
    pub fn simulate(&self, order_id: i64, offsets: &mut [i64], out: &mut OrderRows) {
        self.draw(order_id, out);
        self.finish(offsets, out);
    }

    /// Simulates one order with the consumer running `policy`: the world (timeline,
    /// messages, consumers, faults) is drawn exactly as for [`World::simulate`], then the
    /// policy re-decides the messages the skip handler skipped, on its own random stream.
    /// Its costs and outcomes, over the whole timeline, are added to `outcome`.
    pub fn simulate_under(
        &self,
        policy: &Policy,
        order_id: i64,
        offsets: &mut [i64],
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
    ) {
        self.draw(order_id, out);
        self.apply_policy(policy, out, outcome);
        self.finish(offsets, out);
    }

    /// When the handling of a message produced at `produced` starts: after the consumer
    /// lag, and after the restart backlog when it arrives during one.
    pub(super) fn handling(&self, produced: Micros, rng: &mut SplitMix64) -> Micros {
        let start = produced + self.lag.draw(rng);
        if self.restart_backlog == 0 {
            return start;
        }
        let restarted = self.next_rebalance(start) - self.rebalance_period;
        let waited = start - restarted;
        if waited < self.restart_backlog {
            restarted + self.restart_backlog + waited / CATCH_UP
        } else {
            start
        }
    }

    /// A provider deduplicating on the business key keeps the first grant of each key and
    /// records nothing for the later calls (a failed call did nothing, so it does not hold
    /// the key).
    fn dedup_at_providers(&self, out: &mut OrderRows) {
        if !self.provider_dedup {
            return;
        }
        let mut first: [Option<Micros>; 3] = [None; 3];
        for r in out.receipts.iter().filter(|r| r.status != ReceiptStatus::Failed) {
            let held = &mut first[r.provider.index()];
            *held = Some(held.map_or(r.created_at, |t| t.min(r.created_at)));
        }
        out.receipts.retain(|r| {
            r.status == ReceiptStatus::Failed
                || first[r.provider.index()].is_none_or(|t| r.created_at <= t)
        });
    }

    /// The world of one order under the skip handler, before the dump.
    fn draw(&self, order_id: i64, out: &mut OrderRows) {
        out.reset(order_id);
        let mut rng = SplitMix64::for_order(self.seed, order_id);
        let fault = if self.incident && order_id == INCIDENT_ORDER {
            Some(Fault::Incident)
        } else {
            self.rates.pick(rng.unit())
        };
        out.fault = fault;
        match fault {
            None => self.lifecycle(&mut rng, Mechanism::Normal, true, out),
            Some(Fault::Orphan) => self.orphan(&mut rng, true, out),
            Some(Fault::Edge) => self.edge(&mut rng, out),
            Some(Fault::Incident) => self.incident_order(&mut rng, out),
            Some(fault) => {
                let mechanism = self.mechanism(&mut rng, fault);
                self.lifecycle(&mut rng, mechanism, true, out);
                self.expect(mechanism, out);
            }
        }
    }

    /// Drops what had not happened when the databases were dumped, then hands out offsets.
    fn finish(&self, offsets: &mut [i64], out: &mut OrderRows) {
        let horizon = self.horizon;
        out.history.retain(|c| c.at <= horizon);
        out.ledger.retain(|e| e.produced <= horizon);
        out.receipts.retain(|r| r.produced.unwrap_or(r.created_at) <= horizon);
        // A reversal updates its receipt in place: the dump reads it as the run's cut sees
        // it (a reversal after the cut belongs to a void the run does not see either).
        for r in &mut out.receipts {
            if r.reversed_at.is_some_and(|t| t <= self.cut) {
                r.status = ReceiptStatus::Reversed;
            }
        }
        for entry in &mut out.ledger {
            let next = &mut offsets[entry.partition as usize];
            entry.offset = *next;
            *next += 1;
        }
    }

    fn grace(&self, provider: Provider) -> Micros {
        self.grace[provider.index()]
    }

    /// Consumer owning `partition` at `t`: ownership rotates at every rebalance.
    fn owner(&self, partition: i32, t: Micros) -> u32 {
        let generation = (t - self.epoch).div_euclid(self.rebalance_period);
        (partition as i64 + generation).rem_euclid(self.consumers as i64) as u32
    }

    fn next_rebalance(&self, t: Micros) -> Micros {
        let period = self.rebalance_period;
        self.epoch + ((t - self.epoch).div_euclid(period) + 1) * period
    }
}

fn rebalance_epoch(seed: u64, start: Micros, period: Micros) -> Micros {
    start + (mix(seed ^ 0xEB0C) % period as u64) as Micros
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MINUTE_MICROS;
    use crate::vocabulary::LedgerAction;

    const CUT: Micros = 1_796_000_400_000_000;

    fn world(rates: FaultRates) -> World {
        World::new(7, 24, 8, CUT, rates, true, [30 * MINUTE_MICROS; 3])
    }

    #[test]
    fn handler_is_the_conditional_skip() {
        let w = world(FaultRates::none());
        let mut offsets = vec![0; 24];
        let mut out = OrderRows::default();
        for order_id in 1..500 {
            w.simulate(order_id, &mut offsets, &mut out);
            for e in &out.ledger {
                assert_eq!(e.action == LedgerAction::Done, e.observed == e.event, "{e:?}");
                assert_eq!(e.partition, w.partition(order_id));
            }
            let done_paid = out
                .ledger
                .iter()
                .any(|e| e.event == Status::Paid && e.action == LedgerAction::Done);
            let points = out.receipts.iter().filter(|r| r.provider == Provider::Points).count();
            assert_eq!(points, usize::from(done_paid), "order {order_id}");
        }
    }

    #[test]
    fn incident_is_shipped_before_paid() {
        let w = world(FaultRates::none());
        let mut out = OrderRows::default();
        w.simulate(INCIDENT_ORDER, &mut [0; 24], &mut out);
        let paid = out.ledger.iter().find(|e| e.msg_id == MsgId::Named(INCIDENT_PAID_MSG)).unwrap();
        let shipped =
            out.ledger.iter().find(|e| e.msg_id == MsgId::Named(INCIDENT_SHIPPED_MSG)).unwrap();
        assert_eq!((paid.action, paid.observed), (LedgerAction::Skipped, Status::Shipped));
        assert!(paid.offset < shipped.offset && paid.decided_at > shipped.decided_at);
        assert_eq!(out.change(Status::Paid), Some(CUT - 8 * HOUR_MICROS));
    }

    #[test]
    fn offsets_are_gap_free_per_partition() {
        let w = world(FaultRates::default());
        let mut offsets = vec![0; 24];
        let mut out = OrderRows::default();
        let mut seen = vec![Vec::new(); 24];
        for order_id in 1..2000 {
            w.simulate(order_id, &mut offsets, &mut out);
            out.ledger.iter().for_each(|e| seen[e.partition as usize].push(e.offset));
        }
        for (p, offsets) in seen.iter().enumerate() {
            assert_eq!(*offsets, (0..offsets.len() as i64).collect::<Vec<_>>(), "partition {p}");
        }
    }
}
