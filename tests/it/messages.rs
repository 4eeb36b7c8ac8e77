//! What a new user sees in the first hour: each error names its argument and
//! says its cause once, on one line; the small confirmations are there; and every example
//! of every `--help` runs as printed against the tiny fixture.

use std::path::Path;
use std::process::Output;

use super::common::{command, repo};

/// Runs the binary with `args` in `dir` (the `--help` examples use relative paths).
fn effect_recon_in(dir: &Path, args: &[&str]) -> Output {
    command(args).current_dir(dir).output().expect("the binary runs")
}

/// Runs the binary with `args` in the repository's root, where a new user starts.
fn effect_recon(args: &[&str]) -> Output {
    effect_recon_in(&repo(""), args)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn tiny() -> String {
    repo("fixtures/tiny/snapshot").display().to_string()
}

/// A failed command's whole stderr (exit 2), without the final newline.
fn error_line(output: &Output) -> String {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{}{err}", stdout(output));
    err.trim_end().to_string()
}

/// A run of the tiny fixture into a fresh folder; returns the folder and the run's path.
fn tiny_run() -> (tempfile::TempDir, String) {
    let out = tempfile::tempdir().unwrap();
    let done =
        effect_recon(&["run", "-q", "--snapshot", &tiny(), "--out", out.path().to_str().unwrap()]);
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let run = out.path().join("run=20261129T160000Z").display().to_string();
    (out, run)
}

#[test]
fn an_unknown_column_lists_the_valid_fields_once() {
    let output = effect_recon(&["sql", "--snapshot", &tiny(), "-c", "SELECT nope FROM ledger"]);
    let line = error_line(&output);
    // DataFusion's own message has two lines; each is said once.
    assert_eq!(
        line,
        "error: sql: Schema error: No field named nope.\nValid fields are ledger.msg_id, \
         ledger.order_id, ledger.event_type, ledger.expected_status, ledger.action, \
         ledger.observed_status, ledger.topic, ledger.kafka_partition, ledger.kafka_offset, \
         ledger.consumer_id, ledger.decided_at."
    );
}

#[test]
fn a_syntax_error_is_said_once() {
    let output = effect_recon(&["sql", "--snapshot", &tiny(), "-c", "SELEC 1"]);
    assert_eq!(
        error_line(&output),
        "error: sql: SQL error: ParserError(\"Expected: an SQL statement, found: SELEC at Line: 1, \
         Column: 1\")"
    );
    let output = effect_recon(&["sql", "--snapshot", &tiny(), "-c", "SELECT * FROM nope"]);
    assert_eq!(
        error_line(&output),
        "error: sql: Error during planning: table 'datafusion.public.nope' not found"
    );
}

#[test]
fn a_file_given_as_snapshot_is_named_as_a_file() {
    let out = tempfile::tempdir().unwrap();
    let file = format!("{}/manifest.json", tiny());
    let output = effect_recon(&["run", "--snapshot", &file, "--out", out.path().to_str().unwrap()]);
    assert_eq!(error_line(&output), format!("error: snapshot {file}: is a file, not a folder"));
}

#[test]
fn a_mistyped_snapshot_path_does_not_exist() {
    let out = tempfile::tempdir().unwrap();
    let missing = format!("{}-typo", tiny());
    let output =
        effect_recon(&["run", "--snapshot", &missing, "--out", out.path().to_str().unwrap()]);
    assert_eq!(error_line(&output), format!("error: snapshot {missing}: does not exist"));
    let output = effect_recon(&["sql", "--snapshot", &missing, "-c", "SELECT 1"]);
    assert_eq!(error_line(&output), format!("error: snapshot {missing}: does not exist"));
}

#[test]
fn a_missing_rules_file_is_named_as_the_rules_file_once() {
    let out = tempfile::tempdir().unwrap();
    let rules = out.path().join("rulez.toml").display().to_string();
    let args = ["--snapshot", &tiny(), "--rules", &rules];
    let run = effect_recon(&[&["run", "--out", out.path().to_str().unwrap()], &args[..]].concat());
    let expected = format!(
        "error: config {rules}: cannot read the rules file: No such file or directory (os error 2)"
    );
    assert_eq!(error_line(&run), expected);
    let sql = effect_recon(&[&["sql", "-c", "SELECT 1"], &args[..]].concat());
    assert_eq!(error_line(&sql), expected);
}

#[test]
fn a_run_table_without_run_says_to_pass_run() {
    let output =
        effect_recon(&["sql", "--snapshot", &tiny(), "-c", "SELECT count(*) FROM discrepancies"]);
    assert_eq!(
        error_line(&output),
        "error: invalid argument sql: table 'discrepancies' not found: the run tables \
         (discrepancies, compensation_tasks, skip_verdicts, resolved) need --run <out>/run=<id>"
    );
}

#[test]
fn a_missing_run_folder_does_not_exist() {
    let missing = repo("no-such-recon/run=20261129T160000Z").display().to_string();
    let output = effect_recon(&["sql", "--run", &missing, "-c", "SELECT 1"]);
    assert_eq!(error_line(&output), format!("error: run {missing}: run folder does not exist"));
}

#[test]
fn sql_runs_several_statements_in_order_each_labelled() {
    let output = effect_recon(&[
        "sql",
        "--snapshot",
        &tiny(),
        "--format",
        "csv",
        "-c",
        "SELECT count(*) AS ledger_rows FROM ledger; SELECT 'a;b' AS quoted",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "-- SELECT count(*) AS ledger_rows FROM ledger\nledger_rows\n25\n\n\
         -- SELECT 'a;b' AS quoted\nquoted\na;b\n"
    );
}

#[test]
fn sql_output_says_where_it_wrote_and_how_many_rows() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ledger.csv").display().to_string();
    let args = ["sql", "--snapshot", &tiny(), "--format", "csv", "-o", &file];
    let output = effect_recon(&[&args[..], &["-c", "SELECT * FROM ledger"]].concat());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stderr(&output), format!("wrote 25 rows to {file}\n"));
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 26);

    let two = effect_recon(&[&args[..], &["-c", "SELECT 1; SELECT 2"]].concat());
    assert_eq!(
        error_line(&two),
        format!("error: --output {file} takes the result of one statement; got 2")
    );
}

