//! Consumer policies: what the handler does with a message whose order is not in the
//! status the message announces, and what that costs.
//!
//! The world (timeline, messages, consumers, rebalances, redeliveries, provider losses)
//! is the one the skip handler drew on the order's own random stream; a policy only
//! re-decides the rows the skip handler marked SKIPPED, drawing its own latencies from a
//! second stream, so every policy sees the same world for one seed and `skip` is the
//! generator's output itself.
//!
//! Ledger rows stay within DESIGN.md §3, one row per message: a parked message is
//! `PENDING_REVIEW` until re-checked; a skip that a re-review or a scan takes back becomes
//! `REVOKED` and is decided again at once on the order's history, as docs/SOP.md's
//! consumer-side contract has it: the same row becomes `DONE` once the providers answered
//! (a dump taken in between sees it `REVOKED`, which §5 counts as SKIPPED and gives no skip
//! verdict). A decision taken after the dump is not in the rows; its receipts are dropped by
//! the dump like any other.

use std::fmt;

use super::model::{MsgId, OrderRows, ReceiptEntry, Status};
use super::World;
use crate::time::{
    format_duration, parse_duration, Micros, DAY_MICROS, MILLI_MICROS, SECOND_MICROS,
};
use crate::vocabulary::{LedgerAction, ReceiptStatus};
use crate::workload::rng::{mix, SplitMix64};

/// A consumer policy for a message whose order is not in the announced status. Policies
/// apply to messages whose handler has effects (ORDER_PAID, ORDER_SHIPPED); the skip of any
/// other message is moot and stays as the skip handler decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// SKIPPED at once (today's handler).
    Skip,
    /// PENDING_REVIEW, re-checked `after` later: DONE when the order is then in the
    /// announced status, else SKIPPED.
    PendingReview {
        /// The re-check delay N.
        after: Micros,
    },
    /// SKIPPED; every status change publishes a re-review message on the order's
    /// partition, whose handler revokes the order's SKIPPED rows that are now due and
    /// re-drives them.
    RereviewEvent,
    /// SKIPPED; a scanner re-judges the SKIPPED rows younger than `ttl` every `interval`
    /// and revokes and re-drives those now due.
    Scan {
        /// Time between two scans.
        interval: Micros,
        /// Rows older than this are no longer scanned.
        ttl: Micros,
    },
    /// Judged on the order's history: DONE when the announced status was ever reached and
    /// no status voiding the effects was, else SKIPPED.
    StateMachine,
    /// `state-machine`, and the scan of `scan:INTERVAL:TTL` over the rows it still skips (a
    /// status not yet reached when read: a message ahead of a lagging read).
    StateMachineScan {
        /// Time between two scans.
        interval: Micros,
        /// Rows older than this are no longer scanned.
        ttl: Micros,
    },
    /// The reorder prevented on the Kafka side (docs/REVERSIBLE-SKIPS.md, "What puts 7392
    /// ahead of 7391"): offsets committed after processing, in-flight work drained in
    /// `onPartitionsRevoked`, and ledger writes fenced by the group generation. A consumer
    /// that lost its partition can no longer write: what it held is finished by the drain
    /// at the revoke, in offset order. The decision is still the status match (`history`:
    /// judged on the history instead, as `state-machine`).
    Fenced {
        /// Decide on the order's history rather than on the current status.
        history: bool,
    },
    /// Event versions: every message carries the order's version. A message whose
    /// predecessor has not been handled yet is parked (a gap) until it has, or for at most
    /// `timeout`; the message itself proves its status was reached, so an effect is owed
    /// unless the history read shows a void.
    Versioned {
        /// The longest a message waits for its predecessor.
        timeout: Micros,
    },
    /// No skip at all (docs/OBLIGATIONS.md): the status change writes one obligation per
    /// (order, effect) in its own transaction, a void cancels it (or owes a reversal once
    /// claimed); a worker woken by any message of the order, or a sweeper 30 s later,
    /// claims it with a lease and calls the provider outside any transaction with the
    /// business key, retrying what failed.
    Obligation,
}

/// The default TTL of `scan:INTERVAL`: one nightly window, after which the T+1 run owns it.
pub const DEFAULT_SCAN_TTL: Micros = DAY_MICROS;

