//! What a run hands on: `--metrics-file` (a Prometheus textfile equal to `summary.json`,
//! written atomically) and `--alert-webhook` (one POST per run; a failing webhook changes
//! neither the outputs nor the exit code).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::mpsc;

use super::common::*;

/// `run` on the tiny fixture into `out`, with `extra` arguments.
fn run_tiny(out: &Path, extra: &[&str]) -> Output {
    let snapshot = repo("fixtures/tiny/snapshot");
    let mut args = vec!["run", "--snapshot", snapshot.to_str().unwrap()];
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(extra);
    effect_recon(&args)
}

fn summary_of(out: &Path) -> serde_json::Value {
    let run = std::fs::read_dir(out).unwrap().next().unwrap().unwrap().path();
    serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap()
}

/// Samples of a Prometheus text exposition: `name{labels}` (labels sorted) -> value.
/// Follows the text format: `#` lines are comments or metadata, a sample is
/// `name[{k="v",...}] value`.
fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        let value: f64 = value.parse().expect("a float value");
        let key = match series.split_once('{') {
            None => series.to_string(),
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').expect("labels close");
                let mut pairs: Vec<(String, String)> = labels
                    .split("\",")
                    .filter(|p| !p.is_empty())
                    .map(|pair| {
                        let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                        (k.to_string(), v.trim_end_matches('"').to_string())
                    })
                    .collect();
                pairs.sort();
                let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{name}{{{}}}", inner.join(","))
            }
        };
        assert!(samples.insert(key, value).is_none(), "one sample per series: {line}");
    }
    samples
}

fn seconds(text: &str) -> f64 {
    chrono::DateTime::parse_from_rfc3339(text).unwrap().timestamp() as f64
}

