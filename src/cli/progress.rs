//! How the binary shows the library's progress events on stderr: a live bar per export
//! source on a terminal (indicatif), plain log lines otherwise (a scheduler's log gets a
//! line every few seconds, never escape codes), and only warnings when quiet.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use effect_recon::events::{DemoStep, Event, Events};
use effect_recon::time::format_elapsed;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How much a command shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Detail {
    /// Every stage line and the per-source export progress.
    All,
    /// Stage lines of the command itself, but neither per-source rows nor run stages
    /// (`nightly --quiet`).
    Stages,
    /// Nothing but warnings and self-check failures (`run --quiet`).
    Warnings,
}

/// Events rendered on stderr, each line starting with `prefix` (`nightly: `, or nothing).
pub(super) fn stderr(prefix: &'static str, detail: Detail) -> Events {
    let renderer = Renderer::new(prefix, detail);
    Events::new(move |event| renderer.show(event))
}

/// Log lines of a source are written at most this often when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

struct Renderer {
    prefix: &'static str,
    detail: Detail,
    /// `Some` on a terminal: the bars drawn there.
    bars: Option<MultiProgress>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    sources: HashMap<String, ProgressBar>,
    last_log: HashMap<String, Instant>,
}

impl Renderer {
    fn new(prefix: &'static str, detail: Detail) -> Self {
        let bars = std::io::stderr()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Renderer { prefix, detail, bars, state: Mutex::new(State::default()) }
    }

    fn show(&self, event: &Event) {
        match event {
            Event::ExportRows { label, rows, elapsed } => self.source_rows(label, *rows, *elapsed),
            Event::ExportDone { label, .. } => {
                if let Some(bar) = self.lock().sources.remove(label) {
                    bar.finish_and_clear();
                }
                if self.detail == Detail::All {
                    self.line(&describe(event));
                }
            }
            Event::RuleWarning(_) | Event::SelfCheckFailed(_) => self.line(&describe(event)),
            // The demo's own steps carry their own `demo:` label.
            Event::Demo(_) => self.print(describe(event)),
            event if event.is_run_stage() => {
                if self.detail == Detail::All {
                    self.line(&describe(event));
                }
            }
            event => {
                if self.detail != Detail::Warnings {
                    self.line(&describe(event));
                }
            }
        }
    }

    fn source_rows(&self, label: &str, rows: u64, elapsed: Duration) {
        if self.detail != Detail::All {
            return;
        }
        let text =
            format!("export {label}: {} rows, {} rows/s", group(rows), group(rate(rows, elapsed)));
        let mut state = self.lock();
        match &self.bars {
            Some(bars) => {
                let bar = state.sources.entry(label.to_string()).or_insert_with(|| {
                    let bar = bars.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("{spinner} {prefix}{msg} [{elapsed}]")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.set_prefix(self.prefix);
                    bar.enable_steady_tick(Duration::from_millis(200));
                    bar
                });
                bar.set_message(text);
            }
            None => {
                let last = state.last_log.entry(label.to_string()).or_insert_with(Instant::now);
                if last.elapsed() >= LOG_EVERY {
                    *last = Instant::now();
                    drop(state);
                    self.line(&text);
                }
            }
        }
    }

    fn line(&self, text: &str) {
        self.print(format!("{}{text}", self.prefix));
    }

