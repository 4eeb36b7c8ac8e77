//! What a correct run must report for each planted mechanism: the ground truth's
//! expectations, judged at the instant each becomes due.

use super::model::{Expect, ExpectTarget, MsgId, OrderRows, Provider, Status};
use super::simulate::{Loss, Mechanism};
use super::World;
use crate::vocabulary::{Class, LedgerAction, ReceiptStatus, SkipVerdict, Verdict};

impl World {
    /// The skip verdict of the order's first SKIPPED row, judged at the cut.
    pub(super) fn skip_expect(&self, out: &OrderRows, verdicts: &'static [SkipVerdict]) -> Expect {
        let msg_id = out
            .ledger
            .iter()
            .find(|e| e.action == LedgerAction::Skipped)
            .map_or(MsgId::Named("none"), |e| e.msg_id);
        Expect { target: ExpectTarget::SkipVerdict { msg_id, verdicts }, judged_at: self.cut }
    }

    /// Records what a correct run must report for `mechanism` on this order.
    pub(super) fn expect(&self, mechanism: Mechanism, out: &mut OrderRows) {
        match mechanism {
            Mechanism::Normal | Mechanism::Plain => {}
            Mechanism::Zombie { compensate } => self.expect_zombie(compensate, out),
            Mechanism::CancelRace => expect_correct_skip(out),
            Mechanism::LostCall { status, provider, loss } => {
                let classes: &'static [Class] =
                    if loss == Loss::Retried { &[] } else { &[Class::DoneNoReceipt] };
                self.expect_findings(out, status, &[provider], classes);
            }
            Mechanism::Duplicate { provider, reversed, .. } => {
                expect_duplicate(provider, reversed, out)
            }
            Mechanism::Stalled { status } => {
                self.expect_findings(out, status, status.providers(), &[Class::ReviewStalled])
            }
            Mechanism::Revoked { status } => {
                self.expect_findings(out, status, status.providers(), &[Class::SkippedButDue]);
                expect_skip_verdict(out, status, &[]);
            }
            Mechanism::Unreversed { provider, .. } => self.expect_unreversed(provider, out),
            Mechanism::Unconsumed => self.expect_findings(
                out,
                Status::Paid,
                Status::Paid.providers(),
                &[Class::NoLedgerEntry],
            ),
        }
    }

    /// A grant still in force on a voided order: UNREVERSED_EFFECT once the grace after
    /// the later of the void and the first grant left standing has passed (DESIGN §10.1).
    fn expect_unreversed(&self, provider: Provider, out: &mut OrderRows) {
        let void_at = out.history.iter().find(|c| c.status.voids_effects()).map(|c| c.at);
        let standing = out
            .receipts
            .iter()
            .filter(|r| {
                r.provider == provider
                    && r.status == ReceiptStatus::Succeeded
                    && r.reversed_at.is_none()
            })
            .map(|r| r.created_at)
            .min();
        if let (Some(void_at), Some(first)) = (void_at, standing) {
            out.expects.push(Expect {
                target: ExpectTarget::Finding {
                    provider,
                    classes: &[Class::UnreversedEffect],
                    verdict: Some(Verdict::Break),
                },
                judged_at: void_at.max(first) + self.grace(provider),
            });
        }
    }

    /// A wrong skip of ORDER_PAID by a zombie consumer; compensated by hand, it may also
    /// be judged HARMLESS (and its effects are no longer missing).
    fn expect_zombie(&self, compensate: bool, out: &mut OrderRows) {
        use SkipVerdict::{Harmless, Pending, Wrong};
        let verdicts: &'static [SkipVerdict] =
            if compensate { &[Wrong, Pending, Harmless] } else { &[Wrong, Pending] };
        if !compensate {
            let providers = Status::Paid.providers();
            self.expect_findings(out, Status::Paid, providers, &[Class::SkippedButDue]);
        }
        expect_skip_verdict(out, Status::Paid, verdicts);
    }

    /// A finding of each of `providers` on the `status` change, judged once it is due.
    fn expect_findings(
        &self,
        out: &mut OrderRows,
        status: Status,
        providers: &[Provider],
        classes: &'static [Class],
    ) {
        for &provider in providers {
            if let Some(at) = out.change(status) {
                out.expects.push(Expect {
                    target: ExpectTarget::Finding { provider, classes, verdict: None },
                    judged_at: at + self.grace(provider),
                });
            }
        }
    }
}

/// The skip verdict of the `status` message, judged when it was decided.
fn expect_skip_verdict(out: &mut OrderRows, status: Status, verdicts: &'static [SkipVerdict]) {
    if let Some(entry) = out.ledger.iter().find(|e| e.event == status).copied() {
        out.expects.push(Expect {
            target: ExpectTarget::SkipVerdict { msg_id: entry.msg_id, verdicts },
            judged_at: entry.decided_at,
        });
    }
}

/// The cancellation race's skip is correct.
fn expect_correct_skip(out: &mut OrderRows) {
    if let Some(entry) = out.ledger.iter().find(|e| e.action == LedgerAction::Skipped).copied() {
        out.expects.push(Expect {
            target: ExpectTarget::SkipVerdict {
                msg_id: entry.msg_id,
                verdicts: &[SkipVerdict::Correct],
            },
            judged_at: entry.decided_at,
        });
    }
}

/// The redelivery's second receipt is a duplicate effect, unless it was reversed since.
fn expect_duplicate(provider: Provider, reversed: bool, out: &mut OrderRows) {
    if let Some(second) = out.second_receipt_at(provider) {
        let classes: &'static [Class] = if reversed { &[] } else { &[Class::DuplicateEffect] };
        out.expects.push(Expect {
            target: ExpectTarget::Finding { provider, classes, verdict: Some(Verdict::Break) },
            judged_at: second,
        });
    }
}
