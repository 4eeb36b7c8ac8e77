//! The object-store path end to end on S3: gen writes a snapshot to a bucket, run reads
//! it from there and publishes its outputs there, verify reads both back.
//!
//! Runs when `EFFECT_RECON_TEST_S3_BUCKET` names a bucket on an S3-compatible endpoint
//! reachable with the usual `AWS_*` variables (`.ci/run` starts a local one); says that it
//! was NOT run otherwise, and fails when the variable is set but the endpoint fails.

use effect_recon::recon;
use effect_recon::run_folder::run_folder;
use effect_recon::storage::Location;
use effect_recon::verify::{self, VerifyPlan};
use effect_recon::workload::{self, truth::TRUTH_FILE, WorkloadPlan};

use super::common::plan;

#[tokio::test]
async fn gen_run_verify_through_an_s3_bucket() {
    let Ok(bucket) = std::env::var("EFFECT_RECON_TEST_S3_BUCKET") else {
        super::common::say_skipped("EFFECT_RECON_TEST_S3_BUCKET", "the S3 test was NOT run");
        return;
    };
    let prefix = format!(
        "s3://{bucket}/it-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_micros()
    );
    let snapshot = Location::parse(&format!("{prefix}/snapshot")).unwrap();
    let out = Location::parse(&format!("{prefix}/recon")).unwrap();

    let mut gen_plan = WorkloadPlan::new(snapshot.clone(), 3000).unwrap();
    gen_plan.incident = true;
    workload::generate(&gen_plan).await.expect("gen writes to the bucket");

    let mut plan = plan(&snapshot, &out);
    let report = recon::run(&plan, &effect_recon::events::Events::none())
        .await
        .expect("run reads and writes the bucket");
    let verified = verify::verify(&VerifyPlan {
        truth_folder: snapshot,
        truth_file: TRUTH_FILE.into(),
        run: out.join(&run_folder(&report.summary.run_id)),
    })
    .await
    .unwrap();
    assert!(verified.is_exact(), "{}", verified.render());

    // A rerun with the same inputs finds the published run; other inputs are refused.
    let again = recon::run(&plan, &effect_recon::events::Events::none()).await.unwrap();
    assert_eq!(again.manifest.summary, report.manifest.summary);
    let mut other = plan.clone();
    other.since = Some(effect_recon::time::parse_instant("2026-11-29T00:00:00Z").unwrap());
    let refused =
        recon::run(&other, &effect_recon::events::Events::none()).await.unwrap_err().to_string();
    assert!(refused.contains("already exists"), "{refused}");
    plan.replace = true;
    recon::run(&plan, &effect_recon::events::Events::none()).await.unwrap();
}
