//! `simulate`: every consumer policy over one world, its costs, and its T+1 net.

use std::path::Path;

use effect_recon::config::RuleSet;
use effect_recon::simulate::{self, PolicyReport, SimPlan, DEFAULT_POLICIES};
use effect_recon::storage::Location;
use effect_recon::vocabulary::LedgerAction;
use effect_recon::workload::world::{
    Fault, MsgId, OrderRows, Policy, PolicyOutcome, Status, Work, World, INCIDENT_ORDER,
    INCIDENT_PAID_MSG,
};
use effect_recon::workload::{self, FaultRates, WorkloadPlan};

use super::common::{block_on, location, tree_bytes};

const SECOND: i64 = 1_000_000;
const DAY: i64 = 86_400 * SECOND;

fn policies() -> Vec<Policy> {
    simulate::parse_policies(&format!(
        "{DEFAULT_POLICIES},scan:1m:2h,pending-review:10m,state-machine+scan:5m,{}",
        "fenced,fenced+state-machine,versioned:10m,obligation"
    ))
    .unwrap()
    .into_iter()
    .map(|(_, p)| p)
    .collect()
}

fn world(rates: FaultRates, seed: u64) -> (WorkloadPlan, World) {
    let mut plan =
        WorkloadPlan::new(Location::parse("/tmp/unused-simulate").unwrap(), 3000).unwrap();
    plan.seed = seed;
    plan.rates = rates;
    plan.incident = true;
    let world = plan.world(&RuleSet::default_rules().unwrap());
    (plan, world)
}

/// Runs `policy` over every order of `plan`, calling `each` on every order's rows.
fn run_policy(
    plan: &WorkloadPlan,
    world: &World,
    policy: &Policy,
    trace: bool,
    mut each: impl FnMut(&OrderRows),
) -> PolicyOutcome {
    let mut outcome = PolicyOutcome { trace, ..PolicyOutcome::default() };
    let mut offsets = vec![0; world.partitions() as usize];
    let mut order = OrderRows::default();
    for order_id in plan.order_ids() {
        world.simulate_under(policy, order_id, &mut offsets, &mut order, &mut outcome);
        each(&order);
    }
    outcome
}

/// What the world is made of, whatever the policy: statuses, and the order-event
/// messages (id, event, production, partition).
type OrderWorld = (i64, Vec<(Status, i64)>, Vec<(String, Status, i64, i32)>);
type WorldRows = Vec<OrderWorld>;

fn world_rows(order: &OrderRows) -> OrderWorld {
    let history = order.history.iter().map(|c| (c.status, c.at)).collect();
    let messages = order
        .ledger
        .iter()
        .map(|e| (e.msg_id.to_string(), e.event, e.produced, e.partition))
        .collect();
    (order.order_id, history, messages)
}

#[test]
fn every_policy_sees_the_same_world() {
    let (plan, world) = world(FaultRates::default(), 11);
    let mut reference: Option<WorldRows> = None;
    let mut skipped_by = Vec::new();
    for policy in policies() {
        let mut rows = WorldRows::new();
        let mut skipped = 0;
        let outcome = run_policy(&plan, &world, &policy, false, |o| {
            rows.push(world_rows(o));
            skipped += o.ledger.iter().filter(|e| e.action == LedgerAction::Skipped).count();
        });
        assert_eq!(outcome.orders, 3001, "{policy}");
        match &reference {
            None => reference = Some(rows),
            Some(reference) => {
                assert_eq!(reference.len(), rows.len());
                for (a, b) in reference.iter().zip(&rows) {
                    assert_eq!(a, b, "{policy}: order {} differs", a.0);
                }
            }
        }
        skipped_by.push((policy, skipped));
    }
    assert!(reference.is_some_and(|r| r.iter().map(|o| o.2.len()).sum::<usize>() > 9_000));
    // Same world, other decisions: the policies do differ in what they leave SKIPPED.
    let skip = skipped_by[0].1;
    assert!(skip > 20, "{skipped_by:?}");
    let fewer = |name: &str| skipped_by.iter().any(|(p, n)| p.to_string() == name && *n < skip);
    assert!(fewer("state-machine") && fewer("rereview-event"), "{skipped_by:?}");
}

