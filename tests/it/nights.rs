//! `gen --nights`: several snapshots of one continuing world, deterministic for a seed,
//! whose truths follow docs/SEMANTICS.md (no open finding is ever dropped); and, end to end,
//! `run` chained night after night equals those truths exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use effect_recon::datafusion::arrow::array::{Array, AsArray, RecordBatch};
use effect_recon::datafusion::arrow::datatypes::{Int32Type, Int64Type, TimestampMicrosecondType};
use effect_recon::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use effect_recon::storage::Location;
use effect_recon::time::{format_compact, format_instant, DAY_MICROS};
use effect_recon::verify;
use effect_recon::workload::nights::{self, NightsPlan, NightsReport};
use effect_recon::workload::truth::TRUTH_FILE;
use effect_recon::workload::world::Fault;
use effect_recon::workload::{FaultRates, WorkloadPlan};

use super::common::{block_on, effect_recon, tree_bytes};

fn heavy() -> FaultRates {
    let mut rates = FaultRates::default();
    for fault in Fault::ALL {
        let scale = if fault == Fault::CancelRace { 3.0 } else { 6.0 };
        rates.set(fault, fault.default_rate() * scale);
    }
    rates
}

fn plan(root: &Path, nights: usize, orders: u64, seed: u64) -> NightsPlan {
    let mut workload =
        WorkloadPlan::new(Location::parse(root.to_str().unwrap()).unwrap(), orders).unwrap();
    workload.seed = seed;
    workload.rates = heavy();
    let mut plan = NightsPlan::new(workload, nights);
    plan.operations.late_receipt = 0.02;
    plan
}

/// One row of a night's truth, its nullable columns as text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    kind: String,
    effect: Option<String>,
    order_id: i64,
    class: Option<String>,
    verdict: Option<String>,
    msg_id: Option<String>,
    lifecycle: Option<String>,
    first_seen_run: Option<String>,
    first_break_on: Option<i64>,
    runs_open: Option<i32>,
    rechecked: Option<bool>,
    resolution: Option<String>,
}

fn truth_rows(snapshot: &Path) -> Vec<Row> {
    let bytes = bytes::Bytes::from(std::fs::read(snapshot.join(TRUTH_FILE)).unwrap());
    let batches: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut rows = Vec::new();
    for b in &batches {
        let text = |name: &str| b.column_by_name(name).unwrap().as_string::<i32>().clone();
        let opt = |a: &effect_recon::datafusion::arrow::array::StringArray, i: usize| {
            (!a.is_null(i)).then(|| a.value(i).to_string())
        };
        let (kind, effect, class, verdict, msg_id, lifecycle, first_seen_run, resolution) = (
            text("kind"),
            text("effect"),
            text("class"),
            text("verdict"),
            text("msg_id"),
            text("lifecycle"),
            text("first_seen_run"),
            text("resolution"),
        );
        let order_id = b.column_by_name("order_id").unwrap().as_primitive::<Int64Type>().clone();
        let first_break_on = b
            .column_by_name("first_break_on")
            .unwrap()
            .as_primitive::<TimestampMicrosecondType>()
            .clone();
        let runs_open = b.column_by_name("runs_open").unwrap().as_primitive::<Int32Type>().clone();
        let rechecked = b.column_by_name("rechecked").unwrap().as_boolean().clone();
        for i in 0..b.num_rows() {
            rows.push(Row {
                kind: kind.value(i).to_string(),
                effect: opt(&effect, i),
                order_id: order_id.value(i),
                class: opt(&class, i),
                verdict: opt(&verdict, i),
                msg_id: opt(&msg_id, i),
                lifecycle: opt(&lifecycle, i),
                first_seen_run: opt(&first_seen_run, i),
                first_break_on: (!first_break_on.is_null(i)).then(|| first_break_on.value(i)),
                runs_open: (!runs_open.is_null(i)).then(|| runs_open.value(i)),
                rechecked: (!rechecked.is_null(i)).then(|| rechecked.value(i)),
                resolution: opt(&resolution, i),
            });
        }
    }
    rows
}

fn manifest(snapshot: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(snapshot.join("manifest.json")).unwrap()).unwrap()
}

fn generate(plan: &NightsPlan) -> NightsReport {
    block_on(nights::generate_nights(plan)).unwrap()
}

fn folders(plan: &NightsPlan, root: &Path) -> Vec<std::path::PathBuf> {
    plan.cuts().into_iter().map(|c| root.join(NightsPlan::snapshot_folder(c))).collect()
}

