//! The mechanism of one order's life: its status timeline, the messages it emits, the
//! conditional-skip handler deciding on each, and the providers' receipts, each with the
//! perturbation of the order's fault.

use super::model::{Fault, LedgerEntry, MsgId, OrderRows, Provider, ReceiptEntry};
use super::model::{Status, StatusChange};
use super::{World, QUIET};
use crate::time::{Micros, HOUR_MICROS, MILLI_MICROS, MINUTE_MICROS, SECOND_MICROS};
use crate::vocabulary::{LedgerAction, ReceiptStatus};
use crate::workload::rng::SplitMix64;

/// How a provider lost a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Loss {
    /// No receipt at all.
    Missing,
    /// A FAILED receipt; the handler marked DONE anyway.
    Failed,
    /// FAILED, then a successful retry: nothing lost.
    Retried,
}

/// The mechanism that perturbs an order's handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mechanism {
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
    /// Paid, granted, then voided, and `provider`'s grant never undone (DESIGN §10.1).
    Unreversed {
        provider: Provider,
        how: Unreversal,
    },
}

/// How a done effect outlived the void of its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unreversal {
    /// The void handler lost the provider's reversal call.
    Lost,
    /// The provider granted twice before the void, and the void handler lost the
    /// reversal: a voided double grant, both grants to undo (not a duplicate).
    Twice,
    /// An operator granted by hand after the void, without looking at the status.
    AfterVoid,
}

