//! The words of the contract (docs/OUTPUTS.md, docs/CONTRACT.md): finding classes,
//! verdicts, lifecycles, resolutions, run status, task actions and states, ledger
//! actions and receipt statuses. One enum each, with one spelling (`as_str`) and one
//! parser (`FromStr`) that refuses any other text: an unknown name is an error, never a
//! default. Production code and the independent ground truth share these names; the
//! truth never shares the SQL's logic.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A text that is not one of a vocabulary's names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} '{value}' (expected one of: {expected})")]
pub struct UnknownName {
    /// What was parsed, e.g. "class".
    pub kind: &'static str,
    /// The text found.
    pub value: String,
    /// The names allowed, comma-separated.
    pub expected: String,
}

/// Defines a closed vocabulary: the enum, `ALL`, `as_str`, `FromStr`, `Display` and serde
/// as the written text.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        $name:ident ($kind:literal) {
            $( $(#[$variant_meta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every value, in the contract's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value as written in the outputs and the databases.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;

            fn from_str(text: &str) -> Result<Self, UnknownName> {
                match text {
                    $( $text => Ok($name::$variant), )+
                    _ => Err(UnknownName {
                        kind: $kind,
                        value: text.to_string(),
                        expected: [$($text),+].join(", "),
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

vocabulary! {
    /// A finding class (docs/SEMANTICS.md §5).
    Class("class") {
        /// The trigger was skipped (or revoked).
        SkippedButDue => "SKIPPED_BUT_DUE",
        /// The trigger was DONE but no receipt succeeded.
        DoneNoReceipt => "DONE_NO_RECEIPT",
        /// The trigger is parked in review.
        ReviewStalled => "REVIEW_STALLED",
        /// No trigger row at all.
        NoLedgerEntry => "NO_LEDGER_ENTRY",
        /// Two or more SUCCEEDED receipts on a due order.
        DuplicateEffect => "DUPLICATE_EFFECT",
        /// A SUCCEEDED receipt on an order never due.
        OrphanEffect => "ORPHAN_EFFECT",
        /// A done effect still in force on a voided order, on a rule with
        /// `reverse_on_void` (DESIGN §10.1).
        UnreversedEffect => "UNREVERSED_EFFECT",
    }
}

impl Class {
    /// One of the four missing-effect classes.
    pub fn is_missing(self) -> bool {
        !self.is_wrong_effect()
    }

    /// One of the three wrong-effect classes: an effect done that must be undone or
    /// looked into (duplicate, orphan, unreversed).
    pub fn is_wrong_effect(self) -> bool {
        matches!(self, Class::DuplicateEffect | Class::OrphanEffect | Class::UnreversedEffect)
    }
}

vocabulary! {
    /// A finding's verdict.
    Verdict("verdict") {
        /// Broken: `break_on <= cut`.
        Break => "BREAK",
        /// Still inside its grace.
        Pending => "PENDING",
    }
}

vocabulary! {
    /// The verdict on one SKIPPED ledger row (`skip_verdicts.verdict`).
    SkipVerdict("skip verdict") {
        /// An effect it should have performed is due, not voided, missing and past its grace.
        Wrong => "WRONG",
        /// Not final yet: a due effect is missing but within its grace, or nothing is due
        /// yet and the skip is younger than the longest grace.
        Pending => "PENDING",
        /// The effect was due but a receipt succeeded anyway.
        Harmless => "HARMLESS",
        /// Nothing it could have performed is owed.
        Correct => "CORRECT",
    }
}

vocabulary! {
    /// `lifecycle` of a BREAK finding across nights (§9).
    Lifecycle("lifecycle") {
        /// Not open in the previous run.
        New => "NEW",
        /// Open in the previous run and still open.
        Persisting => "PERSISTING",
    }
}

vocabulary! {
    /// `lifecycle` of a skip verdict across nights (§9).
    SkipLifecycle("skip lifecycle") {
        /// Decided inside this run's window.
        New => "NEW",
        /// A PENDING skip of the previous run, judged again.
        Carried => "CARRIED",
    }
}

vocabulary! {
    /// Why an open finding left the open set (§9 `resolved.resolution`).
    Resolution("resolution") {
        /// A SUCCEEDED receipt exists now.
        Receipt => "RECEIPT",
        /// The order reached a void status.
        Voided => "VOIDED",
        /// A duplicate or orphan grant was reversed.
        Reversed => "REVERSED",
        /// The orphan's order reached the due status.
        NowDue => "NOW_DUE",
        /// The pair is now a finding of another class.
        Reclassified => "RECLASSIFIED",
        /// Not re-checkable and older than the max age.
        Expired => "EXPIRED",
    }
}

vocabulary! {
    /// Whether a run's inputs looked whole (`manifest.json` and `summary.json` `status`).
    #[derive(Default)]
    RunStatus("run status") {
        /// Every self-check passed.
        #[default]
        Complete => "COMPLETE",
        /// Some self-check failed: the run is published but never green (exit 3).
        Incomplete => "INCOMPLETE",
    }
}

vocabulary! {
    /// What the executor is asked to do with a compensation task (`compensation_tasks.action`).
    TaskAction("task action") {
        /// Perform the missing effect with the rule's command.
        ExecuteEffect => "EXECUTE_EFFECT",
        /// Undo the receipts listed in `reverse_receipt_ids`.
        ReverseEffect => "REVERSE_EFFECT",
        /// A human looks at it.
        Investigate => "INVESTIGATE",
    }
}

vocabulary! {
    /// The state of a task in the team's task table (`publish`).
    TaskState("task state") {
        /// Waiting for the executor.
        Open => "OPEN",
        /// The executor performed it.
        Done => "DONE",
        /// The executor tried and failed.
        Failed => "FAILED",
        /// A later run found the finding closed.
        Resolved => "RESOLVED",
    }
}

vocabulary! {
    /// The actions a handler writes into the idempotency ledger (docs/CONTRACT.md).
    LedgerAction("ledger action") {
        /// The side effects were performed.
        Done => "DONE",
        /// The order status did not match: nothing done.
        Skipped => "SKIPPED",
        /// Parked for a review.
        PendingReview => "PENDING_REVIEW",
        /// Reopened: the next delivery decides again.
        Revoked => "REVOKED",
    }
}

vocabulary! {
    /// The statuses a provider writes on a receipt.
    ReceiptStatus("receipt status") {
        /// The call succeeded.
        Succeeded => "SUCCEEDED",
        /// The call failed.
        Failed => "FAILED",
        /// The effect was undone afterwards.
        Reversed => "REVERSED",
    }
}

vocabulary! {
    /// What made a ledger row be decided after a later offset of its order and partition,
    /// by its fingerprint in the ledger (`advise`; sql/advise_reorder_mechanisms.sql).
    ReorderMechanism("reorder mechanism") {
        /// The partition's old owner wrote after the handoff (a zombie, or offsets
        /// committed before processing).
        OldOwnerLate => "OLD_OWNER_LATE",
        /// Another consumer decided a later offset ahead of its turn before the handoff.
        BeforeHandoff => "BEFORE_HANDOFF",
        /// One consumer decided the two out of offset order.
        SameConsumer => "SAME_CONSUMER",
        /// A retry topic or a dead-letter replay decided it late.
        RetryTopic => "RETRY_TOPIC",
        /// The producer wrote the two in another order than their status changes.
        ProducerOrder => "PRODUCER_ORDER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_and_any_other_text_is_refused() {
        for class in Class::ALL {
            assert_eq!(class.as_str().parse::<Class>(), Ok(*class));
        }
        for action in LedgerAction::ALL {
            assert_eq!(action.to_string().parse::<LedgerAction>(), Ok(*action));
        }
        let error = "NO_SUCH_CLASS".parse::<Class>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown class 'NO_SUCH_CLASS' (expected one of: SKIPPED_BUT_DUE, DONE_NO_RECEIPT, \
             REVIEW_STALLED, NO_LEDGER_ENTRY, DUPLICATE_EFFECT, ORPHAN_EFFECT, UNREVERSED_EFFECT)"
        );
        assert!("break".parse::<Verdict>().is_err(), "names are case-sensitive");
    }

    #[test]
    fn serde_writes_and_reads_the_contract_text() {
        assert_eq!(serde_json::to_string(&RunStatus::Incomplete).unwrap(), "\"INCOMPLETE\"");
        let status: RunStatus = serde_json::from_str("\"COMPLETE\"").unwrap();
        assert_eq!(status, RunStatus::Complete);
        assert!(serde_json::from_str::<RunStatus>("\"GREEN\"").is_err());
    }
}
