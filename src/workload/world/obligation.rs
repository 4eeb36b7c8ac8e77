//! The `obligation` policy: the skip removed (docs/OBLIGATIONS.md). The status change
//! writes the debt of each effect it makes due in its own transaction; a worker performs
//! it outside any transaction with the business key `{effect}:{order_id}`, whichever
//! message wakes it first (or the sweeper); a void cancels an unclaimed debt and owes a
//! reversal of a claimed one.
//!
//! The providers meet the worker's calls as they met the consumer's in the same world: a
//! provider that lost the consumer's call (no receipt, or FAILED) loses the worker's first
//! attempt, which is retried after the lease or the back-off; one that recorded the
//! consumer's call twice (a crash between the call and the ledger write) records the
//! worker's twice (a crash between the call and the finish, the lease expiring), unless
//! it deduplicates on the key (`simulate --provider-dedup`).

use super::model::{LedgerEntry, MsgId, OrderRows, Provider, ReceiptEntry, Status};
use super::policy::{voids, PolicyOutcome, Work};
use super::World;
use crate::time::{Micros, MILLI_MICROS, SECOND_MICROS};
use crate::vocabulary::{LedgerAction, ReceiptStatus};
use crate::workload::rng::SplitMix64;

/// A claim's lease: an attempt whose worker died is claimed again this much later.
const LEASE: Micros = 30 * SECOND_MICROS;
/// The sweeper claims what no message woke once it is this old (and polls every second).
const SWEEP_AFTER: Micros = 30 * SECOND_MICROS;

/// One (order, effect) debt as its worker sees it.
struct Debt<'a> {
    provider: Provider,
    /// The message whose status change made it due (its receipts name it).
    message: LedgerEntry,
    due: Micros,
    void_at: Option<Micros>,
    /// When the order's messages are handled, in order: each wakes a worker.
    wakes: &'a [Micros],
}

/// How the provider met the consumer's calls for one (message, provider), in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// Nothing recorded, the call timed out: claimed again once the lease expires.
    TimedOut,
    /// Refused (a FAILED receipt): claimed again after the back-off.
    Failed,
    /// Done; `twice`: the worker died before its finish and the next claim calls again,
    /// recording a second receipt of that status unless the provider deduplicates.
    Done { twice: Option<ReceiptStatus> },
}

impl World {
    /// Replaces the consumer's effects with the obligations' and counts their work.
    pub(super) fn obligations(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        acted: &mut Vec<(MsgId, Micros)>,
    ) {
        let consumer_calls: Vec<ReceiptEntry> =
            out.receipts.iter().filter(|r| r.produced.is_some()).copied().collect();
        out.receipts.retain(|r| r.produced.is_none());
        // Every message of the order wakes a worker for its due obligations.
        let mut wakes: Vec<Micros> = out.ledger.iter().map(|e| e.decided_at).collect();
        wakes.sort_unstable();
        for event in [Status::Paid, Status::Shipped] {
            let Some(due) = out.change(event) else { continue };
            let Some(message) = out.ledger.iter().find(|e| e.event == event).copied() else {
                continue;
            };
            let void_at =
                out.history.iter().find(|c| voids(event).contains(&c.status)).map(|c| c.at);
            let providers = event.providers();
            outcome.charge(Work::Obligation, 0, providers.len() as u32);
            if void_at.is_some() {
                outcome.charge(Work::Obligation, 0, providers.len() as u32);
            }
            let mut done_at = None;
            for &provider in providers {
                let calls: Vec<ReceiptStatus> = consumer_calls
                    .iter()
                    .filter(|r| r.provider == provider && r.msg_id == Some(message.msg_id))
                    .map(|r| r.status)
                    .collect();
                let debt = Debt { provider, message, due, void_at, wakes: &wakes };
                let done =
                    self.perform(rng, out, outcome, &debt, &attempts(&calls, message.action));
                done_at = done_at.max(done);
            }
            // The ledger row of the message records that its effects are the obligations':
            // DONE, or SKIPPED when the void came before it (the tombstone's no-op).
            let row = out.ledger.iter_mut().find(|e| e.msg_id == message.msg_id);
            if let Some(row) = row.filter(|r| r.action == LedgerAction::Skipped) {
                let voided = void_at.is_some_and(|v| v <= row.decided_at);
                if let (false, Some(done)) = (voided, done_at) {
                    row.action = LedgerAction::Done;
                    outcome.time_to_correct.push(done - due);
                    acted.push((message.msg_id, done));
                }
            }
        }
    }

