//! What happens to an order between two nights of `gen --nights`: operations acting on
//! the previous night's compensation tasks, customers cancelling meanwhile, and rows
//! that reach a database late.
//!
//! Every act is seeded by `(seed, order_id, night, rule)` only, so an order's whole
//! multi-night life depends on nothing but itself. Acts add rows after the previous cut
//! (they are seen from the next night on), except late rows, which carry a time before
//! the cut they missed and become visible only when they are loaded.

use super::lifecycle::{Carry, NightJudge, OpenFinding, PendingSkip};
use super::rng::{mix, SplitMix64};
use super::world::{
    Fault, LedgerEntry, MsgId, OrderRows, Provider, ReceiptEntry, Status, StatusChange, World,
};
use crate::config::RuleSet;
use crate::time::{Micros, DAY_MICROS, HOUR_MICROS, MILLI_MICROS, MINUTE_MICROS};
use crate::vocabulary::{Class, LedgerAction, ReceiptStatus};

/// First message sequence number of the messages operations cause (the world's own
/// messages are numbered by their place in the status history, far below).
const OPERATION_SEQ: u8 = 64;

/// Shares of what operations do with a task, per night it is open.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OperationRates {
    /// A missing effect's compensation is executed: a SUCCEEDED receipt.
    pub executed: f64,
    /// It is attempted and fails: a FAILED receipt, the task stays open.
    pub failed: f64,
    /// The customer cancels or is refunded meanwhile.
    pub voided: f64,
    /// A duplicate, orphan or unreversed grant is reversed (its receipts turn REVERSED).
    pub reversed: f64,
    /// An orphan's order gets paid after all.
    pub paid_late: f64,
    /// A PENDING skip's owed effects are granted before its grace is judged again.
    pub skip_granted: f64,
    /// Per order: a receipt that reaches the provider's table a night late.
    pub late_receipt: f64,
    /// Per reordered order (a wrong skip): moved so that its skip is still inside its
    /// grace at some night's cut (a PENDING skip, carried to the next night).
    pub pending_at_cut: f64,
}

impl Default for OperationRates {
    fn default() -> Self {
        OperationRates {
            executed: 0.45,
            failed: 0.15,
            voided: 0.15,
            reversed: 0.5,
            paid_late: 0.3,
            skip_granted: 0.5,
            late_receipt: 0.004,
            pending_at_cut: 0.5,
        }
    }
}

/// Every row one order ever has, with when each receipt became visible and when it was
/// reversed; a night's snapshot is a [`Facts::view`] of it.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// All rows (the world's and the operations').
    pub order: OrderRows,
    /// Per receipt of `order.receipts`: when it reached the provider's table.
    pub loaded: Vec<Micros>,
    /// Per receipt: when an operator reversed it (its status reads REVERSED from then on).
    pub reversed: Vec<Option<Micros>>,
    /// Messages caused by operations so far.
    operation_messages: u8,
}

impl Facts {
    /// Takes the world's rows of one order; each receipt is loaded when created.
    pub fn reset(&mut self, order: &OrderRows) {
        self.order.clone_from(order);
        self.loaded = order.receipts.iter().map(|r| r.created_at).collect();
        // The void handler's reversals read REVERSED from their own instant on.
        self.reversed = order.receipts.iter().map(|r| r.reversed_at).collect();
        for r in self.order.receipts.iter_mut().filter(|r| r.reversed_at.is_some()) {
            r.status = ReceiptStatus::Succeeded;
        }
        self.operation_messages = 0;
    }

    /// Moves every row of the order by `delta`.
    fn shift(&mut self, delta: Micros) {
        self.order.history.iter_mut().for_each(|c| c.at += delta);
        for e in &mut self.order.ledger {
            e.produced += delta;
            e.decided_at += delta;
        }
        self.order.receipts.iter_mut().for_each(|r| r.created_at += delta);
        self.loaded.iter_mut().for_each(|t| *t += delta);
        self.reversed.iter_mut().flatten().for_each(|t| *t += delta);
    }

