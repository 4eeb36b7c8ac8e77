//! The simulated fulfilment chain: one order's life, its messages on `order-event`, the
//! consumer group's conditional-skip handler (DESIGN.md §1) and the providers' receipts.
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

use std::fmt;

use super::rng::{mix, SplitMix64};
use super::FaultRates;
use crate::time::{Micros, DAY_MICROS};

/// The topic every message is on.
pub const TOPIC: &str = "order-event";
/// The order of the canonical incident.
pub const INCIDENT_ORDER: i64 = 8821;
/// The ORDER_PAID message of the canonical incident (handled second, wrongly SKIPPED).
pub const INCIDENT_PAID_MSG: &str = "msg-7391";
/// The ORDER_SHIPPED message of the canonical incident (handled first, after a rebalance).
pub const INCIDENT_SHIPPED_MSG: &str = "msg-7392";

const MS: Micros = 1_000;
const SECOND: Micros = 1_000_000;
const MINUTE: Micros = 60 * SECOND;
const HOUR: Micros = 60 * MINUTE;
/// Nothing happens in the last seconds before the cut unless a fault says so: the cut is
/// taken at a quiet point, so that a fault-free workload has no finding at all (every
/// message produced by the cut is handled, with its receipts, by the cut).
const QUIET: Micros = 5 * SECOND;
/// Time between two rebalances of the consumer group.
const REBALANCE_PERIOD: Micros = 3 * HOUR;

/// Ledger actions the handler writes.
pub mod action {
    /// The side effects were performed.
    pub const DONE: &str = "DONE";
    /// The order status did not match: nothing done.
    pub const SKIPPED: &str = "SKIPPED";
    /// Parked for a human who never came.
    pub const PENDING_REVIEW: &str = "PENDING_REVIEW";
    /// Revoked by an operator (to be re-driven; it never was).
    pub const REVOKED: &str = "REVOKED";
}

/// Receipt statuses the providers write.
pub mod receipt {
    /// The call succeeded.
    pub const SUCCEEDED: &str = "SUCCEEDED";
    /// The call failed.
    pub const FAILED: &str = "FAILED";
    /// The effect was undone afterwards.
    pub const REVERSED: &str = "REVERSED";
}

/// An order status; each change to one emits `ORDER_<STATUS>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Placed.
    Created,
    /// Paid: points and a WMS stock lock are owed.
    Paid,
    /// Shipped: a waybill is owed.
    Shipped,
    /// Delivered.
    Delivered,
    /// Completed.
    Completed,
    /// Cancelled: voids every effect.
    Cancelled,
    /// Refunded: voids points and the stock lock.
    Refunded,
}

impl Status {
    /// The status as stored.
    pub fn name(self) -> &'static str {
        match self {
            Status::Created => "CREATED",
            Status::Paid => "PAID",
            Status::Shipped => "SHIPPED",
            Status::Delivered => "DELIVERED",
            Status::Completed => "COMPLETED",
            Status::Cancelled => "CANCELLED",
            Status::Refunded => "REFUNDED",
        }
    }

    /// The event type of a change to this status.
    pub fn event_type(self) -> &'static str {
        match self {
            Status::Created => "ORDER_CREATED",
            Status::Paid => "ORDER_PAID",
            Status::Shipped => "ORDER_SHIPPED",
            Status::Delivered => "ORDER_DELIVERED",
            Status::Completed => "ORDER_COMPLETED",
            Status::Cancelled => "ORDER_CANCELLED",
            Status::Refunded => "ORDER_REFUNDED",
        }
    }

    /// The providers the handler of this event calls when it decides DONE.
    pub fn providers(self) -> &'static [Provider] {
        match self {
            Status::Paid => &[Provider::Points, Provider::Wms],
            Status::Shipped => &[Provider::Logistics],
            _ => &[],
        }
    }
}

/// A side-effect provider; each writes its own receipts table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Provider {
    /// Loyalty points.
    Points,
    /// Warehouse stock locks.
    Wms,
    /// Waybills.
    Logistics,
}

impl Provider {
    /// Every provider, in receipts-folder order.
    pub const ALL: [Provider; 3] = [Provider::Points, Provider::Wms, Provider::Logistics];

