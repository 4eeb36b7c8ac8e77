//! The ground truth of a generated snapshot: what a correct implementation of docs/SEMANTICS.md
//! §5 reports for the default window and rules, computed order by order in plain Rust
//! from the simulation's own rows — never by the reconciliation SQL, so that `run` can
//! be checked against it.
//!
//! `truth.parquet` sits in the snapshot folder but not in its manifest, so `run` never
//! reads it. Columns: `kind` (`finding` | `skip_verdict`), `effect`, `order_id`,
//! `class`, `verdict`, `msg_id`; the window and rules it was computed for are in the
//! Arrow schema metadata.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Builder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use super::world::{ExpectTarget, LedgerEntry, MsgId, OrderRows};
use crate::config::{Rule, RuleSet};
use crate::error::{Error, Result};
use crate::time::Micros;
use crate::time::Window;
use crate::vocabulary::{Class, LedgerAction, ReceiptStatus, SkipVerdict, Verdict};

/// File name of the truth inside the snapshot folder.
pub const TRUTH_FILE: &str = "truth.parquet";
/// `kind` of a finding row.
pub const FINDING: &str = "finding";
/// `kind` of a skip-verdict row.
pub const SKIP_VERDICT: &str = "skip_verdict";
/// Schema metadata keys recording what the truth was computed for.
pub const META_CUT: &str = "effect-recon.truth.cut";
/// Window start (exclusive), RFC 3339.
pub const META_SINCE: &str = "effect-recon.truth.since";
/// Hash of the rules (as in run manifests).
pub const META_RULES_HASH: &str = "effect-recon.truth.rules_hash";

/// The Arrow schema of `truth.parquet` (without metadata).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("kind", DataType::Utf8, false),
        Field::new("effect", DataType::Utf8, true),
        Field::new("order_id", DataType::Int64, false),
        Field::new("class", DataType::Utf8, true),
        Field::new("verdict", DataType::Utf8, false),
        Field::new("msg_id", DataType::Utf8, true),
    ]))
}

/// The schema with the window and rules it was computed for.
pub fn schema_for(window: Window, rules: &RuleSet) -> SchemaRef {
    let metadata = HashMap::from([
        (META_CUT.to_string(), crate::time::format_instant(window.cut)),
        (META_SINCE.to_string(), crate::time::format_instant(window.since)),
        (META_RULES_HASH.to_string(), rules.hash.clone()),
    ]);
    Arc::new(schema().as_ref().clone().with_metadata(metadata))
}

/// One expected output row: its `kind` is the variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruthRow<'a> {
    /// A row of kind [`FINDING`].
    Finding {
        /// The finding's effect.
        effect: &'a str,
        /// The order.
        order_id: i64,
        /// Its class.
        class: Class,
        /// BREAK or PENDING.
        verdict: Verdict,
    },
    /// A row of kind [`SKIP_VERDICT`].
    SkipVerdict {
        /// The order.
        order_id: i64,
        /// The skipped message.
        msg_id: MsgId,
        /// WRONG, PENDING, HARMLESS or CORRECT.
        verdict: SkipVerdict,
    },
}

/// What one rule sees of one order, up to the cut.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EffectState {
    /// Earliest change to the due status.
    pub(crate) due_at: Option<Micros>,
    /// The earliest change to a void status (`None`: never voided).
    pub(crate) void_at: Option<Micros>,
    /// SUCCEEDED receipts.
    pub(crate) ok: u32,
    /// First SUCCEEDED receipt by `(created_at, receipt_id)`: its time and sequence number.
    pub(crate) first: Option<(Micros, u32)>,
    /// The second one.
    pub(crate) second: Option<(Micros, u32)>,
}

impl EffectState {
    /// Due, not voided, never granted.
    pub(crate) fn owed(&self) -> bool {
        self.due_at.is_some() && !self.voided() && self.ok == 0
    }