impl World {
    pub(super) fn mechanism(&self, rng: &mut SplitMix64, fault: Fault) -> Mechanism {
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
            Fault::Unreversed => {
                let provider = [Provider::Points, Provider::Wms][rng.index(2)];
                let how =
                    [Unreversal::Lost, Unreversal::Twice, Unreversal::AfterVoid][rng.index(3)];
                Mechanism::Unreversed { provider, how }
            }
            Fault::Orphan | Fault::Edge | Fault::Incident => Mechanism::Normal,
        }
    }

    /// Builds the status history, then handles each of its messages.
    pub(super) fn lifecycle(
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
        self.undo_on_void(rng, mechanism, out);
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
                push(out, Status::Cancelled, t0 + rng.between(10 * MINUTE_MICROS, 3 * HOUR_MICROS));
            }
            return;
        }
        let paid = t0 + rng.between(30 * SECOND_MICROS, 20 * MINUTE_MICROS);
        push(out, Status::Paid, paid);
        let race_on_paid = mechanism == Mechanism::CancelRace && rng.chance(0.7);
        if race_on_paid {
            let status = if rng.chance(0.3) { Status::Refunded } else { Status::Cancelled };
            push(out, status, paid + rng.between(100 * MILLI_MICROS, SECOND_MICROS));
            return;
        }
        if normal && rng.chance(0.03) {
            let status = if rng.chance(0.35) { Status::Refunded } else { Status::Cancelled };
            push(out, status, paid + rng.between(5 * MINUTE_MICROS, 6 * HOUR_MICROS));
            return;
        }
        if let Mechanism::Unreversed { .. } = mechanism {
            let status = if rng.chance(0.5) { Status::Refunded } else { Status::Cancelled };
            push(out, status, paid + rng.between(5 * MINUTE_MICROS, 6 * HOUR_MICROS));
            return;
        }
        let fast = matches!(mechanism, Mechanism::Zombie { .. }) || (normal && rng.chance(0.15));
        let shipped = paid
            + if fast {
                rng.between(MINUTE_MICROS, 5 * MINUTE_MICROS)
            } else {
                rng.between(40 * MINUTE_MICROS, 20 * HOUR_MICROS)
            };
        push(out, Status::Shipped, shipped);
        if mechanism == Mechanism::CancelRace {
            push(out, Status::Cancelled, shipped + rng.between(100 * MILLI_MICROS, SECOND_MICROS));
            return;
        }
        let delivered = shipped + rng.between(6 * HOUR_MICROS, 48 * HOUR_MICROS);
        push(out, Status::Delivered, delivered);
        if normal && rng.chance(0.03) {
            push(out, Status::Refunded, delivered + rng.between(HOUR_MICROS, 24 * HOUR_MICROS));
            return;
        }
        push(out, Status::Completed, delivered + rng.between(2 * HOUR_MICROS, 24 * HOUR_MICROS));
        self.snap(rng, mechanism, out);
    }

    /// Moves a faulted timeline to where its mechanism can strike: a zombie's ORDER_PAID
    /// just before a rebalance, an unconsumed one some time before the cut.
    fn snap(&self, rng: &mut SplitMix64, mechanism: Mechanism, out: &mut OrderRows) {
        let Some(paid) = out.change(Status::Paid) else { return };
        let target = match mechanism {
            Mechanism::Zombie { .. } => {
                self.next_rebalance(paid) - rng.between(SECOND_MICROS, 90 * SECOND_MICROS)
            }
            Mechanism::Unconsumed => self.cut - rng.between(35 * MINUTE_MICROS, 8 * HOUR_MICROS),
            _ => return,
        };
        out.shift(target - paid);
    }

    /// Changes in the last [`QUIET`] before the cut happen just after it instead.
    pub(super) fn quiet_before_cut(&self, out: &mut OrderRows) {
        for change in &mut out.history {
            if change.at >= self.cut - QUIET {
                change.at += QUIET + 1;
            }
        }
    }

    /// One message per status change, each handled by the owner of the partition.
    pub(super) fn handle_messages(
        &self,
        rng: &mut SplitMix64,
        mechanism: Mechanism,
        out: &mut OrderRows,
    ) {
        let partition = self.partition(out.order_id);
        let last = out.history.len().saturating_sub(1);
        for seq in 0..out.history.len() {
            let StatusChange { status, at } = out.history[seq];
            let msg_id = MsgId::Event { order_id: out.order_id, seq: seq as u8 };
            let produced = at + rng.between(MILLI_MICROS, 30 * MILLI_MICROS);
            let mut start = self.handling(produced, rng);
            let mut consumer = self.owner(partition, start);
            let mut revoked_at = None;
            match mechanism {
                Mechanism::Zombie { .. } if status == Status::Paid => {
                    // The old owner fetched it before the rebalance and finishes it late.
                    consumer = self.owner(partition, produced);
                    let shipped = out.change(Status::Shipped).unwrap_or(at);
                    start = shipped + rng.between(MINUTE_MICROS, 10 * MINUTE_MICROS);
                    // A zombie only once the partition was taken from it before its write.
                    revoked_at = Some(self.next_rebalance(produced)).filter(|&r| r <= start);
                }
                Mechanism::CancelRace if seq + 1 == last => {
                    start =
                        out.history[last].at + rng.between(10 * MILLI_MICROS, 500 * MILLI_MICROS);
                    consumer = self.owner(partition, start);
                }
                Mechanism::Unconsumed if status == Status::Paid => {
                    start = self.cut + rng.between(MINUTE_MICROS, 2 * HOUR_MICROS);
                    consumer = self.owner(partition, start);
                }
                _ => {}
            }
            let entry = LedgerEntry {
                msg_id,
                event: status,
                produced,
                action: LedgerAction::Skipped,
                observed: out.status_at(start - self.read_lag),
                partition,
                offset: 0,
                consumer,
                decided_at: start,
                revoked_at,
            };
            let entry = self.decide(rng, mechanism, entry, out);
            out.ledger.push(entry);
        }
    }

    /// The conditional skip of docs/README.md, with the mechanism's perturbation.
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
                entry.action = LedgerAction::PendingReview;
                entry.decided_at += rng.between(MILLI_MICROS, 10 * MILLI_MICROS);
                return entry;
            }
            Mechanism::Revoked { status: s } if s == status => {
                entry.action = LedgerAction::Revoked;
                entry.decided_at += rng.between(MILLI_MICROS, 10 * MILLI_MICROS);
                return entry;
            }
            _ => {}
        }
        if entry.observed != status {
            entry.action = LedgerAction::Skipped;
            entry.decided_at += rng.between(MILLI_MICROS, 10 * MILLI_MICROS);
            return entry;
        }
        let t = self.call_providers(rng, mechanism, &entry, out);
        if let Mechanism::Duplicate { status: s, provider, reversed } = mechanism {
            if s == status {
                return self.redeliver(rng, entry, provider, reversed, t, out);
            }
        }
        entry.action = LedgerAction::Done;
        entry.decided_at = t + rng.between(MILLI_MICROS, 20 * MILLI_MICROS);
        entry
    }

    /// The handler calls each provider of the status in turn, one of them perhaps losing
    /// the call; returns the instant the last call returned.
    fn call_providers(
        &self,
        rng: &mut SplitMix64,
        mechanism: Mechanism,
        entry: &LedgerEntry,
        out: &mut OrderRows,
    ) -> Micros {
        let status = entry.event;
        let mut t = entry.decided_at;
        for &provider in status.providers() {
            t += rng.between(2 * MILLI_MICROS, 80 * MILLI_MICROS);
            let lost = match mechanism {
                Mechanism::LostCall { status: s, provider: p, loss }
                    if s == status && p == provider =>
                {
                    Some(loss)
                }
                _ => None,
            };
            match lost {
                None => self.receipt(out, provider, entry, ReceiptStatus::Succeeded, t),
                Some(Loss::Missing) => {}
                Some(Loss::Failed) => self.receipt(out, provider, entry, ReceiptStatus::Failed, t),
                Some(Loss::Retried) => {
                    self.receipt(out, provider, entry, ReceiptStatus::Failed, t);
                    t += rng.between(200 * MILLI_MICROS, 2 * SECOND_MICROS);
                    self.receipt(out, provider, entry, ReceiptStatus::Succeeded, t);
                }
            }
        }
        t
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
        let start = crashed + rng.between(10 * SECOND_MICROS, 45 * SECOND_MICROS);
        entry.consumer = (entry.consumer + 1) % self.consumers;
        entry.observed = out.status_at(start - self.read_lag);
        if entry.observed != entry.event {
            entry.action = LedgerAction::Skipped;
            entry.decided_at = start + rng.between(MILLI_MICROS, 10 * MILLI_MICROS);
            return entry;
        }
        let t = start + rng.between(2 * MILLI_MICROS, 80 * MILLI_MICROS);
        self.receipt(
            out,
            provider,
            &entry,
            if reversed { ReceiptStatus::Reversed } else { ReceiptStatus::Succeeded },
            t,
        );
        entry.action = LedgerAction::Done;
        entry.decided_at = t + rng.between(MILLI_MICROS, 20 * MILLI_MICROS);
        entry
    }

    fn receipt(
        &self,
        out: &mut OrderRows,
        provider: Provider,
        entry: &LedgerEntry,
        status: ReceiptStatus,
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
            reversed_at: None,
        });
    }

    /// The handler of the order's first void message (ORDER_CANCELLED, ORDER_REFUNDED)
    /// undoes the points and the stock lock granted before it: their receipts read
    /// REVERSED from its decision on. An `Unreversed` mechanism makes it miss those of one
    /// provider (or grant after it).
    /// Draws from `rng` only for that mechanism, so other orders keep their worlds.
    fn undo_on_void(&self, rng: &mut SplitMix64, mechanism: Mechanism, out: &mut OrderRows) {
        let Some(handled) = out
            .ledger
            .iter()
            .find(|e| e.event.voids_effects() && e.action == LedgerAction::Done)
            .map(|e| e.decided_at)
        else {
            return;
        };
        let missed = match mechanism {
            Mechanism::Unreversed { provider, how } => Some((provider, how)),
            _ => None,
        };
        if let Some((provider, Unreversal::Twice)) = missed {
            let first = out.receipts.iter().find(|r| {
                r.provider == provider
                    && r.status == ReceiptStatus::Succeeded
                    && r.created_at < handled
            });
            if let Some(&first) = first {
                let seq = out.next_receipt_seq(provider);
                let created_at =
                    first.created_at + rng.between(10 * SECOND_MICROS, 45 * SECOND_MICROS);
                out.receipts.push(ReceiptEntry { seq, created_at, ..first });
            }
        }
        for r in &mut out.receipts {
            let skipped = match missed {
                Some((provider, Unreversal::Lost | Unreversal::Twice)) => r.provider == provider,
                _ => false,
            };
            if r.undone_by_void_handler_at(handled) && r.reversed_at.is_none() && !skipped {
                r.reversed_at = Some(handled);
            }
        }
        if let Some((provider, Unreversal::AfterVoid)) = missed {
            let seq = out.next_receipt_seq(provider);
            out.receipts.push(ReceiptEntry {
                provider,
                seq,
                msg_id: None,
                produced: None,
                status: ReceiptStatus::Succeeded,
                created_at: handled + rng.between(10 * MINUTE_MICROS, 3 * HOUR_MICROS),
                reversed_at: None,
            });
        }
    }

    /// An operator noticed the wrongly skipped ORDER_PAID and granted its effects by hand.
    fn compensate_by_hand(&self, rng: &mut SplitMix64, out: &mut OrderRows) {
        let Some(paid) = out
            .ledger
            .iter()
            .find(|e| e.event == Status::Paid && e.action == LedgerAction::Skipped)
            .copied()
        else {
            return;
        };
        let mut t = paid.decided_at + rng.between(10 * MINUTE_MICROS, 6 * HOUR_MICROS);
        for &provider in Status::Paid.providers() {
            let seq = out.next_receipt_seq(provider);
            out.receipts.push(ReceiptEntry {
                provider,
                seq,
                msg_id: Some(paid.msg_id),
                produced: None,
                status: ReceiptStatus::Succeeded,
                created_at: t,
                reversed_at: None,
            });
            t += rng.between(SECOND_MICROS, MINUTE_MICROS);
        }
    }
}
