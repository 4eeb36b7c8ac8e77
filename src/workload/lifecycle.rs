//! The ground truth across nights: docs/SEMANTICS.md for one order on one night of a
//! chain, computed in plain Rust from the simulation's rows — never by the SQL of `run`.
//!
//! The chain the truth assumes: night 1 runs without a previous run (its origin is its
//! window start, `cut - 1 day`), every later night runs with the previous night's run as
//! `--previous`, with the default rules and the given late horizon and max age. What a
//! run hands to the next is, per order, a [`Carry`]: its open findings (BREAK rows) and
//! its PENDING skips.

use super::truth::{effect_state, missing_class, skip_verdict, EffectState};
use super::world::{MsgId, OrderRows, Provider, Status};
use crate::config::{Rule, RuleSet};
use crate::time::Micros;
use crate::vocabulary::{
    Class, LedgerAction, Lifecycle, Resolution, SkipLifecycle, SkipVerdict, Verdict,
};

/// A finding open after a night: a BREAK row of its discrepancies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFinding {
    /// Index of the rule in the rule set.
    pub rule: usize,
    /// Its class.
    pub class: Class,
    /// Night (0-based) of the run that first listed it.
    pub first_seen: usize,
    /// Its `break_on` that night.
    pub first_break_on: Micros,
    /// Runs it has been open in, this one included.
    pub runs_open: i32,
}

/// A skip whose verdict was PENDING: judged again the next night.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingSkip {
    /// The skipped message.
    pub msg_id: MsgId,
    /// Its event.
    pub event: Status,
    /// When it was decided.
    pub decided_at: Micros,
}

/// What one order's run hands to the next night's run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Carry {
    /// Open findings.
    pub open: Vec<OpenFinding>,
    /// PENDING skips.
    pub pending_skips: Vec<PendingSkip>,
}

/// The §9 columns of a listed finding; `None` on PENDING rows (`runs_open = 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    /// NEW or PERSISTING.
    pub lifecycle: Lifecycle,
    /// Night (0-based) of `first_seen_run`.
    pub first_seen: usize,
    /// `first_break_on`.
    pub first_break_on: Micros,
    /// `runs_open`.
    pub runs_open: i32,
    /// `rechecked`.
    pub rechecked: bool,
}

/// One expected row of a night's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NightRow {
    /// A row of `discrepancies`.
    Finding {
        /// Index of the rule.
        rule: usize,
        /// Its class.
        class: Class,
        /// Its verdict.
        verdict: Verdict,
        /// The lifecycle columns (BREAK rows only).
        life: Option<Life>,
    },
    /// A row of `skip_verdicts`.
    Skip {
        /// The skipped message.
        msg_id: MsgId,
        /// WRONG, PENDING, HARMLESS or CORRECT.
        verdict: SkipVerdict,
        /// NEW or CARRIED.
        lifecycle: SkipLifecycle,
    },
    /// A row of `resolved`.
    Resolved {
        /// The finding that left the open set.
        finding: OpenFinding,
        /// Why.
        resolution: Resolution,
        /// For RECEIPT: the first SUCCEEDED receipt (its provider and sequence number).
        receipt: Option<(Provider, u32)>,
    },
}

/// The §5 finding of a rule on an order over the whole snapshot (no lower bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Current {
    class: Class,
    break_on: Micros,
    verdict: Verdict,
}

/// One night of the chain: its window, listing bound and max age.
#[derive(Debug, Clone, Copy)]
pub struct Night {
    /// 0-based position in the chain.
    pub index: usize,
    /// Window start `S` (exclusive).
    pub since: Micros,
    /// The cut `C`.
    pub cut: Micros,
    /// Findings are listed when `lower < break_on <= cut`: `S` on the first night,
    /// `max(origin, S - late_horizon)` after.
    pub lower: Micros,
    /// `--max-age`.
    pub max_age: Micros,
}

/// §5 and §9 over one order at a time, for one night.
#[derive(Debug)]
pub struct NightJudge<'a> {
    rules: &'a RuleSet,
    providers: Vec<Option<Provider>>,
    night: Night,
    states: Vec<EffectState>,
}