    /// Some change to a void status.
    pub(crate) fn voided(&self) -> bool {
        self.void_at.is_some()
    }

    /// Done, due and voided on a rule that reverses on void: the effect must be undone
    /// (DESIGN §10.1).
    pub(crate) fn unreversed(&self, rule: &Rule) -> bool {
        rule.reverse_on_void && self.due_at.is_some() && self.voided() && self.ok >= 1
    }

    /// When an unreversed effect became owed back: the later of the void and the first
    /// receipt at `first`.
    pub(crate) fn reverse_from(&self, first: Micros) -> Micros {
        self.void_at.map_or(first, |void_at| void_at.max(first))
    }
}

/// docs/SEMANTICS.md over one order at a time.
#[derive(Debug)]
pub struct Judge<'a> {
    rules: &'a RuleSet,
    window: Window,
    states: Vec<EffectState>,
}

impl<'a> Judge<'a> {
    /// A judge of `window` under `rules`.
    pub fn new(rules: &'a RuleSet, window: Window) -> Self {
        Judge { rules, window, states: vec![EffectState::default(); rules.rules.len()] }
    }

    /// Appends the findings and skip verdicts a correct run reports for `order`.
    pub fn judge(&mut self, order: &OrderRows, out: &mut Vec<TruthRow<'a>>) {
        let rules = self.rules;
        for (state, rule) in self.states.iter_mut().zip(&rules.rules) {
            *state = effect_state(order, rule, self.window.cut);
        }
        for (state, rule) in self.states.iter().zip(&rules.rules) {
            if let Some((class, verdict)) = finding(order, rule, state, self.window) {
                let effect = &rule.effect;
                out.push(TruthRow::Finding { effect, order_id: order.order_id, class, verdict });
            }
        }
        for entry in &order.ledger {
            let Window { since, cut } = self.window;
            if entry.action == LedgerAction::Skipped
                && since < entry.decided_at
                && entry.decided_at <= cut
            {
                out.push(TruthRow::SkipVerdict {
                    order_id: order.order_id,
                    msg_id: entry.msg_id,
                    verdict: self.skip_verdict(entry),
                });
            }
        }
    }

    /// The four-step skip verdict of §5 over the rules triggered by the row's event.
    fn skip_verdict(&self, entry: &LedgerEntry) -> SkipVerdict {
        skip_verdict(
            self.rules,
            &self.states,
            entry.event.event_type(),
            entry.decided_at,
            self.window.cut,
        )
    }
}

/// The four-step skip verdict of §5 of a skip of `event_type` decided at `decided_at`,
/// judged at `cut` over the order's `states` (one per rule of `rules`).
pub(crate) fn skip_verdict(
    rules: &RuleSet,
    states: &[EffectState],
    event_type: &str,
    decided_at: Micros,
    cut: Micros,
) -> SkipVerdict {
    let triggered =
        || states.iter().zip(&rules.rules).filter(|(_, r)| r.trigger_event == event_type);
    if triggered().next().is_none() {
        return SkipVerdict::Correct;
    }
    let max_grace = triggered().map(|(_, r)| r.grace_micros).max().unwrap_or(0);
    if triggered().any(|(s, r)| s.owed() && s.due_at.is_some_and(|due| due + r.grace_micros <= cut))
    {
        SkipVerdict::Wrong
    } else if triggered().any(|(s, _)| s.owed())
        || (triggered().all(|(s, _)| s.due_at.is_none()) && decided_at + max_grace > cut)
    {
        SkipVerdict::Pending
    } else if triggered().any(|(s, _)| s.due_at.is_some() && !s.voided() && s.ok >= 1) {
        SkipVerdict::Harmless
    } else {
        SkipVerdict::Correct
    }
}

