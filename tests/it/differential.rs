//! The same snapshot at batch sizes {1, 7, 8192} and target partitions {1, 2, 4} gives
//! identical outputs (DataFusion's plans change with both; our answers must not).

use effect_recon::recon::{reconcile, Window};
use effect_recon::session::{self, SessionOptions};
use effect_recon::snapshot::Snapshot;
use effect_recon::time::parse_instant;

use super::common::*;

#[tokio::test]
async fn outputs_do_not_depend_on_batch_size_or_partitions() {
    let snapshot = Snapshot::open(&tiny_snapshot()).await.unwrap();
    let rules = effect_recon::config::RuleSet::default_rules().unwrap();
    let cut = parse_instant(TINY_CUT).unwrap();
    let window = Window::resolve(cut, None, None).unwrap();
    let mut reference: Option<[String; 3]> = None;
    for batch_size in [1, 7, 8192] {
        for target_partitions in [1, 2, 4] {
            let ctx = session::build(&SessionOptions { target_partitions, batch_size, memory_limit: None }).unwrap();
            snapshot.register(&ctx).await.unwrap();
            let outputs = reconcile(&ctx, &rules, window, false).await.unwrap();
            let got = [
                psv(&[outputs.discrepancies]),
                psv(&[outputs.compensation_tasks]),
                psv(&[outputs.skip_verdicts]),
            ];
            assert!(got[0].lines().count() > 10, "the fixture should have findings");
            match &reference {
                None => reference = Some(got),
                Some(expected) => assert_eq!(&got, expected, "batch_size {batch_size}, target_partitions {target_partitions}"),
            }
        }
    }
}
