//! The documentation of a fresh clone has no dead links: every relative link of README.md
//! and docs/*.md names a file of the repository, every `#anchor` a heading of its target,
//! and nothing points at the design file outside the repository that the docs replaced.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::common::repo;

/// The Markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![repo("README.md")];
    let docs: Vec<PathBuf> = std::fs::read_dir(repo("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    assert!(!docs.is_empty(), "docs/ holds the contract");
    files.extend(docs);
    files.sort();
    files
}

/// Text outside fenced code blocks and inline code spans, where `[x](y)` is a link.
fn prose(markdown: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code: every other backtick-delimited span.
        for (index, part) in line.split('`').enumerate() {
            if index % 2 == 0 {
                out.push_str(part);
            }
        }
        out.push('\n');
    }
    out
}

/// Every `[text](target)` target of a document.
fn link_targets(markdown: &str) -> Vec<String> {
    let text = prose(markdown);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                targets.push(after[..end].trim().to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    targets
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings.
fn anchors(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    prose(&text)
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| slug(line.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let mut dead = Vec::new();
    let mut checked = 0;
    for document in documents() {
        let text = std::fs::read_to_string(&document).unwrap();
        let folder = document.parent().unwrap();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() { document.clone() } else { folder.join(file) };
            let inside =
                path.canonicalize().is_ok_and(|p| p.starts_with(repo("").canonicalize().unwrap()));
            if !path.exists() || !inside {
                dead.push(format!(
                    "{}: {target} (no such file in the repository)",
                    document.display()
                ));
                continue;
            }
            if let Some(anchor) = anchor {
                if path.extension().is_some_and(|e| e == "md") && !anchors(&path).contains(anchor) {
                    dead.push(format!("{}: {target} (no heading #{anchor})", document.display()));
                }
            }
        }
    }
    assert!(checked > 10, "the link parser found only {checked} links");
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn nothing_refers_to_the_design_file_outside_the_repository() {
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> =
        ["README.md", "src", "docs", "scripts", "fixtures", "tests", "benches", "sql"]
            .iter()
            .map(|p| repo(p))
            .collect();
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            // Spelled in two parts so this file does not find itself.
            let needle = format!("shared/{}", "DESIGN.md");
            if text.contains(&needle) {
                found.push(path.display().to_string());
            }
        }
    }
    assert!(found.is_empty(), "files pointing outside the repository: {found:?}");
}

#[test]
fn the_link_parser_sees_links_but_not_code() {
    let text = "See [a](docs/A.md) and [b](B.md#x).\n`[c](nope.md)`\n```\n[d](nope.md)\n```\n";
    assert_eq!(link_targets(text), ["docs/A.md", "B.md#x"]);
    assert_eq!(slug("Self-checks: COMPLETE or INCOMPLETE"), "self-checks-complete-or-incomplete");
}