#[test]
fn gen_nights_is_deterministic_and_lays_out_one_snapshot_per_cut() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dir in [&a, &b] {
        generate(&plan(dir.path(), 3, 900, 5));
    }
    assert_eq!(tree_bytes(a.path()), tree_bytes(b.path()));
    let plan = plan(a.path(), 3, 900, 5);
    let cuts = plan.cuts();
    assert_eq!(format_instant(cuts[2]), "2026-11-29T16:00:00Z", "the last night is --cut");
    for (folder, cut) in folders(&plan, a.path()).iter().zip(&cuts) {
        let m = manifest(folder);
        assert_eq!(m["cut"], format_instant(*cut));
        assert_eq!(m["coverage_from"], format_instant(cut - 31 * DAY_MICROS));
        assert!(folder.join(TRUTH_FILE).exists());
    }
    let other = tempfile::tempdir().unwrap();
    generate(&self::plan(other.path(), 3, 900, 6));
    assert_ne!(tree_bytes(a.path()), tree_bytes(other.path()), "the seed matters");
}

type Key = (String, i64);

/// Every open finding of night k is PERSISTING (same first_seen_run and first_break_on,
/// runs_open + 1) or resolved (runs_open as before) on night k + 1, never dropped; nothing
/// is PERSISTING or resolved that was not open; every PENDING skip is carried.
#[test]
fn the_truth_never_drops_an_open_finding() {
    let (mut resolutions, mut carried_verdicts) =
        (BTreeSet::<String>::new(), BTreeSet::<String>::new());
    let (mut persisting, mut late_new, mut not_rechecked) = (0, 0, 0);
    for (seed, lookback) in [(1, 30), (2, 3), (3, 2)] {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = plan(dir.path(), 6, 4000, seed);
        plan.lookback = lookback * DAY_MICROS;
        generate(&plan);
        let nights: Vec<Vec<Row>> =
            folders(&plan, dir.path()).iter().map(|f| truth_rows(f)).collect();
        let cuts = plan.cuts();
        for k in 0..nights.len() {
            let since = cuts[k] - DAY_MICROS;
            for row in nights[k].iter().filter(|r| r.kind == "finding") {
                let open = row.verdict.as_deref() == Some("BREAK");
                assert_eq!(open, row.lifecycle.is_some(), "{row:?}");
                assert_eq!(row.runs_open == Some(0), !open, "{row:?}");
                late_new += usize::from(
                    row.lifecycle.as_deref() == Some("NEW")
                        && row.first_break_on.is_some_and(|t| t <= since),
                );
                not_rechecked += usize::from(row.rechecked == Some(false));
            }
            let open = |rows: &[Row]| -> BTreeMap<Key, Row> {
                rows.iter()
                    .filter(|r| r.kind == "finding" && r.verdict.as_deref() == Some("BREAK"))
                    .map(|r| ((r.effect.clone().unwrap(), r.order_id), r.clone()))
                    .collect()
            };
            let before = if k == 0 { BTreeMap::new() } else { open(&nights[k - 1]) };
            let now = open(&nights[k]);
            let resolved: BTreeMap<Key, Row> = nights[k]
                .iter()
                .filter(|r| r.kind == "resolved")
                .map(|r| ((r.effect.clone().unwrap(), r.order_id), r.clone()))
                .collect();
            for (key, f) in &before {
                match (now.get(key), resolved.get(key)) {
                    (Some(p), r) if p.lifecycle.as_deref() == Some("PERSISTING") => {
                        assert!(r.is_none(), "{key:?} both persisting and resolved");
                        assert_eq!(p.class, f.class);
                        assert_eq!(
                            (&p.first_seen_run, p.first_break_on),
                            (&f.first_seen_run, f.first_break_on)
                        );
                        assert_eq!(p.runs_open, f.runs_open.map(|n| n + 1));
                        persisting += 1;
                    }
                    (_, Some(r)) => {
                        assert_eq!((&r.class, r.runs_open), (&f.class, f.runs_open), "{key:?}");
                        assert_eq!(r.first_seen_run, f.first_seen_run);
                        resolutions.insert(r.resolution.clone().unwrap());
                    }
                    other => panic!("seed {seed} night {k}: open {f:?} dropped: {other:?}"),
                }
            }
            for (key, p) in &now {
                if p.lifecycle.as_deref() == Some("PERSISTING") {
                    assert!(before.contains_key(key), "{key:?} persisting but not open before");
                }
            }
            for key in resolved.keys() {
                assert!(before.contains_key(key), "{key:?} resolved but not open before");
            }
            if k > 0 {
                let carried: BTreeSet<&str> = nights[k]
                    .iter()
                    .filter(|r| {
                        r.kind == "skip_verdict" && r.lifecycle.as_deref() == Some("CARRIED")
                    })
                    .map(|r| r.msg_id.as_deref().unwrap())
                    .collect();
                carried_verdicts.extend(
                    nights[k]
                        .iter()
                        .filter(|r| r.lifecycle.as_deref() == Some("CARRIED"))
                        .map(|r| r.verdict.clone().unwrap()),
                );
                for r in nights[k - 1]
                    .iter()
                    .filter(|r| r.kind == "skip_verdict" && r.verdict.as_deref() == Some("PENDING"))
                {
                    assert!(carried.contains(r.msg_id.as_deref().unwrap()), "{r:?} not carried");
                }
            }
        }
    }
    for expected in ["RECEIPT", "VOIDED", "REVERSED", "RECLASSIFIED", "NOW_DUE"] {
        assert!(resolutions.contains(expected), "no {expected} in {resolutions:?}");
    }
    assert!(persisting > 0 && late_new > 0, "persisting {persisting}, late NEW {late_new}");
    assert!(not_rechecked > 0, "a short lookback leaves some findings not re-checkable");
    for verdict in ["WRONG", "HARMLESS"] {
        assert!(carried_verdicts.contains(verdict), "no carried skip turned {verdict}");
    }
}

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs every night of `root` in cut order into `runs` (each follows the one before by
/// default), with the run options the truth assumes.
fn run_chain(plan: &NightsPlan, root: &Path, runs: &Path, extra: &[&str]) {
    for folder in folders(plan, root) {
        let mut args = vec!["run", "--snapshot", folder.to_str().unwrap()];
        args.extend(["--out", runs.to_str().unwrap()]);
        args.extend(extra);
        let run = effect_recon(&args);
        assert_eq!(run.status.code(), Some(0), "{}: {}", folder.display(), text(&run));
    }
}

/// gen --nights 4 → run each night in cut order into one --out → verify --nights: exact.
#[test]
fn chained_runs_equal_the_truth_of_every_night_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (root, runs) = (dir.path().join("nights"), dir.path().join("runs"));
    let (root_text, runs_text) = (root.to_str().unwrap(), runs.to_str().unwrap());
    let args = ["gen", "--nights", "4", "--orders", "6000", "--seed", "9", "--out", root_text];
    let generated = effect_recon(&args);
    assert_eq!(generated.status.code(), Some(0), "{}", text(&generated));
    assert!(text(&generated).contains("resolved: RECEIPT"), "{}", text(&generated));
    let mut plan = plan(&root, 4, 6000, 9);
    plan.workload.rates = FaultRates::default();
    run_chain(&plan, &root, &runs, &[]);
    let verify = effect_recon(&["verify", "--nights", root_text, "--runs", runs_text]);
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify));
    assert_eq!(text(&verify).matches(" exact\n").count(), 4, "{}", text(&verify));
    let last = runs.join(format!("run={}", format_compact(plan.cuts()[3])));
    std::fs::remove_dir_all(last.join("resolved")).unwrap();
    let broken = effect_recon(&["verify", "--nights", root_text, "--runs", runs_text]);
    assert_eq!(broken.status.code(), Some(2), "a run that lost a table is not exact");
}