impl<'a> NightJudge<'a> {
    /// A judge of `night` under `rules`.
    pub fn new(rules: &'a RuleSet, night: Night) -> Self {
        let providers = rules
            .rules
            .iter()
            .map(|r| Provider::ALL.into_iter().find(|p| p.effect() == r.effect))
            .collect();
        NightJudge {
            rules,
            providers,
            night,
            states: vec![EffectState::default(); rules.rules.len()],
        }
    }

    /// The provider whose receipts a rule counts (`None`: no simulated provider).
    pub fn provider(&self, rule: usize) -> Option<Provider> {
        self.providers[rule]
    }

    /// The state of each rule on the last judged order.
    pub(crate) fn states(&self) -> &[EffectState] {
        &self.states
    }

    /// Appends the rows a correct chained run reports for `order` (the snapshot's rows of
    /// one order) given what the previous run carried, and returns what this run carries.
    pub fn judge(&mut self, order: &OrderRows, previous: &Carry, out: &mut Vec<NightRow>) -> Carry {
        let rules = self.rules;
        let cut = self.night.cut;
        for (state, rule) in self.states.iter_mut().zip(&rules.rules) {
            *state = effect_state(order, rule, cut);
        }
        let mut next = Carry::default();
        for (index, rule) in rules.rules.iter().enumerate() {
            let current = current(order, rule, &self.states[index], cut);
            let open = previous.open.iter().find(|f| f.rule == index).copied();
            let mut force = false;
            if let Some(open) = open {
                force = self.rejudge(order, rule, open, current, out, &mut next);
                if current.is_some_and(|c| c.class == open.class) {
                    continue;
                }
            }
            if let Some(current) = current {
                self.list(index, current, force, out, &mut next);
            }
        }
        self.skips(order, previous, out, &mut next);
        next
    }

    /// Re-judges an open finding; true when the pair's current finding is RECLASSIFIED
    /// (listed whatever its `break_on`).
    fn rejudge(
        &self,
        order: &OrderRows,
        rule: &Rule,
        open: OpenFinding,
        current: Option<Current>,
        out: &mut Vec<NightRow>,
        next: &mut Carry,
    ) -> bool {
        let state = &self.states[open.rule];
        let persisting = |rechecked| NightRow::Finding {
            rule: open.rule,
            class: open.class,
            verdict: Verdict::Break,
            life: Some(Life {
                lifecycle: Lifecycle::Persisting,
                first_seen: open.first_seen,
                first_break_on: open.first_break_on,
                runs_open: open.runs_open + 1,
                rechecked,
            }),
        };
        if current.is_some_and(|c| c.class == open.class) {
            out.push(persisting(true));
            next.open.push(OpenFinding { runs_open: open.runs_open + 1, ..open });
            return false;
        }
        let any_receipts = order
            .receipts
            .iter()
            .any(|r| r.provider.effect() == rule.effect && r.created_at <= self.night.cut);
        let resolution = if open.class.is_missing() && state.ok >= 1 {
            Some(Resolution::Receipt)
        } else if open.class.is_missing() && state.voided() {
            Some(Resolution::Voided)
        } else if current.is_some() {
            Some(Resolution::Reclassified)
        } else if any_receipts
            && ((open.class == Class::DuplicateEffect && state.ok < 2)
                || (matches!(open.class, Class::OrphanEffect | Class::UnreversedEffect)
                    && state.ok == 0))
        {
            Some(Resolution::Reversed)
        } else if open.class == Class::OrphanEffect && state.due_at.is_some() {
            Some(Resolution::NowDue)
        } else if open.first_break_on <= self.night.cut - self.night.max_age {
            Some(Resolution::Expired)
        } else {
            None
        };
        match resolution {
            Some(resolution) => {
                let receipt = (resolution == Resolution::Receipt)
                    .then(|| self.providers[open.rule].zip(state.first.map(|(_, seq)| seq)))
                    .flatten();
                out.push(NightRow::Resolved { finding: open, resolution, receipt });
            }
            None => {
                out.push(persisting(false));
                next.open.push(OpenFinding { runs_open: open.runs_open + 1, ..open });
            }
        }
        resolution == Some(Resolution::Reclassified)
    }

