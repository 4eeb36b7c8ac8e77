//! `--alert-webhook`: one JSON message per run when it has BREAK findings or is
//! INCOMPLETE, never one per finding.
//!
//! The body is Slack-compatible (a `text` field a chat shows as it is) and carries the
//! counts as structured fields for other receivers. It is posted with a timeout and a
//! bounded number of attempts; the caller decides what a failure means (the CLI only
//! reports it: a webhook never changes a run's outputs or exit code).

use std::time::Duration;

use serde::Serialize;
use url::Url;

use crate::error::{Error, Result};
use crate::run_folder::summary::Summary;
use crate::vocabulary::{RunStatus, Verdict};

/// How many classes the message names.
const WORST_CLASSES: usize = 5;

/// The message posted for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alert {
    /// The line a chat shows (Slack's `text`).
    pub text: String,
    /// The run id.
    pub run_id: String,
    /// The cut, RFC 3339.
    pub cut: String,
    /// COMPLETE or INCOMPLETE.
    pub status: String,
    /// Why the run is INCOMPLETE.
    pub reasons: Vec<String>,
    /// BREAK findings.
    pub breaks: u64,
    /// PENDING findings.
    pub pending: u64,
    /// BREAK findings first seen in this run.
    pub new: u64,
    /// BREAK findings open since an earlier run.
    pub persisting: u64,
    /// Open backlog.
    pub open: u64,
    /// The earliest first_break_on among open findings, RFC 3339.
    pub oldest_open_break_on: Option<String>,
    /// The effect × class pairs with the most BREAK findings, most first.
    pub worst_classes: Vec<ClassCount>,
    /// The run folder (its outputs).
    pub run_folder: String,
}

/// BREAK findings of one effect × class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassCount {
    /// The rule's effect.
    pub effect: String,
    /// Finding class.
    pub class: String,
    /// BREAK findings.
    pub breaks: u64,
}

/// The alert of a run, or `None` when it is COMPLETE without BREAK findings.
pub fn alert_for(summary: &Summary, run_folder: &str) -> Option<Alert> {
    let incomplete = summary.status == RunStatus::Incomplete;
    if summary.breaks() == 0 && !incomplete {
        return None;
    }
    let mut worst: Vec<ClassCount> = summary
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Break && f.count > 0)
        .map(|f| ClassCount { effect: f.effect.clone(), class: f.class.clone(), breaks: f.count })
        .collect();
    worst.sort_by(|a, b| {
        b.breaks.cmp(&a.breaks).then_with(|| (&a.effect, &a.class).cmp(&(&b.effect, &b.class)))
    });
    worst.truncate(WORST_CLASSES);
    Some(Alert {
        text: headline(summary, &worst, run_folder),
        run_id: summary.run_id.clone(),
        cut: summary.cut.clone(),
        status: summary.status.as_str().to_string(),
        reasons: summary.reasons.clone(),
        breaks: summary.breaks(),
        pending: summary.pending(),
        new: summary.new,
        persisting: summary.persisting,
        open: summary.open,
        oldest_open_break_on: summary.oldest_open_break_on.clone(),
        worst_classes: worst,
        run_folder: run_folder.to_string(),
    })
}

/// The alert of one `watch` cycle, or `None` when the cycle found nothing new and is
/// COMPLETE: findings still open from earlier cycles were already reported.
pub fn cycle_alert_for(summary: &Summary, run_folder: &str) -> Option<Alert> {
    if summary.new == 0 && summary.status != RunStatus::Incomplete {
        return None;
    }
    let mut alert = alert_for(summary, run_folder)?;
    alert.text = cycle_headline(summary, &alert.worst_classes, run_folder);
    Some(alert)
}

/// `effect-recon watch 20261204T094000Z (COMPLETE): 3 NEW BREAK since 2026-12-04T09:35:00Z, open 12; worst: ...`.
fn cycle_headline(summary: &Summary, worst: &[ClassCount], run_folder: &str) -> String {
    let mut text = format!(
        "effect-recon watch {} ({}): {} NEW BREAK since {}, open {}",
        summary.run_id,
        summary.status.as_str(),
        summary.new,
        summary.since,
        summary.open
    );
    push_details(&mut text, summary, worst, run_folder);
    text
}

/// `effect-recon run 20261127T000000Z (COMPLETE): 8 BREAK (NEW 8, PERSISTING 0), open 8; worst: ...`.
fn headline(summary: &Summary, worst: &[ClassCount], run_folder: &str) -> String {
    let mut text = format!(
        "effect-recon run {} ({}): {} BREAK (NEW {}, PERSISTING {}), open {}",
        summary.run_id,
        summary.status.as_str(),
        summary.breaks(),
        summary.new,
        summary.persisting,
        summary.open
    );
    push_details(&mut text, summary, worst, run_folder);
    text
}