#[test]
fn skip_is_gen_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let mut plan = SimPlan::new(1500, 5, "skip").unwrap();
    plan.net = Some(location(&dir.path().join("sim")));
    let reports = block_on(simulate::simulate(&plan)).unwrap();
    assert!(reports[0].net.as_ref().unwrap().exact);
    let mut gen_plan = WorkloadPlan::new(location(&dir.path().join("gen")), 1500).unwrap();
    gen_plan.seed = 5;
    gen_plan.incident = true;
    block_on(workload::generate(&gen_plan)).unwrap();
    let generated = tree_bytes(&dir.path().join("gen"));
    let simulated = tree_bytes(&dir.path().join("sim").join("skip").join("snapshot"));
    assert!(generated.len() >= 6, "{:?}", generated.iter().map(|f| &f.0).collect::<Vec<_>>());
    assert_eq!(
        generated.iter().map(|f| &f.0).collect::<Vec<_>>(),
        simulated.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for (g, s) in generated.iter().zip(&simulated) {
        assert!(g.1 == s.1, "{} differs", g.0);
    }
}

fn net_reports(policies: &str, rates: FaultRates, dir: &Path) -> Vec<PolicyReport> {
    let mut plan = SimPlan::new(2500, 3, policies).unwrap();
    plan.workload.rates = rates;
    plan.net = Some(location(dir));
    block_on(simulate::simulate(&plan)).unwrap()
}

#[test]
fn every_policy_net_is_exact_and_state_machine_never_skips_a_due_effect() {
    let dir = tempfile::tempdir().unwrap();
    let rates = FaultRates::default()
        .with(Fault::Reorder, 0.03)
        .with(Fault::Revoked, 0.0)
        .with(Fault::CancelRace, 0.03);
    let list = format!("{DEFAULT_POLICIES},scan:1m:2h");
    let reports = net_reports(&list, rates, dir.path());
    assert_eq!(reports.len(), 7);
    for r in &reports {
        let net = r.net.as_ref().unwrap();
        assert!(net.exact, "{}: {} mismatches in {}", r.label, net.mismatches, net.run);
    }
    let by = |label: &str| reports.iter().find(|r| r.label == label).unwrap();
    let skip = by("skip");
    assert!(skip.net.as_ref().unwrap().skipped_but_due() > 10, "{:?}", skip.net);
    assert!(skip.outcome.lost > by("state-machine").outcome.lost);
    let state_machine = by("state-machine");
    assert_eq!(state_machine.net.as_ref().unwrap().skipped_but_due(), 0, "{:?}", state_machine.net);
    // Re-review and scans win back every reorder that is re-judged before the dump.
    assert!(by("rereview-event").outcome.revoked > 0 && by("scan:5m").outcome.revoked > 0);
    assert!(by("scan:5m").outcome.lost < skip.outcome.lost);
}

#[test]
fn pending_review_wins_only_with_n_longer_than_the_gap() {
    // The planted incident: consumers read a status replica 3 s behind, so a message
    // handled within 3 s of its change sees the status before it and is skipped.
    let (plan, world) = world(FaultRates::none(), 21);
    let world = world.with_read_lag(3 * SECOND);
    let plan = WorkloadPlan { orders: 400, incident: false, ..plan };
    let lost = |policy: &str| {
        run_policy(&plan, &world, &Policy::parse(policy).unwrap(), false, |_| {}).lost
    };
    let (skip, short, long) = (lost("skip"), lost("pending-review:1s"), lost("pending-review:5s"));
    assert!(skip > 300, "{skip}");
    assert!(short > 300, "N = 1s < the 3 s gap loses effects: {short}");
    assert_eq!(long, 0, "N = 5s > the 3 s gap loses none");
    // The rebalance incident is the other kind of reorder: the status is already past
    // PAID, and stays past it, so no N re-checking the current status saves it.
    let (plan, world) = self::world(FaultRates::none(), 21);
    let plan = WorkloadPlan { orders: 1, ..plan };
    for n in ["1s", "60s", "1h"] {
        let policy = Policy::parse(&format!("pending-review:{n}")).unwrap();
        let outcome = run_policy(&plan, &world, &policy, false, |_| {});
        assert_eq!(outcome.lost, 2, "pending-review:{n} on the incident (points and wms)");
    }
}

