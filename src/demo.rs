//! The main job end to end on the embedded default (`effect-recon demo`): a generated day
//! (or several consecutive nights of one world) is loaded into an embedded SQLite database
//! — the source a newcomer has without any server — exported and reconciled by the
//! [`crate::nightly`] job like cron would, and each run is verified against the
//! generator's ground truth. The binary only prints the report and the steps.

use std::path::PathBuf;
use std::time::Instant;

use crate::config::JobConfig;
use crate::db::load::{load_snapshot, LoadOptions};
use crate::engine::session::{Engine, SessionOptions};
use crate::error::{Error, Result};
use crate::events::{DemoStep, Event, Events};
use crate::inspect::history::{self, HistoryLine};
use crate::nightly::{nightly, NightlyPlan, NightlyReport};
use crate::run_folder::run_folder;
use crate::storage::Location;
use crate::time::{format_compact, Micros};
use crate::verify::{self, VerifyPlan, VerifyReport};
use crate::workload::nights::{generate_nights, NightsPlan};
use crate::workload::truth::TRUTH_FILE;
use crate::workload::{self, WorkloadPlan};

/// The embedded default job: every source in `fulfilment.db`, the nightly root `recon/`.
pub const DEMO_JOB: &str = include_str!("../fixtures/demo/job.toml");

/// A validated demo request.
#[derive(Debug, Clone)]
pub struct DemoPlan {
    /// The demo's folder (created; its previous outputs are replaced).
    pub dir: PathBuf,
    /// Orders generated (over all nights).
    pub orders: u64,
    /// Seed of the world.
    pub seed: u64,
    /// Consecutive nights (1: one day).
    pub nights: usize,
}

/// Where a demo writes.
#[derive(Debug, Clone)]
pub struct DemoLayout {
    /// The demo folder, absolute.
    pub root: PathBuf,
    /// The generated day(s) and their truth.
    pub generated: Location,
    /// The SQLite source.
    pub database: PathBuf,
    /// The job config written for it.
    pub job: PathBuf,
    /// The nightly root (`snapshot=<cut>/`, `run=<id>/`).
    pub recon: Location,
}

/// One night of a demo: the nightly job's report and its check against the truth.
#[derive(Debug)]
pub struct DemoNight {
    /// What the nightly job did.
    pub nightly: NightlyReport,
    /// The run against the ground truth.
    pub verified: VerifyReport,
    /// The truth file it was checked against.
    pub truth: String,
}

/// What a demo did.
#[derive(Debug)]
pub struct DemoReport {
    /// Where everything is.
    pub layout: DemoLayout,
    /// Each night, in cut order.
    pub nights: Vec<DemoNight>,
    /// The runs under the nightly root, one line each.
    pub history: Vec<HistoryLine>,
}

impl DemoReport {
    /// Whether every night's run equals its truth.
    pub fn is_exact(&self) -> bool {
        self.nights.iter().all(|night| night.verified.is_exact())
    }

    /// Differences over all nights.
    pub fn mismatch_count(&self) -> usize {
        self.nights.iter().map(|night| night.verified.mismatch_count).sum()
    }
}

/// Runs the demo, reporting each step to `events`.
pub async fn demo(plan: &DemoPlan, events: &Events) -> Result<DemoReport> {
    let layout = prepare(plan)?;
    let cuts = generate(plan, &layout, events).await?;
    std::fs::write(&layout.job, DEMO_JOB).map_err(|e| io(&layout.job, e))?;
    let mut nights = Vec::new();
    for cut in cuts {
        nights.push(night(plan, &layout, cut, events).await?);
    }
    let history = history::read(&layout.recon).await?;
    Ok(DemoReport { layout, nights, history })
}

