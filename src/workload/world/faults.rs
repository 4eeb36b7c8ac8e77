//! Faults planted without the usual mechanism: orphan grants, the canonical incident and
//! instants placed exactly on a window boundary.

use super::model::{Expect, ExpectTarget, MsgId, OrderRows, ReceiptEntry};
use super::model::{Provider, Status, StatusChange};
use super::simulate::{Loss, Mechanism};
use super::{World, INCIDENT_PAID_MSG, INCIDENT_SHIPPED_MSG};
use crate::time::{Micros, HOUR_MICROS, MINUTE_MICROS};
use crate::vocabulary::{Class, LedgerAction, ReceiptStatus, SkipVerdict, Verdict};
use crate::workload::rng::SplitMix64;

impl World {
    /// A manual points grant on an order that was never paid, or that does not exist.
    pub(super) fn orphan(&self, rng: &mut SplitMix64, phantom_allowed: bool, out: &mut OrderRows) {
        let t0 = self.start + rng.between(0, self.span);
        let phantom = phantom_allowed && rng.chance(0.5);
        let granted = if phantom {
            t0
        } else {
            out.history.push(StatusChange { status: Status::Created, at: t0 });
            if rng.chance(0.5) {
                out.history.push(StatusChange {
                    status: Status::Cancelled,
                    at: t0 + rng.between(10 * MINUTE_MICROS, 3 * HOUR_MICROS),
                });
            }
            self.quiet_before_cut(out);
            self.handle_messages(rng, Mechanism::Normal, out);
            t0 + rng.between(20 * MINUTE_MICROS, 20 * HOUR_MICROS)
        };
        out.receipts.push(ReceiptEntry {
            provider: Provider::Points,
            seq: 0,
            msg_id: None,
            produced: None,
            status: ReceiptStatus::Succeeded,
            created_at: granted,
            reversed_at: None,
        });
        let judged_at = granted + self.grace(Provider::Points);
        out.expects.push(Expect {
            target: ExpectTarget::Finding {
                provider: Provider::Points,
                classes: &[Class::OrphanEffect],
                verdict: None,
            },
            judged_at,
        });
    }

    /// The canonical incident: order 8821, ORDER_SHIPPED `msg-7392` handled by the new
    /// owner after a rebalance, then ORDER_PAID `msg-7391` finished by the old owner,
    /// which saw SHIPPED and marked it SKIPPED. Paid eight hours before the cut.
    pub(super) fn incident_order(&self, rng: &mut SplitMix64, out: &mut OrderRows) {
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
            out.shift(self.cut - 8 * HOUR_MICROS - paid);
        }
    }

    /// A fault placed exactly on a window boundary, where half-open windows decide: one of
    /// ten cases, each a mechanism run ([`World::edge_case_run`]), the instant it places
    /// ([`World::edge_case_target`]) and what a correct run reports
    /// ([`World::edge_case_expect`]).
    pub(super) fn edge(&self, rng: &mut SplitMix64, out: &mut OrderRows) {
        let case = rng.index(10);
        let key = self.edge_case_run(rng, case, out);
        let target = self.edge_case_target(case);
        let mut expect = self.edge_case_expect(case, out);
        if let Some(key) = key {
            out.shift(target - key);
        }
        // Expectations are judged at the cut, after the shift: they always apply.
        expect.judged_at = self.cut;
        out.expects.clear();
        out.expects.push(expect);
    }

    /// Runs the mechanism of edge `case`; returns the instant that is to be placed.
    fn edge_case_run(
        &self,
        rng: &mut SplitMix64,
        case: usize,
        out: &mut OrderRows,
    ) -> Option<Micros> {
        let (status, provider) = (Status::Paid, Provider::Points);
        let lost = Mechanism::LostCall { status, provider, loss: Loss::Missing };
        let duplicate = Mechanism::Duplicate { status, provider, reversed: false };
        match case {
            0 | 1 => self.edge_run(rng, lost, out, Key::DueAt),
            2 | 3 => self.edge_run(rng, Mechanism::CancelRace, out, Key::SkipDecided),
            4 | 5 => self.edge_run(rng, duplicate, out, Key::SecondReceipt),
            6 | 7 => self.edge_orphan(rng, out),
            8 => self.edge_run(rng, Mechanism::Plain, out, Key::DueAt),
            // A wrong skip still inside its grace: PENDING, both as finding and as skip.
            _ => self.edge_run(rng, Mechanism::Zombie { compensate: false }, out, Key::DueAt),
        }
    }

    /// Where edge `case` places its instant.
    fn edge_case_target(&self, case: usize) -> Micros {
        let (since, cut) = (self.since, self.cut);
        let points = self.grace(Provider::Points);
        match case {
            0 | 6 => cut - points,
            1 => since - points,
            2 | 4 => since,
            3 | 5 | 7 | 8 => cut,
            _ => cut - 20 * MINUTE_MICROS,
        }
    }

    /// What a correct run reports for edge `case`, once its mechanism has run.
    fn edge_case_expect(&self, case: usize, out: &OrderRows) -> Expect {
        let finding = |classes: &'static [Class], verdict: Option<Verdict>| Expect {
            target: ExpectTarget::Finding { provider: Provider::Points, classes, verdict },
            judged_at: self.cut,
        };
        let (brk, pending) = (Some(Verdict::Break), Some(Verdict::Pending));
        match case {
            0 => finding(&[Class::DoneNoReceipt], brk),
            1 | 4 => finding(&[], None),
            2 => self.skip_expect(out, &[]),
            3 => self.skip_expect(out, &[SkipVerdict::Correct]),
            5 => finding(&[Class::DuplicateEffect], brk),
            6 => finding(&[Class::OrphanEffect], brk),
            7 => finding(&[Class::OrphanEffect], pending),
            8 => finding(&[Class::NoLedgerEntry], pending),
            _ => self.skip_expect(out, &[SkipVerdict::Pending]),
        }
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
                out.ledger.iter().find(|e| e.action == LedgerAction::Skipped).map(|e| e.decided_at)
            }
            Key::SecondReceipt => out.second_receipt_at(Provider::Points),
        }
    }

    fn edge_orphan(&self, rng: &mut SplitMix64, out: &mut OrderRows) -> Option<Micros> {
        self.orphan(rng, false, out);
        out.receipts.first().map(|r| r.created_at)
    }
}

/// Which instant of an edge order is placed on a boundary.
#[derive(Debug, Clone, Copy)]
enum Key {
    DueAt,
    SkipDecided,
    SecondReceipt,
}
