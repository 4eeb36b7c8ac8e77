//! Progress of an export on stderr: a redrawn status line on a terminal, plain log lines
//! (every few seconds and at the end of each table) otherwise, nothing when quiet.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A status line redrawn in place (stderr is a terminal).
    Terminal,
    /// Plain lines, for logs and schedulers.
    Lines,
    /// Nothing.
    Quiet,
}

impl ProgressMode {
    /// `Terminal` when stderr is a terminal, else `Lines`.
    pub fn detect() -> Self {
        if std::io::stderr().is_terminal() {
            ProgressMode::Terminal
        } else {
            ProgressMode::Lines
        }
    }
}

/// The progress reporter shared by the tables of one export.
#[derive(Debug)]
pub struct Progress {
    mode: ProgressMode,
    last_print: Mutex<Instant>,
}

const TERMINAL_EVERY: Duration = Duration::from_millis(200);
const LINES_EVERY: Duration = Duration::from_secs(10);

impl Progress {
    /// A reporter in `mode`.
    pub fn new(mode: ProgressMode) -> Self {
        Progress { mode, last_print: Mutex::new(Instant::now()) }
    }

    /// Starts counting one table of one source.
    pub fn table(&self, label: &str) -> TableProgress<'_> {
        TableProgress { progress: self, label: label.to_string(), rows: 0, started: Instant::now() }
    }

    /// A plain message (stage lines).
    pub fn message(&self, line: &str) {
        match self.mode {
            ProgressMode::Quiet => {}
            ProgressMode::Terminal => eprintln!("\r\x1b[K{line}"),
            ProgressMode::Lines => eprintln!("{line}"),
        }
    }

    fn tick(&self, line: &str) {
        let every = match self.mode {
            ProgressMode::Quiet => return,
            ProgressMode::Terminal => TERMINAL_EVERY,
            ProgressMode::Lines => LINES_EVERY,
        };
        let Ok(mut last) = self.last_print.lock() else { return };
        if last.elapsed() < every {
            return;
        }
        *last = Instant::now();
        let mut err = std::io::stderr().lock();
        let _ = match self.mode {
            ProgressMode::Terminal => write!(err, "\r\x1b[K{line}"),
            _ => writeln!(err, "{line}"),
        };
        let _ = err.flush();
    }
}

/// Rows of one table as they are written.
pub struct TableProgress<'a> {
    progress: &'a Progress,
    label: String,
    rows: u64,
    started: Instant,
}

impl TableProgress<'_> {
    /// Counts `rows` more rows.
    pub fn add(&mut self, rows: u64) {
        self.rows += rows;
        let line = format!(
            "export {}: {} rows, {} rows/s",
            self.label,
            group(self.rows),
            group(self.rate())
        );
        self.progress.tick(&line);
    }

    /// Prints the final line of the table and returns its elapsed time.
    pub fn finish(self, chunks: usize) -> Duration {
        let elapsed = self.started.elapsed();
        self.progress.message(&format!(
            "export {}: {} rows in {} ({} rows/s, {chunks} chunk{})",
            self.label,
            group(self.rows),
            crate::time::format_elapsed(elapsed),
            group(self.rate()),
            if chunks == 1 { "" } else { "s" }
        ));
        elapsed
    }

    fn rate(&self) -> u64 {
        let secs = self.started.elapsed().as_secs_f64();
        if secs > 0.0 {
            (self.rows as f64 / secs) as u64
        } else {
            0
        }
    }
}

/// `1234567` as `1,234,567`.
pub fn group(n: u64) -> String {
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
