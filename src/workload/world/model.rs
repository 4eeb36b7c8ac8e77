//! The vocabulary of the simulated chain: statuses, providers, message ids, the rows an
//! order leaves in the three sources, the planted faults and what each must make a
//! correct run report.

use std::fmt;

use crate::time::Micros;
use crate::vocabulary::{Class, LedgerAction, ReceiptStatus, SkipVerdict, Verdict};

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

    /// Whether its handler undoes the points and the stock lock (the void statuses of
    /// both rules of fixtures/rules.toml, which reverse on void).
    pub fn voids_effects(self) -> bool {
        matches!(self, Status::Cancelled | Status::Refunded)
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

    /// Whether a void undoes its grants (the rules of points and WMS reverse on void;
    /// a waybill is not taken back).
    pub fn undone_on_void(self) -> bool {
        matches!(self, Provider::Points | Provider::Wms)
    }

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
    /// What the handler decided.
    pub action: LedgerAction,
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
    /// A message its consumer held across a rebalance and decided after losing the
    /// partition (a zombie's write): when the partition was revoked. Not written.
    pub revoked_at: Option<Micros>,
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
    /// What the provider recorded.
    pub status: ReceiptStatus,
    /// When the provider recorded it.
    pub created_at: Micros,
    /// When the order's void handler reversed it (DESIGN §10.1); a dump taken at a cut
    /// reads it REVERSED only from then on (`status` is what it was before).
    pub reversed_at: Option<Micros>,
}

impl ReceiptEntry {
    /// Whether the void handler deciding at `at` undoes it: a points or stock-lock grant
    /// in force that was made before the handler ran (`World::undo_on_void`, and the
    /// same handler between nights).
    pub fn undone_by_void_handler_at(&self, at: Micros) -> bool {
        self.provider.undone_on_void()
            && self.status == ReceiptStatus::Succeeded
            && self.created_at < at
    }
}

/// What one planted fault must make a correct run report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectTarget {
    /// A finding of this provider's effect on the order.
    Finding {
        /// Whose effect.
        provider: Provider,
        /// Accepted classes; empty: the order has no finding of this effect.
        classes: &'static [Class],
        /// The exact verdict, when the fault pins it.
        verdict: Option<Verdict>,
    },
    /// The skip verdict of this message.
    SkipVerdict {
        /// The skipped message.
        msg_id: MsgId,
        /// Accepted verdicts; empty: the message has no skip verdict.
        verdicts: &'static [SkipVerdict],
    },
}

/// An expectation of a planted fault, judged against the ground truth.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// Which truth row, and what it may hold.
    pub target: ExpectTarget,
    /// The instant the row is judged at; the expectation holds when it is inside the window.
    pub judged_at: Micros,
}

/// Defines [`Fault`] from one table: per fault an order draws at a rate, in draw order,
/// its variant, its name, its default rate and its doc; then the canonical incident,
/// which is never drawn (`--incident` plants it on its own order).
macro_rules! faults {
    ( $( $variant:ident => $name:literal, $rate:literal, $doc:literal; )+ ) => {
        /// The planted faults, as reported: those drawn at a rate, then the incident.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        pub enum Fault {
            $( #[doc = $doc] $variant, )+
            /// The canonical incident of order 8821 (`--incident`), never drawn at a rate.
            Incident,
        }

        impl Fault {
            /// Every fault drawn at a rate, in draw order: all but [`Fault::Incident`].
            pub const ALL: [Fault; Fault::COUNT] = [$( Fault::$variant ),+];
            /// The number of faults drawn at a rate.
            pub const COUNT: usize = [$( $name ),+].len();

            /// Its name in reports; `gen`'s flag of its rate is `--<name>-rate`, `-` for `_`.
            pub const fn name(self) -> &'static str {
                match self {
                    $( Fault::$variant => $name, )+
                    Fault::Incident => "incident",
                }
            }

            /// Its per-order probability by default (0 for the incident, never drawn).
            pub const fn default_rate(self) -> f64 {
                match self {
                    $( Fault::$variant => $rate, )+
                    Fault::Incident => 0.0,
                }
            }

            /// What it plants, in a sentence (the help of its `gen` flag).
            pub const fn doc(self) -> &'static str {
                match self {
                    $( Fault::$variant => $doc, )+
                    Fault::Incident => "The canonical incident of order 8821.",
                }
            }
        }
    };
}

faults! {
    Reorder => "reorder", 0.004,
        "ORDER_PAID finished after ORDER_SHIPPED following a rebalance (wrong skip).";
    Compensated => "compensated", 0.001,
        "Wrong skip whose effects were later granted by hand (HARMLESS).";
    CancelRace => "cancel_race", 0.01,
        "Cancelled/refunded just before the handler ran (correct skip).";
    LostCall => "lost_call", 0.003,
        "DONE but the provider lost, failed, or failed-and-retried the call.";
    Duplicate => "duplicate", 0.003,
        "Crash before the ledger write; redelivery to a non-idempotent provider.";
    Orphan => "orphan", 0.001,
        "Manual grant on an unpaid or unknown order.";
    Stalled => "stalled", 0.001,
        "Parked as PENDING_REVIEW and forgotten.";
    Unconsumed => "unconsumed", 0.002,
        "ORDER_PAID consumed only after the cut.";
    Revoked => "revoked", 0.001,
        "Ledger row revoked and never re-driven.";
    Edge => "edge", 0.001,
        "An instant placed exactly on a window boundary.";
    Unreversed => "unreversed", 0.002,
        "Paid, granted, then voided, and the grant never undone: the void handler lost one reversal, missed a second grant, or the grant came after the void.";
}

impl Fault {
    /// Position in [`Fault::ALL`]; the incident's is [`Fault::COUNT`], past its end.
    pub const fn index(self) -> usize {
        self as usize
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
    pub(super) fn reset(&mut self, order_id: i64) {
        self.order_id = order_id;
        self.history.clear();
        self.ledger.clear();
        self.receipts.clear();
        self.fault = None;
        self.expects.clear();
    }

    pub(super) fn status_at(&self, t: Micros) -> Status {
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

    /// When the provider's second receipt was created, by creation time and whatever its
    /// status: in a duplicate, the redelivery's call.
    pub(super) fn second_receipt_at(&self, provider: Provider) -> Option<Micros> {
        let mut times: Vec<Micros> =
            self.receipts.iter().filter(|r| r.provider == provider).map(|r| r.created_at).collect();
        times.sort_unstable();
        times.get(1).copied()
    }

    pub(super) fn shift(&mut self, delta: Micros) {
        self.history.iter_mut().for_each(|c| c.at += delta);
        for entry in &mut self.ledger {
            entry.produced += delta;
            entry.decided_at += delta;
            entry.revoked_at = entry.revoked_at.map(|t| t + delta);
        }
        for r in &mut self.receipts {
            r.created_at += delta;
            r.produced = r.produced.map(|p| p + delta);
            r.reversed_at = r.reversed_at.map(|t| t + delta);
        }
        self.expects.iter_mut().for_each(|e| e.judged_at += delta);
    }
}
