//! Configuration files: the rules TOML (what is owed) and the job config (where data lives).
//!
//! Both refuse unknown keys, so a typo never silently changes what a run judges.

pub mod job;
pub mod rules;

pub use job::{JobConfig, SourceConfig};
pub use rules::{Rule, RuleSet};