    /// When a worker first claims a debt written at `due`: the first message of the order
    /// handled after it, or the sweeper.
    fn claim_after(&self, rng: &mut SplitMix64, wakes: &[Micros], due: Micros) -> Micros {
        let sweep = due + SWEEP_AFTER + rng.between(0, SECOND_MICROS);
        wakes.iter().copied().find(|&w| w >= due).map_or(sweep, |w| w.min(sweep))
    }

    /// The worker's attempts on one debt, from its first claim on; returns when the effect
    /// was done, if it was.
    fn perform(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        debt: &Debt,
        attempts: &[Attempt],
    ) -> Option<Micros> {
        let (provider, message, void_at) = (debt.provider, &debt.message, debt.void_at);
        let mut claim = self.claim_after(rng, debt.wakes, debt.due);
        let record = |out: &mut OrderRows, status, at| {
            let seq =
                out.receipts.iter().filter(|r| r.provider == provider).map(|r| r.seq + 1).max();
            out.receipts.push(ReceiptEntry {
                provider,
                seq: seq.unwrap_or(0),
                msg_id: Some(message.msg_id),
                produced: Some(message.produced),
                status,
                created_at: at,
                reversed_at: None,
            });
        };
        for attempt in attempts {
            let call = claim + rng.between(2 * MILLI_MICROS, 80 * MILLI_MICROS);
            // A void before the call fences the claim: nothing is called.
            if void_at.is_some_and(|v| v <= call) {
                return None;
            }
            outcome.charge(Work::Attempt, 2, 2);
            match *attempt {
                Attempt::TimedOut => claim += LEASE + rng.between(0, SECOND_MICROS),
                Attempt::Failed => {
                    record(out, ReceiptStatus::Failed, call);
                    claim = call + SECOND_MICROS + rng.between(0, SWEEP_AFTER);
                }
                Attempt::Done { twice } => {
                    record(out, ReceiptStatus::Succeeded, call);
                    let mut done = call + rng.between(MILLI_MICROS, 20 * MILLI_MICROS);
                    if let Some(status) = twice {
                        let again = claim + LEASE + rng.between(0, SECOND_MICROS);
                        let call = again + rng.between(2 * MILLI_MICROS, 80 * MILLI_MICROS);
                        if void_at.is_none_or(|v| v > call) {
                            outcome.charge(Work::Attempt, 2, 2);
                            record(out, status, call);
                            done = call + rng.between(MILLI_MICROS, 20 * MILLI_MICROS);
                        }
                    }
                    self.reverse_after_void(rng, out, outcome, debt);
                    return Some(done);
                }
            }
        }
        None
    }

    /// A void after the effect was claimed owes its reversal, performed by the worker the
    /// void's own message (or the sweeper) wakes: every grant of the key in force is undone
    /// (the waybill is not reversed on void).
    fn reverse_after_void(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        debt: &Debt,
    ) {
        let provider = debt.provider;
        let Some(void_at) = debt.void_at.filter(|_| provider.undone_on_void()) else { return };
        let claim = self.claim_after(rng, debt.wakes, void_at);
        let reversed = claim + rng.between(2 * MILLI_MICROS, 80 * MILLI_MICROS);
        outcome.charge(Work::Attempt, 2, 2);
        for r in out.receipts.iter_mut().filter(|r| {
            r.provider == provider
                && r.produced.is_some()
                && r.status == ReceiptStatus::Succeeded
                && r.reversed_at.is_none()
        }) {
            r.reversed_at = Some(reversed.max(r.created_at + MILLI_MICROS));
        }
    }
}

/// The worker's attempts, from what the provider did with the consumer's calls of the
/// same message (`action`: the consumer's decision on it).
fn attempts(calls: &[ReceiptStatus], action: LedgerAction) -> Vec<Attempt> {
    let successes: Vec<ReceiptStatus> =
        calls.iter().copied().filter(|s| *s != ReceiptStatus::Failed).collect();
    let mut attempts = Vec::new();
    match calls.first() {
        Some(ReceiptStatus::Failed) => attempts.push(Attempt::Failed),
        // DONE without a receipt: the provider lost the call.
        None if action == LedgerAction::Done => attempts.push(Attempt::TimedOut),
        _ => {}
    }
    attempts.push(Attempt::Done { twice: successes.get(1).copied() });
    attempts
}
