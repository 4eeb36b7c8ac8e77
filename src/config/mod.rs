//! Configuration files: the rules TOML (what is owed) and the job config (where data lives).
//!
//! Both refuse unknown keys, so a typo never silently changes what a run judges.

pub mod rules;

pub use rules::{Rule, RuleSet};
