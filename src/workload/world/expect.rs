//! What a correct run must report for each planted mechanism: the ground truth's
//! expectations, judged at the instant each becomes due.

use super::model::{action, Expect, ExpectTarget, MsgId, OrderRows, Provider, Status};
use super::simulate::{Loss, Mechanism};
use super::World;
use crate::time::Micros;

impl World {
    pub(super) fn skip_expect(&self, out: &OrderRows, allowed: &'static [&'static str]) -> Expect {
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
    pub(super) fn expect(&self, mechanism: Mechanism, out: &mut OrderRows) {
        match mechanism {
            Mechanism::Normal | Mechanism::Plain => {}
            Mechanism::Zombie { compensate } => self.expect_zombie(compensate, out),
            Mechanism::CancelRace => expect_correct_skip(out),
            Mechanism::LostCall { status, provider, loss } => {
                let allowed: &'static [&'static str] =
                    if loss == Loss::Retried { &[] } else { &["DONE_NO_RECEIPT"] };
                self.expect_findings(out, status, &[provider], allowed);
            }
            Mechanism::Duplicate { provider, reversed, .. } => {
                expect_duplicate(provider, reversed, out)
            }
            Mechanism::Stalled { status } => {
                self.expect_findings(out, status, status.providers(), &["REVIEW_STALLED"])
            }
            Mechanism::Revoked { status } => {
                self.expect_findings(out, status, status.providers(), &["SKIPPED_BUT_DUE"]);
                expect_skip_verdict(out, status, &[]);
            }
            Mechanism::Unconsumed => self.expect_findings(
                out,
                Status::Paid,
                Status::Paid.providers(),
                &["NO_LEDGER_ENTRY"],
            ),
        }
    }

    /// A wrong skip of ORDER_PAID by a zombie consumer; compensated by hand, it may also
    /// be judged HARMLESS (and its effects are no longer missing).
    fn expect_zombie(&self, compensate: bool, out: &mut OrderRows) {
        let allowed: &'static [&'static str] =
            if compensate { &["WRONG", "PENDING", "HARMLESS"] } else { &["WRONG", "PENDING"] };
        if !compensate {
            let providers = Status::Paid.providers();
            self.expect_findings(out, Status::Paid, providers, &["SKIPPED_BUT_DUE"]);
        }
        expect_skip_verdict(out, Status::Paid, allowed);
    }

    /// A finding of each of `providers` on the `status` change, judged once it is due.
    fn expect_findings(
        &self,
        out: &mut OrderRows,
        status: Status,
        providers: &[Provider],
        allowed: &'static [&'static str],
    ) {
        for &provider in providers {
            if let Some(at) = out.change(status) {
                out.expects.push(Expect {
                    target: ExpectTarget::Finding(provider),
                    allowed,
                    verdict: None,
                    judged_at: at + self.grace(provider),
                });
            }
        }
    }
}

/// The skip verdict of the `status` message, judged when it was decided.
fn expect_skip_verdict(out: &mut OrderRows, status: Status, allowed: &'static [&'static str]) {
    if let Some(entry) = out.ledger.iter().find(|e| e.event == status).copied() {
        out.expects.push(Expect {
            target: ExpectTarget::SkipVerdict(entry.msg_id),
            allowed,
            verdict: None,
            judged_at: entry.decided_at,
        });
    }
}

/// The cancellation race's skip is correct.
fn expect_correct_skip(out: &mut OrderRows) {
    if let Some(entry) = out.ledger.iter().find(|e| e.action == action::SKIPPED).copied() {
        out.expects.push(Expect {
            target: ExpectTarget::SkipVerdict(entry.msg_id),
            allowed: &["CORRECT"],
            verdict: None,
            judged_at: entry.decided_at,
        });
    }
}

/// The redelivery's second receipt is a duplicate effect, unless it was reversed since.
fn expect_duplicate(provider: Provider, reversed: bool, out: &mut OrderRows) {
    let mut times: Vec<Micros> =
        out.receipts.iter().filter(|r| r.provider == provider).map(|r| r.created_at).collect();
    times.sort_unstable();
    if let Some(&second) = times.get(1) {
        let allowed: &'static [&'static str] = if reversed { &[] } else { &["DUPLICATE_EFFECT"] };
        out.expects.push(Expect {
            target: ExpectTarget::Finding(provider),
            allowed,
            verdict: Some("BREAK"),
            judged_at: second,
        });
    }
}
