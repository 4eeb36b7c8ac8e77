//! Criterion bench of the reconciliation (`cargo bench --bench run`), so a regression
//! shows up locally. It reconciles a snapshot already registered in a session, i.e. the
//! `reconcile` stage of `effect-recon run` (validation and writing excluded).
//!
//! The snapshot is `EFFECT_RECON_BENCH_SNAPSHOT` when set, else a small day generated
//! with a fixed seed (20,000 orders, 24 partitions). The side-by-side comparison with
//! DuckDB and MariaDB is `benches/compare.py` (see benches/README.md).

use criterion::{criterion_group, criterion_main, Criterion};
use effect_recon::config::RuleSet;
use effect_recon::engine::session::{self, SessionOptions};
use effect_recon::recon::{reconcile, Bounds, Window};
use effect_recon::snapshot::Snapshot;
use effect_recon::storage::Location;
use effect_recon::workload::{self, WorkloadPlan};

fn bench_reconcile(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let generated = tempfile::tempdir().expect("temp dir");
    let (path, name) = match std::env::var("EFFECT_RECON_BENCH_SNAPSHOT") {
        Ok(path) => (path.clone(), path),
        Err(_) => {
            let path = generated.path().join("snapshot").display().to_string();
            let mut plan = WorkloadPlan::new(Location::parse(&path).expect("location"), 20_000)
                .expect("gen plan");
            plan.seed = 7;
            runtime.block_on(workload::generate(&plan)).expect("gen");
            (path, "generated day, 20000 orders".to_string())
        }
    };
    let location = Location::parse(&path).expect("snapshot location");
    let snapshot = runtime.block_on(Snapshot::open(&location)).expect("snapshot");
    let rules = RuleSet::default_rules().expect("rules");
    let window = Window::resolve(snapshot.cut(), None, None).expect("window");
    let bounds = Bounds::standalone(window, "bench");
    let mut group = c.benchmark_group("reconcile");
    group.sample_size(10);
    group.bench_function(name, |b| {
        b.iter(|| {
            runtime.block_on(async {
                let ctx = session::build(&SessionOptions {
                    target_partitions: 2,
                    ..SessionOptions::default()
                })
                .expect("session");
                snapshot.register(&ctx).await.expect("register");
                reconcile(
                    &ctx,
                    &rules,
                    &bounds,
                    effect_recon::engine::session::ROWS_PER_PASS,
                    false,
                )
                .await
                .expect("reconcile")
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench_reconcile);
criterion_main!(benches);