#[test]
fn the_metrics_file_of_the_tiny_fixture_equals_its_summary() {
    let out = tempfile::tempdir().unwrap();
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("effect_recon.prom");
    let output = run_tiny(out.path(), &["--metrics-file", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let names: Vec<_> =
        std::fs::read_dir(folder.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["effect_recon.prom"], "the file alone, no temporary file left");

    let m = parse_exposition(&std::fs::read_to_string(&file).unwrap());
    assert_metrics_equal_summary(&m, &summary_of(out.path()));
}

/// The samples `m` (as [`parse_exposition`] keys them) equal the run's summary.json `s`.
fn assert_metrics_equal_summary(m: &BTreeMap<String, f64>, s: &serde_json::Value) {
    let get = |key: &str| *m.get(key).unwrap_or_else(|| panic!("{key} missing from {m:#?}"));
    for f in s["findings"].as_array().unwrap() {
        let key = format!(
            "effect_recon_findings{{class={},effect={},verdict={}}}",
            f["class"].as_str().unwrap(),
            f["effect"].as_str().unwrap(),
            f["verdict"].as_str().unwrap()
        );
        assert_eq!(get(&key), f["count"].as_f64().unwrap(), "{key}");
    }
    let findings = m.keys().filter(|k| k.starts_with("effect_recon_findings{")).count();
    assert_eq!(findings, s["findings"].as_array().unwrap().len());
    for (verdict, n) in s["skip_verdicts"].as_object().unwrap() {
        assert_eq!(
            get(&format!("effect_recon_skip_verdicts{{verdict={verdict}}}")),
            n.as_f64().unwrap()
        );
    }
    for (table, n) in s["inputs"].as_object().unwrap() {
        assert_eq!(get(&format!("effect_recon_input_rows{{table={table}}}")), n.as_f64().unwrap());
    }
    for (stage, ms) in s["timings_ms"].as_object().unwrap() {
        let secs = get(&format!("effect_recon_stage_duration_seconds{{stage={stage}}}"));
        assert_eq!((secs * 1000.0).round(), ms.as_f64().unwrap(), "{stage}");
    }
    for resolution in ["RECEIPT", "VOIDED", "REVERSED", "NOW_DUE", "RECLASSIFIED", "EXPIRED"] {
        let n = s["resolved"].get(resolution).and_then(|n| n.as_f64()).unwrap_or(0.0);
        assert_eq!(get(&format!("effect_recon_resolved_findings{{resolution={resolution}}}")), n);
    }
    for (metric, field) in [
        ("effect_recon_new_findings", "new"),
        ("effect_recon_persisting_findings", "persisting"),
        ("effect_recon_not_rechecked_findings", "not_rechecked"),
        ("effect_recon_open_findings", "open"),
        ("effect_recon_compensation_tasks", "compensation_tasks"),
    ] {
        assert_eq!(get(metric), s[field].as_f64().unwrap(), "{metric}");
    }
    let cut = seconds(s["cut"].as_str().unwrap());
    let oldest = seconds(s["oldest_open_break_on"].as_str().unwrap());
    assert_eq!(get("effect_recon_oldest_open_age_seconds"), cut - oldest);
    assert_eq!(get("effect_recon_last_run_timestamp_seconds"), cut);
    assert_eq!(get("effect_recon_last_complete_run_timestamp_seconds"), cut);
    assert_eq!(get("effect_recon_run_status{status=COMPLETE}"), 1.0);
    assert_eq!(get("effect_recon_run_status{status=INCOMPLETE}"), 0.0);
    let run_id = s["run_id"].as_str().unwrap();
    assert_eq!(get(&format!("effect_recon_run_info{{previous_run=,run_id={run_id}}}")), 1.0);
}

/// Reads a metrics file with the Prometheus Python client's text-format parser; its
/// samples keyed like [`parse_exposition`]'s.
const PROMETHEUS_PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
samples = {}
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    for sample in family.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
        key = sample.name + ("{" + labels + "}" if sample.labels else "")
        assert key not in samples, key
        samples[key] = sample.value
print(json.dumps(samples))
"#;

#[test]
fn the_metrics_file_parses_with_the_prometheus_python_client_and_equals_the_summary() {
    let Ok(python) = std::env::var("EFFECT_RECON_TEST_PYTHON") else {
        say_skipped(
            "EFFECT_RECON_TEST_PYTHON",
            "the metrics file was not read by prometheus_client",
        );
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("effect_recon.prom");
    let output = run_tiny(out.path(), &["--metrics-file", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let parsed = Command::new(&python)
        .args(["-c", PROMETHEUS_PARSE, file.to_str().unwrap()])
        .output()
        .expect("the test python runs");
    assert!(
        parsed.status.success(),
        "prometheus_client: {}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let samples: BTreeMap<String, f64> = serde_json::from_slice(&parsed.stdout).unwrap();
    // The client read the same samples as the format's own rules say are there.
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(samples, parse_exposition(&text));
    assert_metrics_equal_summary(&samples, &summary_of(out.path()));
}

#[test]
fn a_metrics_file_in_a_missing_folder_is_refused_before_any_work() {
    let out = tempfile::tempdir().unwrap();
    let output = run_tiny(out.path(), &["--metrics-file", "/nonexistent/dir/recon.prom"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--metrics-file") && stderr.contains("/nonexistent/dir"), "{stderr}");
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0, "nothing published");
}

/// Reads one HTTP request (headers, then Content-Length bytes of body), answers 200.
fn answer_one(stream: std::net::TcpStream) -> (String, Vec<u8>) {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
        if line == "\r\n" || line.is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let mut stream = reader.into_inner();
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        .unwrap();
    (head, body)
}

/// A local HTTP server on 127.0.0.1: its webhook URL, and the requests it answered.
pub(crate) fn webhook_receiver() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks/secret-token", listener.local_addr().unwrap());
    let (sent, received) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if sent.send(answer_one(stream.unwrap())).is_err() {
                break;
            }
        }
    });
    (url, received)
}

#[test]
fn the_webhook_gets_one_post_with_the_counts() {
    let (url, received) = webhook_receiver();
    let out = tempfile::tempdir().unwrap();
    let output = run_tiny(out.path(), &["--alert-webhook", &url]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("alert: posted to http://127.0.0.1:"), "{stderr}");
    assert!(!stderr.contains("secret-token"), "the webhook's path is never printed: {stderr}");

    let (head, body) = received.try_recv().expect("one POST");
    assert!(received.try_recv().is_err(), "exactly one POST");
    assert!(head.starts_with("POST /hooks/secret-token HTTP/1.1"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    let alert: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let s = summary_of(out.path());
    assert_eq!(alert["breaks"], s["verdicts"]["BREAK"]);
    assert_eq!(alert["pending"], s["verdicts"]["PENDING"]);
    for field in ["run_id", "cut", "status", "new", "persisting", "open", "oldest_open_break_on"] {
        assert_eq!(alert[field], s[field], "{field}");
    }
    let text = alert["text"].as_str().unwrap();
    assert!(text.contains("17 BREAK") && text.contains("points_grant/SKIPPED_BUT_DUE 3"), "{text}");
    let worst = alert["worst_classes"].as_array().unwrap();
    assert_eq!(worst.len(), 5);
    assert_eq!(worst[0]["class"], "SKIPPED_BUT_DUE");
    assert_eq!(worst[0]["breaks"], 3);
    let folder = alert["run_folder"].as_str().unwrap();
    assert!(Path::new(folder).join("summary.json").is_file(), "{folder}");
}

#[test]
fn a_failing_webhook_changes_neither_outputs_nor_exit_code() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{closed}/hook");
    let plain = tempfile::tempdir().unwrap();
    let alerted = tempfile::tempdir().unwrap();
    let without = run_tiny(plain.path(), &["--fail-on-breaks"]);
    let with = run_tiny(alerted.path(), &["--fail-on-breaks", "--alert-webhook", &url]);
    assert_eq!(without.status.code(), Some(1));
    assert_eq!(with.status.code(), without.status.code());

    let stderr = String::from_utf8_lossy(&with.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("alert")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("warning: alert webhook http://127.0.0.1:"), "{stderr}");
    assert!(lines[0].contains("after 3 attempts"), "{stderr}");

    // The same files, and the same bytes except the summary's timings and the manifest
    // that hashes the summary.
    let tables = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        tree_bytes(dir)
            .into_iter()
            .map(|(name, bytes)| {
                let volatile = name.ends_with("summary.json") || name.ends_with("manifest.json");
                (name, if volatile { Vec::new() } else { bytes })
            })
            .collect()
    };
    assert_eq!(tables(plain.path()), tables(alerted.path()));
    let (mut a, mut b) = (summary_of(plain.path()), summary_of(alerted.path()));
    a["timings_ms"] = serde_json::Value::Null;
    b["timings_ms"] = serde_json::Value::Null;
    assert_eq!(a, b);
}

#[tokio::test]
async fn an_incomplete_run_alerts_and_its_metrics_keep_the_last_complete_run() {
    let out = tempfile::tempdir().unwrap();
    let first = run_tiny(out.path(), &[]);
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));

    // The next night, every receipts source empty: published, but INCOMPLETE.
    let csv = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo("fixtures/tiny/csv")).unwrap() {
        let path = entry.unwrap().path();
        let mut text = std::fs::read_to_string(&path).unwrap();
        if path.file_name().unwrap().to_str().unwrap().starts_with("receipts_") {
            text = text.lines().next().unwrap().to_string() + "\n";
        }
        std::fs::write(csv.path().join(path.file_name().unwrap()), text).unwrap();
    }
    let (_snap, snapshot) = temp_location();
    let next_cut = "2026-11-30T16:00:00Z";
    snapshot_from_csv(csv.path(), &snapshot, next_cut).await;
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("effect_recon.prom");
    let (url, received) = webhook_receiver();
    let output = effect_recon(&[
        "run",
        "--snapshot",
        &snapshot.to_string(),
        "--out",
        out.path().to_str().unwrap(),
        "--metrics-file",
        file.to_str().unwrap(),
        "--alert-webhook",
        &url,
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");

    let m = parse_exposition(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(m["effect_recon_run_status{status=INCOMPLETE}"], 1.0);
    assert_eq!(m["effect_recon_run_status{status=COMPLETE}"], 0.0);
    assert_eq!(m["effect_recon_last_run_timestamp_seconds"], seconds(next_cut));
    assert_eq!(m["effect_recon_last_complete_run_timestamp_seconds"], seconds(TINY_CUT));

    let (_, body) = received.try_recv().expect("an INCOMPLETE run alerts");
    assert!(received.try_recv().is_err(), "exactly one POST");
    let alert: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(alert["status"], "INCOMPLETE");
    let text = alert["text"].as_str().unwrap();
    assert!(text.contains("INCOMPLETE: table receipts has no rows"), "{text}");
}