/// The worst classes, the INCOMPLETE reasons and the outputs folder, after the first line.
fn push_details(text: &mut String, summary: &Summary, worst: &[ClassCount], run_folder: &str) {
    if !worst.is_empty() {
        let names: Vec<String> =
            worst.iter().map(|c| format!("{}/{} {}", c.effect, c.class, c.breaks)).collect();
        text.push_str(&format!("; worst: {}", names.join(", ")));
    }
    for reason in &summary.reasons {
        text.push_str(&format!("\nINCOMPLETE: {reason}"));
    }
    text.push_str(&format!("\noutputs: {run_folder}"));
}

/// Timeout and attempts of a post.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    /// Timeout of one attempt (connect and response).
    pub timeout: Duration,
    /// Attempts in all (at least 1).
    pub attempts: u32,
    /// Wait before the second attempt; doubled before each further one.
    pub backoff: Duration,
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery {
            timeout: Duration::from_secs(10),
            attempts: 3,
            backoff: Duration::from_millis(500),
        }
    }
}

/// Posts `alert` as JSON to `url`. Network errors, timeouts, 429 and 5xx answers are
/// retried; any other non-2xx answer is final. Errors never name the URL's path or
/// query (a Slack webhook's secret is its path).
pub async fn post<M: Serialize>(url: &Url, alert: &M, delivery: Delivery) -> Result<()> {
    let target = redacted(url);
    let failed = |message: String| Error::Alert { target: target.clone(), message };
    let body = serde_json::to_vec(alert)
        .map_err(|e| Error::Internal(format!("alert: cannot serialize the message: {e}")))?;
    let client = reqwest::Client::builder()
        .timeout(delivery.timeout)
        .build()
        .map_err(|e| failed(format!("cannot build an HTTP client: {}", e.without_url())))?;
    let attempts = delivery.attempts.max(1);
    let mut wait = delivery.backoff;
    let mut last = String::new();
    for attempt in 1..=attempts {
        if attempt > 1 {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        let sent = client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) => {
                let status = response.status();
                last = format!("answered {status}");
                if !(status.is_server_error() || status.as_u16() == 429) {
                    return Err(failed(last));
                }
            }
            Err(e) => last = with_causes(&e.without_url()),
        }
    }
    Err(failed(format!("{last} (after {attempts} attempts)")))
}

/// An error and its causes on one line (reqwest's own message is only "error sending request").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let text = inner.to_string();
        if !line.contains(&text) {
            line.push_str(&format!(": {text}"));
        }
        cause = inner.source();
    }
    line
}

/// `https://hooks.slack.com/…`: scheme and host only.
pub fn redacted(url: &Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}://{}{port}/…", url.scheme(), url.host_str().unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(breaks: u64, status: RunStatus) -> Summary {
        let text = format!(
            r#"{{"format":"effect-recon/summary@1","run_id":"r","since":"2026-11-28T16:00:00Z",
            "cut":"2026-11-29T16:00:00Z","findings":[{{"effect":"e","class":"C","verdict":"BREAK","count":{breaks}}}],
            "verdicts":{{"BREAK":{breaks}}},"skip_verdicts":{{}},"compensation_tasks":0,"inputs":{{}},
            "timings_ms":{{}},"status":"{}","reasons":["ledger is empty"]}}"#,
            status.as_str()
        );
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn only_breaks_or_an_incomplete_run_alert() {
        assert_eq!(alert_for(&summary(0, RunStatus::Complete), "/o"), None);
        let breaks = alert_for(&summary(2, RunStatus::Complete), "/o").unwrap();
        assert!(
            breaks.text.starts_with("effect-recon run r (COMPLETE): 2 BREAK"),
            "{}",
            breaks.text
        );
        let incomplete = alert_for(&summary(0, RunStatus::Incomplete), "/o").unwrap();
        assert!(incomplete.text.contains("INCOMPLETE: ledger is empty"), "{}", incomplete.text);
        assert!(incomplete.worst_classes.is_empty());
    }

    #[test]
    fn a_printed_webhook_keeps_only_scheme_and_host() {
        let url = Url::parse("https://hooks.slack.com/services/T0/B0/secret?x=1").unwrap();
        assert_eq!(redacted(&url), "https://hooks.slack.com/…");
    }
}
