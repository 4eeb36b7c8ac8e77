//! The answer page's main tables are what the model gives: the 100,000-order, 7-policy
//! `simulate` of docs/REVERSIBLE-SKIPS.md, and the five worlds of its re-ranking, are run
//! exactly as the page shows them, and every line of the tables the page quotes must be
//! in their output. A change of the model that
//! moves a published number fails here until the page (and its Chinese version, kept in
//! step by `zh_docs`) is regenerated with `scripts/reversible-skips-figures`.

use super::common::{effect_recon, repo, text};

/// The command's `sh` block is recognised by this argument; its output is the next block.
const MARKER: &str = "--out /tmp/fig/net100k";

/// The fenced blocks of a Markdown page, in order: (info string, lines).
fn blocks(page: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, Vec<String>)> = None;
    for line in page.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (fence, open.take()) {
            (Some(info), None) => open = Some((info.trim().to_string(), Vec::new())),
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some((info, mut lines))) => {
                lines.push(line.to_string());
                open = Some((info, lines));
            }
            (None, None) => {}
        }
    }
    blocks
}

/// docs/REVERSIBLE-SKIPS.md's `sh` block that holds `marker`, and the block after it (what
/// the page says the commands print).
fn commands_and_output(marker: &str) -> (Vec<String>, Vec<String>) {
    let page = std::fs::read_to_string(repo("docs/REVERSIBLE-SKIPS.md")).unwrap();
    let blocks = blocks(&page);
    let at = blocks
        .iter()
        .position(|(info, lines)| info == "sh" && lines.iter().any(|l| l.contains(marker)))
        .unwrap_or_else(|| panic!("the page shows a simulate command with {marker}"));
    (blocks[at].1.clone(), blocks[at + 1].1.clone())
}

/// The arguments of the page's command (continuation lines joined), the output dir
/// replaced by `out`.
fn command(lines: &[String], out: &str) -> Vec<String> {
    let joined = lines.iter().map(|l| l.trim_end_matches('\\').trim()).collect::<Vec<_>>();
    let words: Vec<String> = joined.join(" ").split_whitespace().map(str::to_string).collect();
    assert_eq!(words.first().map(String::as_str), Some("effect-recon"), "{words:?}");
    words[1..]
        .iter()
        .map(|w| if w == "/tmp/fig/net100k" { out.to_string() } else { w.clone() })
        .collect()
}

#[test]
fn the_answer_pages_policy_table_is_what_simulate_prints() {
    let (shown, table) = commands_and_output(MARKER);
    assert!(table.len() >= 9, "the page's table: {table:?}");
    let out = tempfile::tempdir().unwrap();
    let args = command(&shown, out.path().to_str().unwrap());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = effect_recon(&args);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let printed: Vec<&str> = stdout.lines().map(str::trim_end).collect();
    for line in table {
        assert!(
            printed.contains(&line.trim_end()),
            "docs/REVERSIBLE-SKIPS.md quotes a line simulate no longer prints (regenerate the page with scripts/reversible-skips-figures):\n  page:    {line}\n  printed:\n{stdout}"
        );
    }
}

/// The re-ranking's commands are recognised by their policy list.
const RANK_MARKER: &str = "--policies skip,state-machine+scan:5m:2h,fenced,";

/// The commands of one `sh` block: each starts with `effect-recon`, continuation lines
/// joined.
fn commands(lines: &[String]) -> Vec<Vec<String>> {
    let mut commands: Vec<Vec<String>> = Vec::new();
    for line in lines {
        if line.starts_with("effect-recon") || commands.is_empty() {
            commands.push(Vec::new());
        }
        commands.last_mut().unwrap().push(line.clone());
    }
    commands.iter().map(|c| command(c, "/unused")).collect()
}

#[test]
fn the_answer_pages_re_ranking_is_what_simulate_prints() {
    let (shown, table) = commands_and_output(RANK_MARKER);
    let commands = commands(&shown);
    assert_eq!(commands.len(), 5, "five worlds: {commands:?}");
    let mut printed = String::new();
    for args in &commands {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = effect_recon(&args);
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        printed.push_str(&stdout);
    }
    let lines: Vec<&str> = printed.lines().map(str::trim_end).collect();
    assert_eq!(table.len(), 5 * 8, "five tables of six policies: {table:?}");
    for line in table {
        assert!(
            lines.contains(&line.trim_end()),
            "docs/REVERSIBLE-SKIPS.md quotes a re-ranking line simulate no longer prints (regenerate the page with scripts/reversible-skips-figures):\n  page:    {line}\n  printed:\n{printed}"
        );
    }
}

#[test]
fn a_moved_figure_is_caught() {
    let page = "```sh\neffect-recon simulate --orders 10 --out /tmp/fig/net100k \\\n  --seed 7\n```\n```\nskip   10  1\n```\n";
    let blocks = blocks(page);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        command(&blocks[0].1, "/x"),
        ["simulate", "--orders", "10", "--out", "/x", "--seed", "7"]
    );
    let printed = ["skip   10  2"];
    assert!(!printed.contains(&blocks[1].1[0].as_str()), "a changed count must not match");
}