    /// Lists a finding the pair has now: BREAK when it broke after the listing bound (or
    /// whatever its `break_on` when `force`d), PENDING always.
    fn list(
        &self,
        rule: usize,
        current: Current,
        force: bool,
        out: &mut Vec<NightRow>,
        next: &mut Carry,
    ) {
        let Current { class, break_on, verdict } = current;
        match verdict {
            Verdict::Pending => out.push(NightRow::Finding { rule, class, verdict, life: None }),
            Verdict::Break if force || self.night.lower < break_on => {
                let life = Life {
                    lifecycle: Lifecycle::New,
                    first_seen: self.night.index,
                    first_break_on: break_on,
                    runs_open: 1,
                    rechecked: true,
                };
                out.push(NightRow::Finding { rule, class, verdict, life: Some(life) });
                next.open.push(OpenFinding {
                    rule,
                    class,
                    first_seen: self.night.index,
                    first_break_on: break_on,
                    runs_open: 1,
                });
            }
            Verdict::Break => {}
        }
    }

    /// The window's skips (NEW) and the previous run's PENDING skips judged again (CARRIED).
    fn skips(
        &self,
        order: &OrderRows,
        previous: &Carry,
        out: &mut Vec<NightRow>,
        next: &mut Carry,
    ) {
        let Night { since, cut, .. } = self.night;
        let window = order
            .ledger
            .iter()
            .filter(|e| {
                e.action == LedgerAction::Skipped && since < e.decided_at && e.decided_at <= cut
            })
            .map(|e| {
                let skip =
                    PendingSkip { msg_id: e.msg_id, event: e.event, decided_at: e.decided_at };
                (skip, SkipLifecycle::New)
            });
        let carried = previous
            .pending_skips
            .iter()
            .filter(|s| s.decided_at <= since)
            .map(|&s| (s, SkipLifecycle::Carried));
        for (skip, lifecycle) in window.chain(carried) {
            let verdict = skip_verdict(
                self.rules,
                &self.states,
                skip.event.event_type(),
                skip.decided_at,
                cut,
            );
            out.push(NightRow::Skip { msg_id: skip.msg_id, verdict, lifecycle });
            if verdict == SkipVerdict::Pending {
                next.pending_skips.push(skip);
            }
        }
    }
}