    /// What a dump at `cut` exporting rows newer than `coverage_from` holds of the order.
    pub fn view(&self, coverage_from: Micros, cut: Micros, out: &mut OrderRows) {
        let kept = |t: Micros| coverage_from < t && t <= cut;
        out.order_id = self.order.order_id;
        out.fault = self.order.fault;
        out.expects.clear();
        out.history.clear();
        out.history.extend(self.order.history.iter().filter(|c| kept(c.at)));
        out.ledger.clear();
        out.ledger.extend(self.order.ledger.iter().filter(|e| kept(e.decided_at)));
        out.receipts.clear();
        for (i, r) in self.order.receipts.iter().enumerate() {
            if kept(r.created_at) && self.loaded[i] <= cut {
                let mut r = *r;
                if self.reversed[i].is_some_and(|t| t <= cut) {
                    r.status = ReceiptStatus::Reversed;
                }
                out.receipts.push(r);
            }
        }
    }

    fn receipt(&mut self, provider: Provider, status: ReceiptStatus, at: Micros, loaded: Micros) {
        let seq = self.order.next_receipt_seq(provider);
        self.order.receipts.push(ReceiptEntry {
            provider,
            seq,
            msg_id: None,
            produced: None,
            status,
            created_at: at,
            reversed_at: None,
        });
        self.loaded.push(loaded);
        self.reversed.push(None);
    }

    /// A status change and its message, handled at once (DONE: the status matched);
    /// returns when the handler decided.
    fn change(&mut self, world: &World, offsets: &mut [i64], status: Status, at: Micros) -> Micros {
        let partition = world.partition(self.order.order_id);
        let position = self.order.history.partition_point(|c| c.at <= at);
        self.order.history.insert(position, StatusChange { status, at });
        let seq = OPERATION_SEQ + self.operation_messages;
        self.operation_messages += 1;
        let decided_at = at + 40 * MILLI_MICROS;
        self.order.ledger.push(LedgerEntry {
            msg_id: MsgId::Event { order_id: self.order.order_id, seq },
            event: status,
            produced: at + 5 * MILLI_MICROS,
            action: LedgerAction::Done,
            observed: status,
            partition,
            offset: offsets[partition as usize],
            consumer: world.owner_at(partition, decided_at),
            decided_at,
            revoked_at: None,
        });
        offsets[partition as usize] += 1;
        if status.voids_effects() {
            self.undo_on_void(decided_at);
        }
        decided_at
    }

    /// Takes back the void handler's reversal at `at` of every grant of `provider` but the
    /// first by `(created_at, receipt_id)`: a handler that knew of one grant only.
    fn keep_standing_but_first(&mut self, provider: Provider, at: Micros) {
        let mut undone: Vec<usize> = (0..self.order.receipts.len())
            .filter(|&i| {
                self.order.receipts[i].provider == provider && self.reversed[i] == Some(at)
            })
            .collect();
        undone.sort_by_key(|&i| {
            let r = &self.order.receipts[i];
            (r.created_at, r.seq.to_string())
        });
        for &i in undone.iter().skip(1) {
            self.reversed[i] = None;
        }
    }

    /// The void handler deciding at `at` undoes the points and stock locks granted before
    /// it, as in the world (`World::undo_on_void`).
    fn undo_on_void(&mut self, at: Micros) {
        for (i, r) in self.order.receipts.iter().enumerate() {
            if r.undone_by_void_handler_at(at) && self.reversed[i].is_none() {
                self.reversed[i] = Some(at);
            }
        }
    }

    /// Whether the order is cancelled or refunded after `cut` already.
    fn voided_after(&self, cut: Micros) -> bool {
        self.order
            .history
            .iter()
            .any(|c| c.at > cut && matches!(c.status, Status::Cancelled | Status::Refunded))
    }

    /// Reverses the provider's SUCCEEDED receipts visible at `cut`, all of them or all
    /// but the first by `(created_at, receipt_id)`.
    fn reverse(&mut self, provider: Provider, cut: Micros, keep_first: bool, at: Micros) {
        let mut live: Vec<usize> = (0..self.order.receipts.len())
            .filter(|&i| {
                let r = &self.order.receipts[i];
                r.provider == provider
                    && r.status == ReceiptStatus::Succeeded
                    && r.created_at <= cut
                    && self.loaded[i] <= cut
                    && self.reversed[i].is_none_or(|t| t > cut)
            })
            .collect();
        let key = |i: &usize| {
            let r = &self.order.receipts[*i];
            (r.created_at, r.seq.to_string())
        };
        live.sort_by_key(key);
        for &i in live.iter().skip(usize::from(keep_first)) {
            self.reversed[i] = Some(at);
        }
    }
}

