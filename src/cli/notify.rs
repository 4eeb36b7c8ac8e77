//! What a published run hands on, shared by `run` and `nightly`: `--metrics-file` (the
//! summary as a Prometheus textfile) and `--alert-webhook` (one aggregate message).

use std::path::{Path, PathBuf};

use anyhow::Context;
use effect_recon::inspect::alert::{self, Delivery};
use effect_recon::inspect::history;
use effect_recon::inspect::metrics;
use effect_recon::recon::RunReport;
use effect_recon::run_folder::summary::Summary;
use effect_recon::storage::Location;
use effect_recon::time::{parse_instant, Micros};
use effect_recon::vocabulary::RunStatus;
use url::Url;

/// Metrics and alert of a run.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct NotifyArgs {
    /// Write the summary as a Prometheus textfile (e.g. for node_exporter's textfile
    /// collector): a temporary file in the same folder, then a rename. A failed write is
    /// one line on stderr (the run is published; the exit code is unchanged).
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<PathBuf>,
    /// POST one JSON message (Slack-compatible `text` plus counts) when the run has BREAK
    /// findings or is INCOMPLETE; 10 s timeout, 3 attempts. A failure is one line on
    /// stderr and changes neither the outputs nor the exit code.
    #[arg(long, value_name = "URL", value_parser = parse_webhook)]
    alert_webhook: Option<Url>,
}

impl NotifyArgs {
    /// Refuses, before any work, a metrics file whose folder does not exist.
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        let Some(path) = &self.metrics_file else { return Ok(()) };
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        anyhow::ensure!(
            folder.is_dir() && path.file_name().is_some(),
            "--metrics-file {}: the folder {} does not exist",
            path.display(),
            folder.display()
        );
        Ok(())
    }

    /// Writes the metrics file and posts the alert of a published run under `out`; a
    /// failure of either is one line on stderr.
    pub(super) async fn deliver(&self, report: &RunReport, out: &Location, quiet: bool) {
        self.write_metrics(report, out, quiet).await;
        let message = alert::alert_for(&report.summary, &report.folder);
        self.post(message.as_ref(), quiet).await;
    }

    /// `watch`: the metrics of every cycle, and an alert only for a cycle with NEW BREAK
    /// findings or an INCOMPLETE one (what is still open was reported when it was new).
    pub(super) async fn deliver_cycle(&self, report: &RunReport, out: &Location, quiet: bool) {
        self.write_metrics(report, out, quiet).await;
        let message = alert::cycle_alert_for(&report.summary, &report.folder);
        self.post(message.as_ref(), quiet).await;
    }

    /// Posts `message` when there is one and a webhook is set; a failure is one line.
    pub(super) async fn post<M: serde::Serialize>(&self, message: Option<&M>, quiet: bool) {
        let (Some(url), Some(message)) = (&self.alert_webhook, message) else { return };
        match alert::post(url, message, Delivery::default()).await {
            Ok(()) if !quiet => eprintln!("alert: posted to {}", alert::redacted(url)),
            Ok(()) => {}
            // The run is published: a chat that cannot be reached changes nothing else.
            Err(e) => eprintln!("warning: {e}; the run's outputs and exit code are unchanged"),
        }
    }

    async fn write_metrics(&self, report: &RunReport, out: &Location, quiet: bool) {
        if let Some(path) = &self.metrics_file {
            // The run is published: a failed metrics file is said, not turned into exit 2
            // (which means "nothing published" and would make a scheduler retry).
            match write_metrics(path, report, out).await {
                Ok(()) if !quiet => eprintln!("metrics: wrote {}", path.display()),
                Ok(()) => {}
                Err(e) => eprintln!(
                    "warning: --metrics-file {}: {}; the run's outputs and exit code are unchanged",
                    path.display(),
                    super::render_error(&e)
                ),
            }
        }
    }
}

async fn write_metrics(path: &Path, report: &RunReport, out: &Location) -> anyhow::Result<()> {
    let last_complete = last_complete_cut(&report.summary, out).await?;
    let text = metrics::render(&report.summary, last_complete)?;
    metrics::write_atomically(path, &text)?;
    Ok(())
}

/// The cut of the latest COMPLETE run under `out` (this one's when it is COMPLETE).
async fn last_complete_cut(summary: &Summary, out: &Location) -> anyhow::Result<Option<Micros>> {
    if summary.status == RunStatus::Complete {
        return Ok(Some(instant(&summary.cut)?));
    }
    let lines = history::read(out).await.context("--metrics-file: reading the earlier runs")?;
    let mut latest = None;
    for line in lines.iter().filter(|line| line.status == RunStatus::Complete.as_str()) {
        latest = latest.max(Some(instant(&line.cut)?));
    }
    Ok(latest)
}

fn instant(text: &str) -> anyhow::Result<Micros> {
    parse_instant(text).map_err(|e| anyhow::anyhow!("cut {text}: {e}"))
}

/// An http(s) URL.
fn parse_webhook(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("'{text}' is not a URL: {e}"))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(format!("'{other}' is not http or https")),
    }
}