    fn print(&self, line: String) {
        match &self.bars {
            Some(bars) => {
                let _ = bars.println(&line);
            }
            None => eprintln!("{line}"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The line an event is shown as.
pub(super) fn describe(event: &Event) -> String {
    match event {
        Event::ExportRows { label, rows, elapsed } => {
            format!("export {label}: {} rows, {} rows/s", group(*rows), group(rate(*rows, *elapsed)))
        }
        Event::ExportDone { label, rows, elapsed, chunks } => format!(
            "export {label}: {} rows in {} ({} rows/s, {chunks} chunk{})",
            group(*rows),
            format_elapsed(*elapsed),
            group(rate(*rows, *elapsed)),
            if *chunks == 1 { "" } else { "s" }
        ),
        Event::RunValidated { snapshot, files, rows, elapsed } => format!(
            "run: validated snapshot {snapshot} ({files} files, {rows} rows) in {}",
            format_elapsed(*elapsed)
        ),
        Event::RunFollows { previous_run, cut, list_since } => format!(
            "run: following run {previous_run} (cut {cut}); listing findings that broke after {list_since}"
        ),
        Event::RunJudged { orders, rows, reach } => format!(
            "run: judged {} orders ({} rows): those with a row after {reach} or in the previous run; no other order can change an output",
            group(*orders),
            group(*rows)
        ),
        Event::RunReconciled { findings, skip_verdicts, resolved, elapsed } => format!(
            "run: reconciled: {findings} findings, {skip_verdicts} skip verdicts, {resolved} resolved in {}",
            format_elapsed(*elapsed)
        ),
        Event::RunEngine { engine } => format!("run: engine {engine} answers"),
        Event::RunSingleNodeChecked { engine, elapsed } => format!(
            "run: --check-single-node: the in-process run ({}) gives the same outputs as {engine}",
            format_elapsed(*elapsed)
        ),
        Event::RuleWarning(warning) => format!("warning: {warning}"),
        Event::SelfCheckFailed(reason) => format!("self-check failed: {reason}"),
        Event::RunWritten { folder, elapsed } => {
            format!("run: wrote {folder} in {}", format_elapsed(*elapsed))
        }
        Event::RunAlreadyDone { folder } => {
            format!("run: {folder} is already complete with the same inputs; nothing to do (--replace recomputes it)")
        }
        Event::NightlyStarted { cut, rules, rules_hash } => {
            format!("cut {cut}, rules {rules} ({rules_hash})")
        }
        Event::ExportChain(line) => line.clone(),
        Event::ExportSkipped { snapshot } => {
            format!("export skipped: {snapshot} is already complete")
        }
        Event::ExportFinished { rows, sources, snapshot, elapsed } => format!(
            "export done: {rows} rows from {sources} sources into {snapshot} in {}",
            format_elapsed(*elapsed)
        ),
        Event::Demo(step) => describe_demo(step),
        Event::RunFinished { findings, breaks, tasks, folder, elapsed } => format!(
            "run done: {findings} findings ({breaks} BREAK), {tasks} compensation tasks into {folder} in {}",
            format_elapsed(*elapsed)
        ),
    }
}

/// The demo's steps, with rough times so a newcomer knows what to expect.
fn describe_demo(step: &DemoStep) -> String {
    match step {
        DemoStep::Generating { orders, folder } => {
            format!("demo: generating {orders} orders into {folder} (about 2 s per 100k orders)")
        }
        DemoStep::Generated { summary } => summary.trim_end().to_string(),
        DemoStep::Loading { database } => {
            format!("demo: loading into SQLite {database} (about 10 s per 100k orders)")
        }
        DemoStep::Loaded { rows, database, elapsed } => {
            format!("demo: loaded {rows} rows into {database} in {}", format_elapsed(*elapsed))
        }
        DemoStep::Nightly { job } => format!(
            "demo: nightly job {job}: export from SQLite (about 15 s per 100k orders), then run"
        ),
        DemoStep::Verifying => "demo: verifying the run against the ground truth".to_string(),
    }
}

fn rate(rows: u64, elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        (rows as f64 / secs) as u64
    } else {
        0
    }
}

/// `1234567` as `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_as_before() {
        assert_eq!(group(1_234_567), "1,234,567");
        let done = Event::ExportDone {
            label: "points (receipts)".into(),
            rows: 2_000,
            elapsed: Duration::from_secs(2),
            chunks: 1,
        };
        assert_eq!(
            describe(&done),
            "export points (receipts): 2,000 rows in 2.00s (1,000 rows/s, 1 chunk)"
        );
    }
}