#[test]
fn sql_with_only_run_reads_the_snapshot_the_run_judged() {
    let (_out, run) = tiny_run();
    let output = effect_recon(&[
        "sql",
        "--run",
        &run,
        "--format",
        "csv",
        "-c",
        "SELECT (SELECT count(*) FROM ledger) AS ledger, (SELECT count(*) FROM compensation_tasks) AS tasks",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "ledger,tasks\n25,17\n");
}

#[test]
fn sql_needs_a_snapshot_or_a_run() {
    let output = effect_recon(&["sql", "-c", "SELECT 1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--snapshot"), "{}", stderr(&output));
}

#[test]
fn a_date_alone_is_midnight_utc_and_the_command_says_so() {
    let out = tempfile::tempdir().unwrap();
    let output = effect_recon(&[
        "run",
        "-q",
        "--snapshot",
        &tiny(),
        "--out",
        out.path().to_str().unwrap(),
        "--cut",
        "2026-11-29",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "note: '2026-11-29' is a date alone; read as 2026-11-29T00:00:00Z (midnight UTC)"
        ),
        "{}",
        stderr(&output)
    );
    assert!(stdout(&output).contains("2026-11-29T00:00:00Z]"), "{}", stdout(&output));
}

#[test]
fn fail_on_breaks_says_why_it_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().display().to_string();
    let made = effect_recon(&["demo", "--orders", "2000", "--dir", &demo]);
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    let job = dir.path().join("job.toml").display().to_string();
    let cut = "2026-11-29T16:00:00Z";
    let args = ["nightly", "-q", "--config", &job, "--cut", cut, "--replace", "--fail-on-breaks"];
    let output = effect_recon(&args);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let total = stdout(&output)
        .lines()
        .find_map(|line| line.trim().strip_prefix("total"))
        .and_then(|counts| counts.split_whitespace().next().map(str::to_string))
        .expect("the summary has a total line");
    assert_eq!(
        stderr(&output).lines().last(),
        Some(format!("exit 1: {total} BREAK findings (--fail-on-breaks)").as_str())
    );
}

/// `effect-recon ...` lines of every subcommand's `--help`.
fn help_examples() -> Vec<(String, String)> {
    let top = stdout(&effect_recon(&["--help"]));
    let commands: Vec<String> = top
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .filter(|command| command != "help")
        .collect();
    assert!(commands.len() >= 8, "{top}");
    let mut examples = Vec::new();
    for command in commands {
        let help = stdout(&effect_recon(&[&command, "--help"]));
        for line in help.lines().map(str::trim) {
            if line.starts_with("effect-recon ") {
                examples.push((command.clone(), line.to_string()));
            }
        }
    }
    examples
}

/// Splits a command line as a shell would for these examples: spaces, double quotes.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            _ => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// Why an example cannot run here; `None` when it must.
fn cannot_run(line: &str) -> Option<&'static str> {
    if line.contains("s3://") {
        Some("needs an S3 bucket")
    } else if line.contains("ballista://") || line.starts_with("effect-recon cluster ") {
        Some("needs a running cluster (tests/it/cluster.rs starts one)")
    } else if line.contains("--config") || line.contains("--ledger") || line.contains("PASSWORD=") {
        Some("needs reachable databases")
    } else if line.contains("/var/lib/") || line.contains(" ... ") {
        Some("a production path or a placeholder")
    } else if line.contains("(interactive") {
        Some("interactive")
    } else if line.contains('$') || line.contains("verify --nights") {
        // A shell loop runs each night (tests/it/nights.rs runs that chain end to end).
        Some("a shell loop over the nights")
    } else {
        None
    }
}

