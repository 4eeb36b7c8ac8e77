//! Criterion bench of the reconciliation (`cargo bench --bench run`), so a regression
//! shows up locally. It reconciles a snapshot already registered in a session, i.e. the
//! `reconcile` stage of `effect-recon run` (validation and writing excluded).
//!
//! The snapshot is `EFFECT_RECON_BENCH_SNAPSHOT` when set (e.g. a generated day), else
//! the committed tiny fixture. The side-by-side comparison with DuckDB and MariaDB is
//! `benches/compare.py` (see benches/README.md).

use criterion::{criterion_group, criterion_main, Criterion};
use effect_recon::config::RuleSet;
use effect_recon::recon::{reconcile, Window};
use effect_recon::session::{self, SessionOptions};
use effect_recon::snapshot::Snapshot;
use effect_recon::storage::Location;

fn bench_reconcile(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let path = std::env::var("EFFECT_RECON_BENCH_SNAPSHOT").unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tiny/snapshot").to_string());
    let location = Location::parse(&path).expect("snapshot location");
    let snapshot = runtime.block_on(Snapshot::open(&location)).expect("snapshot");
    let rules = RuleSet::default_rules().expect("rules");
    let window = Window::resolve(snapshot.cut(), None, None).expect("window");
    let mut group = c.benchmark_group("reconcile");
    group.sample_size(10);
    group.bench_function(format!("{path}"), |b| {
        b.iter(|| {
            runtime.block_on(async {
                let ctx = session::build(&SessionOptions { target_partitions: 2, ..SessionOptions::default() }).expect("session");
                snapshot.register(&ctx).await.expect("register");
                reconcile(&ctx, &rules, window, false).await.expect("reconcile")
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench_reconcile);
criterion_main!(benches);
