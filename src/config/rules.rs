//! The rules file of docs/CONTRACT.md: one `[[rule]]` per side effect.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::time::{parse_duration, Micros};

/// The default rule set, `fixtures/rules.toml`, embedded so the binary needs no file.
pub const DEFAULT_RULES_TOML: &str = include_str!("../../fixtures/rules.toml");

/// The largest rules file read (bytes): the default one is about 1 KB.
pub const MAX_RULES_BYTES: u64 = 1 << 20;

/// The most rules a rule set may have.
pub const MAX_RULES: usize = 1000;

/// Name shown for the embedded default rules.
pub const DEFAULT_RULES_NAME: &str = "fixtures/rules.toml (embedded default)";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    rule: Vec<RuleEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    effect: String,
    trigger_event: String,
    due_status: String,
    #[serde(default)]
    void_statuses: Vec<String>,
    grace: String,
    compensation: String,
    priority: i32,
    #[serde(default)]
    reverse_on_void: bool,
    reversal: Option<String>,
}

/// One validated rule: an effect, when it is owed, when the debt is void, and how to compensate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// Matches `receipts.effect`.
    pub effect: String,
    /// `ledger.event_type` whose handler performs the effect.
    pub trigger_event: String,
    /// The effect is owed once the order reaches this status.
    pub due_status: String,
    /// Reaching any of these cancels the debt.
    pub void_statuses: Vec<String>,
    /// The grace as written, e.g. `30m`.
    pub grace: String,
    /// The grace in microseconds.
    pub grace_micros: Micros,
    /// Command name handed to the executor.
    pub compensation: String,
    /// Executor priority.
    pub priority: i32,
    /// A done effect must be undone when the order is voided (DESIGN §10.1): a done
    /// effect on a voided order is an `UNREVERSED_EFFECT`. Left out of the rules hash
    /// when false, so rules files without it keep their hash.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reverse_on_void: bool,
    /// Command handed to the executor to undo the effect (unreversed and duplicate
    /// effects); required when `reverse_on_void`. Left out of the hash when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reversal: Option<String>,
}

/// A validated rule set and where it came from.
#[derive(Debug, Clone)]
pub struct RuleSet {
    /// The rules, in file order.
    pub rules: Vec<Rule>,
    /// Where they were read from (a path, or the embedded default).
    pub origin: String,
    /// Hex SHA-256 of the canonical JSON of the rules; recorded in every run manifest.
    pub hash: String,
}

impl RuleSet {
    /// The embedded default rule set.
    pub fn default_rules() -> Result<Self> {
        Self::parse(DEFAULT_RULES_TOML, DEFAULT_RULES_NAME)
    }

    /// Reads a rules file, or the embedded default when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        match path {
            None => Self::default_rules(),
            Some(path) => {
                let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                if size > MAX_RULES_BYTES {
                    return Err(Error::config(
                        path.display(),
                        format!("the rules file is {size} bytes; a rules file is at most {MAX_RULES_BYTES} bytes (one [[rule]] per side effect)"),
                    ));
                }
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::config(path.display(), format!("cannot read the rules file: {e}"))
                })?;
                Self::parse(&text, &path.display().to_string())
            }
        }
    }

    /// Parses and validates rules TOML; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let file: RulesFile = toml::from_str(text).map_err(|e| Error::config(origin, e))?;
        if file.rule.is_empty() {
            return Err(Error::config(origin, "no [[rule]] entries"));
        }
        if file.rule.len() > MAX_RULES {
            return Err(Error::config(
                origin,
                format!(
                    "{} rules; at most {MAX_RULES} (one [[rule]] per side effect)",
                    file.rule.len()
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        let mut rules = Vec::with_capacity(file.rule.len());
        for (index, entry) in file.rule.into_iter().enumerate() {
            let rule = validate(entry).map_err(|message| {
                Error::config(origin, format!("rule {}: {message}", index + 1))
            })?;
            if !seen.insert(rule.effect.clone()) {
                return Err(Error::config(
                    origin,
                    format!(
                        "rule {}: effect '{}' has two rules; each effect takes exactly one",
                        index + 1,
                        rule.effect
                    ),
                ));
            }
            rules.push(rule);
        }
        let canonical = serde_json::to_vec(&rules).map_err(|e| Error::config(origin, e))?;
        let hash = hex::encode(Sha256::digest(&canonical));
        Ok(RuleSet { rules, origin: origin.to_string(), hash })
    }

    /// The rules whose trigger is `event_type`.
    pub fn triggered_by<'a>(&'a self, event_type: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |r| r.trigger_event == event_type)
    }

    /// The rule of `effect`, if any.
    pub fn for_effect(&self, effect: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.effect == effect)
    }
}

