//! The report's view model and its template (`templates/report.html`, checked by askama
//! at compile time). Every count comes from `summary.json` and carries its key in a
//! `data-summary` attribute, so a test (or a person) can match the page to the file.

use std::collections::BTreeMap;

use askama::Template;
use chrono::DateTime;

use super::charts::{self, Bars, Line, AMBER, BLUE, RED};
use super::data::{Finding, ReportData};
use crate::error::{Error, Result};
use crate::time::{format_instant, Micros, DAY_MICROS};
use crate::vocabulary::{Lifecycle, Resolution, RunStatus, SkipVerdict, Verdict};

/// Tasks listed with their `explain` line.
const TOP_TASKS: usize = 20;
/// Skip verdicts listed one by one (WRONG first, then PENDING).
const LISTED_SKIPS: usize = 50;

/// A value of `summary.json` and its key (`findings/points_grant/SKIPPED_BUT_DUE/BREAK`,
/// `inputs/ledger`, `open`, ...); an empty key for a value the summary does not hold.
pub(crate) struct Cell {
    key: String,
    value: String,
}

impl Cell {
    fn of(key: impl Into<String>, value: impl ToString) -> Self {
        Cell { key: key.into(), value: value.to_string() }
    }

    fn absent(value: impl ToString) -> Self {
        Cell { key: String::new(), value: value.to_string() }
    }
}

/// One effect × class row of the counts.
pub(crate) struct CountRow {
    effect: String,
    class: String,
    breaks: Cell,
    pending: Cell,
}

/// One chart, its SVG drawn by plotters.
pub(crate) struct Chart {
    name: &'static str,
    title: String,
    note: String,
    svg: charts::Svg,
}

/// One of the top tasks.
pub(crate) struct TaskLine {
    rank: usize,
    priority: i32,
    effect: String,
    class: String,
    action: String,
    order_id: i64,
    what: String,
    open_since: String,
    age: String,
    attempt: String,
    explain: String,
}

/// One listed skip verdict.
pub(crate) struct SkipLine {
    verdict: String,
    msg_id: String,
    order_id: i64,
    event_type: String,
    decided_at: String,
    lifecycle: String,
}