impl Policy {
    /// `skip`, `pending-review:N`, `rereview-event`, `scan:INTERVAL[:TTL]`, `state-machine`.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let duration = |t: &str| {
            let d = parse_duration(t)?;
            if d <= 0 {
                return Err(format!("'{t}' in policy '{text}' must be positive"));
            }
            Ok(d)
        };
        let mut parts = text.trim().split(':');
        let policy = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("skip"), None, ..) => Policy::Skip,
            (Some("pending-review"), Some(n), None, _) => {
                Policy::PendingReview { after: duration(n)? }
            }
            (Some("rereview-event"), None, ..) => Policy::RereviewEvent,
            (Some("scan"), Some(interval), ttl, None) => Policy::Scan {
                interval: duration(interval)?,
                ttl: ttl.map(duration).transpose()?.unwrap_or(DEFAULT_SCAN_TTL),
            },
            (Some("state-machine"), None, ..) => Policy::StateMachine,
            (Some("state-machine+scan"), Some(interval), ttl, None) => Policy::StateMachineScan {
                interval: duration(interval)?,
                ttl: ttl.map(duration).transpose()?.unwrap_or(DEFAULT_SCAN_TTL),
            },
            (Some("fenced"), None, ..) => Policy::Fenced { history: false },
            (Some("fenced+state-machine"), None, ..) => Policy::Fenced { history: true },
            (Some("versioned"), Some(timeout), None, _) => {
                Policy::Versioned { timeout: duration(timeout)? }
            }
            (Some("obligation"), None, ..) => Policy::Obligation,
            _ => {
                return Err(format!(
                    "'{text}' is not a policy: use skip, pending-review:N, rereview-event, \
                     scan:INTERVAL[:TTL], state-machine, state-machine+scan:INTERVAL[:TTL], \
                     fenced, fenced+state-machine, versioned:TIMEOUT or obligation \
                     (N, INTERVAL, TTL, TIMEOUT durations such as 5s, 5m, 1d)"
                ))
            }
        };
        Ok(policy)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |t: Micros| format_duration(t).replace(' ', "");
        match *self {
            Policy::Skip => f.write_str("skip"),
            Policy::PendingReview { after } => write!(f, "pending-review:{}", d(after)),
            Policy::RereviewEvent => f.write_str("rereview-event"),
            Policy::Scan { interval, ttl } if ttl == DEFAULT_SCAN_TTL => {
                write!(f, "scan:{}", d(interval))
            }
            Policy::Scan { interval, ttl } => write!(f, "scan:{}:{}", d(interval), d(ttl)),
            Policy::StateMachine => f.write_str("state-machine"),
            Policy::StateMachineScan { interval, ttl } if ttl == DEFAULT_SCAN_TTL => {
                write!(f, "state-machine+scan:{}", d(interval))
            }
            Policy::StateMachineScan { interval, ttl } => {
                write!(f, "state-machine+scan:{}:{}", d(interval), d(ttl))
            }
            Policy::Fenced { history: false } => f.write_str("fenced"),
            Policy::Fenced { history: true } => f.write_str("fenced+state-machine"),
            Policy::Versioned { timeout } => write!(f, "versioned:{}", d(timeout)),
            Policy::Obligation => f.write_str("obligation"),
        }
    }
}

/// What a unit of work is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// An `order-event` message handled (idempotency read, status or history read, ledger
    /// write).
    Message,
    /// A parked message re-checked (status read, ledger update).
    Recheck,
    /// A re-review message handled (the order's SKIPPED rows read; per row its history;
    /// per revocation the REVOKED update and the redrive row).
    Rereview,
    /// One SKIPPED row seen by one scan (its history read; per revocation two writes).
    Scan,
    /// A zombie's ledger write refused by the generation fence (one write attempted).
    Fenced,
    /// A message parked on a version gap (a delayed re-delivery: its row written as
    /// PENDING_REVIEW, then read and decided on release).
    Park,
    /// The obligation rows a status change writes in its own transaction (one per effect
    /// it makes due), or a void's tombstone and transition (one per effect it voids).
    Obligation,
    /// One attempt of a worker: the candidates read, the fence read, the claim and the
    /// finish (a reversal is an attempt too).
    Attempt,
}

/// The database work of one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// What was done.
    pub work: Work,
    /// Database reads (queries).
    pub reads: u32,
    /// Database writes (inserts and updates).
    pub writes: u32,
}