fn validate(entry: RuleEntry) -> Result<Rule, String> {
    let RuleEntry {
        effect,
        trigger_event,
        due_status,
        void_statuses,
        grace,
        compensation,
        priority,
        reverse_on_void,
        reversal,
    } = entry;
    for (field, value) in [
        ("effect", &effect),
        ("trigger_event", &trigger_event),
        ("due_status", &due_status),
        ("compensation", &compensation),
    ] {
        if value.trim().is_empty() {
            return Err(format!("field '{field}' is empty"));
        }
    }
    let grace_micros = parse_duration(&grace).map_err(|e| format!("({effect}) grace: {e}"))?;
    if reversal.as_deref().is_some_and(|r| r.trim().is_empty()) {
        return Err(format!("({effect}) field 'reversal' is empty"));
    }
    if reverse_on_void && reversal.is_none() {
        return Err(format!(
            "({effect}) reverse_on_void = true needs 'reversal', the command that undoes the effect (e.g. reversal = \"REVOKE_POINTS\")"
        ));
    }
    Ok(Rule {
        effect,
        trigger_event,
        due_status,
        void_statuses,
        grace,
        grace_micros,
        compensation,
        priority,
        reverse_on_void,
        reversal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rules_are_the_three_of_the_design() {
        let set = RuleSet::default_rules().unwrap();
        let effects: Vec<_> = set.rules.iter().map(|r| r.effect.as_str()).collect();
        assert_eq!(effects, ["points_grant", "wms_lock", "logistics_waybill"]);
        assert_eq!(set.rules[2].void_statuses, ["CANCELLED"]);
        assert_eq!(set.rules[0].grace_micros, 30 * 60_000_000);
        assert_eq!(set.triggered_by("ORDER_PAID").count(), 2);
        let reversals: Vec<_> =
            set.rules.iter().map(|r| (r.reverse_on_void, r.reversal.as_deref())).collect();
        assert_eq!(
            reversals,
            [(true, Some("REVOKE_POINTS")), (true, Some("RELEASE_STOCK")), (false, None)]
        );
    }

    const PLAIN: &str = "[[rule]]\neffect='a'\ntrigger_event='E'\ndue_status='S'\ngrace='1h'\ncompensation='C'\npriority=1\n";

    #[test]
    fn reverse_on_void_needs_a_reversal() {
        let error = RuleSet::parse(&format!("{PLAIN}reverse_on_void=true\n"), "t").unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("rule 1") && text.contains("(a) reverse_on_void = true needs 'reversal'"),
            "{text}"
        );
        let empty = RuleSet::parse(&format!("{PLAIN}reversal=' '\n"), "t").unwrap_err();
        assert!(empty.to_string().contains("(a) field 'reversal' is empty"), "{empty}");
        // A reversal alone names the command of duplicate reversals (DESIGN §10.1).
        let alone = RuleSet::parse(&format!("{PLAIN}reversal='UNDO'\n"), "t").unwrap();
        assert_eq!(
            (alone.rules[0].reverse_on_void, alone.rules[0].reversal.as_deref()),
            (false, Some("UNDO"))
        );
    }

    #[test]
    fn rules_without_the_reversal_fields_keep_their_hash() {
        // The hash of PLAIN before the fields existed: runs chained across the upgrade
        // keep following each other.
        let plain = RuleSet::parse(PLAIN, "t").unwrap();
        let explicit = RuleSet::parse(&format!("{PLAIN}reverse_on_void=false\n"), "t").unwrap();
        assert_eq!(plain.hash, explicit.hash);
        let reversing =
            RuleSet::parse(&format!("{PLAIN}reverse_on_void=true\nreversal='U'\n"), "t").unwrap();
        assert_ne!(plain.hash, reversing.hash);
    }

    #[test]
    fn void_statuses_may_be_omitted() {
        assert!(RuleSet::parse(PLAIN, "t").unwrap().rules[0].void_statuses.is_empty());
    }
}
