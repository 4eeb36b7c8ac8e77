//! The same snapshot at batch sizes {1, 7, 8192}, target partitions {1, 2, 4} and one or
//! many order_id passes gives identical outputs (plans change with all three; our answers
//! must not).

use effect_recon::engine::session::{self, SessionOptions};
use effect_recon::recon::{reconcile, Bounds, Window};
use effect_recon::snapshot::Snapshot;
use effect_recon::time::parse_instant;

use super::common::*;

#[tokio::test]
async fn outputs_do_not_depend_on_batch_size_or_partitions() {
    let snapshot = Snapshot::open(&tiny_snapshot()).await.unwrap();
    let rules = effect_recon::config::RuleSet::default_rules().unwrap();
    let cut = parse_instant(TINY_CUT).unwrap();
    let window = Window::resolve(cut, None, None).unwrap();
    let bounds = Bounds::standalone(window, "differential");
    let mut reference: Option<[String; 3]> = None;
    let cases = [1, 7, 8192].into_iter().flat_map(|b| {
        [1, 2, 4].into_iter().map(move |p| (b, p, SessionOptions::default().rows_per_pass))
    });
    // 10 input rows per pass: the 89-row fixture is judged in nine order_id ranges.
    let cases = cases.chain([(8192, 2, 10), (7, 4, 10)]);
    for (batch_size, target_partitions, rows_per_pass) in cases {
        {
            let ctx = session::build(&SessionOptions {
                target_partitions,
                batch_size,
                memory_limit: None,
                rows_per_pass,
            })
            .unwrap();
            snapshot.register(&ctx).await.unwrap();
            let outputs = reconcile(&ctx, &rules, &bounds, rows_per_pass, false).await.unwrap();
            let got = [
                psv(&[outputs.discrepancies]),
                psv(&[outputs.compensation_tasks]),
                psv(&[outputs.skip_verdicts]),
            ];
            assert!(got[0].lines().count() > 10, "the fixture should have findings");
            match &reference {
                None => reference = Some(got),
                Some(expected) => assert_eq!(&got, expected, "batch_size {batch_size}, target_partitions {target_partitions}, rows_per_pass {rows_per_pass}"),
            }
        }
    }
}