#[test]
fn rereview_event_revokes_the_incident_skip() {
    let (plan, world) = world(FaultRates::none(), 7);
    let cut = world.cut();
    let world = world.with_horizon(cut + 3 * DAY);
    let plan = WorkloadPlan { orders: 1, ..plan };
    let mut incident = None;
    let outcome = run_policy(&plan, &world, &Policy::RereviewEvent, true, |o| {
        if o.order_id == INCIDENT_ORDER {
            incident = Some(o.clone());
        }
    });
    assert!(outcome.revoked_msgs.contains(&MsgId::Named(INCIDENT_PAID_MSG)), "{outcome:?}");
    let order = incident.unwrap();
    let row = |id: &str| order.ledger.iter().find(|e| e.msg_id.to_string() == id).unwrap();
    // Revoked, then decided again on the history: the same row is DONE, after the skip
    // and after ORDER_SHIPPED's row, and points and WMS were granted for it.
    let paid = row(INCIDENT_PAID_MSG);
    let shipped = row("msg-7392");
    assert_eq!((paid.action, paid.event), (LedgerAction::Done, Status::Paid));
    assert!(paid.decided_at > shipped.decided_at + 60 * SECOND, "{paid:?} {shipped:?}");
    let granted =
        order.receipts.iter().filter(|r| r.msg_id == Some(MsgId::Named(INCIDENT_PAID_MSG))).count();
    assert_eq!(granted, 2, "points and wms re-driven");
    assert_eq!(outcome.lost, 0);
    // Under skip the same order loses both effects.
    let skipped = run_policy(&plan, &world, &Policy::Skip, true, |_| {});
    assert_eq!(skipped.lost, 2);
}

#[test]
fn costs_add_up() {
    let (plan, world) = world(FaultRates::default(), 13);
    // Dumped a month later, so the rows hold every status change the re-reviews announce.
    let cut = world.cut();
    let world = world.with_horizon(cut + 30 * DAY);
    for policy in policies() {
        let mut changes = 0u64;
        let outcome =
            run_policy(&plan, &world, &policy, true, |o| changes += o.history.len() as u64);
        let reads: u64 = outcome.charges.iter().map(|c| u64::from(c.reads)).sum();
        let writes: u64 = outcome.charges.iter().map(|c| u64::from(c.writes)).sum();
        assert_eq!((reads, writes), (outcome.reads, outcome.writes), "{policy}");
        let count = |w: Work| outcome.charges.iter().filter(|c| c.work == w).count() as u64;
        assert_eq!(count(Work::Message), outcome.messages, "{policy}");
        let (m, rechecks) = (outcome.messages, count(Work::Recheck));
        match policy {
            Policy::Skip | Policy::StateMachine => {
                assert_eq!((outcome.reads, outcome.writes), (2 * m, m), "{policy}");
                assert_eq!(outcome.extra_messages, 0);
            }
            Policy::PendingReview { .. } => {
                assert!(rechecks > 0);
                assert_eq!(rechecks, outcome.parked);
                assert_eq!((outcome.reads, outcome.writes), (2 * m + rechecks, m + rechecks));
                assert_eq!(outcome.extra_messages, rechecks);
            }
            Policy::RereviewEvent => {
                assert_eq!(count(Work::Rereview), changes, "one re-review per status change");
                assert_eq!(outcome.extra_messages, changes);
                assert_eq!(outcome.writes, m + 2 * outcome.revoked);
            }
            Policy::Scan { .. } | Policy::StateMachineScan { .. } => {
                assert_eq!(count(Work::Scan), outcome.scanned_rows);
                assert_eq!(outcome.reads, 2 * m + outcome.scanned_rows);
                assert_eq!(outcome.writes, m + 2 * outcome.revoked);
            }
            Policy::Fenced { .. } => {
                // One refused write per zombie write, nothing else beyond skip's.
                let fenced = count(Work::Fenced);
                assert!(fenced > 0, "{policy}: the world has zombies");
                assert_eq!((outcome.reads, outcome.writes), (2 * m, m + fenced), "{policy}");
                assert_eq!(outcome.extra_messages, 0);
            }
            Policy::Versioned { .. } => {
                let parked = count(Work::Park);
                assert!(parked > 0 && parked == outcome.parked, "{policy}");
                assert_eq!((outcome.reads, outcome.writes), (2 * m + parked, m + parked));
                assert_eq!(outcome.extra_messages, parked);
            }
            Policy::Obligation => {
                let attempts = count(Work::Attempt);
                let rows: u64 = outcome
                    .charges
                    .iter()
                    .filter(|c| c.work == Work::Obligation)
                    .map(|c| u64::from(c.writes))
                    .sum();
                assert!(attempts > 0 && rows > 0);
                assert_eq!(outcome.reads, 2 * m + 2 * attempts, "{policy}");
                assert_eq!(outcome.writes, m + rows + 2 * attempts, "{policy}");
                assert_eq!(outcome.extra_messages, 0);
            }
        }
    }
}

