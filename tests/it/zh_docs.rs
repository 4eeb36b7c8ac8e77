//! The Chinese pages of docs/zh/ carry the English pages' figures, numeral for numeral:
//! every numeral of docs/REVERSIBLE-SKIPS.md stands in docs/zh/REVERSIBLE-SKIPS.md as often
//! and spelled the same (`1,369` stays `1,369`, `10.0` stays `10.0`; the units around them
//! may be translated), and likewise the README's first screen and docs/zh/README.md. A
//! figure changed on one page and not on the other fails here, named with its lines.

use std::collections::{BTreeMap, BTreeSet};

use super::common::repo;

/// Every numeral of a page with the lines (1-based) it stands on, one entry per occurrence.
type Figures = BTreeMap<String, Vec<usize>>;

/// The numerals of one line: a run of ASCII digits with any `,ddd` thousands groups and
/// one `.d…` decimal part. What follows (`%`, `k`, `ms`, `分钟`) is not part of it, and a
/// sentence's full stop is not a decimal point.
fn numerals(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let digit = |at: usize| chars.get(at).is_some_and(char::is_ascii_digit);
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        if !digit(at) {
            at += 1;
            continue;
        }
        let start = at;
        while digit(at) {
            at += 1;
        }
        while chars.get(at) == Some(&',') && (1..=3).all(|k| digit(at + k)) && !digit(at + 4) {
            at += 4;
        }
        if chars.get(at) == Some(&'.') && digit(at + 1) {
            at += 1;
            while digit(at) {
                at += 1;
            }
        }
        found.push(chars[start..at].iter().collect());
    }
    found
}

/// The figures of a page.
fn figures(page: &str) -> Figures {
    let mut figures = Figures::new();
    for (index, line) in page.lines().enumerate() {
        for numeral in numerals(line) {
            figures.entry(numeral).or_default().push(index + 1);
        }
    }
    figures
}

/// The first few of `lines` of `page`, quoted for a failure message.
fn quoted(label: &str, page: &[&str], lines: &[usize]) -> String {
    lines
        .iter()
        .take(3)
        .map(|&line| format!("\n  {label} {line}: {}", page[line - 1].trim()))
        .collect()
}

/// ` (lines 3, 17, 40)`, or nothing when a page lacks the numeral.
fn line_numbers(lines: &[usize]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
    format!(" (lines {})", lines.join(", "))
}

/// The numerals one page has more often than the other, in the order they first occur,
/// each with its counts and the lines it stands on in both; empty when the figures agree.
fn differences(english: &str, chinese: &str) -> Vec<String> {
    let (en, zh) = (figures(english), figures(chinese));
    let (en_page, zh_page): (Vec<&str>, Vec<&str>) =
        (english.lines().collect(), chinese.lines().collect());
    let none: Vec<usize> = Vec::new();
    let mut found: Vec<(usize, String)> = Vec::new();
    for numeral in en.keys().chain(zh.keys()).collect::<BTreeSet<_>>() {
        let in_en = en.get(numeral).unwrap_or(&none);
        let in_zh = zh.get(numeral).unwrap_or(&none);
        if in_en.len() == in_zh.len() {
            continue;
        }
        let first = in_en.iter().chain(in_zh).min().copied().unwrap_or(0);
        let text = format!(
            "{numeral}: {} in English{}, {} in Chinese{}{}{}",
            in_en.len(),
            line_numbers(in_en),
            in_zh.len(),
            line_numbers(in_zh),
            quoted("en", &en_page, in_en),
            quoted("zh", &zh_page, in_zh),
        );
        found.push((first, text));
    }
    found.sort();
    found.into_iter().map(|(_, text)| text).collect()
}

/// A README's first screen: everything before its second `## ` heading outside code
/// fences, i.e. the introduction and the "Two commands" section (the whole page when it
/// has no second one). Both READMEs are cut the same way, so neither needs an exception.
fn first_screen(page: &str) -> String {
    let mut fenced = false;
    let mut headings = 0;
    let mut kept = String::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with("## ") {
            headings += 1;
            if headings == 2 {
                break;
            }
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// A file of the repository, as text.
fn read(relative: &str) -> String {
    std::fs::read_to_string(repo(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Fails naming the first figures only one of the two pages has; `at_least` numerals on
/// the English page show that the comparison compared something.
fn assert_same_figures(english: (&str, &str), chinese: (&str, &str), at_least: usize) {
    let count: usize = figures(english.1).values().map(Vec::len).sum();
    assert!(count >= at_least, "{}: only {count} numerals found", english.0);
    let found = differences(english.1, chinese.1);
    assert!(
        found.is_empty(),
        "{} and {} differ in {} figures (translate the change; keep the numerals as written); \
         the first:\n{}",
        english.0,
        chinese.0,
        found.len(),
        found[..found.len().min(10)].join("\n"),
    );
}

#[test]
fn the_chinese_answer_page_has_the_english_figures() {
    let (english, chinese) = ("docs/REVERSIBLE-SKIPS.md", "docs/zh/REVERSIBLE-SKIPS.md");
    assert_same_figures((english, &read(english)), (chinese, &read(chinese)), 1000);
}

#[test]
fn the_chinese_readme_has_the_figures_of_the_first_screen() {
    let english = first_screen(&read("README.md"));
    let chinese = first_screen(&read("docs/zh/README.md"));
    assert!(english.contains("\n## Two commands\n"), "README.md's first screen moved");
    assert_same_figures(
        ("README.md (first screen)", &english),
        ("docs/zh/README.md (first screen)", &chinese),
        20,
    );
}

#[test]
fn numerals_keep_their_spelling_and_leave_units_and_full_stops_out() {
    assert_eq!(
        numerals("lost 1,369 of 240,890 (−68 %), p99.9 11.4m, 3,108.9 rows; T+1 at 2026-11-29."),
        ["1,369", "240,890", "68", "99.9", "11.4", "3,108.9", "1", "2026", "11", "29"]
    );
    assert_eq!(numerals("每 1000 条消息 2,050 次读，共 437。"), ["1000", "2,050", "437"]);
    assert_eq!(numerals("1,2345 and 12,34, 1,000,000"), ["1", "2345", "12", "34", "1,000,000"]);
    let page = "# t\nintro 1\n## A\n```\n## in a fence\n```\ntext 2\n## B\nrest 3\n";
    assert_eq!(first_screen(page), "# t\nintro 1\n## A\n```\n## in a fence\n```\ntext 2\n");
}

#[test]
fn a_figure_changed_on_one_page_is_reported_with_its_lines() {
    let english = "p50 10.0 min vs 28.1 h\nlost 1,369 of 240,890, scan every 5 min or 5 s\n";
    let same =
        "p50 10.0 分钟，对比 28.1 小时\n丢失 1,369（共 240,890），每 5 分钟或 5 秒扫描一次\n";
    assert!(differences(english, same).is_empty());

    let changed = "p50 10.5 分钟，对比 28.1 小时\n丢失 1,369（共 240,890），每 5 分钟扫描一次\n";
    let found = differences(english, changed);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(
        found[0], "10.0: 1 in English (lines 1), 0 in Chinese\n  en 1: p50 10.0 min vs 28.1 h",
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("10.5: 0 in English, 1 in Chinese (lines 1)\n  zh 1: "),
        "{found:#?}"
    );
    // A dropped occurrence counts, though the numeral is still on the page.
    assert!(
        found[2].starts_with("5: 2 in English (lines 2, 2), 1 in Chinese (lines 2)\n  en 2: "),
        "{found:#?}"
    );
}