/// Heavy faults, late receipts, short lookbacks (findings that cannot be re-checked) and a
/// short max age (EXPIRED): every night of every seed equals the truth exactly.
#[test]
fn chained_runs_equal_the_truth_with_late_rows_short_lookbacks_and_expiry() {
    for (seed, lookback, max_age) in [(1, 30, 30), (2, 3, 30), (3, 2, 3)] {
        let dir = tempfile::tempdir().unwrap();
        let (root, runs) = (dir.path().join("nights"), dir.path().join("runs"));
        let mut plan = plan(&root, 5, 5000, seed);
        (plan.lookback, plan.max_age) = (lookback * DAY_MICROS, max_age * DAY_MICROS);
        let report = generate(&plan);
        let expired: u64 = report.nights.iter().filter_map(|n| n.resolved.get("EXPIRED")).sum();
        assert_eq!(expired > 0, max_age < 5, "seed {seed}: {}", report.render());
        let max_age_text = format!("{max_age}d");
        run_chain(&plan, &root, &runs, &["--max-age", &max_age_text]);
        let location = |p: &Path| Location::parse(p.to_str().unwrap()).unwrap();
        let checked = block_on(verify::verify_nights(&location(&root), &location(&runs))).unwrap();
        assert!(checked.is_exact(), "seed {seed}:\n{}", checked.render());
    }
}
