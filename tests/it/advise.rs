//! `advise` on generated days: it recovers the consumer lag the generator was given, and
//! its suggested rules parse.

use std::path::Path;

use effect_recon::advise::{self, AdvisePlan};
use effect_recon::config::RuleSet;
use effect_recon::stats::LagQuantiles;
use effect_recon::workload::world::{Lag, Policy, PolicyOutcome};
use effect_recon::workload::{self, WorkloadPlan};

use super::common::{block_on, command, location};

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
        // The planted reorders are found, and concentrated after rebalances.
        assert!(advice.skips.ahead > 0, "{:?}", advice.skips);
        assert!(advice.after_rebalance.rate() > advice.steady.rate(), "{advice:?}");
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