// ---------------------------------------------------------------- the skip removed, the
// reorder prevented (docs/REVERSIBLE-SKIPS.md, "The policies re-ranked")

fn outcome_of(world: &World, plan: &WorkloadPlan, policy: &str) -> PolicyOutcome {
    run_policy(plan, world, &Policy::parse(policy).unwrap(), true, |_| {})
}

#[test]
fn fencing_has_the_old_owner_drain_the_incident_in_offset_order() {
    let (plan, world) = world(FaultRates::none(), 7);
    let plan = WorkloadPlan { orders: 1, ..plan };
    let mut incident = None;
    let outcome = run_policy(&plan, &world, &Policy::Fenced { history: false }, true, |o| {
        incident = Some(o.clone());
    });
    let order = incident.unwrap();
    let row = |id: &str| *order.ledger.iter().find(|e| e.msg_id.to_string() == id).unwrap();
    let (paid, shipped) = (row(INCIDENT_PAID_MSG), row("msg-7392"));
    // The zombie's SKIPPED write was refused; the old owner finished the message while it
    // still owned the partition, before the new owner handled ORDER_SHIPPED.
    assert_eq!(outcome.charges.iter().filter(|c| c.work == Work::Fenced).count(), 1);
    assert_eq!((paid.action, paid.observed), (LedgerAction::Done, Status::Paid), "{paid:?}");
    assert!(paid.decided_at < shipped.decided_at, "{paid:?} {shipped:?}");
    assert_eq!(paid.consumer, world.owner_at(paid.partition, paid.produced));
    assert_eq!(outcome.lost, 0);
    assert_eq!(outcome_of(&world, &plan, "skip").lost, 2, "points and wms under skip");
}

#[test]
fn a_restart_backlog_loses_effects_that_fencing_cannot_save() {
    // No planted fault: every message is handled in order. After each restart the
    // consumers are 5 minutes behind, and a conditional skip handled late sees a status
    // that moved on (an order shipped within minutes of its payment).
    let (plan, world) = world(FaultRates::none(), 3);
    let plan = WorkloadPlan { incident: false, ..plan };
    let lost = |world: &World, policy: &str| outcome_of(world, &plan, policy).lost;
    for policy in ["skip", "fenced", "state-machine", "versioned:10m", "obligation"] {
        assert_eq!(lost(&world, policy), 0, "{policy} without a backlog");
    }
    let behind = world.clone().with_restart_backlog(5 * 60 * SECOND);
    let (skip, fenced) = (lost(&behind, "skip"), lost(&behind, "fenced"));
    assert!(skip > 0, "the backlog makes the skip handler lose effects");
    assert_eq!(fenced, skip, "fencing keeps the order, not the status the skip compares");
    for policy in ["fenced+state-machine", "state-machine", "versioned:10m", "obligation"] {
        assert_eq!(lost(&behind, policy), 0, "{policy} decides on what happened, not on now");
    }
}