/// The costs and outcomes of a policy, added up over orders. All counts are over the whole
/// simulated timeline (not cut at the dump).
#[derive(Debug, Clone, Default)]
pub struct PolicyOutcome {
    /// Keep every [`Charge`] in `charges` (tests).
    pub trace: bool,
    /// Every unit of work, when tracing.
    pub charges: Vec<Charge>,
    /// Orders.
    pub orders: u64,
    /// `order-event` messages handled.
    pub messages: u64,
    /// Database reads.
    pub reads: u64,
    /// Database writes.
    pub writes: u64,
    /// Kafka messages beyond `order-event`'s: delayed re-checks, re-review messages.
    pub extra_messages: u64,
    /// SKIPPED rows re-judged by a scan (one per row per scan).
    pub scanned_rows: u64,
    /// Messages parked as PENDING_REVIEW.
    pub parked: u64,
    /// Skips revoked and re-driven.
    pub revoked: u64,
    /// Effects due by the cut and never voided.
    pub owed: u64,
    /// Of those, never done (no SUCCEEDED receipt, ever).
    pub lost: u64,
    /// SUCCEEDED receipts created after the order reached a status voiding the effect.
    pub done_after_void: u64,
    /// SUCCEEDED receipts beyond the first of an (order, effect).
    pub duplicates: u64,
    /// For each message the skip handler skips and this policy re-drives or acts on:
    /// from the status change it announced to the effect done.
    pub time_to_correct: Vec<Micros>,
    /// The messages whose skips were revoked (when tracing).
    pub revoked_msgs: Vec<MsgId>,
    /// Ledger rows written (at the dump).
    pub ledger_rows: u64,
}

impl PolicyOutcome {
    /// Adds `other`'s counts (not its traces) to these.
    pub fn merge(&mut self, other: &PolicyOutcome) {
        self.orders += other.orders;
        self.messages += other.messages;
        self.reads += other.reads;
        self.writes += other.writes;
        self.extra_messages += other.extra_messages;
        self.scanned_rows += other.scanned_rows;
        self.parked += other.parked;
        self.revoked += other.revoked;
        self.owed += other.owed;
        self.lost += other.lost;
        self.done_after_void += other.done_after_void;
        self.duplicates += other.duplicates;
        self.ledger_rows += other.ledger_rows;
        self.time_to_correct.extend_from_slice(&other.time_to_correct);
    }

    pub(super) fn charge(&mut self, work: Work, reads: u32, writes: u32) {
        self.reads += u64::from(reads);
        self.writes += u64::from(writes);
        if self.trace {
            self.charges.push(Charge { work, reads, writes });
        }
    }
}

/// The statuses that void the effects of `event`'s handler (the default rules).
pub(super) fn voids(event: Status) -> &'static [Status] {
    match event {
        Status::Paid => &[Status::Cancelled, Status::Refunded],
        Status::Shipped => &[Status::Cancelled],
        _ => &[],
    }
}

/// A skipped row and what the policy made of it so far.
#[derive(Debug, Clone, Copy)]
pub(super) struct Skipped {
    pub(super) index: usize,
    pub(super) decided_at: Micros,
    pub(super) open: bool,
}

impl World {
    /// Re-decides the rows the skip handler skipped under `policy` and counts the costs
    /// and outcomes of the whole order.
    pub(super) fn apply_policy(
        &self,
        policy: &Policy,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
    ) {
        outcome.orders += 1;
        outcome.messages += out.ledger.len() as u64;
        for _ in 0..out.ledger.len() {
            outcome.charge(Work::Message, 2, 1);
        }
        let mut skipped: Vec<Skipped> = out
            .ledger
            .iter()
            .enumerate()
            // Only messages whose handler has effects: a skip of any other is moot.
            .filter(|(_, e)| e.action == LedgerAction::Skipped && !e.event.providers().is_empty())
            .map(|(index, e)| Skipped { index, decided_at: e.decided_at, open: true })
            .collect();
        let mut rng = SplitMix64::new(mix(self.seed ^ mix(out.order_id as u64 ^ 0x9011_C1E5)));
        let mut acted: Vec<(MsgId, Micros)> = Vec::new();
        match *policy {
            Policy::Skip => {}
            Policy::PendingReview { after } => {
                for s in &skipped {
                    self.recheck(&mut rng, out, outcome, s, after, &mut acted);
                }
            }
            Policy::StateMachine => {
                for s in &skipped {
                    let t = s.decided_at;
                    if self.due_by(out, out.ledger[s.index].event, t) {
                        let (msg_id, decided) = self.act_in_place(&mut rng, out, outcome, s, t);
                        acted.push((msg_id, decided));
                    }
                }
            }
            Policy::StateMachineScan { interval, ttl } => {
                for s in &mut skipped {
                    let t = s.decided_at;
                    if self.due_by(out, out.ledger[s.index].event, t) {
                        let (msg_id, decided) = self.act_in_place(&mut rng, out, outcome, s, t);
                        acted.push((msg_id, decided));
                    } else {
                        self.scan(&mut rng, out, outcome, s, interval, ttl, &mut acted);
                    }
                }
            }
            Policy::RereviewEvent => {
                self.rereview(&mut rng, out, outcome, &mut skipped, &mut acted)
            }
            Policy::Scan { interval, ttl } => {
                for s in &mut skipped {
                    self.scan(&mut rng, out, outcome, s, interval, ttl, &mut acted);
                }
            }
            Policy::Fenced { history } => {
                self.fence(&mut rng, out, outcome, &skipped, history, &mut acted)
            }
            Policy::Versioned { timeout } => {
                self.versions(&mut rng, out, outcome, timeout, &mut acted)
            }
            Policy::Obligation => self.obligations(&mut rng, out, outcome, &mut acted),
        }
        // An operator compensates a wrong skip by hand only while it is still wrong.
        out.receipts.retain(|r| {
            r.produced.is_some()
                || !acted.iter().any(|&(m, at)| r.msg_id == Some(m) && at < r.created_at)
        });
        self.dedup_at_providers(out);
        self.count_effects(out, outcome);
        outcome.ledger_rows +=
            out.ledger.iter().filter(|e| e.produced <= self.horizon).count() as u64;
    }