/// The pair's finding by §5 at `cut` over the whole snapshot, if any.
fn current(order: &OrderRows, rule: &Rule, state: &EffectState, cut: Micros) -> Option<Current> {
    let verdict =
        |break_on: Micros| if break_on <= cut { Verdict::Break } else { Verdict::Pending };
    match (state.due_at, state.first) {
        (Some(due), _) if state.owed() => {
            let break_on = due + rule.grace_micros;
            let class = missing_class(order, rule, cut);
            Some(Current { class, break_on, verdict: verdict(break_on) })
        }
        (None, Some((first, _))) => {
            let break_on = first + rule.grace_micros;
            Some(Current { class: Class::OrphanEffect, break_on, verdict: verdict(break_on) })
        }
        (Some(_), Some((first, _))) if state.unreversed(rule) => {
            let break_on = state.reverse_from(first) + rule.grace_micros;
            Some(Current { class: Class::UnreversedEffect, break_on, verdict: verdict(break_on) })
        }
        (Some(_), _) if state.ok >= 2 => state.second.map(|(second, _)| Current {
            class: Class::DuplicateEffect,
            break_on: second,
            verdict: Verdict::Break,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::DAY_MICROS;
    use crate::vocabulary::ReceiptStatus;
    use crate::workload::world::{LedgerEntry, ReceiptEntry, StatusChange};

    const MIN: Micros = 60_000_000;
    const C1: Micros = 20_000 * DAY_MICROS;

    fn night(index: usize) -> Night {
        let cut = C1 + index as Micros * DAY_MICROS;
        let since = cut - DAY_MICROS;
        let origin = C1 - DAY_MICROS;
        let lower = if index == 0 { since } else { origin.max(since - 2 * DAY_MICROS) };
        Night { index, since, cut, lower, max_age: 30 * DAY_MICROS }
    }

    fn skipped_paid(paid: Micros) -> OrderRows {
        let mut o = OrderRows { order_id: 7, ..Default::default() };
        o.history.push(StatusChange { status: Status::Paid, at: paid });
        o.ledger.push(LedgerEntry {
            msg_id: MsgId::Event { order_id: 7, seq: 1 },
            event: Status::Paid,
            produced: paid,
            action: LedgerAction::Skipped,
            observed: Status::Shipped,
            partition: 0,
            offset: 0,
            consumer: 0,
            decided_at: paid + MIN,
            revoked_at: None,
        });
        o
    }

    fn grant(o: &mut OrderRows, provider: Provider, at: Micros) {
        let seq = o.next_receipt_seq(provider);
        let r = ReceiptEntry {
            provider,
            seq,
            msg_id: None,
            produced: None,
            status: ReceiptStatus::Succeeded,
            created_at: at,
            reversed_at: None,
        };
        o.receipts.push(r);
    }

    fn kinds(rows: &[NightRow]) -> Vec<String> {
        rows.iter()
            .map(|r| match r {
                NightRow::Finding { class, verdict, life, .. } => format!(
                    "{} {} {:?}",
                    class.as_str(),
                    verdict.as_str(),
                    life.map(|l| (l.lifecycle.as_str(), l.runs_open, l.rechecked))
                ),
                NightRow::Skip { verdict, lifecycle, .. } => {
                    format!("skip {verdict} {}", lifecycle.as_str())
                }
                NightRow::Resolved { finding, resolution, .. } => {
                    format!("resolved {} {}", finding.class.as_str(), resolution.as_str())
                }
            })
            .collect()
    }

    /// The first night of a chain is a plain §5 run: the same findings and skip verdicts
    /// as the single-night judge, BREAK rows NEW.
    #[test]
    fn the_first_night_agrees_with_the_single_night_judge() {
        use crate::workload::truth::{Judge, TruthRow};
        use crate::workload::world::Fault;
        use crate::workload::WorkloadPlan;
        let rules = RuleSet::default_rules().unwrap();
        let mut plan =
            WorkloadPlan::new(crate::storage::Location::parse("/tmp/unused").unwrap(), 3000)
                .unwrap();
        for (fault, rate) in [
            (Fault::Reorder, 0.05),
            (Fault::LostCall, 0.05),
            (Fault::Orphan, 0.03),
            (Fault::Edge, 0.05),
        ] {
            plan.rates.set(fault, rate);
        }
        plan.incident = true;
        let world = plan.world(&rules);
        let window = plan.window();
        let first = Night {
            index: 0,
            since: window.since,
            cut: window.cut,
            lower: window.since,
            max_age: 30 * DAY_MICROS,
        };
        let (mut single, mut chained) =
            (Judge::new(&rules, window), NightJudge::new(&rules, first));
        let (mut order, mut offsets) = (OrderRows::default(), vec![0; 24]);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut compared = 0;
        for order_id in plan.order_ids() {
            world.simulate(order_id, &mut offsets, &mut order);
            a.clear();
            b.clear();
            single.judge(&order, &mut a);
            let carry = chained.judge(&order, &Carry::default(), &mut b);
            let expected: Vec<(Option<String>, Option<Class>, &str)> = a
                .iter()
                .map(|r| match *r {
                    TruthRow::Finding { effect, class, verdict, .. } => {
                        (Some(effect.to_string()), Some(class), verdict.as_str())
                    }
                    TruthRow::SkipVerdict { verdict, .. } => (None, None, verdict.as_str()),
                })
                .collect();
            let got: Vec<(Option<String>, Option<Class>, &str)> = b
                .iter()
                .map(|r| match *r {
                    NightRow::Finding { rule, class, verdict, life } => {
                        assert_eq!(life.is_some(), verdict == Verdict::Break);
                        let effect = rules.rules[rule].effect.clone();
                        (Some(effect), Some(class), verdict.as_str())
                    }
                    NightRow::Skip { verdict, lifecycle, .. } => {
                        assert_eq!(lifecycle, SkipLifecycle::New);
                        (None, None, verdict.as_str())
                    }
                    NightRow::Resolved { .. } => panic!("nothing to resolve on a first night"),
                })
                .collect();
            assert_eq!(got, expected, "order {order_id}");
            let breaks = a
                .iter()
                .filter(|r| matches!(r, TruthRow::Finding { verdict: Verdict::Break, .. }))
                .count();
            assert_eq!(carry.open.len(), breaks);
            compared += a.len();
        }
        assert!(compared > 100);
    }

    #[test]
    fn a_skipped_grant_persists_then_resolves_by_receipt() {
        let rules = RuleSet::default_rules().unwrap();
        let mut o = skipped_paid(C1 - 5 * 60 * MIN);
        let mut rows = Vec::new();
        let carry = NightJudge::new(&rules, night(0)).judge(&o, &Carry::default(), &mut rows);
        assert_eq!(carry.open.len(), 2, "{:?}", kinds(&rows));
        rows.clear();
        let carry = NightJudge::new(&rules, night(1)).judge(&o, &carry, &mut rows);
        assert_eq!(
            kinds(&rows)[0],
            "SKIPPED_BUT_DUE BREAK Some((\"PERSISTING\", 2, true))",
            "{:?}",
            kinds(&rows)
        );
        grant(&mut o, Provider::Points, C1 + DAY_MICROS + 60 * MIN);
        rows.clear();
        let carry = NightJudge::new(&rules, night(2)).judge(&o, &carry, &mut rows);
        assert_eq!(kinds(&rows)[0], "resolved SKIPPED_BUT_DUE RECEIPT");
        assert_eq!(carry.open.len(), 1, "wms_lock stays open");
    }

    #[test]
    fn rows_out_of_coverage_are_not_rechecked_then_expire() {
        let rules = RuleSet::default_rules().unwrap();
        let o = skipped_paid(C1 - 5 * 60 * MIN);
        let mut rows = Vec::new();
        let carry = NightJudge::new(&rules, night(0)).judge(&o, &Carry::default(), &mut rows);
        rows.clear();
        let empty = OrderRows { order_id: 7, ..Default::default() };
        let carry = NightJudge::new(&rules, night(1)).judge(&empty, &carry, &mut rows);
        assert_eq!(kinds(&rows)[0], "SKIPPED_BUT_DUE BREAK Some((\"PERSISTING\", 2, false))");
        rows.clear();
        let mut late = night(30);
        late.index = 2;
        NightJudge::new(&rules, late).judge(&empty, &carry, &mut rows);
        assert_eq!(kinds(&rows)[0], "resolved SKIPPED_BUT_DUE EXPIRED");
    }

    #[test]
    fn a_late_duplicate_within_the_horizon_is_new_and_beyond_it_is_not_listed() {
        let rules = RuleSet::default_rules().unwrap();
        let mut o = OrderRows { order_id: 3, ..Default::default() };
        o.history.push(StatusChange { status: Status::Paid, at: C1 - 3 * DAY_MICROS });
        grant(&mut o, Provider::Points, C1 - 3 * DAY_MICROS + MIN);
        grant(&mut o, Provider::Wms, C1 - 3 * DAY_MICROS + MIN);
        let mut within = o.clone();
        grant(&mut within, Provider::Points, C1 - 60 * MIN);
        let mut rows = Vec::new();
        NightJudge::new(&rules, night(2)).judge(&within, &Carry::default(), &mut rows);
        assert_eq!(kinds(&rows), ["DUPLICATE_EFFECT BREAK Some((\"NEW\", 1, true))"]);
        grant(&mut o, Provider::Points, C1 - DAY_MICROS - 60 * MIN);
        rows.clear();
        NightJudge::new(&rules, night(2)).judge(&o, &Carry::default(), &mut rows);
        assert!(rows.is_empty(), "older than the origin: {:?}", kinds(&rows));
    }
}