#[test]
fn versions_know_a_status_was_reached_without_reading_it() {
    // Status reads lag 3 s: a message handled sooner after its change sees the status
    // before it. state-machine judges the history it reads and skips; the version on the
    // message says the status was reached.
    let (plan, world) = world(FaultRates::none(), 21);
    let world = world.with_read_lag(3 * SECOND);
    let plan = WorkloadPlan { orders: 400, incident: false, ..plan };
    let state_machine = outcome_of(&world, &plan, "state-machine");
    assert!(state_machine.lost > 300, "{}", state_machine.lost);
    let versioned = outcome_of(&world, &plan, "versioned:10m");
    assert_eq!(versioned.lost, 0);
    assert_eq!(outcome_of(&world, &plan, "obligation").lost, 0);
}

#[test]
fn the_obligation_loses_nothing_and_the_business_key_removes_every_double() {
    let (plan, world) = world(FaultRates::default(), 13);
    let obligation = outcome_of(&world, &plan, "obligation");
    let skip = outcome_of(&world, &plan, "skip");
    assert!(skip.lost > 0 && skip.duplicates > 0, "{skip:?}");
    // Lost calls are retried, forgotten reviews and unconsumed messages do not matter:
    // the debt exists from the status change on.
    assert_eq!(obligation.lost, 0);
    // A worker that died after its call and before its finish calls again when its lease
    // expires: without dedup at the provider, that is a second grant.
    assert!(obligation.duplicates > 0, "{obligation:?}");
    let dedup = world.clone().with_provider_dedup(true);
    for policy in policies() {
        let outcome = run_policy(&plan, &dedup, &policy, false, |_| {});
        assert_eq!(outcome.duplicates, 0, "{policy}: every path sends the business key");
    }
    // What is still done after a void is a manual grant on an order never paid (an
    // orphan: no grant holds its key), the same under every policy.
    let obligation = outcome_of(&dedup, &plan, "obligation");
    let skip = outcome_of(&dedup, &plan, "skip");
    assert_eq!((obligation.lost, obligation.duplicates), (0, 0));
    assert_eq!(obligation.done_after_void, skip.done_after_void);
}

#[test]
fn the_new_policies_nets_are_exact_in_every_world() {
    let rates = FaultRates::default().with(Fault::Reorder, 0.03).with(Fault::CancelRace, 0.03);
    let list = "skip,fenced,fenced+state-machine,versioned:10m,obligation";
    for (backlog, dedup) in [(0, false), (3 * 60 * SECOND, true)] {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = SimPlan::new(2500, 3, list).unwrap();
        plan.workload.rates = rates;
        plan.restart_backlog = backlog;
        plan.provider_dedup = dedup;
        plan.net = Some(location(dir.path()));
        let reports = block_on(simulate::simulate(&plan)).unwrap();
        for r in &reports {
            let net = r.net.as_ref().unwrap();
            assert!(
                net.exact,
                "{} (backlog {backlog}): {} mismatches in {}",
                r.label, net.mismatches, net.run
            );
        }
        let by = |label: &str| reports.iter().find(|r| r.label == label).unwrap();
        assert_eq!(by("obligation").outcome.lost, 0);
        assert!(by("fenced").outcome.lost < by("skip").outcome.lost);
        assert_eq!(by("obligation").net.as_ref().unwrap().skipped_but_due(), 0);
    }
}

#[test]
fn a_bad_world_or_policy_is_refused_naming_the_flag_and_writing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let out = out.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--restart-backlog", "4h"], "--restart-backlog: 4h must be at least 0 and shorter than the time between two rebalances (3h)"),
        (&["--restart-backlog", "3m", "--rebalances-per-hour", "30"], "--restart-backlog: 3m must be at least 0 and shorter than the time between two rebalances (2m)"),
        (&["--policies", "skip,versioned"], "--policies: 'versioned' is not a policy"),
        (&["--policies", "obligation:5s"], "--policies: 'obligation:5s' is not a policy"),
    ];
    for (args, said) in cases {
        let mut all = vec!["simulate", "--orders", "50", "--out", out];
        all.extend_from_slice(args);
        let output = super::common::effect_recon(&all);
        let (_, stderr) = super::common::text(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
        assert!(!Path::new(out).exists(), "{args:?} wrote {out}");
    }
}