    /// `receipts.effect` of its receipts (the rules' effect).
    pub fn effect(self) -> &'static str {
        match self {
            Provider::Points => "points_grant",
            Provider::Wms => "wms_lock",
            Provider::Logistics => "logistics_waybill",
        }
    }

    /// The receipt source, naming `receipts/<source>/`.
    pub fn source(self) -> &'static str {
        match self {
            Provider::Points => "points",
            Provider::Wms => "wms",
            Provider::Logistics => "logistics",
        }
    }

    /// Position in [`Provider::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A message id, formatted only when written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgId {
    /// `msg-<order_id>-<seq>`: the `seq`-th message of an order.
    Event {
        /// The order.
        order_id: i64,
        /// Position of the status change in the order's history.
        seq: u8,
    },
    /// A fixed id (the canonical incident).
    Named(&'static str),
}

impl fmt::Display for MsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsgId::Event { order_id, seq } => write!(f, "msg-{order_id}-{seq}"),
            MsgId::Named(name) => f.write_str(name),
        }
    }
}

/// One row of `status_history`.
#[derive(Debug, Clone, Copy)]
pub struct StatusChange {
    /// The new status.
    pub status: Status,
    /// When it changed.
    pub at: Micros,
}

/// One row of the ledger: a consumed message and the handler's decision.
#[derive(Debug, Clone, Copy)]
pub struct LedgerEntry {
    /// The message.
    pub msg_id: MsgId,
    /// The status change it announces (its event type and expected status).
    pub event: Status,
    /// When the message was produced (not written; decides whether it exists at dump time).
    pub produced: Micros,
    /// DONE, SKIPPED, PENDING_REVIEW or REVOKED.
    pub action: &'static str,
    /// The order status the handler saw.
    pub observed: Status,
    /// Kafka partition.
    pub partition: i32,
    /// Kafka offset (assigned last, gap-free per partition).
    pub offset: i64,
    /// Consumer instance number (`consumer-<n>`).
    pub consumer: u32,
    /// When the decision was recorded.
    pub decided_at: Micros,
}

/// One receipt of a provider.
#[derive(Debug, Clone, Copy)]
pub struct ReceiptEntry {
    /// Whose receipt.
    pub provider: Provider,
    /// Per (order, provider) sequence number; the receipt id is `<source>-<order_id>-<seq>`.
    pub seq: u32,
    /// The message whose handling made the call (`None`: a manual call).
    pub msg_id: Option<MsgId>,
    /// When the causing message was produced (`None`: not caused by a message).
    pub produced: Option<Micros>,
    /// SUCCEEDED, FAILED or REVERSED.
    pub status: &'static str,
    /// When the provider recorded it.
    pub created_at: Micros,
}

/// What one planted fault must make a correct run report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectTarget {
    /// A finding of this provider's effect on the order.
    Finding(Provider),
    /// The skip verdict of this message.
    SkipVerdict(MsgId),
}

/// An expectation of a planted fault, judged against the ground truth.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// Which truth row.
    pub target: ExpectTarget,
    /// Accepted classes (findings) or verdicts (skip verdicts); empty = the row must be absent.
    pub allowed: &'static [&'static str],
    /// For findings, the exact verdict when the fault pins it.
    pub verdict: Option<&'static str>,
    /// The instant the row is judged at; the expectation holds when it is inside the window.
    pub judged_at: Micros,
}

/// The planted faults, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// ORDER_PAID finished by a zombie consumer after a rebalance, after the fast
    /// ORDER_SHIPPED: SKIPPED on SHIPPED (the incident).
    Reorder,
    /// A reorder whose lost effects were granted by hand later.
    Compensated,
    /// Cancelled or refunded before the handler ran: a correct skip.
    CancelRace,
    /// DONE, but a provider lost (or failed) the call.
    LostCall,
    /// A crash between the provider call and the ledger write: the redelivered message
    /// calls a non-idempotent provider again.
    Duplicate,
    /// A manual grant on an order that was never paid (or does not exist).
    Orphan,
    /// Parked as PENDING_REVIEW and forgotten.
    Stalled,
    /// ORDER_PAID consumed only after the cut.
    Unconsumed,
    /// The ledger row revoked by an operator; never re-driven.
    Revoked,
    /// An instant placed exactly on a window boundary.
    Edge,
    /// The canonical incident of order 8821.
    Incident,
}

impl Fault {
    /// Every fault, in report order.
    pub const ALL: [Fault; 11] = [
        Fault::Reorder,
        Fault::Compensated,
        Fault::CancelRace,
        Fault::LostCall,
        Fault::Duplicate,
        Fault::Orphan,
        Fault::Stalled,
        Fault::Unconsumed,
        Fault::Revoked,
        Fault::Edge,
        Fault::Incident,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Reorder => "reorder",
            Fault::Compensated => "compensated",
            Fault::CancelRace => "cancel_race",
            Fault::LostCall => "lost_call",
            Fault::Duplicate => "duplicate",
            Fault::Orphan => "orphan",
            Fault::Stalled => "stalled",
            Fault::Unconsumed => "unconsumed",
            Fault::Revoked => "revoked",
            Fault::Edge => "edge",
            Fault::Incident => "incident",
        }
    }
}

