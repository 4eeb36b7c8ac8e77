//! `effect-recon report` and the `report.html` nightly writes, opened by a real headless
//! browser (Debian's `chromium`; `.ci/run` installs it): the DOM it builds holds every
//! value of `summary.json`, each chart is drawn with its data, a screenshot is not blank,
//! and the file fetches nothing from anywhere.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::common::*;

/// stdout and stderr as one text (of the binary, chromium or Python); unlike
/// `common::text`, which keeps them apart.
fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The charts every report draws.
const CHARTS: [&str; 6] =
    ["backlog", "reorder_share", "by_hour", "by_partition", "by_consumer", "open_age"];

/// Debian's chromium, or `None` (the test then says it did not run).
fn chromium() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"));
    std::iter::once(PathBuf::from("/usr/bin/chromium")).chain(on_path).find(|p| p.is_file())
}

/// `SKIPPED report::<test>: chromium not installed; ...` on stderr (scripts/test collects it).
fn say_no_browser() {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: chromium not installed; the report was checked without a browser"
    );
}

/// Runs headless chromium on `page` with `args`, in its own profile folder.
fn browse(browser: &Path, page: &Path, args: &[String]) -> Output {
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(output.status.success(), "chromium failed: {}", text(&output));
    output
}

/// Every leaf of `summary.json` as (key, text): the keys the page's `data-summary`
/// attributes use (`findings/<effect>/<class>/<verdict>`, `inputs/ledger`, `open`, ...).
fn summary_leaves(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let join = |key: &str| if path.is_empty() { key.to_string() } else { format!("{path}/{key}") };
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| summary_leaves(v, &join(k), out)),
        Value::Array(rows) if path == "findings" => {
            for f in rows {
                let key = format!(
                    "findings/{}/{}/{}",
                    f["effect"].as_str().unwrap(),
                    f["class"].as_str().unwrap(),
                    f["verdict"].as_str().unwrap()
                );
                out.push((key, f["count"].to_string()));
            }
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| summary_leaves(v, &join(&i.to_string()), out)),
        Value::Null => {}
        Value::String(s) => out.push((path.to_string(), s.clone())),
        other => out.push((path.to_string(), other.to_string())),
    }
}

/// The text of the first element whose `data-summary` is `key`.
fn summary_value<'a>(dom: &'a str, key: &str) -> Option<&'a str> {
    let at = dom.find(&format!("data-summary=\"{key}\""))?;
    let rest = &dom[at..];
    let start = rest.find('>')? + 1;
    let end = rest[start..].find('<')?;
    Some(&rest[start..start + end])
}