/// The operations of one generated world.
#[derive(Debug)]
pub struct Operations<'a> {
    seed: u64,
    rates: OperationRates,
    world: &'a World,
    rules: &'a RuleSet,
    cuts: &'a [Micros],
}

impl<'a> Operations<'a> {
    /// Operations over `world` between the nights of `cuts`.
    pub fn new(
        seed: u64,
        rates: OperationRates,
        world: &'a World,
        rules: &'a RuleSet,
        cuts: &'a [Micros],
    ) -> Self {
        Operations { seed, rates, world, rules, cuts }
    }

    fn rng(&self, order_id: i64, night: usize, what: u64) -> SplitMix64 {
        SplitMix64::new(mix(self.seed
            ^ 0x0DE5_A7C4
            ^ mix(order_id as u64)
            ^ (night as u64) << 40
            ^ what))
    }

    /// Moves a reordered order (ORDER_PAID wrongly skipped) so that its skip was decided
    /// less than a grace after the payment before some night's cut: that night judges
    /// the skip (and the missing effects) PENDING, and the next nights carry it.
    pub fn plant_pending_skip(&self, facts: &mut Facts) {
        let order = &facts.order;
        if order.fault != Some(Fault::Reorder) || self.cuts.len() < 2 {
            return;
        }
        let mut rng = self.rng(order.order_id, usize::MAX, 0x5E1F);
        if !rng.chance(self.rates.pending_at_cut) {
            return;
        }
        let skipped = order
            .ledger
            .iter()
            .find(|e| e.event == Status::Paid && e.action == LedgerAction::Skipped);
        let (Some(paid), Some(skipped)) = (order.change(Status::Paid), skipped) else { return };
        let grace = self.paid_grace();
        let gap = skipped.decided_at - paid;
        if gap <= 0 || gap + MILLI_MICROS >= grace {
            return;
        }
        let cut = self.cuts[rng.index(self.cuts.len() - 1)];
        let target = cut - rng.between(gap + MILLI_MICROS, grace);
        facts.shift(target - paid);
    }

    /// The shortest grace of the rules ORDER_PAID triggers.
    fn paid_grace(&self) -> Micros {
        self.rules
            .rules
            .iter()
            .filter(|r| r.trigger_event == Status::Paid.event_type())
            .map(|r| r.grace_micros)
            .min()
            .unwrap_or(0)
    }

    /// Plants at most one late receipt: created before some night's cut, loaded after it
    /// (a duplicate grant on a paid order, or a manual grant on an unpaid one).
    pub fn plant_late(&self, facts: &mut Facts) {
        if self.cuts.len() < 2 {
            return;
        }
        let order_id = facts.order.order_id;
        let mut rng = self.rng(order_id, usize::MAX, 0x1A7E);
        if !rng.chance(self.rates.late_receipt) {
            return;
        }
        let night = rng.index(self.cuts.len() - 1);
        let cut = self.cuts[night];
        let created = cut - rng.between(MINUTE_MICROS, 3 * DAY_MICROS);
        let loaded = cut + rng.between(HOUR_MICROS, 12 * HOUR_MICROS);
        let order = &facts.order;
        let points = |r: &&ReceiptEntry| r.provider == Provider::Points;
        let first_grant = order.receipts.iter().filter(points).map(|r| r.created_at).min();
        let born = order.history.first().map(|c| c.at);
        let paid = order.change(Status::Paid).is_some();
        let fits = match (paid, first_grant, born) {
            (true, Some(first), _) => first < created,
            (false, None, Some(born)) => born < created,
            _ => false,
        };
        if fits {
            facts.receipt(Provider::Points, ReceiptStatus::Succeeded, created, loaded);
        }
    }