/// Everything one order left in the three sources, and what its fault should cause.
#[derive(Debug, Clone, Default)]
pub struct OrderRows {
    /// The order.
    pub order_id: i64,
    /// Its status changes, in time order.
    pub history: Vec<StatusChange>,
    /// Its ledger rows, in message order.
    pub ledger: Vec<LedgerEntry>,
    /// Its receipts, all providers.
    pub receipts: Vec<ReceiptEntry>,
    /// The planted fault, if any.
    pub fault: Option<Fault>,
    /// What the fault should make a correct run report.
    pub expects: Vec<Expect>,
}

impl OrderRows {
    fn reset(&mut self, order_id: i64) {
        self.order_id = order_id;
        self.history.clear();
        self.ledger.clear();
        self.receipts.clear();
        self.fault = None;
        self.expects.clear();
    }

    fn status_at(&self, t: Micros) -> Status {
        self.history.iter().take_while(|c| c.at <= t).last().map_or(Status::Created, |c| c.status)
    }

    /// When the order first changed to `status`, if it did.
    pub fn change(&self, status: Status) -> Option<Micros> {
        self.history.iter().find(|c| c.status == status).map(|c| c.at)
    }

    /// The sequence number of the provider's next receipt for this order.
    pub fn next_receipt_seq(&self, provider: Provider) -> u32 {
        self.receipts.iter().filter(|r| r.provider == provider).count() as u32
    }

    fn shift(&mut self, delta: Micros) {
        self.history.iter_mut().for_each(|c| c.at += delta);
        for entry in &mut self.ledger {
            entry.produced += delta;
            entry.decided_at += delta;
        }
        for r in &mut self.receipts {
            r.created_at += delta;
            r.produced = r.produced.map(|p| p + delta);
        }
        self.expects.iter_mut().for_each(|e| e.judged_at += delta);
    }
}

/// How a provider lost a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// No receipt at all.
    Missing,
    /// A FAILED receipt; the handler marked DONE anyway.
    Failed,
    /// FAILED, then a successful retry: nothing lost.
    Retried,
}

