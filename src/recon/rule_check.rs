//! Rules checked against the snapshot's own vocabulary: a rule whose `effect` matches no
//! receipt, whose `trigger_event` matches no ledger row, or whose `due_status` or
//! `void_statuses` match no status quietly changes the findings. Each such value gets a
//! warning with the closest existing value; one within a small edit distance of an
//! existing value ("SHIPED" for "SHIPPED") is almost surely a typo and also makes the
//! run INCOMPLETE. A rule with a `reversal` whose effect has no receipts at all is warned
//! about too: nothing it could reverse is ever seen.

use std::collections::{BTreeMap, BTreeSet};

use datafusion::prelude::SessionContext;

use crate::config::RuleSet;
use crate::engine::queries::{self, Param};
use crate::error::Result;

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RuleCheck {
    /// Every rule value the snapshot does not contain, as a sentence.
    pub warnings: Vec<String>,
    /// The warnings that look like typos (a close existing value): INCOMPLETE reasons.
    pub typos: Vec<String>,
}

/// Checks every rule of `rules` against the values of the snapshot tables in `ctx`.
pub(crate) async fn check(
    ctx: &SessionContext,
    rules: &RuleSet,
    params: &[Param],
) -> Result<RuleCheck> {
    let mut vocabulary: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for batch in queries::collect(ctx, queries::VOCABULARY, params).await? {
        let kinds = queries::string_column(&batch, "kind")?;
        let values = queries::string_column(&batch, "value")?;
        for row in 0..batch.num_rows() {
            vocabulary.entry(kinds.value(row).into()).or_default().insert(values.value(row).into());
        }
    }
    let mut found = RuleCheck::default();
    for rule in &rules.rules {
        let mut probe = |field: &str, kind: &str, table: &str, value: &str| {
            let known = vocabulary.get(kind).cloned().unwrap_or_default();
            if known.contains(value) {
                return;
            }
            let typo_of =
                closest(value, &known).filter(|(_, distance)| *distance <= typo_distance(value));
            let hint = typo_of.map(|(c, _)| format!(" (did you mean {c}?)")).unwrap_or_default();
            let sentence = format!(
                "rule {}: {field} \"{value}\" matches no {table} value in the snapshot{hint}",
                rule.effect
            );
            if typo_of.is_some() {
                found.typos.push(sentence.clone());
            }
            found.warnings.push(sentence);
        };
        probe("effect", "effect", "receipts.effect", &rule.effect);
        probe("trigger_event", "event_type", "ledger.event_type", &rule.trigger_event);
        probe("due_status", "status", "status_history.status", &rule.due_status);
        for status in &rule.void_statuses {
            probe("void_statuses", "status", "status_history.status", status);
        }
        let delivered = vocabulary.get("effect").is_some_and(|e| e.contains(&rule.effect));
        if let (Some(reversal), false) = (&rule.reversal, delivered) {
            // DESIGN §10.1: only receipts can be reversed; without them the rule's
            // reversal is never asked for and a voided effect is never found.
            found.warnings.push(format!(
                "rule {}: reversal \"{reversal}\" can never be asked for: no receipts source delivers effect \"{}\" (add its receipts [[source]])",
                rule.effect, rule.effect
            ));
        }
    }
    Ok(found)
}

/// The existing value nearest to `value` by edit distance, with that distance.
fn closest<'a>(value: &str, known: &'a BTreeSet<String>) -> Option<(&'a str, usize)> {
    known.iter().map(|k| (k.as_str(), edit_distance(value, k))).min_by_key(|(_, d)| *d)
}

/// Up to this many edits a near value is taken for a typo: 1 for short words, 2 from 6
/// characters on.
fn typo_distance(value: &str) -> usize {
    if value.chars().count() >= 6 {
        2
    } else {
        1
    }
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("SHIPED", "SHIPPED"), 1);
        assert_eq!(edit_distance("logistic_waybill", "logistics_waybill"), 1);
        assert_eq!(edit_distance("PAID", "PAID"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn the_closest_value_is_suggested() {
        let known: BTreeSet<String> =
            ["SHIPPED", "PAID", "CANCELLED"].iter().map(|s| s.to_string()).collect();
        assert_eq!(closest("SHIPED", &known), Some(("SHIPPED", 1)));
        assert!(closest("REFUNDED", &known).is_some_and(|(_, d)| d > typo_distance("REFUNDED")));
    }
}