    /// Whether `event`'s effects are due by `t` as the consumer reads the history: the
    /// status was reached and no status voiding them was.
    pub(super) fn due_by(&self, out: &OrderRows, event: Status, t: Micros) -> bool {
        let seen = t - self.read_lag;
        let history = out.history.iter().take_while(|c| c.at <= seen);
        let mut reached = false;
        for c in history {
            if voids(event).contains(&c.status) {
                return false;
            }
            reached |= c.status == event;
        }
        reached && !event.providers().is_empty()
    }

    /// Calls `event`'s providers from `t` on, the receipts naming `msg_id`; returns when
    /// the decision is recorded.
    fn call(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        event: Status,
        msg_id: MsgId,
        t: Micros,
    ) -> Micros {
        let mut call = t;
        for &provider in event.providers() {
            call += rng.between(2 * MILLI_MICROS, 80 * MILLI_MICROS);
            let seq = out.next_receipt_seq(provider);
            out.receipts.push(ReceiptEntry {
                provider,
                seq,
                msg_id: Some(msg_id),
                produced: Some(t),
                status: ReceiptStatus::Succeeded,
                created_at: call,
                reversed_at: None,
            });
        }
        let decided = call + rng.between(MILLI_MICROS, 20 * MILLI_MICROS);
        if let Some(due) = out.change(event) {
            outcome.time_to_correct.push(decided - due);
        }
        decided
    }

    /// DONE on the skipped row itself, decided from `t` on.
    pub(super) fn act_in_place(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        s: &Skipped,
        t: Micros,
    ) -> (MsgId, Micros) {
        let entry = out.ledger[s.index];
        let decided = self.call(rng, out, outcome, entry.event, entry.msg_id, t);
        if decided <= self.horizon {
            let row = &mut out.ledger[s.index];
            row.action = LedgerAction::Done;
            row.observed = out
                .history
                .iter()
                .take_while(|c| c.at <= t - self.read_lag)
                .last()
                .map_or(Status::Created, |c| c.status);
            row.decided_at = decided;
            row.consumer = self.owner(row.partition, t);
        }
        (entry.msg_id, decided)
    }

    /// PENDING_REVIEW, then the re-check `after` later.
    fn recheck(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        s: &Skipped,
        after: Micros,
        acted: &mut Vec<(MsgId, Micros)>,
    ) {
        outcome.parked += 1;
        outcome.extra_messages += 1;
        outcome.charge(Work::Recheck, 1, 1);
        out.ledger[s.index].action = LedgerAction::PendingReview;
        let t = s.decided_at + after;
        let entry = out.ledger[s.index];
        let observed = out.status_at(t - self.read_lag);
        if observed == entry.event {
            acted.push(self.act_in_place(rng, out, outcome, s, t));
            return;
        }
        let decided = t + rng.between(MILLI_MICROS, 10 * MILLI_MICROS);
        if decided <= self.horizon {
            let row = &mut out.ledger[s.index];
            row.action = LedgerAction::Skipped;
            row.observed = observed;
            row.decided_at = decided;
            row.consumer = self.owner(row.partition, t);
        }
    }

    /// REVOKED at `t`, then decided again on the history at once (docs/SOP.md, the
    /// consumer-side contract): DONE on the same row once the providers answered.
    fn revoke(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        s: &mut Skipped,
        t: Micros,
        acted: &mut Vec<(MsgId, Micros)>,
    ) {
        s.open = false;
        outcome.revoked += 1;
        let entry = out.ledger[s.index];
        if outcome.trace {
            outcome.revoked_msgs.push(entry.msg_id);
        }
        if t <= self.horizon {
            let observed = out.status_at(t - self.read_lag);
            let row = &mut out.ledger[s.index];
            row.action = LedgerAction::Revoked;
            row.observed = observed;
            row.decided_at = t;
            row.consumer = self.owner(row.partition, t);
        }
        acted.push(self.act_in_place(rng, out, outcome, s, t));
    }

