//! Progress of one export source as typed events ([`crate::events::Event::ExportRows`]
//! per batch, [`crate::events::Event::ExportDone`] at the end); the binary renders them.

use std::time::{Duration, Instant};

use crate::events::{Event, Events};

/// Counts the rows of one source as they are written and reports them.
pub(crate) struct SourceProgress {
    events: Events,
    label: String,
    rows: u64,
    started: Instant,
}

impl SourceProgress {
    /// Starts counting for the source `label`.
    pub(crate) fn start(events: &Events, label: &str) -> Self {
        SourceProgress {
            events: events.clone(),
            label: label.to_string(),
            rows: 0,
            started: Instant::now(),
        }
    }

    /// Records `rows` more rows written.
    pub(crate) fn add(&mut self, rows: u64) {
        self.rows += rows;
        self.events.emit(Event::ExportRows {
            label: self.label.clone(),
            rows: self.rows,
            elapsed: self.started.elapsed(),
        });
    }

    /// Reports the source done and returns its elapsed time.
    pub(crate) fn finish(self, chunks: usize) -> Duration {
        let elapsed = self.started.elapsed();
        self.events.emit(Event::ExportDone { label: self.label, rows: self.rows, elapsed, chunks });
        elapsed
    }
}