/// What `rule` sees of `order` up to `cut`.
pub(crate) fn effect_state(order: &OrderRows, rule: &Rule, cut: Micros) -> EffectState {
    let mut state = EffectState::default();
    for change in order.history.iter().filter(|c| c.at <= cut) {
        let status = change.status.name();
        if status == rule.due_status {
            state.due_at = Some(state.due_at.map_or(change.at, |d| d.min(change.at)));
        }
        if rule.void_statuses.iter().any(|v| v == status) {
            state.void_at = Some(state.void_at.map_or(change.at, |v| v.min(change.at)));
        }
    }
    for r in order.receipts.iter().filter(|r| {
        r.provider.effect() == rule.effect
            && r.status == ReceiptStatus::Succeeded
            && r.created_at <= cut
    }) {
        state.ok += 1;
        let key = (r.created_at, r.seq);
        match (state.first, state.second) {
            (None, _) => state.first = Some(key),
            (Some(first), _) if receipt_before(key, first) => {
                state.second = state.first;
                state.first = Some(key);
            }
            (Some(_), None) => state.second = Some(key),
            (Some(_), Some(second)) if receipt_before(key, second) => state.second = Some(key),
            _ => {}
        }
    }
    state
}

/// `(created_at, receipt_id)` order; receipt ids of one (order, effect) differ only in
/// their decimal sequence number, compared as text like the ids themselves.
fn receipt_before((at, seq): (Micros, u32), (other_at, other_seq): (Micros, u32)) -> bool {
    at < other_at || (at == other_at && seq.to_string() < other_seq.to_string())
}

/// The finding of one rule on one order, if any: (class, verdict).
fn finding(
    order: &OrderRows,
    rule: &Rule,
    state: &EffectState,
    window: Window,
) -> Option<(Class, Verdict)> {
    let Window { since, cut } = window;
    let in_window = |t: Micros| since < t && t <= cut;
    match (state.due_at, state.first) {
        (Some(due), _) if state.owed() => {
            let break_on = due + rule.grace_micros;
            let verdict = if in_window(break_on) {
                Verdict::Break
            } else if due <= cut && cut < break_on {
                Verdict::Pending
            } else {
                return None;
            };
            Some((missing_class(order, rule, cut), verdict))
        }
        (None, Some((first, _))) => {
            let break_on = first + rule.grace_micros;
            if in_window(break_on) {
                Some((Class::OrphanEffect, Verdict::Break))
            } else if first <= cut && cut < break_on {
                Some((Class::OrphanEffect, Verdict::Pending))
            } else {
                None
            }
        }
        (Some(_), Some((first, _))) if state.unreversed(rule) => {
            let break_on = state.reverse_from(first) + rule.grace_micros;
            if in_window(break_on) {
                Some((Class::UnreversedEffect, Verdict::Break))
            } else if cut < break_on {
                Some((Class::UnreversedEffect, Verdict::Pending))
            } else {
                None
            }
        }
        (Some(_), _) if state.ok >= 2 => state
            .second
            .filter(|(second, _)| in_window(*second))
            .map(|_| (Class::DuplicateEffect, Verdict::Break)),
        _ => None,
    }
}

/// The class of a missing effect from its trigger rows' outcome:
/// DONE > SKIPPED/REVOKED > PENDING_REVIEW > none.
pub(crate) fn missing_class(order: &OrderRows, rule: &Rule, cut: Micros) -> Class {
    order
        .ledger
        .iter()
        .filter(|e| e.decided_at <= cut && e.event.event_type() == rule.trigger_event)
        .map(|e| match e.action {
            LedgerAction::Done => (1, Class::DoneNoReceipt),
            LedgerAction::Skipped | LedgerAction::Revoked => (2, Class::SkippedButDue),
            LedgerAction::PendingReview => (3, Class::ReviewStalled),
        })
        .min()
        .map_or(Class::NoLedgerEntry, |(_, class)| class)
}