fn unescape(html: &str) -> String {
    html.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Asserts every value of the run's summary.json is in the page under its key.
fn assert_every_summary_value(dom: &str, summary: &Value) {
    let mut leaves = Vec::new();
    summary_leaves(summary, "", &mut leaves);
    assert!(leaves.len() >= 20, "{leaves:?}");
    for (key, expected) in &leaves {
        let shown = summary_value(dom, key)
            .unwrap_or_else(|| panic!("summary.json {key} = {expected} is not in the page"));
        assert_eq!(unescape(shown), *expected, "summary.json {key}");
    }
}

/// The `<figure data-chart=NAME ...>` of each chart: its data marks and its SVG.
fn charts_of(dom: &str) -> BTreeMap<String, (usize, String)> {
    let mut out = BTreeMap::new();
    for part in dom.split("<figure data-chart=\"").skip(1) {
        let name = part.split('"').next().unwrap().to_string();
        let marks: usize = part
            .split("data-marks=\"")
            .nth(1)
            .and_then(|m| m.split('"').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("chart {name} has no data-marks"));
        let svg = part.split("</figure>").next().unwrap();
        let svg = &svg[svg.find("<svg").unwrap_or_else(|| panic!("chart {name} has no <svg>"))..];
        out.insert(name, (marks, svg.split("</svg>").next().unwrap().to_string()));
    }
    out
}

/// Elements drawn in one of the series colours (bars, points, legend keys).
fn coloured_marks(svg: &str) -> usize {
    svg.split('<')
        .filter(|e| e.starts_with("rect") || e.starts_with("circle"))
        .filter(|e| ["#C0392B", "#E09A1A", "#1F5FA8"].iter().any(|c| e.contains(c)))
        .count()
}

/// Asserts each chart is present, has data and really draws it.
fn assert_charts_drawn(dom: &str, runs: usize) {
    let charts = charts_of(dom);
    assert_eq!(
        charts.keys().map(String::as_str).collect::<HashSet<_>>(),
        CHARTS.into_iter().collect()
    );
    for (name, (marks, svg)) in &charts {
        assert!(*marks > 0, "chart {name} drew no data");
        assert!(coloured_marks(svg) >= *marks, "chart {name}: {marks} marks said, fewer drawn");
        assert!(svg.contains("<text"), "chart {name} has no labels");
    }
    // One point per run on the backlog line (the blue circles).
    let points =
        charts["backlog"].1.split("<circle").skip(1).filter(|c| c.contains("#1F5FA8")).count();
    assert_eq!(points, runs, "one backlog point per run");
}

/// Asserts the HTML fetches nothing: no script, stylesheet, font or image from a URL.
fn assert_self_contained(html: &str) {
    let lower = html.to_ascii_lowercase();
    for attribute in ["src=", "href="] {
        for value in lower.split(attribute).skip(1) {
            let value = value.trim_start_matches(['"', '\'']);
            for scheme in ["http:", "https:", "//", "file:", "ftp:"] {
                assert!(!value.starts_with(scheme), "{attribute}{value:.60}");
            }
        }
    }
    for fetch in ["<script", "<link", "@import", "url(", "<img", "<iframe", "<object"] {
        assert!(!lower.contains(fetch), "the page holds {fetch}");
    }
}

/// Decodes a PNG screenshot (with Python's standard library: `report/png_colours.py`);
/// asserts it is not blank: many colours, and a good part of the pixels unlike the
/// background.
fn assert_not_blank(png_path: &Path) {
    let python = std::env::var("EFFECT_RECON_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let output = Command::new(&python)
        .arg(repo("tests/it/report/png_colours.py"))
        .arg(png_path)
        .output()
        .unwrap_or_else(|e| panic!("{python} runs: {e}"));
    assert!(output.status.success(), "decoding the screenshot: {}", text(&output));
    let shot: Value = serde_json::from_slice(&output.stdout).unwrap();
    let number = |key: &str| shot[key].as_u64().unwrap();
    assert_eq!((number("width"), number("height")), (1280, 2400), "{shot}");
    assert!(number("colours") >= 50, "only {} colours in the screenshot", number("colours"));
    let (pixels, background) = (number("pixels"), number("background"));
    assert!(
        (pixels - background) * 100 >= pixels * 5,
        "{} of {pixels} pixels differ from the background",
        pixels - background
    );
}

/// Checks one written report: self-contained; with a browser, the DOM, charts and a screenshot.
fn check_report(page: &Path, run_folder: &Path, runs: usize) {
    let html = std::fs::read_to_string(page).unwrap();
    assert_self_contained(&html);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(run_folder.join("summary.json")).unwrap()).unwrap();
    // Without a browser the page's own text is checked (a browser parses it the same way).
    assert_every_summary_value(&html, &summary);
    let Some(browser) = chromium() else {
        // CI installs it and says so: there a missing browser is a failure, not a skip.
        assert!(
            std::env::var_os("EFFECT_RECON_TEST_REQUIRE_CHROMIUM").is_none(),
            "EFFECT_RECON_TEST_REQUIRE_CHROMIUM is set but chromium is not installed"
        );
        say_no_browser();
        return;
    };
    let dom = browse(&browser, page, &["--dump-dom".into()]);
    let dom = String::from_utf8(dom.stdout).unwrap();
    assert!(dom.contains("</main>"), "a whole page: {dom:.300}");
    assert_every_summary_value(&dom, &summary);
    assert_charts_drawn(&dom, runs);
    let shots = tempfile::tempdir().unwrap();
    let shot = shots.path().join("report.png");
    browse(
        &browser,
        page,
        &[format!("--screenshot={}", shot.display()), "--window-size=1280,2400".into()],
    );
    assert_not_blank(&shot);
}

fn printed_report(output: &Output) -> PathBuf {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report:"))
        .unwrap_or_else(|| panic!("no report: line in {}", text(output)));
    PathBuf::from(line.trim())
}

#[test]
fn the_report_of_the_tiny_fixture_holds_every_number_of_its_summary() {
    let out = tempfile::tempdir().unwrap();
    let snapshot = repo("fixtures/tiny/snapshot");
    let root = out.path().to_str().unwrap();
    let run = effect_recon(&["run", "--snapshot", snapshot.to_str().unwrap(), "--out", root]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let run_folder = out.path().join("run=20261129T160000Z");

    let report = effect_recon(&["report", "--out", root]);
    assert_eq!(report.status.code(), Some(0), "{}", text(&report));
    let page = printed_report(&report);
    assert_eq!(page, run_folder.join("report.html"));
    check_report(&page, &run_folder, 1);

    // The same run by id, to a file of one's own: the same page.
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().join("morning.html");
    let by_id = effect_recon(&[
        "report",
        "--out",
        root,
        "--run",
        "20261129T160000Z",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(by_id.status.code(), Some(0), "{}", text(&by_id));
    assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(&page).unwrap());
    let names: Vec<_> =
        std::fs::read_dir(elsewhere.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["morning.html"], "no temporary file left");
}

#[test]
fn a_report_of_a_missing_run_names_it_and_writes_nothing() {
    let out = tempfile::tempdir().unwrap();
    let root = out.path().to_str().unwrap();
    let empty = effect_recon(&["report", "--out", root]);
    assert_eq!(empty.status.code(), Some(2), "{}", text(&empty));
    assert!(text(&empty).contains("no complete run"), "{}", text(&empty));

    let snapshot = repo("fixtures/tiny/snapshot");
    let run = effect_recon(&["run", "--snapshot", snapshot.to_str().unwrap(), "--out", root]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let missing = effect_recon(&["report", "--out", root, "--run", "20261130T160000Z"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(text(&missing).contains("--run"), "{}", text(&missing));
    assert!(text(&missing).contains("20261130T160000Z"), "{}", text(&missing));
    assert!(!out.path().join("run=20261129T160000Z/report.html").exists());
}

/// `demo --nights 3`: the nightly job writes report.html into each run folder and the
/// demo prints the last one's path; each page holds its own summary, and the last one's
/// charts over the runs have three points.
#[test]
fn nightly_writes_the_report_of_each_night_of_a_three_night_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().join("demo");
    let demo = effect_recon(&[
        "demo",
        "--nights",
        "3",
        "--orders",
        "3000",
        "--seed",
        "7",
        "--dir",
        demo_dir.to_str().unwrap(),
    ]);
    assert_eq!(demo.status.code(), Some(0), "{}", text(&demo));
    let recon = std::fs::canonicalize(&demo_dir).unwrap().join("recon");
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&recon)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("run="))
        .collect();
    runs.sort();
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(printed_report(&demo), runs[2].join("report.html"));
    for (i, run) in runs.iter().enumerate() {
        let page = run.join("report.html");
        assert!(page.is_file(), "nightly wrote no {}", page.display());
        if i < 2 {
            // Every night's page holds that night's numbers (the browser opens the last).
            let html = std::fs::read_to_string(&page).unwrap();
            let summary: Value =
                serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
            assert_every_summary_value(&html, &summary);
        }
    }
    let last: Value =
        serde_json::from_slice(&std::fs::read(runs[2].join("summary.json")).unwrap()).unwrap();
    assert!(last["persisting"].as_u64().unwrap() > 0, "a chain with a backlog: {last}");
    check_report(&runs[2].join("report.html"), &runs[2], 3);

    // The report command renders the same page for the same run.
    let again = tempfile::tempdir().unwrap();
    let file = again.path().join("again.html");
    let output =
        effect_recon(&["report", "--out", recon.to_str().unwrap(), "-o", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(runs[2].join("report.html")).unwrap());
}

/// The latest run is reported even when it is INCOMPLETE (that is what the on-call must
/// see): its status, exit code 3 and every failed self-check are on the page.
#[tokio::test]
async fn the_report_of_an_incomplete_night_says_so_with_exit_code_3() {
    let out = tempfile::tempdir().unwrap();
    let root = out.path().to_str().unwrap();
    let snapshot = repo("fixtures/tiny/snapshot");
    let first = effect_recon(&["run", "--snapshot", snapshot.to_str().unwrap(), "--out", root]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    // The next night, every receipts source empty: published, but INCOMPLETE.
    let csv = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo("fixtures/tiny/csv")).unwrap() {
        let path = entry.unwrap().path();
        let mut content = std::fs::read_to_string(&path).unwrap();
        if path.file_name().unwrap().to_str().unwrap().starts_with("receipts_") {
            content = content.lines().next().unwrap().to_string() + "\n";
        }
        std::fs::write(csv.path().join(path.file_name().unwrap()), content).unwrap();
    }
    let (_snap, next) = temp_location();
    snapshot_from_csv(csv.path(), &next, "2026-11-30T16:00:00Z").await;
    let second = effect_recon(&["run", "--snapshot", &next.to_string(), "--out", root]);
    assert_eq!(second.status.code(), Some(3), "{}", text(&second));

    let report = effect_recon(&["report", "--out", root]);
    assert_eq!(report.status.code(), Some(0), "{}", text(&report));
    let run_folder = out.path().join("run=20261130T160000Z");
    let page = printed_report(&report);
    assert_eq!(page, run_folder.join("report.html"));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<span class=\"word\" data-summary=\"status\">INCOMPLETE</span>"));
    assert!(html.contains("exit code <strong id=\"exit-code\">3</strong>"), "{html:.2000}");
    assert!(html.contains("table receipts has no rows"), "{html:.2000}");
    check_report(&page, &run_folder, 2);
}
