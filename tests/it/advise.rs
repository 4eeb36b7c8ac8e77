//! `advise` on generated days: it recovers the consumer lag the generator was given, and
//! its suggested rules parse.

use std::path::{Path, PathBuf};

use effect_recon::advise::{self, AdvisePlan};
use effect_recon::config::RuleSet;
use effect_recon::stats::LagQuantiles;
use effect_recon::vocabulary::ReorderMechanism;
use effect_recon::workload::world::{Lag, Policy, PolicyOutcome};
use effect_recon::workload::{self, WorkloadPlan};

use super::common::{block_on, command, location, snapshot_from_csv};

const MS: i64 = 1_000;

/// A SplitMix64 of the test's own, to sample what the generator was told.
struct Sampler(u64);

impl Sampler {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn between(&mut self, low: i64, high: i64) -> i64 {
        low + (self.next() % (high - low) as u64) as i64
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The decision lag of a message with no provider to call (ORDER_CREATED): production
/// 1–30 ms after the change, the consumer lag, then 1–20 ms to record the decision.
fn expected(lag: Lag) -> LagQuantiles {
    let mut s = Sampler(99);
    let mut sample: Vec<i64> = (0..200_000)
        .map(|_| {
            let consumer = match lag {
                Lag::Uniform { low, high } => s.between(low, high),
                Lag::Exponential { low, mean } => {
                    low + (-(1.0 - s.unit()).ln() * mean as f64).round() as i64
                }
            };
            s.between(MS, 30 * MS) + consumer + s.between(MS, 20 * MS)
        })
        .collect();
    LagQuantiles::of(&mut sample)
}

fn generate(dir: &Path, lag: Lag) {
    let mut plan = WorkloadPlan::new(location(dir), 6000).unwrap();
    plan.seed = 17;
    plan.incident = true;
    let world = plan.world(&RuleSet::default_rules().unwrap()).with_lag(lag);
    block_on(workload::generate_under(&plan, &world, &Policy::Skip, &mut PolicyOutcome::default()))
        .unwrap();
}

fn advice(dir: &Path) -> advise::Advice {
    block_on(advise::advise(&AdvisePlan {
        snapshot: location(dir),
        run: None,
        rules: RuleSet::default_rules().unwrap(),
        rebalance_window: 30 * 60 * 1_000_000,
    }))
    .unwrap()
}

#[test]
fn advise_recovers_the_lag_the_generator_was_given() {
    for (lag, tolerance) in
        [(Lag::default(), 45 * MS), (Lag::Exponential { low: 5 * MS, mean: 400 * MS }, 45 * MS)]
    {
        let dir = tempfile::tempdir().unwrap();
        generate(dir.path(), lag);
        let advice = advice(dir.path());
        let got = advice.lags["ORDER_CREATED"];
        let want = expected(lag);
        assert!(got.count > 5000, "{got:?}");
        for (name, g, w) in [("p50", got.p50, want.p50), ("p90", got.p90, want.p90)] {
            assert!((g - w).abs() <= tolerance, "{lag:?} {name}: advise {g} vs given {w}");
        }
        // Its suggested rules parse, with a grace for every rule.
        let rules = RuleSet::parse(&advice.rules_toml, "suggested").unwrap();
        assert_eq!(rules.rules.len(), 3);
        assert!(rules.rules.iter().all(|r| r.grace_micros >= 60_000_000), "{}", advice.rules_toml);
        // What each rule owes back is kept as it was (DESIGN §10.1).
        let kept: Vec<_> =
            rules.rules.iter().map(|r| (r.reverse_on_void, r.reversal.clone())).collect();
        let given: Vec<_> = RuleSet::default_rules()
            .unwrap()
            .rules
            .into_iter()
            .map(|r| (r.reverse_on_void, r.reversal))
            .collect();
        assert_eq!(kept, given, "{}", advice.rules_toml);
        // Grants after a void (effects to undo) are no handler lag: the graces stay minutes.
        for g in &advice.graces {
            assert!(g.advised <= 60 * 60 * 1_000_000, "{}: {}", g.effect, g.arithmetic);
        }
        // The planted reorders are found, and concentrated after rebalances.
        assert!(advice.skips.ahead > 0, "{:?}", advice.skips);
        assert!(advice.after_rebalance.rate() > advice.steady.rate(), "{advice:?}");
        // Every reorder gets one mechanism: the generator's zombies (the old owner writing
        // after the handoff) are found; its cancel races are one consumer out of offset
        // order; it has no retry topic and no producer that swaps messages.
        let reordered = advice.after_rebalance.reordered + advice.steady.reordered;
        let m = &advice.mechanisms;
        assert_eq!(m.values().sum::<u64>(), reordered, "{m:?}");
        assert!(m.get(&ReorderMechanism::OldOwnerLate).is_some_and(|&n| n > 0), "{m:?}");
        assert!(!m.contains_key(&ReorderMechanism::RetryTopic), "{m:?}");
        assert!(!m.contains_key(&ReorderMechanism::ProducerOrder), "{m:?}");
    }
}

#[test]
fn advise_command_writes_rules_that_parse() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("snap");
    generate(&snapshot, Lag::default());
    let rules = dir.path().join("suggested.toml");
    let output = command(&["advise", "--snapshot", snapshot.to_str().unwrap()])
        .args(["--rules-out", rules.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("ORDER_PAID") && stdout.contains("advised grace"), "{stdout}");
    let text = std::fs::read_to_string(&rules).unwrap();
    RuleSet::parse(&text, "suggested").unwrap();
    assert!(text.contains("# was 30m"), "{text}");
}

/// One order per mechanism on its own partition (cut 2026-11-29T16:00:00Z):
/// 1 a zombie: c-1 lost p1 at 10:00 and still wrote PAID at 10:20, between c-2's rows;
/// 2 a later offset decided by c-3 before its handoff at 11:00, the PAID redelivered to c-4;
/// 3 one consumer out of offset order; 4 a retry topic deciding PAID an hour late;
/// 5 a producer that wrote SHIPPED (changed at 09:10) before PAID (09:00).
const LEDGER: &str = "\
msg_id,order_id,event_type,expected_status,action,observed_status,topic,kafka_partition,kafka_offset,consumer_id,decided_at
m1b,1,ORDER_SHIPPED,SHIPPED,DONE,SHIPPED,order-event,1,11,c-2,2026-11-29T10:05:00Z
f90,90,ORDER_PAID,PAID,DONE,PAID,order-event,1,12,c-2,2026-11-29T10:10:00Z
m1a,1,ORDER_PAID,PAID,SKIPPED,SHIPPED,order-event,1,10,c-1,2026-11-29T10:20:00Z
f91,91,ORDER_PAID,PAID,DONE,PAID,order-event,1,13,c-2,2026-11-29T10:30:00Z
m2b,2,ORDER_SHIPPED,SHIPPED,DONE,SHIPPED,order-event,2,21,c-3,2026-11-29T10:50:00Z
m2a,2,ORDER_PAID,PAID,SKIPPED,SHIPPED,order-event,2,20,c-4,2026-11-29T11:05:00Z
f92,92,ORDER_PAID,PAID,DONE,PAID,order-event,2,22,c-4,2026-11-29T11:10:00Z
m3b,3,ORDER_SHIPPED,SHIPPED,DONE,SHIPPED,order-event,3,31,c-5,2026-11-29T12:00:00Z
m3a,3,ORDER_PAID,PAID,SKIPPED,SHIPPED,order-event,3,30,c-5,2026-11-29T12:01:00Z
m4b,4,ORDER_SHIPPED,SHIPPED,DONE,SHIPPED,order-event,4,41,c-6,2026-11-29T13:00:00Z
m4a,4,ORDER_PAID,PAID,SKIPPED,SHIPPED,order-event-retry,4,40,c-6,2026-11-29T14:00:00Z
m5b,5,ORDER_SHIPPED,SHIPPED,SKIPPED,CREATED,order-event,5,50,c-7,2026-11-29T09:10:05Z
m5a,5,ORDER_PAID,PAID,DONE,PAID,order-event,5,51,c-7,2026-11-29T09:10:06Z
";

const HISTORY: &str = "\
order_id,status,changed_at
1,PAID,2026-11-29T09:50:00Z
1,SHIPPED,2026-11-29T10:00:00Z
2,PAID,2026-11-29T10:40:00Z
2,SHIPPED,2026-11-29T10:45:00Z
3,PAID,2026-11-29T11:50:00Z
3,SHIPPED,2026-11-29T11:55:00Z
4,PAID,2026-11-29T12:50:00Z
4,SHIPPED,2026-11-29T12:55:00Z
5,PAID,2026-11-29T09:00:00Z
5,SHIPPED,2026-11-29T09:10:00Z
";

/// A snapshot cut at 2026-11-29T16:00:00Z, under `dir`/snap, of a ledger, a status history
/// and receipt sources (name, CSV rows without the header), all CSV.
fn csv_snapshot(dir: &Path, ledger: &str, history: &str, receipts: &[(&str, &str)]) -> PathBuf {
    let csv = dir.join("csv");
    std::fs::create_dir(&csv).unwrap();
    std::fs::write(csv.join("ledger.csv"), ledger).unwrap();
    std::fs::write(csv.join("status_history.csv"), history).unwrap();
    for (source, rows) in receipts {
        let text = format!("receipt_id,order_id,effect,msg_id,status,created_at\n{rows}");
        std::fs::write(csv.join(format!("receipts_{source}.csv")), text).unwrap();
    }
    let snapshot = dir.join("snap");
    block_on(snapshot_from_csv(&csv, &location(&snapshot), "2026-11-29T16:00:00Z"));
    snapshot
}

#[test]
fn each_reorder_mechanism_is_told_by_its_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = csv_snapshot(dir.path(), LEDGER, HISTORY, &[("points", "")]);
    let advice = advice(&snapshot);
    use ReorderMechanism::*;
    let found: Vec<_> = advice.mechanisms.iter().map(|(m, n)| (*m, *n)).collect();
    assert_eq!(
        found,
        [
            (OldOwnerLate, 1),
            (BeforeHandoff, 1),
            (SameConsumer, 1),
            (RetryTopic, 1),
            (ProducerOrder, 1)
        ]
    );
    let text = advice.render();
    assert!(text.contains("OLD_OWNER_LATE") && text.contains("enable.auto.commit=false"), "{text}");
    assert!(
        text.contains("enable.idempotence=true") && text.contains("CooperativeStickyAssignor"),
        "{text}"
    );
}

/// Two WRONG skips (cut 2026-11-29T16:00:00Z): order 11's ORDER_PAID was skipped at 09:00
/// while the order was still CREATED, and the payment committed only at 11:30 (a message
/// ahead of its commit, a late callback); order 12's was skipped after SHIPPED (the
/// rebalance incident), which a scan catches at its first tick.
const LATE_LEDGER: &str = "\
msg_id,order_id,event_type,expected_status,action,observed_status,topic,kafka_partition,kafka_offset,consumer_id,decided_at
p11,11,ORDER_PAID,PAID,SKIPPED,CREATED,order-event,1,10,c-1,2026-11-29T09:00:00Z
p12,12,ORDER_PAID,PAID,SKIPPED,SHIPPED,order-event,2,20,c-2,2026-11-29T10:00:00Z
p13,13,ORDER_PAID,PAID,DONE,PAID,order-event,3,30,c-3,2026-11-29T09:00:02Z
";

const LATE_HISTORY: &str = "\
order_id,status,changed_at
11,CREATED,2026-11-29T08:00:00Z
11,PAID,2026-11-29T11:30:00Z
12,CREATED,2026-11-29T09:00:00Z
12,PAID,2026-11-29T09:55:00Z
12,SHIPPED,2026-11-29T09:58:00Z
13,CREATED,2026-11-29T08:50:00Z
13,PAID,2026-11-29T09:00:00Z
";

#[test]
fn the_scan_ttl_covers_the_latest_wrong_skip() {
    let dir = tempfile::tempdir().unwrap();
    // Order 13 was paid and granted: the receipts are not empty.
    let receipts = [
        ("points", "points-13,13,points_grant,p13,SUCCEEDED,2026-11-29T09:00:01Z\n"),
        ("wms", "wms-13,13,wms_lock,p13,SUCCEEDED,2026-11-29T09:00:01Z\n"),
        ("logistics", ""),
    ];
    let snapshot = csv_snapshot(dir.path(), LATE_LEDGER, LATE_HISTORY, &receipts);
    let runs = dir.path().join("runs");
    let output = command(&["run", "--snapshot", snapshot.to_str().unwrap()])
        .args(["--out", runs.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let plan = AdvisePlan {
        snapshot: location(&snapshot),
        run: Some(location(&runs.join("run=20261129T160000Z"))),
        rules: RuleSet::default_rules().unwrap(),
        rebalance_window: 30 * 60 * 1_000 * MS,
    };
    let advice = block_on(advise::advise(&plan)).unwrap();
    assert_eq!(advice.verdicts.as_ref().unwrap().get("WRONG"), Some(&2), "{advice:?}");
    // 2 h 30 m from order 11's skip to its payment, plus the 5-minute interval.
    let (ttl, arithmetic) = advice.scan_ttl.clone().unwrap();
    assert_eq!(ttl, (2 * 60 + 35) * 60 * 1_000 * MS, "{arithmetic}");
    assert!(arithmetic.starts_with("2 WRONG skips, 1 of them decided before"), "{arithmetic}");
    assert!(advice.render().contains("advised scan TTL (state-machine+scan:5m:TTL): 2h 35m"));
}