/// Generates the day or the nights (with the msg-7391 incident planted); returns the cuts.
async fn generate(plan: &DemoPlan, layout: &DemoLayout, events: &Events) -> Result<Vec<Micros>> {
    events.emit(Event::Demo(DemoStep::Generating {
        orders: plan.orders,
        folder: layout.generated.to_string(),
    }));
    let mut gen_plan = WorkloadPlan::new(layout.generated.clone(), plan.orders)?;
    gen_plan.seed = plan.seed;
    gen_plan.incident = true;
    if plan.nights > 1 {
        let nights = NightsPlan::new(gen_plan, plan.nights);
        let report = generate_nights(&nights).await?;
        events.emit(Event::Demo(DemoStep::Generated { summary: report.render() }));
        return Ok(nights.cuts());
    }
    let report = workload::generate(&gen_plan).await?;
    events.emit(Event::Demo(DemoStep::Generated { summary: report.render() }));
    let cut = report
        .window
        .map(|w| w.cut)
        .ok_or_else(|| Error::Internal("gen reported no cut".into()))?;
    Ok(vec![cut])
}

/// One night: its snapshot loaded into SQLite, the nightly job, the check.
async fn night(
    plan: &DemoPlan,
    layout: &DemoLayout,
    cut: Micros,
    events: &Events,
) -> Result<DemoNight> {
    let snapshot = if plan.nights > 1 {
        layout.generated.join(&NightsPlan::snapshot_folder(cut))
    } else {
        layout.generated.clone()
    };
    if layout.database.exists() {
        std::fs::remove_file(&layout.database).map_err(|e| io(&layout.database, e))?;
    }
    let database = layout.database.display().to_string();
    events.emit(Event::Demo(DemoStep::Loading { database: database.clone() }));
    let started = Instant::now();
    let loaded =
        load_snapshot(&snapshot, &format!("sqlite:{database}"), &LoadOptions::default()).await?;
    events.emit(Event::Demo(DemoStep::Loaded {
        rows: loaded.rows(),
        database,
        elapsed: started.elapsed(),
    }));
    events.emit(Event::Demo(DemoStep::Nightly { job: layout.job.display().to_string() }));
    let nightly_plan = NightlyPlan {
        job: JobConfig::load(&layout.job)?,
        cut,
        replace: true,
        session: SessionOptions::default(),
        engine: Engine::InProcess,
        check_single_node: false,
        export_mode: crate::db::export::ExportMode::Auto,
        chain: crate::nightly::JobChain::Nightly,
        follows: None,
        judge_all: false,
    };
    let report = nightly(&nightly_plan, events).await?;
    events.emit(Event::Demo(DemoStep::Verifying));
    let run = layout.recon.join(&run_folder(&format_compact(cut)));
    let verify_plan =
        VerifyPlan { truth_folder: snapshot.clone(), truth_file: TRUTH_FILE.into(), run };
    let verified = verify::verify(&verify_plan).await?;
    Ok(DemoNight { nightly: report, verified, truth: snapshot.display(TRUTH_FILE) })
}

/// Creates the folder and removes the previous demo's outputs (and nothing else in it).
fn prepare(plan: &DemoPlan) -> Result<DemoLayout> {
    std::fs::create_dir_all(&plan.dir).map_err(|e| io(&plan.dir, e))?;
    let root = std::fs::canonicalize(&plan.dir).map_err(|e| io(&plan.dir, e))?;
    let layout = DemoLayout {
        generated: Location::parse(&root.join("generated").display().to_string())?,
        database: root.join("fulfilment.db"),
        job: root.join("job.toml"),
        recon: Location::parse(&root.join("recon").display().to_string())?,
        root,
    };
    for dir in [layout.root.join("generated"), layout.root.join("recon")] {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| io(&dir, e))?;
        }
    }
    for file in [&layout.database, &layout.job] {
        if file.exists() {
            std::fs::remove_file(file).map_err(|e| io(file, e))?;
        }
    }
    Ok(layout)
}

fn io(path: &std::path::Path, source: std::io::Error) -> Error {
    Error::Io { path: path.display().to_string(), source }
}