#[test]
fn every_help_example_runs_against_the_tiny_fixture() {
    let examples = help_examples();
    assert!(examples.iter().any(|(c, _)| c == "sql"), "{examples:?}");
    // The examples' relative paths are from the repository root after ./scripts/demo; run
    // them in a scratch folder that has the repository's fixtures, /tmp mapped into it.
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path();
    std::os::unix::fs::symlink(repo("fixtures"), root.join("fixtures")).unwrap();
    let tmp = root.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    // demo first (other examples read its folder), then gen, run, verify as printed.
    let order = |command: &str| match command {
        "demo" => 0,
        "gen" => 1,
        "run" => 2,
        "verify" => 3,
        _ => 4,
    };
    let mut examples = examples;
    examples.sort_by_key(|(command, _)| order(command));
    let mut ran = 0;
    for (command, line) in &examples {
        if let Some(reason) = cannot_run(line) {
            eprintln!("not run ({reason}): {line}");
            continue;
        }
        let mut args = words(line);
        assert_eq!(args.remove(0), "effect-recon");
        run_example(root, &tmp, args, &format!("`{command} --help` example {line}"));
        ran += 1;
    }
    assert!(ran >= 5, "only {ran} examples ran: {examples:?}");
}

/// Runs one documented example (its arguments after `effect-recon`) in `root`, with
/// `/tmp/` mapped to `tmp` and fewer orders (the paths and flags are what is checked, not
/// the speed); it must exit 0 or 1.
fn run_example(root: &std::path::Path, tmp: &std::path::Path, mut args: Vec<String>, what: &str) {
    for index in 0..args.len() {
        args[index] = args[index].replace("/tmp/", &format!("{}/", tmp.display()));
        if index > 0 && args[index - 1] == "--orders" {
            args[index] = "2000".into();
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = effect_recon_in(root, &args);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{what} failed\n{}{}",
        stdout(&output),
        stderr(&output)
    );
}

/// The `effect-recon ...` lines of the README's `sh` blocks: continuations joined,
/// comments and `[optional]` parts dropped.
fn readme_examples() -> Vec<String> {
    let readme = std::fs::read_to_string(repo("README.md")).unwrap();
    let mut lines = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = line.split(" #").next().unwrap_or("").trim_end();
        match code.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(code);
                let full = std::mem::take(&mut pending);
                if full.trim_start().starts_with("effect-recon ") {
                    lines.push(drop_optional(full.trim()));
                }
            }
        }
    }
    lines
}

/// `gen --out X [--incident]` -> `gen --out X`.
fn drop_optional(line: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in line.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_readme_example_on_the_tiny_fixture_runs_as_printed() {
    let top = stdout(&effect_recon(&["--help"]));
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path();
    std::os::unix::fs::symlink(repo("fixtures"), root.join("fixtures")).unwrap();
    let tmp = root.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut ran = 0;
    for line in readme_examples() {
        let mut args = words(&line);
        args.remove(0);
        let command = args[0].clone();
        let reason = if line.contains("s3://") || line.contains("--config") {
            Some("needs S3 or databases")
        } else if line.contains("ballista://") || command == "cluster" {
            Some("needs a running cluster (tests/it/cluster.rs starts one)")
        } else if line.contains("snap-11") {
            Some("placeholder snapshots of consecutive nights")
        } else if line.contains('$') || line.contains("verify --nights") || line.contains('<') {
            Some("a shell loop or a placeholder (tests/it/nights.rs and publish.rs run these)")
        } else if !top.contains(&format!("\n  {command} ")) {
            Some("a command this build does not have yet")
        } else if args.len() == 3 && command == "sql" {
            Some("interactive")
        } else {
            None
        };
        if let Some(reason) = reason {
            eprintln!("not run ({reason}): {line}");
            continue;
        }
        run_example(root, &tmp, args, &format!("README example {line}"));
        ran += 1;
    }
    assert!(ran >= 7, "only {ran} README examples ran");
}

#[test]
fn the_example_splitter_keeps_quoted_statements_whole() {
    assert_eq!(
        words(r#"effect-recon sql -c "SELECT a, b FROM t"  --format csv"#),
        ["effect-recon", "sql", "-c", "SELECT a, b FROM t", "--format", "csv"]
    );
}