#[derive(Template)]
#[template(path = "report.html")]
struct Page {
    run_id: String,
    complete: bool,
    status: String,
    exit_code: &'static str,
    exit_note: String,
    meaning: &'static str,
    reasons: Vec<Cell>,
    rule_warnings: Vec<Cell>,
    details: Vec<(&'static str, Cell)>,
    counts: Vec<CountRow>,
    breaks: Cell,
    pending: Cell,
    tasks_total: Cell,
    lifecycle: Vec<(&'static str, Cell)>,
    resolved: Vec<(&'static str, Cell)>,
    resolved_total: u64,
    oldest: Cell,
    oldest_age: String,
    inputs: Vec<(String, Cell)>,
    timings: Vec<(String, Cell)>,
    charts: Vec<Chart>,
    tasks: Vec<TaskLine>,
    skip_counts: Vec<(&'static str, Cell)>,
    skips: Vec<SkipLine>,
    skips_unlisted: usize,
}

/// The report of `data` as one self-contained HTML page.
pub(crate) fn render(data: &ReportData, me: &str) -> Result<String> {
    let s = &data.summary;
    let complete = s.status == RunStatus::Complete;
    let (exit_code, exit_note) = exit_of(data);
    let mut details = vec![
        ("run", Cell::of("run_id", &s.run_id)),
        ("window from (exclusive)", Cell::of("since", &s.since)),
        ("cut (inclusive)", Cell::of("cut", &s.cut)),
        ("follows run", optional("previous_run", s.previous_run.as_deref(), "none (first run)")),
        ("chain origin", Cell::of("origin", &s.origin)),
        ("late horizon", Cell::of("late_horizon", &s.late_horizon)),
        ("rules changed since the previous run", Cell::of("rules_changed", s.rules_changed)),
        ("snapshot", Cell::absent(&data.manifest.snapshot)),
        ("run folder", Cell::absent(data.folder.to_string())),
        ("summary format", Cell::of("format", &s.format)),
    ];
    details.push(("effect-recon version", Cell::absent(&data.manifest.version)));
    let page = Page {
        run_id: s.run_id.clone(),
        complete,
        status: s.status.as_str().to_string(),
        exit_code,
        exit_note,
        meaning: if complete { COMPLETE_MEANING } else { INCOMPLETE_MEANING },
        reasons: keyed_list("reasons", &s.reasons),
        rule_warnings: keyed_list("rule_warnings", &s.rule_warnings),
        details,
        counts: count_rows(data),
        breaks: verdict_cell(&s.verdicts, Verdict::Break),
        pending: verdict_cell(&s.verdicts, Verdict::Pending),
        tasks_total: Cell::of("compensation_tasks", s.compensation_tasks),
        lifecycle: vec![
            (Lifecycle::New.as_str(), Cell::of("new", s.new)),
            (Lifecycle::Persisting.as_str(), Cell::of("persisting", s.persisting)),
            ("of them not re-checked", Cell::of("not_rechecked", s.not_rechecked)),
            ("open backlog", Cell::of("open", s.open)),
        ],
        resolved: resolved_cells(&s.resolved),
        resolved_total: s.resolved.values().sum(),
        oldest: optional("oldest_open_break_on", s.oldest_open_break_on.as_deref(), "nothing open"),
        oldest_age: oldest_age(data),
        inputs: s
            .inputs
            .iter()
            .map(|(k, v)| (k.clone(), Cell::of(format!("inputs/{k}"), v)))
            .collect(),
        timings: s
            .timings_ms
            .iter()
            .map(|(k, v)| (k.clone(), Cell::of(format!("timings_ms/{k}"), v)))
            .collect(),
        charts: charts_of(data)?,
        tasks: top_tasks(data, me),
        skip_counts: SkipVerdict::ALL
            .iter()
            .map(|v| match s.skip_verdicts.get(v.as_str()) {
                Some(n) => (v.as_str(), Cell::of(format!("skip_verdicts/{v}"), n)),
                None => (v.as_str(), Cell::absent(0)),
            })
            .collect(),
        skips: listed_skips(data),
        skips_unlisted: unlisted_skips(data),
    };
    page.render().map_err(|e| Error::Internal(format!("report template: {e}")))
}

const COMPLETE_MEANING: &str = "Every self-check passed: the snapshot was read whole and \
agrees with the nights before, so the findings below are last night's findings and their \
compensation tasks can be executed.";
const INCOMPLETE_MEANING: &str = "A self-check failed: the run was published, but its \
findings may come from a broken or partial export. Do not act on them: fix the cause below \
and run again (publish and reopen refuse this run unless given --allow-incomplete).";

/// The exit code `run` and `nightly` gave, and what would change it.
fn exit_of(data: &ReportData) -> (&'static str, String) {
    let s = &data.summary;
    if s.status == RunStatus::Incomplete {
        return ("3", "INCOMPLETE (3 wins over 1)".into());
    }
    match s.breaks() {
        0 => ("0", "no BREAK findings".into()),
        n => ("0", format!("1 under --fail-on-breaks: {n} BREAK findings")),
    }
}

fn optional(key: &str, value: Option<&str>, otherwise: &str) -> Cell {
    match value {
        Some(v) => Cell::of(key, v),
        None => Cell::absent(otherwise),
    }
}

fn keyed_list(key: &str, values: &[String]) -> Vec<Cell> {
    values.iter().enumerate().map(|(i, v)| Cell::of(format!("{key}/{i}"), v)).collect()
}

fn verdict_cell(verdicts: &BTreeMap<String, u64>, verdict: Verdict) -> Cell {
    match verdicts.get(verdict.as_str()) {
        Some(n) => Cell::of(format!("verdicts/{verdict}"), n),
        None => Cell::absent(0),
    }
}

fn count_rows(data: &ReportData) -> Vec<CountRow> {
    let mut rows: BTreeMap<(&str, &str), (Cell, Cell)> = BTreeMap::new();
    for f in &data.summary.findings {
        let entry =
            rows.entry((&f.effect, &f.class)).or_insert_with(|| (Cell::absent(0), Cell::absent(0)));
        let cell = Cell::of(format!("findings/{}/{}/{}", f.effect, f.class, f.verdict), f.count);
        match f.verdict {
            Verdict::Break => entry.0 = cell,
            Verdict::Pending => entry.1 = cell,
        }
    }
    rows.into_iter()
        .map(|((effect, class), (breaks, pending))| CountRow {
            effect: effect.into(),
            class: class.into(),
            breaks,
            pending,
        })
        .collect()
}

fn resolved_cells(resolved: &BTreeMap<String, u64>) -> Vec<(&'static str, Cell)> {
    let mut cells: Vec<(&'static str, Cell)> = Resolution::ALL
        .iter()
        .map(|r| match resolved.get(r.as_str()) {
            Some(n) => (r.as_str(), Cell::of(format!("resolved/{r}"), n)),
            None => (r.as_str(), Cell::absent(0)),
        })
        .collect();
    // A resolution this version does not know still shows, with its number.
    for (r, n) in resolved.iter().filter(|(r, _)| r.parse::<Resolution>().is_err()) {
        cells.push(("other", Cell::of(format!("resolved/{r}"), format!("{n} ({r})"))));
    }
    cells
}

fn oldest_age(data: &ReportData) -> String {
    let oldest = data
        .summary
        .oldest_open_break_on
        .as_deref()
        .and_then(|t| crate::time::parse_instant(t).ok());
    match oldest {
        Some(at) => format!("broke {} before the cut", age(data.cut - at)),
        None => String::new(),
    }
}

/// A duration in days and hours, e.g. `2d 5h`, `3h 20m`, `12m`.
fn age(micros: Micros) -> String {
    let minutes = micros.max(0) / 60_000_000;
    let (days, hours, minutes) = (minutes / 1440, minutes / 60 % 24, minutes % 60);
    match (days, hours) {
        (0, 0) => format!("{minutes}m"),
        (0, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}

fn charts_of(data: &ReportData) -> Result<Vec<Chart>> {
    let mut out = over_runs_charts(data)?;
    out.push(by_hour(data)?);
    out.push(by_partition(data)?);
    out.push(by_consumer(data)?);
    out.push(open_age(data)?);
    Ok(out)
}

fn run_labels(data: &ReportData) -> Vec<String> {
    let day = |cut: Micros, format: &str| {
        DateTime::from_timestamp_micros(cut)
            .map(|t| t.format(format).to_string())
            .unwrap_or_default()
    };
    let days: Vec<String> = data.history.iter().map(|r| day(r.cut, "%m-%d")).collect();
    let mut distinct = days.clone();
    distinct.dedup();
    if distinct.len() == days.len() {
        days
    } else {
        data.history.iter().map(|r| day(r.cut, "%d %H:%M")).collect()
    }
}

fn over_runs_charts(data: &ReportData) -> Result<Vec<Chart>> {
    let runs = run_labels(data);
    let h = &data.history;
    let span = format!("the last {} complete run{}", h.len(), if h.len() == 1 { "" } else { "s" });
    let backlog = charts::over_runs(
        "backlog",
        "findings",
        &runs,
        Some(Bars {
            label: Lifecycle::New.as_str(),
            colour: RED,
            values: h.iter().map(|r| r.new).collect(),
        }),
        &[Line {
            label: "open backlog",
            colour: BLUE,
            values: h.iter().map(|r| r.open as f64).collect(),
        }],
        None,
    )?;
    let share = |found: u64, of: u64| if of == 0 { 0.0 } else { 100.0 * found as f64 / of as f64 };
    let reorder = charts::over_runs(
        "reorder_share",
        "% of findings",
        &runs,
        None,
        &[Line {
            label: "reorder_suspected",
            colour: AMBER,
            values: h.iter().map(|r| share(r.reorder_suspected, r.findings)).collect(),
        }],
        Some(100.0),
    )?;
    let incomplete = h.iter().filter(|r| r.status != RunStatus::Complete).count();
    let note = match incomplete {
        0 => String::new(),
        n => format!("{n} of them INCOMPLETE."),
    };
    Ok(vec![
        Chart {
            name: "backlog",
            title: format!("Open backlog and NEW findings over {span}"),
            note: note.clone(),
            svg: backlog,
        },
        Chart {
            name: "reorder_share",
            title: format!("Share of findings with reorder_suspected over {span}"),
            note: "A rebalance shows as a jump: a later offset of a partition was decided before an earlier one.".into(),
            svg: reorder,
        },
    ])
}

/// BREAK and PENDING counts per category of `key` (findings without one are left out).
fn by_verdict<K: Ord + Clone>(
    findings: &[Finding],
    key: impl Fn(&Finding) -> Option<K>,
) -> (BTreeMap<K, (u64, u64)>, usize) {
    let mut counts: BTreeMap<K, (u64, u64)> = BTreeMap::new();
    let mut without = 0;
    for f in findings {
        let Some(k) = key(f) else {
            without += 1;
            continue;
        };
        let entry = counts.entry(k).or_default();
        if f.verdict == Verdict::Break {
            entry.0 += 1
        } else {
            entry.1 += 1
        }
    }
    (counts, without)
}

fn verdict_stacks(values: Vec<(u64, u64)>) -> Vec<Bars<'static>> {
    vec![
        Bars {
            label: Verdict::Break.as_str(),
            colour: RED,
            values: values.iter().map(|v| v.0).collect(),
        },
        Bars {
            label: Verdict::Pending.as_str(),
            colour: AMBER,
            values: values.iter().map(|v| v.1).collect(),
        },
    ]
}

fn left_out(without: usize, what: &str) -> String {
    match without {
        0 => String::new(),
        1 => format!("1 finding without {what} is not shown."),
        n => format!("{n} findings without {what} are not shown."),
    }
}

fn by_hour(data: &ReportData) -> Result<Chart> {
    let hour = |f: &Finding| {
        f.due_at.and_then(DateTime::from_timestamp_micros).map(|t| t.format("%H").to_string())
    };
    let (counts, without) = by_verdict(&data.findings, hour);
    let hours: Vec<String> = (0..24).map(|h| format!("{h:02}")).collect();
    let values = hours.iter().map(|h| counts.get(h).copied().unwrap_or_default()).collect();
    let svg =
        charts::stacked_bars("by_hour", "hour of due_at (UTC)", &hours, &verdict_stacks(values))?;
    Ok(Chart {
        name: "by_hour",
        title: "Findings by hour of due_at".into(),
        note: left_out(without, "due_at (never due)"),
        svg,
    })
}

fn by_partition(data: &ReportData) -> Result<Chart> {
    let (counts, without) = by_verdict(&data.findings, |f| f.kafka_partition);
    let highest = counts.keys().copied().max().unwrap_or(0).max(23);
    let partitions: Vec<i32> = (0..=highest).collect();
    let labels: Vec<String> = partitions.iter().map(|p| p.to_string()).collect();
    let values = partitions.iter().map(|p| counts.get(p).copied().unwrap_or_default()).collect();
    let svg =
        charts::stacked_bars("by_partition", "Kafka partition", &labels, &verdict_stacks(values))?;
    Ok(Chart {
        name: "by_partition",
        title: "Findings by Kafka partition of the evidence".into(),
        note: left_out(without, "ledger evidence (NO_LEDGER_ENTRY)"),
        svg,
    })
}

fn by_consumer(data: &ReportData) -> Result<Chart> {
    let (counts, without) = by_verdict(&data.findings, |f| f.consumer_id.clone());
    let mut consumers: Vec<&String> = counts.keys().collect();
    // consumer-2 before consumer-10.
    consumers.sort_by_key(|c| (c.len(), c.as_str()));
    let labels: Vec<String> = consumers.iter().map(|c| c.to_string()).collect();
    let values = consumers.iter().map(|c| counts[*c]).collect();
    let svg = charts::stacked_bars("by_consumer", "consumer", &labels, &verdict_stacks(values))?;
    Ok(Chart {
        name: "by_consumer",
        title: "Findings by consumer that decided".into(),
        note: left_out(without, "ledger evidence (NO_LEDGER_ENTRY)"),
        svg,
    })
}

/// Age buckets of open findings, in days: `[from, to)`.
const AGE_BUCKETS: [(i64, i64, &str); 7] = [
    (0, 1, "< 1d"),
    (1, 2, "1-2d"),
    (2, 3, "2-3d"),
    (3, 7, "3-7d"),
    (7, 14, "7-14d"),
    (14, 30, "14-30d"),
    (30, i64::MAX, ">= 30d"),
];

fn open_age(data: &ReportData) -> Result<Chart> {
    let mut values = vec![(0u64, 0u64); AGE_BUCKETS.len()];
    for f in data.findings.iter().filter(|f| f.verdict == Verdict::Break) {
        let days = f.first_break_on.map_or(0, |at| (data.cut - at).max(0) / DAY_MICROS);
        let bucket = AGE_BUCKETS.iter().position(|(from, to, _)| (*from..*to).contains(&days));
        let slot = &mut values[bucket.unwrap_or(AGE_BUCKETS.len() - 1)];
        if f.lifecycle == Some(Lifecycle::New) {
            slot.0 += 1
        } else {
            slot.1 += 1
        }
    }
    let labels: Vec<String> = AGE_BUCKETS.iter().map(|b| b.2.to_string()).collect();
    let stacks = vec![
        Bars {
            label: Lifecycle::New.as_str(),
            colour: RED,
            values: values.iter().map(|v| v.0).collect(),
        },
        Bars {
            label: Lifecycle::Persisting.as_str(),
            colour: BLUE,
            values: values.iter().map(|v| v.1).collect(),
        },
    ];
    let svg =
        charts::stacked_bars("open_age", "time since first BREAK, at the cut", &labels, &stacks)?;
    Ok(Chart { name: "open_age", title: "Age of open findings".into(), note: String::new(), svg })
}

fn top_tasks(data: &ReportData, me: &str) -> Vec<TaskLine> {
    let open = data.open_by_id();
    let first_break = |id: &str| open.get(id).and_then(|f| f.first_break_on);
    let mut tasks: Vec<_> = data.tasks.iter().collect();
    tasks.sort_by_key(|t| {
        let at = first_break(&t.task_id);
        (t.priority, at.is_none(), at, t.task_id.clone())
    });
    let folder = shell_word(&data.folder.to_string());
    let snapshot = shell_word(&data.manifest.snapshot);
    tasks
        .into_iter()
        .take(TOP_TASKS)
        .enumerate()
        .map(|(i, t)| {
            let at = first_break(&t.task_id);
            let what = match (&t.command, &t.reopen_msg_id, &t.reverse_receipt_ids) {
                (Some(c), Some(m), _) => format!("{c}, reopen {m}"),
                (Some(c), None, _) => c.clone(),
                (None, _, Some(ids)) => format!("reverse {}", ids.join(", ")),
                _ => String::new(),
            };
            TaskLine {
                rank: i + 1,
                priority: t.priority,
                effect: t.effect.clone(),
                class: t.class.as_str().to_string(),
                action: t.action.as_str().to_string(),
                order_id: t.order_id,
                what,
                open_since: at.map(format_instant).unwrap_or_default(),
                age: at.map(|at| age(data.cut - at)).unwrap_or_default(),
                attempt: t.attempt.map(|a| a.to_string()).unwrap_or_default(),
                explain: format!(
                    "{me} explain --snapshot {snapshot} --run {folder} --order {}",
                    t.order_id
                ),
            }
        })
        .collect()
}

/// A word as a POSIX shell reads it back: quoted only when it has to be.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-=:@+,".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// The skip verdicts listed one by one: those that may have lost an effect.
fn listed(verdict: SkipVerdict) -> bool {
    matches!(verdict, SkipVerdict::Wrong | SkipVerdict::Pending)
}

fn listed_skips(data: &ReportData) -> Vec<SkipLine> {
    let mut skips: Vec<_> = data.skips.iter().filter(|s| listed(s.verdict)).collect();
    // SkipVerdict's order is the report's: WRONG first, then PENDING.
    skips.sort_by_key(|s| (s.verdict, s.order_id, s.decided_at, s.msg_id.clone()));
    skips
        .into_iter()
        .take(LISTED_SKIPS)
        .map(|s| SkipLine {
            verdict: s.verdict.as_str().to_string(),
            msg_id: s.msg_id.clone(),
            order_id: s.order_id,
            event_type: s.event_type.clone(),
            decided_at: s.decided_at.map(format_instant).unwrap_or_default(),
            lifecycle: s.lifecycle.map(|l| l.as_str().to_string()).unwrap_or_default(),
        })
        .collect()
}

fn unlisted_skips(data: &ReportData) -> usize {
    let listable = data.skips.iter().filter(|s| listed(s.verdict)).count();
    listable.saturating_sub(LISTED_SKIPS)
}

#[cfg(test)]
mod tests {
    use super::{age, shell_word};

    #[test]
    fn ages_read_in_days_hours_or_minutes() {
        let minute = 60_000_000;
        assert_eq!(age(12 * minute), "12m");
        assert_eq!(age(200 * minute), "3h 20m");
        assert_eq!(age((2 * 1440 + 5 * 60 + 7) * minute), "2d 5h");
        assert_eq!(age(-5), "0m");
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(
            shell_word("/tmp/recon/run=20261129T160000Z"),
            "/tmp/recon/run=20261129T160000Z"
        );
        assert_eq!(shell_word("s3://b/recon"), "s3://b/recon");
        assert_eq!(shell_word("/tmp/my runs"), "'/tmp/my runs'");
        assert_eq!(shell_word("/tmp/it's"), r"'/tmp/it'\''s'");
    }
}
