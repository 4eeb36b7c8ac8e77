//! `effect-recon watch`: the nightly's export and run every few minutes on the intraday
//! chain under `<root>/intraday/` (docs/WATCH.md).
//!
//! A cycle is [`crate::nightly::nightly`] with [`JobChain::Intraday`]: an incremental
//! export of what changed since the previous cycle's snapshot, then the same `sql/` as a
//! chained run. This module holds what the loop around it decides: whether a job can be
//! watched at all, when the next cycle starts, how a failing cycle backs off, and when
//! failures are worth one alert. The loop itself (signals, sleeping, printing) is the CLI's.
//!
//! [`JobChain::Intraday`]: crate::nightly::JobChain::Intraday

use std::time::Duration;

use serde::Serialize;

use crate::config::JobConfig;
use crate::error::{Error, Result};

/// The shortest backoff after a failed cycle.
const FIRST_BACKOFF: Duration = Duration::from_secs(5);

/// Refuses a job that cannot be read incrementally: a cycle every few minutes that
/// exported the whole lookback each time would load the database like a nightly per cycle.
pub fn check_watchable(job: &JobConfig) -> Result<()> {
    let without: Vec<String> =
        job.sources.iter().filter(|s| s.change_columns().is_none()).map(|s| s.label()).collect();
    if without.is_empty() {
        return Ok(());
    }
    Err(Error::config(
        job.path.display(),
        format!(
            "watch needs incremental snapshots: every source needs `key` and `changed_column` \
             (docs/JOB_CONFIG.md \"Incremental nights\"); {} {} none",
            without.join(", "),
            if without.len() == 1 { "has" } else { "have" }
        ),
    ))
}

/// When the next cycle starts, after one that started at `started` and took `took`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextCycle {
    /// Wait this long: cycles start every `every`, counted from the previous start.
    After(Duration),
    /// At once: the cycle took longer than the interval (cycles never overlap).
    Overrun,
}

/// The next start of a cycle that took `took` on a schedule of one every `every`.
pub fn next_cycle(every: Duration, took: Duration) -> NextCycle {
    if took >= every {
        NextCycle::Overrun
    } else {
        NextCycle::After(every - took)
    }
}

/// Consecutive failed cycles: the wait before the next try, and one alert when they
/// reach the threshold (never one per failure).
#[derive(Debug, Clone)]
pub struct Failures {
    alert_after: u32,
    in_a_row: u32,
}

/// What a failed cycle leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfterFailure {
    /// Failures in a row, this one included.
    pub in_a_row: u32,
    /// Wait this long before the next try.
    pub backoff: Duration,
    /// Post the failure alert now (the threshold was just reached).
    pub alert: bool,
}

impl Failures {
    /// Alerts once `alert_after` cycles in a row have failed (at least 1).
    pub fn new(alert_after: u32) -> Failures {
        Failures { alert_after: alert_after.max(1), in_a_row: 0 }
    }

    /// A failed cycle: the backoff doubles from 5 s, never beyond the interval `every`.
    pub fn failed(&mut self, every: Duration) -> AfterFailure {
        self.in_a_row += 1;
        let doubled = FIRST_BACKOFF.saturating_mul(1 << (self.in_a_row - 1).min(16));
        AfterFailure {
            in_a_row: self.in_a_row,
            backoff: doubled.min(every.max(Duration::from_secs(1))),
            alert: self.in_a_row == self.alert_after,
        }
    }

    /// A cycle that published: `Some(n)` when `n` failures in a row had been alerted, so
    /// the recovery is worth saying too.
    pub fn succeeded(&mut self) -> Option<u32> {
        let before = std::mem::take(&mut self.in_a_row);
        (before >= self.alert_after).then_some(before)
    }
}

/// The message posted when cycles keep failing, and when they recover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WatchHealth {
    /// The line a chat shows (Slack's `text`).
    pub text: String,
    /// FAILING, RECOVERED or REOPEN_CEILING.
    pub state: String,
    /// Cycles in a row that failed.
    pub failures: u32,
    /// The last error (FAILING only).
    pub error: Option<String>,
}

impl WatchHealth {
    /// `failures` cycles in a row failed, the last with `error`.
    pub fn failing(failures: u32, error: &str) -> WatchHealth {
        WatchHealth {
            text: format!(
                "effect-recon watch: {failures} cycles in a row failed; it keeps retrying. Last error: {error}"
            ),
            state: "FAILING".into(),
            failures,
            error: Some(error.to_string()),
        }
    }

    /// `--reopen` stopped the loop: the cycle would reopen `would` rows, over `max`.
    pub fn reopen_ceiling(would: usize, max: usize, run_folder: &str) -> WatchHealth {
        WatchHealth {
            text: format!(
                "effect-recon watch stopped: the cycle would reopen {would} ledger rows, over \
                 --max-reopen-per-cycle {max}; nothing was reopened. Look at {run_folder}, then \
                 reopen by hand (effect-recon reopen --run {run_folder} ...) or raise the ceiling"
            ),
            state: "REOPEN_CEILING".into(),
            failures: 0,
            error: None,
        }
    }

    /// A cycle published again after `failures` failed ones.
    pub fn recovered(failures: u32) -> WatchHealth {
        WatchHealth {
            text: format!("effect-recon watch: a cycle published again after {failures} failed"),
            state: "RECOVERED".into(),
            failures,
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_start_every_interval_from_the_previous_start_and_never_overlap() {
        let every = Duration::from_secs(300);
        assert_eq!(
            next_cycle(every, Duration::from_secs(40)),
            NextCycle::After(Duration::from_secs(260))
        );
        assert_eq!(next_cycle(every, every), NextCycle::Overrun);
        assert_eq!(next_cycle(every, Duration::from_secs(301)), NextCycle::Overrun);
    }

    #[test]
    fn failures_back_off_up_to_the_interval_and_alert_once() {
        let every = Duration::from_secs(60);
        let mut failures = Failures::new(3);
        let waits: Vec<(u64, bool)> = (0..6)
            .map(|_| failures.failed(every))
            .map(|f| (f.backoff.as_secs(), f.alert))
            .collect();
        assert_eq!(
            waits,
            [(5, false), (10, false), (20, true), (40, false), (60, false), (60, false)]
        );
        assert_eq!(failures.succeeded(), Some(6));
        assert_eq!(failures.failed(every).backoff, Duration::from_secs(5), "a success starts over");
        assert_eq!(failures.succeeded(), None, "one failure under the threshold is not a recovery");
    }

    #[test]
    fn a_short_interval_bounds_the_backoff() {
        let mut failures = Failures::new(1);
        let first = failures.failed(Duration::from_secs(2));
        assert_eq!((first.backoff, first.alert), (Duration::from_secs(2), true));
        assert!(!failures.failed(Duration::from_secs(2)).alert, "alerted once, not again");
    }
}