    /// One re-review message per status change, handled like any message on the order's
    /// partition; each re-judges the order's SKIPPED rows decided before it.
    fn rereview(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        skipped: &mut [Skipped],
        acted: &mut Vec<(MsgId, Micros)>,
    ) {
        for i in 0..out.history.len() {
            let produced = out.history[i].at + rng.between(MILLI_MICROS, 30 * MILLI_MICROS);
            let handled = self.handling(produced, rng);
            outcome.extra_messages += 1;
            let mut work = (1, 0);
            for s in skipped.iter_mut().filter(|s| s.open && s.decided_at < handled) {
                work.0 += 1;
                if self.due_by(out, out.ledger[s.index].event, handled) {
                    work.1 += 2;
                    self.revoke(rng, out, outcome, s, handled, acted);
                }
            }
            outcome.charge(Work::Rereview, work.0, work.1);
        }
    }

    /// The scans after the row was skipped, until it is due or older than `ttl`.
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        rng: &mut SplitMix64,
        out: &mut OrderRows,
        outcome: &mut PolicyOutcome,
        s: &mut Skipped,
        interval: Micros,
        ttl: Micros,
        acted: &mut Vec<(MsgId, Micros)>,
    ) {
        let mut tick = (s.decided_at.div_euclid(interval) + 1) * interval;
        while tick <= s.decided_at + ttl {
            outcome.scanned_rows += 1;
            if self.due_by(out, out.ledger[s.index].event, tick) {
                outcome.charge(Work::Scan, 1, 2);
                let t = tick + rng.between(10 * MILLI_MICROS, SECOND_MICROS);
                self.revoke(rng, out, outcome, s, t, acted);
                return;
            }
            outcome.charge(Work::Scan, 1, 0);
            tick += interval;
        }
    }

    /// Effects owed and lost, done after a void, done twice: over the whole timeline.
    fn count_effects(&self, out: &OrderRows, outcome: &mut PolicyOutcome) {
        for event in [Status::Paid, Status::Shipped] {
            let due = out.change(event);
            let void_at =
                out.history.iter().filter(|c| voids(event).contains(&c.status)).map(|c| c.at).min();
            for &provider in event.providers() {
                let ok: Vec<Micros> = out
                    .receipts
                    .iter()
                    .filter(|r| r.provider == provider && r.status == ReceiptStatus::Succeeded)
                    .map(|r| r.created_at)
                    .collect();
                if due.is_some_and(|d| d <= self.cut) && void_at.is_none() {
                    outcome.owed += 1;
                    outcome.lost += u64::from(ok.is_empty());
                }
                if due.is_some() {
                    outcome.duplicates += ok.len().saturating_sub(1) as u64;
                }
                if let Some(v) = void_at {
                    outcome.done_after_void += ok.iter().filter(|&&at| at > v).count() as u64;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::world::Lag;

    #[test]
    fn policies_parse_and_print_back() {
        for text in [
            "skip",
            "pending-review:5s",
            "pending-review:1m",
            "rereview-event",
            "scan:5m",
            "scan:5m:2h",
            "state-machine",
            "state-machine+scan:5m",
            "fenced",
            "fenced+state-machine",
            "versioned:10m",
            "obligation",
        ] {
            assert_eq!(Policy::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Policy::parse("scan:30s").unwrap(),
            Policy::Scan { interval: 30_000_000, ttl: DEFAULT_SCAN_TTL }
        );
        for bad in [
            "",
            "skip:5s",
            "pending-review",
            "pending-review:0s",
            "scan:5m:1h:2",
            "x",
            "versioned",
            "fenced:1s",
            "obligation:5s",
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lags_parse() {
        assert_eq!(Lag::parse("uniform:5ms..1500ms").unwrap(), Lag::default());
        assert_eq!(
            Lag::parse("exp:5ms+400ms").unwrap(),
            Lag::Exponential { low: 5_000, mean: 400_000 }
        );
        assert_eq!(Lag::parse("exp:2s").unwrap(), Lag::Exponential { low: 0, mean: 2_000_000 });
        for bad in ["uniform:2s..1s", "exp:0s", "normal:1s", "uniform:1s"] {
            assert!(Lag::parse(bad).is_err(), "{bad}");
        }
    }
}