    /// Acts, between night `night` and the next, on what that night's run carries.
    pub fn act(
        &self,
        night: usize,
        carry: &Carry,
        judge: &NightJudge<'_>,
        facts: &mut Facts,
        offsets: &mut [i64],
    ) {
        for task in &carry.open {
            if let Some(provider) = judge.provider(task.rule) {
                self.on_task(night, task, provider, facts, offsets);
            }
        }
        for skip in &carry.pending_skips {
            self.on_pending_skip(night, skip, judge, facts);
        }
    }

    fn on_task(
        &self,
        night: usize,
        task: &OpenFinding,
        provider: Provider,
        facts: &mut Facts,
        offsets: &mut [i64],
    ) {
        let cut = self.cuts[night];
        let mut rng = self.rng(facts.order.order_id, night, task.rule as u64);
        let at = cut + rng.between(30 * MINUTE_MICROS, 20 * HOUR_MICROS);
        let u = rng.unit();
        let r = self.rates;
        match task.class {
            class if class.is_missing() => {
                if u < r.executed {
                    facts.receipt(provider, ReceiptStatus::Succeeded, at, at);
                } else if u < r.executed + r.failed {
                    facts.receipt(provider, ReceiptStatus::Failed, at, at);
                } else if u < r.executed + r.failed + r.voided && !facts.voided_after(cut) {
                    let status = if provider == Provider::Logistics || rng.chance(0.5) {
                        Status::Cancelled
                    } else {
                        Status::Refunded
                    };
                    facts.change(self.world, offsets, status, at);
                }
            }
            Class::DuplicateEffect => {
                if u < r.reversed {
                    facts.reverse(provider, cut, true, at);
                } else if u < r.reversed + r.voided && !facts.voided_after(cut) {
                    // Refunded meanwhile, and the refund handler undid only the grant it
                    // knew of: the duplicate is RECLASSIFIED as unreversed (DESIGN §10.1).
                    let handled = facts.change(self.world, offsets, Status::Refunded, at);
                    facts.keep_standing_but_first(provider, handled);
                }
            }
            Class::UnreversedEffect => {
                if u < r.reversed {
                    facts.reverse(provider, cut, false, at);
                }
            }
            _ => {
                if u < r.reversed {
                    facts.reverse(provider, cut, false, at);
                } else if u < r.reversed + r.paid_late {
                    self.pay_orphan(&mut rng, provider, at, facts, offsets);
                }
            }
        }
    }

    /// The orphan's order is paid after all: the handler does its effects, and the
    /// provider of the orphan grant either recognises it (NOW_DUE) or grants again
    /// (a duplicate: RECLASSIFIED).
    fn pay_orphan(
        &self,
        rng: &mut SplitMix64,
        provider: Provider,
        at: Micros,
        facts: &mut Facts,
        offsets: &mut [i64],
    ) {
        let order = &facts.order;
        let cancelled = order.history.iter().any(|c| c.status == Status::Cancelled);
        if order.history.is_empty() || cancelled || order.change(Status::Paid).is_some() {
            return;
        }
        facts.change(self.world, offsets, Status::Paid, at);
        let grants_again = rng.chance(0.5);
        for &p in Status::Paid.providers() {
            if p != provider || grants_again {
                let t = at + 60 * MILLI_MICROS + p.index() as Micros * MILLI_MICROS;
                facts.receipt(p, ReceiptStatus::Succeeded, t, t);
            }
        }
    }

    /// Half of the PENDING skips get their owed effects granted before the next night.
    fn on_pending_skip(
        &self,
        night: usize,
        skip: &PendingSkip,
        judge: &NightJudge<'_>,
        facts: &mut Facts,
    ) {
        let cut = self.cuts[night];
        let what = match skip.msg_id {
            MsgId::Event { seq, .. } => 0x5_0000 | seq as u64,
            MsgId::Named(_) => 0x5_FFFF,
        };
        let mut rng = self.rng(facts.order.order_id, night, what);
        if !rng.chance(self.rates.skip_granted) {
            return;
        }
        let at = cut + rng.between(10 * MINUTE_MICROS, 6 * HOUR_MICROS);
        for (index, rule) in self.rules.rules.iter().enumerate() {
            let owed = judge.states()[index].owed();
            if rule.trigger_event == skip.event.event_type() && owed {
                if let Some(provider) = judge.provider(index) {
                    facts.receipt(provider, ReceiptStatus::Succeeded, at, at);
                }
            }
        }
    }
}
