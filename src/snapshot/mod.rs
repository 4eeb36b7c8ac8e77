//! The snapshot contract of docs/CONTRACT.md: layout, manifest, column types.
//!
//! A snapshot is a folder with `manifest.json` (written last), `ledger/`, `status_history/`
//! and `receipts/<source>/` Parquet files. [`writer`] produces one (used by `gen` and
//! `export`, so `run` cannot tell them apart); [`reader`] validates one and registers its
//! tables in a DataFusion session.

pub mod chain;
mod deleted_rows;
pub mod deletes;
pub(crate) mod diagnose;
pub mod reader;
mod row_groups;
mod unique_keys;
pub mod writer;

pub use crate::storage::parquet_parts::FileEntry;
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

pub use reader::{Snapshot, SnapshotStats};
pub use writer::{SnapshotWriter, TableWriter};

/// The `format` of every snapshot manifest this version reads and writes.
pub const SNAPSHOT_FORMAT: &str = "effect-recon/snapshot@1";

/// File name of the manifest, in a snapshot and in a run.
pub const MANIFEST: &str = "manifest.json";

/// The timezone of every timestamp the contract writes.
pub const UTC: &str = "UTC";

/// The three snapshot tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// The idempotency ledger: one row per consumed message.
    Ledger,
    /// One row per order status change.
    StatusHistory,
    /// One row per side-effect call recorded by a provider.
    Receipts,
}

impl Table {
    /// All tables, in manifest order.
    pub const ALL: [Table; 3] = [Table::Ledger, Table::StatusHistory, Table::Receipts];

    /// The table (and folder, and manifest key) name.
    pub fn name(self) -> &'static str {
        match self {
            Table::Ledger => "ledger",
            Table::StatusHistory => "status_history",
            Table::Receipts => "receipts",
        }
    }

    /// Parses a table name as written in configs and manifests.
    pub fn from_name(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The contract's columns of this table.
    pub fn columns(self) -> &'static [ColumnSpec] {
        match self {
            Table::Ledger => LEDGER_COLUMNS,
            Table::StatusHistory => STATUS_HISTORY_COLUMNS,
            Table::Receipts => RECEIPTS_COLUMNS,
        }
    }

    /// The Arrow schema writers must produce.
    pub fn schema(self) -> SchemaRef {
        let fields: Vec<Field> = self
            .columns()
            .iter()
            .map(|c| Field::new(c.name, c.kind.data_type(), c.nullable))
            .collect();
        Arc::new(Schema::new(fields))
    }
}

/// The logical type of a contract column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// Utf8 (readers also accept LargeUtf8 and Utf8View).
    Text,
    /// Int64, exactly.
    Int64,
    /// Int32, exactly.
    Int32,
    /// Timestamp(µs, UTC) (readers accept any unit and zone; naive means UTC).
    Timestamp,
}

impl ColumnKind {
    /// The Arrow type writers produce and readers normalise to.
    pub fn data_type(self) -> DataType {
        match self {
            ColumnKind::Text => DataType::Utf8,
            ColumnKind::Int64 => DataType::Int64,
            ColumnKind::Int32 => DataType::Int32,
            ColumnKind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        }
    }

    /// The type a session works with: the contract type, except strings, which are read
    /// as Utf8View (decoded without copying, faster to filter, join and group); outputs
    /// are cast back to the contract's Utf8.
    pub fn session_type(self) -> DataType {
        match self {
            ColumnKind::Text => DataType::Utf8View,
            other => other.data_type(),
        }
    }

    /// Whether a reader accepts `found` for this kind.
    pub fn accepts(self, found: &DataType) -> bool {
        match self {
            ColumnKind::Text => {
                matches!(found, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            }
            ColumnKind::Int64 => found == &DataType::Int64,
            ColumnKind::Int32 => found == &DataType::Int32,
            ColumnKind::Timestamp => matches!(found, DataType::Timestamp(_, _)),
        }
    }

    /// What the contract asks for, as shown in errors.
    pub fn describe(self) -> &'static str {
        match self {
            ColumnKind::Text => "Utf8 (or LargeUtf8, Utf8View)",
            ColumnKind::Int64 => "Int64",
            ColumnKind::Int32 => "Int32",
            ColumnKind::Timestamp => "Timestamp (any unit; naive means UTC)",
        }
    }
}

/// One column of the contract.
#[derive(Debug, Clone, Copy)]
pub struct ColumnSpec {
    /// Column name.
    pub name: &'static str,
    /// Its logical type.
    pub kind: ColumnKind,
    /// Whether NULL is allowed.
    pub nullable: bool,
}

const fn column(name: &'static str, kind: ColumnKind, nullable: bool) -> ColumnSpec {
    ColumnSpec { name, kind, nullable }
}

/// The key column of `@2` files ([`chain::KEY_COLUMN`]), as a contract column.
pub const KEY_SPEC: ColumnSpec = column(chain::KEY_COLUMN, ColumnKind::Text, false);

const LEDGER_COLUMNS: &[ColumnSpec] = &[
    column("msg_id", ColumnKind::Text, false),
    column("order_id", ColumnKind::Int64, false),
    column("event_type", ColumnKind::Text, false),
    column("expected_status", ColumnKind::Text, true),
    column("action", ColumnKind::Text, false),
    column("observed_status", ColumnKind::Text, true),
    column("topic", ColumnKind::Text, true),
    column("kafka_partition", ColumnKind::Int32, true),
    column("kafka_offset", ColumnKind::Int64, true),
    column("consumer_id", ColumnKind::Text, true),
    column("decided_at", ColumnKind::Timestamp, false),
];

const STATUS_HISTORY_COLUMNS: &[ColumnSpec] = &[
    column("order_id", ColumnKind::Int64, false),
    column("status", ColumnKind::Text, false),
    column("changed_at", ColumnKind::Timestamp, false),
];

const RECEIPTS_COLUMNS: &[ColumnSpec] = &[
    column("receipt_id", ColumnKind::Text, false),
    column("order_id", ColumnKind::Int64, false),
    column("effect", ColumnKind::Text, false),
    column("msg_id", ColumnKind::Text, true),
    column("status", ColumnKind::Text, false),
    column("created_at", ColumnKind::Timestamp, false),
];

/// `manifest.json` of a snapshot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotManifest {
    /// Always [`SNAPSHOT_FORMAT`].
    pub format: String,
    /// The logical snapshot time, RFC 3339.
    pub cut: String,
    /// The exporter's lower bound (`since - lookback`), RFC 3339: rows older than it are
    /// not in the snapshot. Absent = unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_from: Option<String>,
    /// Files per table name.
    pub tables: BTreeMap<String, TableFiles>,
    /// Who wrote it (`gen`, `export`), informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// The segment chain of an incremental snapshot (format `@2` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<chain::Chain>,
}

/// The files of one table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TableFiles {
    /// Files, relative to the snapshot folder.
    pub files: Vec<FileEntry>,
}