/// The expectations of `order`'s planted fault that its truth `rows` do not meet; only
/// expectations judged inside `window` are checked. Empty when the simulation planted
/// what it meant to.
pub fn unmet_expectations(order: &OrderRows, rows: &[TruthRow<'_>], window: Window) -> Vec<String> {
    let mut unmet = Vec::new();
    for expect in
        order.expects.iter().filter(|e| window.since < e.judged_at && e.judged_at <= window.cut)
    {
        if !meets(expect.target, rows) {
            unmet.push(format!(
                "order {} ({:?}): expected {:?}, truth has {:?}",
                order.order_id, order.fault, expect.target, rows
            ));
        }
    }
    unmet
}

/// Whether an order's truth `rows` hold what `target` expects.
fn meets(target: ExpectTarget, rows: &[TruthRow<'_>]) -> bool {
    match target {
        ExpectTarget::Finding { provider, classes, verdict } => {
            let found = rows.iter().find_map(|r| match *r {
                TruthRow::Finding { effect, class, verdict, .. } if effect == provider.effect() => {
                    Some((class, verdict))
                }
                _ => None,
            });
            found.map_or(classes.is_empty(), |(class, found)| {
                classes.contains(&class) && verdict.is_none_or(|v| v == found)
            })
        }
        ExpectTarget::SkipVerdict { msg_id, verdicts } => {
            let found = rows.iter().find_map(|r| match *r {
                TruthRow::SkipVerdict { msg_id: id, verdict, .. } if id == msg_id => Some(verdict),
                _ => None,
            });
            found.map_or(verdicts.is_empty(), |verdict| verdicts.contains(&verdict))
        }
    }
}

/// Arrow builders of `truth.parquet`.
#[derive(Debug, Default)]
pub struct TruthColumns {
    kind: StringBuilder,
    effect: StringBuilder,
    order_id: Int64Builder,
    class: StringBuilder,
    verdict: StringBuilder,
    msg_id: StringBuilder,
}

impl TruthColumns {
    /// Appends one row.
    pub fn push(&mut self, row: &TruthRow<'_>) {
        use std::fmt::Write;
        match *row {
            TruthRow::Finding { effect, order_id, class, verdict } => {
                self.kind.append_value(FINDING);
                self.effect.append_value(effect);
                self.order_id.append_value(order_id);
                self.class.append_value(class.as_str());
                self.verdict.append_value(verdict.as_str());
                self.msg_id.append_null();
            }
            TruthRow::SkipVerdict { order_id, msg_id, verdict } => {
                self.kind.append_value(SKIP_VERDICT);
                self.effect.append_null();
                self.order_id.append_value(order_id);
                self.class.append_null();
                self.verdict.append_value(verdict.as_str());
                let _ = write!(self.msg_id, "{msg_id}");
                self.msg_id.append_value("");
            }
        }
    }

    /// The rows so far as one batch with `schema`; the builders start over.
    pub fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.kind.finish()),
            Arc::new(self.effect.finish()),
            Arc::new(self.order_id.finish()),
            Arc::new(self.class.finish()),
            Arc::new(self.verdict.finish()),
            Arc::new(self.msg_id.finish()),
        ];
        RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| Error::Output {
            location: TRUTH_FILE.into(),
            message: e.to_string(),
            source: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::world::{LedgerEntry, Provider, ReceiptEntry, Status, StatusChange};
    use LedgerAction as Action;
    use ReceiptStatus::{Reversed, Succeeded};

    const MIN: Micros = 60_000_000;
    const CUT: Micros = 10_000 * MIN;
    const SINCE: Micros = CUT - 1440 * MIN;

    fn order(
        history: &[(Status, Micros)],
        ledger: &[(Status, LedgerAction, Micros)],
        receipts: &[(Provider, ReceiptStatus, Micros)],
    ) -> OrderRows {
        let mut o = OrderRows { order_id: 1, ..Default::default() };
        o.history = history.iter().map(|&(status, at)| StatusChange { status, at }).collect();
        o.ledger = ledger
            .iter()
            .enumerate()
            .map(|(i, &(event, action, decided_at))| LedgerEntry {
                msg_id: MsgId::Event { order_id: 1, seq: i as u8 },
                event,
                produced: 0,
                action,
                observed: event,
                partition: 0,
                offset: i as i64,
                consumer: 0,
                decided_at,
                revoked_at: None,
            })
            .collect();
        o.receipts = receipts
            .iter()
            .enumerate()
            .map(|(i, &(provider, status, created_at))| ReceiptEntry {
                provider,
                seq: i as u32,
                msg_id: None,
                produced: None,
                status,
                created_at,
                reversed_at: None,
            })
            .collect();
        o
    }

    /// The order's truth rows as (effect, class, verdict).
    fn judge(o: &OrderRows) -> Vec<(Option<String>, Option<Class>, &'static str)> {
        let rules = RuleSet::default_rules().unwrap();
        let mut judge = Judge::new(&rules, Window { since: SINCE, cut: CUT });
        let mut out = Vec::new();
        judge.judge(o, &mut out);
        out.iter()
            .map(|r| match *r {
                TruthRow::Finding { effect, class, verdict, .. } => {
                    (Some(effect.to_string()), Some(class), verdict.as_str())
                }
                TruthRow::SkipVerdict { verdict, .. } => (None, None, verdict.as_str()),
            })
            .collect()
    }

    fn paid_done(paid: Micros) -> OrderRows {
        order(
            &[(Status::Paid, paid)],
            &[(Status::Paid, Action::Done, paid + 1)],
            &[(Provider::Wms, Succeeded, paid + 1)],
        )
    }

    #[test]
    fn break_on_is_half_open() {
        let at_cut = judge(&paid_done(CUT - 30 * MIN));
        assert_eq!(at_cut, [(Some("points_grant".into()), Some(Class::DoneNoReceipt), "BREAK")]);
        assert!(
            judge(&paid_done(SINCE - 30 * MIN)).is_empty(),
            "break_on == since is the previous window's"
        );
        let young = judge(&paid_done(CUT - 29 * MIN));
        assert_eq!(young, [(Some("points_grant".into()), Some(Class::DoneNoReceipt), "PENDING")]);
    }

    #[test]
    fn outcome_precedence_and_revoked() {
        let t = CUT - 5 * 60 * MIN;
        let revoked = order(
            &[(Status::Paid, t)],
            &[(Status::Paid, Action::Revoked, t + 1), (Status::Paid, Action::PendingReview, t + 2)],
            &[],
        );
        assert_eq!(judge(&revoked)[0].1, Some(Class::SkippedButDue));
        assert_eq!(judge(&revoked).len(), 2, "REVOKED gets no skip verdict");
        let done = order(
            &[(Status::Paid, t)],
            &[(Status::Paid, Action::Skipped, t + 1), (Status::Paid, Action::Done, t + 2)],
            &[],
        );
        let rows = judge(&done);
        assert_eq!(rows[0].1, Some(Class::DoneNoReceipt));
        assert_eq!(rows[2], (None, None, "WRONG"));
    }

    #[test]
    fn duplicates_need_the_second_receipt_in_the_window() {
        let t = SINCE - 60 * MIN;
        let history = [(Status::Paid, t)];
        let inside = order(
            &history,
            &[],
            &[(Provider::Points, Succeeded, t), (Provider::Points, Succeeded, SINCE + 1)],
        );
        assert_eq!(
            judge(&inside),
            [(Some("points_grant".into()), Some(Class::DuplicateEffect), "BREAK")]
        );
        let before = order(
            &history,
            &[],
            &[(Provider::Points, Succeeded, t), (Provider::Points, Succeeded, SINCE)],
        );
        assert!(judge(&before).is_empty());
        let reversed = order(
            &history,
            &[],
            &[(Provider::Points, Succeeded, t), (Provider::Points, Reversed, SINCE + 1)],
        );
        assert!(judge(&reversed).is_empty());
    }

    /// DESIGN §10.1 on the default rules (points reverse on void): break_on is the later
    /// of the void and the first grant, plus the grace; a voided double grant is
    /// unreversed, not a duplicate; a reversed grant is nothing.
    #[test]
    fn unreversed_effects_break_at_the_later_of_void_and_grant() {
        let unreversed =
            |verdict| vec![(Some("points_grant".into()), Some(Class::UnreversedEffect), verdict)];
        let t = SINCE + 60 * MIN;
        let void_after = order(
            &[(Status::Paid, t), (Status::Refunded, t + 10 * MIN)],
            &[],
            &[(Provider::Points, Succeeded, t)],
        );
        assert_eq!(judge(&void_after), unreversed("BREAK"));
        // Refunded an hour before the window: its grace ended before it, judged then.
        let judged_before = order(
            &[(Status::Paid, SINCE - 90 * MIN), (Status::Refunded, SINCE - 60 * MIN)],
            &[],
            &[(Provider::Points, Succeeded, SINCE - 89 * MIN)],
        );
        assert!(judge(&judged_before).is_empty());
        // ... but a grant after that void, inside the window, breaks now.
        let grant_after = order(
            &[(Status::Paid, SINCE - 90 * MIN), (Status::Cancelled, SINCE - 60 * MIN)],
            &[],
            &[(Provider::Points, Succeeded, SINCE + MIN)],
        );
        assert_eq!(judge(&grant_after), unreversed("BREAK"));
        let young = order(
            &[(Status::Paid, t), (Status::Cancelled, CUT - MIN)],
            &[],
            &[(Provider::Points, Succeeded, t)],
        );
        assert_eq!(judge(&young), unreversed("PENDING"));
        let twice = order(
            &[(Status::Paid, t), (Status::Refunded, t + 10 * MIN)],
            &[],
            &[(Provider::Points, Succeeded, t), (Provider::Points, Succeeded, t + MIN)],
        );
        assert_eq!(judge(&twice), unreversed("BREAK"));
        let undone = order(
            &[(Status::Paid, t), (Status::Refunded, t + 10 * MIN)],
            &[],
            &[(Provider::Points, Reversed, t)],
        );
        assert!(judge(&undone).is_empty());
    }

    #[test]
    fn orphans_and_rows_after_the_cut() {
        let orphan = order(&[], &[], &[(Provider::Points, Succeeded, CUT)]);
        assert_eq!(
            judge(&orphan),
            [(Some("points_grant".into()), Some(Class::OrphanEffect), "PENDING")]
        );
        let later = order(&[], &[], &[(Provider::Points, Succeeded, CUT + 1)]);
        assert!(judge(&later).is_empty());
    }

    #[test]
    fn skip_verdicts() {
        let t = CUT - 5 * 60 * MIN;
        let cancelled = order(
            &[(Status::Paid, t), (Status::Cancelled, t + 1)],
            &[(Status::Paid, Action::Skipped, t + 2)],
            &[],
        );
        assert_eq!(judge(&cancelled), [(None, None, "CORRECT")]);
        let harmless = order(
            &[(Status::Paid, t)],
            &[(Status::Paid, Action::Skipped, t + 2)],
            &[(Provider::Points, Succeeded, t + 3), (Provider::Wms, Succeeded, t + 3)],
        );
        assert_eq!(judge(&harmless), [(None, None, "HARMLESS")]);
        let never_due =
            order(&[(Status::Created, t)], &[(Status::Paid, Action::Skipped, CUT - MIN)], &[]);
        assert_eq!(judge(&never_due), [(None, None, "PENDING")]);
        let no_rule =
            order(&[(Status::Created, t)], &[(Status::Delivered, Action::Skipped, CUT)], &[]);
        assert_eq!(judge(&no_rule), [(None, None, "CORRECT")]);
    }
}
