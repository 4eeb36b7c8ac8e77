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
        "{DEFAULT_POLICIES},scan:1m:2h,pending-review:10m,state-machine+scan:5m"
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
        }
    }
}