/// The mechanism that perturbs an order's handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mechanism {
    Normal,
    /// The happy path, unperturbed (edge orders need a paid order that stays paid).
    Plain,
    /// ORDER_PAID held by a zombie consumer until after ORDER_SHIPPED was handled.
    Zombie {
        compensate: bool,
    },
    /// The message of the status before the final cancellation is handled after it.
    CancelRace,
    LostCall {
        status: Status,
        provider: Provider,
        loss: Loss,
    },
    Duplicate {
        status: Status,
        provider: Provider,
        reversed: bool,
    },
    Stalled {
        status: Status,
    },
    Revoked {
        status: Status,
    },
    /// ORDER_PAID handled only after the cut.
    Unconsumed,
}

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
        let epoch = start + (mix(seed ^ 0xEB0C) % REBALANCE_PERIOD as u64) as Micros;
        World {
            seed,
            partitions: partitions.max(1),
            consumers: consumers.max(1),
            cut,
            since: cut - DAY_MICROS,
            start,
            span: 2 * DAY_MICROS + 2 * HOUR,
            horizon: cut + 6 * HOUR,
            epoch,
            rates,
            incident,
            grace,
        }
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
        self.finish(offsets, out);
    }

    fn mechanism(&self, rng: &mut SplitMix64, fault: Fault) -> Mechanism {
        let status = if rng.chance(0.6) { Status::Paid } else { Status::Shipped };
        let providers = status.providers();
        let provider = providers[rng.index(providers.len())];
        match fault {
            Fault::Reorder => Mechanism::Zombie { compensate: false },
            Fault::Compensated => Mechanism::Zombie { compensate: true },
            Fault::CancelRace => Mechanism::CancelRace,
            Fault::LostCall => {
                let loss = [Loss::Missing, Loss::Failed, Loss::Retried][rng.index(3)];
                Mechanism::LostCall { status, provider, loss }
            }
            Fault::Duplicate => {
                Mechanism::Duplicate { status, provider, reversed: rng.chance(0.25) }
            }
            Fault::Stalled => Mechanism::Stalled { status },
            Fault::Revoked => Mechanism::Revoked { status },
            Fault::Unconsumed => Mechanism::Unconsumed,
            Fault::Orphan | Fault::Edge | Fault::Incident => Mechanism::Normal,
        }
    }

    /// Builds the status history, then handles each of its messages.
    fn lifecycle(
        &self,
        rng: &mut SplitMix64,
        mechanism: Mechanism,
        quiet: bool,
        out: &mut OrderRows,
    ) {
        self.timeline(rng, mechanism, out);
        if quiet {
            self.quiet_before_cut(out);
        }
        self.handle_messages(rng, mechanism, out);
        if let Mechanism::Zombie { compensate: true } = mechanism {
            self.compensate_by_hand(rng, out);
        }
    }

    /// CREATED → PAID → SHIPPED → DELIVERED → COMPLETED, with cancellations and refunds.
    /// Faulted orders keep to the happy path (but for their fault), so that an unrelated
    /// cancellation cannot hide what was planted.
    fn timeline(&self, rng: &mut SplitMix64, mechanism: Mechanism, out: &mut OrderRows) {
        let normal = mechanism == Mechanism::Normal;
        let t0 = self.start + rng.between(0, self.span);
        let push = |out: &mut OrderRows, status, at| out.history.push(StatusChange { status, at });
        push(out, Status::Created, t0);
        if normal && rng.chance(0.05) {
            if rng.chance(0.5) {
                push(out, Status::Cancelled, t0 + rng.between(10 * MINUTE, 3 * HOUR));
            }
            return;
        }
        let paid = t0 + rng.between(30 * SECOND, 20 * MINUTE);
        push(out, Status::Paid, paid);
        let race_on_paid = mechanism == Mechanism::CancelRace && rng.chance(0.7);
        if race_on_paid {
            let status = if rng.chance(0.3) { Status::Refunded } else { Status::Cancelled };
            push(out, status, paid + rng.between(100 * MS, SECOND));
            return;
        }
        if normal && rng.chance(0.03) {
            let status = if rng.chance(0.35) { Status::Refunded } else { Status::Cancelled };
            push(out, status, paid + rng.between(5 * MINUTE, 6 * HOUR));
            return;
        }
        let fast = matches!(mechanism, Mechanism::Zombie { .. }) || (normal && rng.chance(0.15));
        let shipped = paid
            + if fast {
                rng.between(MINUTE, 5 * MINUTE)
            } else {
                rng.between(40 * MINUTE, 20 * HOUR)
            };
        push(out, Status::Shipped, shipped);
        if mechanism == Mechanism::CancelRace {
            push(out, Status::Cancelled, shipped + rng.between(100 * MS, SECOND));
            return;
        }
        let delivered = shipped + rng.between(6 * HOUR, 48 * HOUR);
        push(out, Status::Delivered, delivered);
        if normal && rng.chance(0.03) {
            push(out, Status::Refunded, delivered + rng.between(HOUR, 24 * HOUR));
            return;
        }
        push(out, Status::Completed, delivered + rng.between(2 * HOUR, 24 * HOUR));
        self.snap(rng, mechanism, out);
    }

    /// Moves a faulted timeline to where its mechanism can strike: a zombie's ORDER_PAID
    /// just before a rebalance, an unconsumed one some time before the cut.
    fn snap(&self, rng: &mut SplitMix64, mechanism: Mechanism, out: &mut OrderRows) {
        let Some(paid) = out.change(Status::Paid) else { return };
        let target = match mechanism {
            Mechanism::Zombie { .. } => {
                self.next_rebalance(paid) - rng.between(SECOND, 90 * SECOND)
            }
            Mechanism::Unconsumed => self.cut - rng.between(35 * MINUTE, 8 * HOUR),
            _ => return,
        };
        out.shift(target - paid);
    }

    /// Changes in the last [`QUIET`] before the cut happen just after it instead.
    fn quiet_before_cut(&self, out: &mut OrderRows) {
        for change in &mut out.history {
            if change.at >= self.cut - QUIET {
                change.at += QUIET + 1;
            }
        }
    }

    /// One message per status change, each handled by the owner of the partition.
    fn handle_messages(&self, rng: &mut SplitMix64, mechanism: Mechanism, out: &mut OrderRows) {
        let partition = self.partition(out.order_id);
        let last = out.history.len().saturating_sub(1);
        for seq in 0..out.history.len() {
            let StatusChange { status, at } = out.history[seq];
            let msg_id = MsgId::Event { order_id: out.order_id, seq: seq as u8 };
            let produced = at + rng.between(MS, 30 * MS);
            let mut start = produced + rng.between(5 * MS, 1500 * MS);
            let mut consumer = self.owner(partition, start);
            match mechanism {
                Mechanism::Zombie { .. } if status == Status::Paid => {
                    // The old owner fetched it before the rebalance and finishes it late.
                    consumer = self.owner(partition, produced);
                    let shipped = out.change(Status::Shipped).unwrap_or(at);
                    start = shipped + rng.between(MINUTE, 10 * MINUTE);
                }
                Mechanism::CancelRace if seq + 1 == last => {
                    start = out.history[last].at + rng.between(10 * MS, 500 * MS);
                    consumer = self.owner(partition, start);
                }
                Mechanism::Unconsumed if status == Status::Paid => {
                    start = self.cut + rng.between(MINUTE, 2 * HOUR);
                    consumer = self.owner(partition, start);
                }
                _ => {}
            }
            let entry = LedgerEntry {
                msg_id,
                event: status,
                produced,
                action: action::SKIPPED,
                observed: out.status_at(start),
                partition,
                offset: 0,
                consumer,
                decided_at: start,
            };
            let entry = self.decide(rng, mechanism, entry, out);
            out.ledger.push(entry);
        }
    }

    /// The conditional skip of DESIGN.md §1, with the mechanism's perturbation.
    fn decide(
        &self,
        rng: &mut SplitMix64,
        mechanism: Mechanism,
        mut entry: LedgerEntry,
        out: &mut OrderRows,
    ) -> LedgerEntry {
        let status = entry.event;
        match mechanism {
            Mechanism::Stalled { status: s } if s == status => {
                entry.action = action::PENDING_REVIEW;
                entry.decided_at += rng.between(MS, 10 * MS);
                return entry;
            }
            Mechanism::Revoked { status: s } if s == status => {
                entry.action = action::REVOKED;
                entry.decided_at += rng.between(MS, 10 * MS);
                return entry;
            }
            _ => {}
        }
        if entry.observed != status {
            entry.action = action::SKIPPED;
            entry.decided_at += rng.between(MS, 10 * MS);
            return entry;
        }
        let mut t = entry.decided_at;
        for &provider in status.providers() {
            t += rng.between(2 * MS, 80 * MS);
            let lost = match mechanism {
                Mechanism::LostCall { status: s, provider: p, loss }
                    if s == status && p == provider =>
                {
                    Some(loss)
                }
                _ => None,
            };
            match lost {
                None => self.receipt(out, provider, &entry, receipt::SUCCEEDED, t),
                Some(Loss::Missing) => {}
                Some(Loss::Failed) => self.receipt(out, provider, &entry, receipt::FAILED, t),
                Some(Loss::Retried) => {
                    self.receipt(out, provider, &entry, receipt::FAILED, t);
                    t += rng.between(200 * MS, 2 * SECOND);
                    self.receipt(out, provider, &entry, receipt::SUCCEEDED, t);
                }
            }
        }
        if let Mechanism::Duplicate { status: s, provider, reversed } = mechanism {
            if s == status {
                return self.redeliver(rng, entry, provider, reversed, t, out);
            }
        }
        entry.action = action::DONE;
        entry.decided_at = t + rng.between(MS, 20 * MS);
        entry
    }

    /// The consumer crashed after the provider calls, before the ledger write: the group
    /// rebalances and the next owner handles the message again. The non-idempotent
    /// `provider` records a second receipt (`reversed`: undone since by an operator).
    fn redeliver(
        &self,
        rng: &mut SplitMix64,
        mut entry: LedgerEntry,
        provider: Provider,
        reversed: bool,
        crashed: Micros,
        out: &mut OrderRows,
    ) -> LedgerEntry {
        let start = crashed + rng.between(10 * SECOND, 45 * SECOND);
        entry.consumer = (entry.consumer + 1) % self.consumers;
        entry.observed = out.status_at(start);
        if entry.observed != entry.event {
            entry.action = action::SKIPPED;
            entry.decided_at = start + rng.between(MS, 10 * MS);
            return entry;
        }
        let t = start + rng.between(2 * MS, 80 * MS);
        self.receipt(
            out,
            provider,
            &entry,
            if reversed { receipt::REVERSED } else { receipt::SUCCEEDED },
            t,
        );
        entry.action = action::DONE;
        entry.decided_at = t + rng.between(MS, 20 * MS);
        entry
    }

    fn receipt(
        &self,
        out: &mut OrderRows,
        provider: Provider,
        entry: &LedgerEntry,
        status: &'static str,
        created_at: Micros,
    ) {
        let seq = out.next_receipt_seq(provider);
        out.receipts.push(ReceiptEntry {
            provider,
            seq,
            msg_id: Some(entry.msg_id),
            produced: Some(entry.produced),
            status,
            created_at,
        });
    }

    /// An operator noticed the wrongly skipped ORDER_PAID and granted its effects by hand.
    fn compensate_by_hand(&self, rng: &mut SplitMix64, out: &mut OrderRows) {
        let Some(paid) = out
            .ledger
            .iter()
            .find(|e| e.event == Status::Paid && e.action == action::SKIPPED)
            .copied()
        else {
            return;
        };
        let mut t = paid.decided_at + rng.between(10 * MINUTE, 6 * HOUR);
        for &provider in Status::Paid.providers() {
            let seq = out.next_receipt_seq(provider);
            out.receipts.push(ReceiptEntry {
                provider,
                seq,
                msg_id: Some(paid.msg_id),
                produced: None,
                status: receipt::SUCCEEDED,
                created_at: t,
            });
            t += rng.between(SECOND, MINUTE);
        }
    }

    /// A manual points grant on an order that was never paid, or that does not exist.
    fn orphan(&self, rng: &mut SplitMix64, phantom_allowed: bool, out: &mut OrderRows) {
        let t0 = self.start + rng.between(0, self.span);
        let phantom = phantom_allowed && rng.chance(0.5);
        let granted = if phantom {
            t0
        } else {
            out.history.push(StatusChange { status: Status::Created, at: t0 });
            if rng.chance(0.5) {
                out.history.push(StatusChange {
                    status: Status::Cancelled,
                    at: t0 + rng.between(10 * MINUTE, 3 * HOUR),
                });
            }
            self.quiet_before_cut(out);
            self.handle_messages(rng, Mechanism::Normal, out);
            t0 + rng.between(20 * MINUTE, 20 * HOUR)
        };
        out.receipts.push(ReceiptEntry {
            provider: Provider::Points,
            seq: 0,
            msg_id: None,
            produced: None,
            status: receipt::SUCCEEDED,
            created_at: granted,
        });
        let judged_at = granted + self.grace(Provider::Points);
        out.expects.push(Expect {
            target: ExpectTarget::Finding(Provider::Points),
            allowed: &["ORPHAN_EFFECT"],
            verdict: None,
            judged_at,
        });
    }

    /// The canonical incident: order 8821, ORDER_SHIPPED `msg-7392` handled by the new
    /// owner after a rebalance, then ORDER_PAID `msg-7391` finished by the old owner,
    /// which saw SHIPPED and marked it SKIPPED. Paid eight hours before the cut.
    fn incident_order(&self, rng: &mut SplitMix64, out: &mut OrderRows) {
        let mechanism = Mechanism::Zombie { compensate: false };
        self.lifecycle(rng, mechanism, false, out);
        let rename = |id: MsgId| match id {
            MsgId::Event { seq: 1, .. } => MsgId::Named(INCIDENT_PAID_MSG),
            MsgId::Event { seq: 2, .. } => MsgId::Named(INCIDENT_SHIPPED_MSG),
            other => other,
        };
        out.ledger.iter_mut().for_each(|e| e.msg_id = rename(e.msg_id));
        out.receipts.iter_mut().for_each(|r| r.msg_id = r.msg_id.map(rename));
        self.expect(mechanism, out);
        if let Some(paid) = out.change(Status::Paid) {
            out.shift(self.cut - 8 * HOUR - paid);
        }
    }

    /// A fault placed exactly on a window boundary, where half-open windows decide.
    fn edge(&self, rng: &mut SplitMix64, out: &mut OrderRows) {
        let (since, cut) = (self.since, self.cut);
        let points = self.grace(Provider::Points);
        let lost = Mechanism::LostCall {
            status: Status::Paid,
            provider: Provider::Points,
            loss: Loss::Missing,
        };
        let duplicate = Mechanism::Duplicate {
            status: Status::Paid,
            provider: Provider::Points,
            reversed: false,
        };
        let finding = |allowed: &'static [&'static str], verdict: Option<&'static str>| Expect {
            target: ExpectTarget::Finding(Provider::Points),
            allowed,
            verdict,
            judged_at: cut,
        };
        // (mechanism, which instant is placed, where, what a correct run reports)
        let (key, target, expect) = match rng.index(10) {
            0 => (
                self.edge_run(rng, lost, out, Key::DueAt),
                cut - points,
                finding(&["DONE_NO_RECEIPT"], Some("BREAK")),
            ),
            1 => (self.edge_run(rng, lost, out, Key::DueAt), since - points, finding(&[], None)),
            2 => (
                self.edge_run(rng, Mechanism::CancelRace, out, Key::SkipDecided),
                since,
                self.skip_expect(out, &[]),
            ),
            3 => (
                self.edge_run(rng, Mechanism::CancelRace, out, Key::SkipDecided),
                cut,
                self.skip_expect(out, &["CORRECT"]),
            ),
            4 => {
                (self.edge_run(rng, duplicate, out, Key::SecondReceipt), since, finding(&[], None))
            }
            5 => (
                self.edge_run(rng, duplicate, out, Key::SecondReceipt),
                cut,
                finding(&["DUPLICATE_EFFECT"], Some("BREAK")),
            ),
            6 => (
                self.edge_orphan(rng, out),
                cut - points,
                finding(&["ORPHAN_EFFECT"], Some("BREAK")),
            ),
            7 => (self.edge_orphan(rng, out), cut, finding(&["ORPHAN_EFFECT"], Some("PENDING"))),
            8 => (
                self.edge_run(rng, Mechanism::Plain, out, Key::DueAt),
                cut,
                finding(&["NO_LEDGER_ENTRY"], Some("PENDING")),
            ),
            // A wrong skip still inside its grace: PENDING, both as finding and as skip.
            _ => (
                self.edge_run(rng, Mechanism::Zombie { compensate: false }, out, Key::DueAt),
                cut - 20 * MINUTE,
                self.skip_expect(out, &["PENDING"]),
            ),
        };
        if let Some(key) = key {
            out.shift(target - key);
        }
        // Expectations are judged at the cut, after the shift: they always apply.
        let mut expect = expect;
        expect.judged_at = cut;
        out.expects.clear();
        out.expects.push(expect);
    }

    fn edge_run(
        &self,
        rng: &mut SplitMix64,
        mechanism: Mechanism,
        out: &mut OrderRows,
        key: Key,
    ) -> Option<Micros> {
        self.lifecycle(rng, mechanism, false, out);
        match key {
            Key::DueAt => out.change(Status::Paid),
            Key::SkipDecided => {
                out.ledger.iter().find(|e| e.action == action::SKIPPED).map(|e| e.decided_at)
            }
            Key::SecondReceipt => {
                let mut times: Vec<Micros> = out
                    .receipts
                    .iter()
                    .filter(|r| r.provider == Provider::Points && r.status == receipt::SUCCEEDED)
                    .map(|r| r.created_at)
                    .collect();
                times.sort_unstable();
                times.get(1).copied()
            }
        }
    }

    fn edge_orphan(&self, rng: &mut SplitMix64, out: &mut OrderRows) -> Option<Micros> {
        self.orphan(rng, false, out);
        out.receipts.first().map(|r| r.created_at)
    }

    fn skip_expect(&self, out: &OrderRows, allowed: &'static [&'static str]) -> Expect {
        let msg_id = out
            .ledger
            .iter()
            .find(|e| e.action == action::SKIPPED)
            .map_or(MsgId::Named("none"), |e| e.msg_id);
        Expect {
            target: ExpectTarget::SkipVerdict(msg_id),
            allowed,
            verdict: None,
            judged_at: self.cut,
        }
    }

    /// Records what a correct run must report for `mechanism` on this order.
    fn expect(&self, mechanism: Mechanism, out: &mut OrderRows) {
        let due_plus_grace = |out: &OrderRows, status: Status, provider: Provider| {
            out.change(status).map(|at| at + self.grace(provider))
        };
        let findings = |out: &mut OrderRows,
                        status: Status,
                        providers: &[Provider],
                        allowed: &'static [&'static str]| {
            for &provider in providers {
                if let Some(judged_at) = due_plus_grace(out, status, provider) {
                    out.expects.push(Expect {
                        target: ExpectTarget::Finding(provider),
                        allowed,
                        verdict: None,
                        judged_at,
                    });
                }
            }
        };
        let skipped = |out: &OrderRows, status: Status| {
            out.ledger.iter().find(|e| e.event == status).map(|e| (e.msg_id, e.decided_at))
        };
        match mechanism {
            Mechanism::Normal | Mechanism::Plain => {}
            Mechanism::Zombie { compensate } => {
                let allowed: &'static [&'static str] = if compensate {
                    &["WRONG", "PENDING", "HARMLESS"]
                } else {
                    &["WRONG", "PENDING"]
                };
                if !compensate {
                    findings(out, Status::Paid, Status::Paid.providers(), &["SKIPPED_BUT_DUE"]);
                }
                if let Some((msg_id, judged_at)) = skipped(out, Status::Paid) {
                    out.expects.push(Expect {
                        target: ExpectTarget::SkipVerdict(msg_id),
                        allowed,
                        verdict: None,
                        judged_at,
                    });
                }
            }
            Mechanism::CancelRace => {
                if let Some(entry) =
                    out.ledger.iter().find(|e| e.action == action::SKIPPED).copied()
                {
                    out.expects.push(Expect {
                        target: ExpectTarget::SkipVerdict(entry.msg_id),
                        allowed: &["CORRECT"],
                        verdict: None,
                        judged_at: entry.decided_at,
                    });
                }
            }
            Mechanism::LostCall { status, provider, loss } => {
                let allowed: &'static [&'static str] =
                    if loss == Loss::Retried { &[] } else { &["DONE_NO_RECEIPT"] };
                findings(out, status, &[provider], allowed);
            }
            Mechanism::Duplicate { provider, reversed, .. } => {
                let mut times: Vec<Micros> = out
                    .receipts
                    .iter()
                    .filter(|r| r.provider == provider)
                    .map(|r| r.created_at)
                    .collect();
                times.sort_unstable();
                if let Some(&second) = times.get(1) {
                    let allowed: &'static [&'static str] =
                        if reversed { &[] } else { &["DUPLICATE_EFFECT"] };
                    out.expects.push(Expect {
                        target: ExpectTarget::Finding(provider),
                        allowed,
                        verdict: Some("BREAK"),
                        judged_at: second,
                    });
                }
            }
            Mechanism::Stalled { status } => {
                findings(out, status, status.providers(), &["REVIEW_STALLED"])
            }
            Mechanism::Revoked { status } => {
                findings(out, status, status.providers(), &["SKIPPED_BUT_DUE"]);
                if let Some((msg_id, judged_at)) = skipped(out, status) {
                    out.expects.push(Expect {
                        target: ExpectTarget::SkipVerdict(msg_id),
                        allowed: &[],
                        verdict: None,
                        judged_at,
                    });
                }
            }
            Mechanism::Unconsumed => {
                findings(out, Status::Paid, Status::Paid.providers(), &["NO_LEDGER_ENTRY"])
            }
        }
    }

    /// Drops what had not happened when the databases were dumped, then hands out offsets.
    fn finish(&self, offsets: &mut [i64], out: &mut OrderRows) {
        let horizon = self.horizon;
        out.history.retain(|c| c.at <= horizon);
        out.ledger.retain(|e| e.produced <= horizon);
        out.receipts.retain(|r| r.produced.unwrap_or(r.created_at) <= horizon);
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
        let generation = (t - self.epoch).div_euclid(REBALANCE_PERIOD);
        (partition as i64 + generation).rem_euclid(self.consumers as i64) as u32
    }

    fn next_rebalance(&self, t: Micros) -> Micros {
        self.epoch + ((t - self.epoch).div_euclid(REBALANCE_PERIOD) + 1) * REBALANCE_PERIOD
    }
}

/// Which instant of an edge order is placed on a boundary.
#[derive(Debug, Clone, Copy)]
enum Key {
    DueAt,
    SkipDecided,
    SecondReceipt,
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUT: Micros = 1_796_000_400_000_000;

    fn world(rates: FaultRates) -> World {
        World::new(7, 24, 8, CUT, rates, true, [30 * MINUTE; 3])
    }

    #[test]
    fn handler_is_the_conditional_skip() {
        let w = world(FaultRates::none());
        let mut offsets = vec![0; 24];
        let mut out = OrderRows::default();
        for order_id in 1..500 {
            w.simulate(order_id, &mut offsets, &mut out);
            for e in &out.ledger {
                assert_eq!(e.action == action::DONE, e.observed == e.event, "{e:?}");
                assert_eq!(e.partition, w.partition(order_id));
            }
            let done_paid =
                out.ledger.iter().any(|e| e.event == Status::Paid && e.action == action::DONE);
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
        assert_eq!((paid.action, paid.observed), (action::SKIPPED, Status::Shipped));
        assert!(paid.offset < shipped.offset && paid.decided_at > shipped.decided_at);
        assert_eq!(out.change(Status::Paid), Some(CUT - 8 * HOUR));
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
