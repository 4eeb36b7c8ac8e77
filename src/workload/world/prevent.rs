//! The policies that keep the order of an order's messages instead of repairing what a
//! reorder skipped: `fenced` (the Kafka-side prevention) and `versioned:TIMEOUT` (event
//! versions, parking on a gap).

use super::model::{MsgId, OrderRows, ReceiptEntry, Status};
use super::policy::{voids, PolicyOutcome, Skipped, Work};
use super::World;
use crate::time::{Micros, MILLI_MICROS};
use crate::vocabulary::LedgerAction;
use crate::workload::rng::SplitMix64;

impl World {
    /// `fenced`: the zombie's late write is refused (its generation is stale) and the
    /// message is the one the old owner drained at the revoke, in offset order; the rest
    /// is decided as the skip handler (`history`: as `state-machine`) decides it.
    pub(super) fn fence(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        skipped: &[Skipped],
        history: bool,
        acted: &mut Vec<(MsgId, Micros)>,
    ) {
        for s in skipped {
            let entry = out.ledger[s.index];
            let mut t = s.decided_at;
            if let Some(revoked) = entry.revoked_at {
                // The zombie's write is refused; the old owner drained the message before
                // it let the partition go.
                outcome.charge(Work::Fenced, 0, 1);
                t = revoked;
            }
            let owed = if history {
                self.due_by(out, entry.event, t)
            } else {
                out.status_at(t - self.read_lag) == entry.event
            };
            if owed {
                acted.push(self.act_in_place(rng, out, outcome, s, t));
            } else if t != s.decided_at {
                let observed = out.status_at(t - self.read_lag);
                let row = &mut out.ledger[s.index];
                row.observed = observed;
                row.decided_at = t + rng.between(MILLI_MICROS, 10 * MILLI_MICROS);
            }
        }
    }

    /// `versioned:TIMEOUT`: each message waits until its predecessor (by version) is
    /// decided, for at most `timeout`; an effect-bearing message is then owed unless the
    /// history read shows a void: the message itself says its status was reached.
    pub(super) fn versions(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        timeout: Micros,
        acted: &mut Vec<(MsgId, Micros)>,
    ) {
        let mut previous_decided: Option<Micros> = None;
        for index in 0..out.ledger.len() {
            let entry = out.ledger[index];
            let arrived = entry.decided_at;
            let mut t = arrived;
            if let Some(before) = previous_decided.filter(|&before| before > arrived) {
                // A gap: parked on a delay, released when the predecessor is decided.
                t = before.min(arrived + timeout) + rng.between(MILLI_MICROS, 10 * MILLI_MICROS);
                outcome.parked += 1;
                outcome.extra_messages += 1;
                outcome.charge(Work::Park, 1, 1);
            }
            let has_effects = !entry.event.providers().is_empty();
            let voided = self.voided_by(out, entry.event, t);
            let decided = if has_effects && !voided && entry.action == LedgerAction::Skipped {
                let s = Skipped { index, decided_at: entry.decided_at, open: true };
                let (msg_id, decided) = self.act_in_place(rng, out, outcome, &s, t);
                acted.push((msg_id, decided));
                decided
            } else if t != arrived {
                self.postpone(out, index, t - arrived, has_effects && voided);
                out.ledger[index].decided_at
            } else {
                arrived
            };
            previous_decided = Some(previous_decided.map_or(decided, |p| p.max(decided)));
        }
    }

    /// Whether the history read at `t` shows a status voiding `event`'s effects.
    fn voided_by(&self, out: &OrderRows, event: Status, t: Micros) -> bool {
        let seen = t - self.read_lag;
        out.history.iter().take_while(|c| c.at <= seen).any(|c| voids(event).contains(&c.status))
    }

    /// The message at `index` decided `delay` later than the skip handler decided it: its
    /// provider calls and the void it applied move with it; `skip`: released after a void,
    /// it is skipped and its calls never happen.
    fn postpone(&self, out: &mut OrderRows, index: usize, delay: Micros, skip: bool) {
        let entry = out.ledger[index];
        let own = |r: &ReceiptEntry| r.msg_id == Some(entry.msg_id) && r.produced.is_some();
        if skip {
            out.receipts.retain(|r| !own(r));
            out.ledger[index].action = LedgerAction::Skipped;
        } else {
            for r in out.receipts.iter_mut().filter(|r| own(r)) {
                r.created_at += delay;
            }
        }
        if entry.event.voids_effects() && entry.action == LedgerAction::Done {
            for r in out.receipts.iter_mut().filter(|r| r.reversed_at == Some(entry.decided_at)) {
                r.reversed_at = Some(entry.decided_at + delay);
            }
        }
        let decided_at = entry.decided_at + delay;
        let observed = out.status_at(decided_at - self.read_lag);
        let row = &mut out.ledger[index];
        row.decided_at = decided_at;
        row.observed = observed;
        row.consumer = self.owner(row.partition, decided_at);
    }
}
