//! Every DataFusion SQL text of the crate, embedded at build time from `sql/`, and the
//! helpers that run them with bound parameters. Nothing else holds DataFusion SQL (the
//! statements sent to the team's databases are in `db/dialect.rs`).
//!
//! Each file is one query; its file name is the view (or output) name. The recon views
//! are registered in [`PIPELINE`] order, each seeing the ones before it, with the
//! parameters of [`crate::recon::Bounds`] bound (never formatted into the text).

use datafusion::arrow::array::{Array, Int64Array, RecordBatch, StringArray};
use datafusion::common::ScalarValue;
use datafusion::prelude::{DataFrame, SessionContext};

use crate::error::{Error, Result};

/// One embedded query: its name (= view name) and text.
#[derive(Debug, Clone, Copy)]
pub struct Query {
    /// File stem in `sql/`, and the name it is registered under.
    pub name: &'static str,
    /// The exact text of `sql/<name>.sql`.
    pub text: &'static str,
}

macro_rules! query {
    ($name:literal) => {
        Query { name: $name, text: include_str!(concat!("../../sql/", $name, ".sql")) }
    };
}

/// Rule due/void statuses as rows.
pub const RULE_STATUSES: Query = query!("rule_statuses");
/// The previous run's open (BREAK) findings.
pub const PREVIOUS_OPEN: Query = query!("previous_open");
/// (rule, order) pairs judged whatever the window: previous open findings, carried skips.
pub const WATCHED: Query = query!("watched");
/// Per (effect, order): due_at, voided, SUCCEEDED receipts (owed vs happened).
pub const EFFECT_STATE: Query = query!("effect_state");
/// The orders a chained run judges (`$reach`): everything else cannot change an output.
pub const JUDGED_ORDERS: Query = query!("judged_orders");
/// Order id range and row count of the snapshot.
pub const ORDER_ID_SPAN: Query = query!("order_id_span");
/// Possible findings and the state of skipped orders, from one pass over effect_state.
pub const EFFECTS_IN_PLAY: Query = query!("effects_in_play");
/// The SUCCEEDED receipts of the pairs whose receipts are listed (one receipts pass).
pub const RECEIPTS_IN_PLAY: Query = query!("receipts_in_play");
/// The first receipt and the second receipt's time of each pair in receipts_in_play.
pub const RECEIPT_POSITIONS: Query = query!("receipt_positions");
/// Findings of the window before evidence.
pub const CANDIDATES: Query = query!("candidates");
/// Every ledger row up to the cut of a candidate's order (one ledger pass for the evidence).
pub const CANDIDATE_LEDGER: Query = query!("candidate_ledger");
/// Trigger outcome and evidence row per (order, event type) of a candidate.
pub const TRIGGER_EVIDENCE: Query = query!("trigger_evidence");
/// Every candidate classified, with finding_id and evidence, before the lifecycle.
pub const FINDINGS: Query = query!("findings");
/// The previous run's open findings judged again: PERSISTING, resolved, or unchecked.
pub const REJUDGED: Query = query!("rejudged");
/// The discrepancies output.
pub const DISCREPANCIES: Query = query!("discrepancies");
/// The compensation_tasks output (reads the `discrepancies` table).
pub const COMPENSATION_TASKS: Query = query!("compensation_tasks");
/// The skip_verdicts output.
pub const SKIP_VERDICTS: Query = query!("skip_verdicts");
/// The resolved output: previous open findings closed by this run, and why.
pub const RESOLVED: Query = query!("resolved");
/// The distinct effects, event types and statuses of the snapshot (rule typo check).
pub const VOCABULARY: Query = query!("vocabulary");
/// Ledger key check, first pass: the hash of every msg_id.
pub const LEDGER_KEY_HASHES: Query = query!("ledger_key_hashes");
/// Ledger key check on a cluster, first pass: the hashes that repeat.
pub const REPEATED_KEY_HASHES: Query = query!("repeated_key_hashes");
/// Ledger key check, second pass: the msg_ids behind repeated hashes.
pub const DUPLICATE_MSG_IDS: Query = query!("duplicate_msg_ids");
/// `advise`: decision lag of every ledger row (`$cut`).
pub const ADVISE_LAGS: Query = query!("advise_lags");
/// `advise`: reorders per partition, consumer and after a rebalance (`$cut`, `$window`).
pub const ADVISE_REORDERS: Query = query!("advise_reorders");
/// `advise`: reordered rows counted by the mechanism their ledger fingerprint points to.
pub const ADVISE_REORDER_MECHANISMS: Query = query!("advise_reorder_mechanisms");
/// `advise`: due to first receipt of one rule (`$cut`, `$due_status`, `$effect`).
pub const ADVISE_DONE_LAGS: Query = query!("advise_done_lags");
/// `advise`: a run's skip verdicts counted.
pub const ADVISE_SKIP_VERDICTS: Query = query!("advise_skip_verdicts");
/// `advise`: from each WRONG skip of a run to its status change (`$cut`).
pub const ADVISE_WRONG_SKIP_GAPS: Query = query!("advise_wrong_skip_gaps");

/// Every query of a run in dependency order: each may read the ones before it.
pub const PIPELINE: [Query; 16] = [
    RULE_STATUSES,
    PREVIOUS_OPEN,
    WATCHED,
    EFFECT_STATE,
    EFFECTS_IN_PLAY,
    RECEIPTS_IN_PLAY,
    RECEIPT_POSITIONS,
    CANDIDATES,
    CANDIDATE_LEDGER,
    TRIGGER_EVIDENCE,
    FINDINGS,
    REJUDGED,
    DISCREPANCIES,
    COMPENSATION_TASKS,
    SKIP_VERDICTS,
    RESOLVED,
];

/// The queries of `advise` (their own parameters: not registered with a run's bounds).
pub const ADVISE: [Query; 6] = [
    ADVISE_LAGS,
    ADVISE_REORDERS,
    ADVISE_REORDER_MECHANISMS,
    ADVISE_DONE_LAGS,
    ADVISE_SKIP_VERDICTS,
    ADVISE_WRONG_SKIP_GAPS,
];

/// Every embedded query of a run: the pipeline and the checks.
pub fn all() -> impl Iterator<Item = Query> {
    PIPELINE.into_iter().chain([
        JUDGED_ORDERS,
        ORDER_ID_SPAN,
        LEDGER_KEY_HASHES,
        REPEATED_KEY_HASHES,
        DUPLICATE_MSG_IDS,
        VOCABULARY,
    ])
}

/// A named parameter value (`$cut`, `$since`, `$list_since`, `$expire_before`, `$run_id`,
/// `$lo`, `$hi`, and `$reach` for `judged_orders`).
pub type Param = (&'static str, ScalarValue);

/// Plans `query` with `params` bound.
pub async fn frame(ctx: &SessionContext, query: Query, params: &[Param]) -> Result<DataFrame> {
    let context = |e| Error::query(format!("query sql/{}.sql", query.name), e);
    let frame = ctx.sql(query.text).await.map_err(context)?;
    if params.is_empty() {
        return Ok(frame);
    }
    let values: Vec<(&str, ScalarValue)> = params.iter().map(|(k, v)| (*k, v.clone())).collect();
    frame.with_param_values(values).map_err(context)
}

/// Registers `query` as a view under its own name, with `params` bound. A view captures
/// the plans of the tables it reads *now*: register it after anything it reads has been
/// materialised, or it will recompute that.
pub async fn register_view(ctx: &SessionContext, query: Query, params: &[Param]) -> Result<()> {
    let view = frame(ctx, query, params).await?.into_view();
    let context = |e| Error::query(format!("registering view {}", query.name), e);
    ctx.deregister_table(query.name).map_err(context)?;
    ctx.register_table(query.name, view).map_err(context)?;
    Ok(())
}

/// Runs `query` and collects its batches.
pub async fn collect(
    ctx: &SessionContext,
    query: Query,
    params: &[Param],
) -> Result<Vec<RecordBatch>> {
    frame(ctx, query, params)
        .await?
        .collect()
        .await
        .map_err(|e| Error::query(format!("running sql/{}.sql", query.name), e))
}

/// A string column of a result by name, as Utf8 whatever string encoding the engine chose.
pub fn string_column(batch: &RecordBatch, name: &str) -> Result<StringArray> {
    let column = batch.column_by_name(name).ok_or_else(|| missing_column(name))?;
    let utf8 =
        datafusion::arrow::compute::cast(column, &datafusion::arrow::datatypes::DataType::Utf8)
            .map_err(|_| missing_column(name))?;
    utf8.as_any().downcast_ref::<StringArray>().cloned().ok_or_else(|| missing_column(name))
}

/// An Int64 column of a result by name.
pub fn int64_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a Int64Array> {
    typed_column(batch, name)
}

fn missing_column(name: &str) -> Error {
    Error::Internal(format!("result column '{name}' missing or of an unexpected type"))
}

fn typed_column<'a, T: Array + 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| missing_column(name))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::prelude::SessionContext;

    /// Rows of `sql` sorted by effect and order_id, as a table.
    async fn table(ctx: &SessionContext, sql: &str) -> String {
        let sorted = format!("SELECT * FROM ({sql}) ORDER BY effect, order_id");
        let batches = ctx.sql(&sorted).await.unwrap().collect().await.unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    /// receipt_positions takes the first receipt and the second receipt's time from
    /// aggregates over first_at; they must be the first two in (created_at, receipt_id)
    /// order, ties at first_at included.
    #[tokio::test]
    async fn receipt_positions_are_the_first_two_in_created_at_then_receipt_id_order() {
        let ctx = SessionContext::new();
        let receipts = "CREATE TABLE receipts_in_play AS
            WITH r(effect, order_id, receipt_id, created_at) AS (VALUES
                ('e', 1, 'r-b', '2026-11-29T10:00:00'), ('e', 1, 'r-a', '2026-11-29T10:00:00'),
                ('e', 1, 'r-c', '2026-11-29T11:00:00'),
                ('e', 2, 'r-z', '2026-11-29T09:00:00'), ('e', 2, 'r-y', '2026-11-29T10:00:00'),
                ('e', 2, 'r-x', '2026-11-29T12:00:00'),
                ('e', 3, 'r-q', '2026-11-29T08:00:00'),
                ('e', 4, 'r-2', '2026-11-29T10:00:00'), ('e', 4, 'r-1', '2026-11-29T11:00:00'),
                ('e', 4, 'r-0', '2026-11-29T11:00:00'),
                ('f', 1, 'r-m', '2026-11-29T07:00:00'), ('f', 1, 'r-n', '2026-11-29T07:00:00'),
                ('f', 1, 'r-l', '2026-11-29T07:00:00'))
            SELECT effect, CAST(order_id AS BIGINT) AS order_id, receipt_id,
                   CAST(created_at AS TIMESTAMP) AS created_at,
                   min(CAST(created_at AS TIMESTAMP)) OVER (PARTITION BY effect, order_id) AS first_at
            FROM r";
        ctx.sql(receipts).await.unwrap().collect().await.unwrap();
        let found = table(&ctx, super::RECEIPT_POSITIONS.text).await;
        let by_definition = table(
            &ctx,
            "SELECT effect, order_id,
                    max(CASE WHEN position = 1 THEN receipt_id END) AS first_receipt_id,
                    max(CASE WHEN position = 2 THEN created_at END) AS second_at
             FROM (SELECT *, row_number() OVER (PARTITION BY effect, order_id
                                                ORDER BY created_at, receipt_id) AS position
                   FROM receipts_in_play)
             GROUP BY effect, order_id",
        )
        .await;
        assert_eq!(found, by_definition);
        let expected = [
            "+--------+----------+------------------+---------------------+",
            "| effect | order_id | first_receipt_id | second_at           |",
            "+--------+----------+------------------+---------------------+",
            "| e      | 1        | r-a              | 2026-11-29T10:00:00 |",
            "| e      | 2        | r-z              | 2026-11-29T10:00:00 |",
            "| e      | 3        | r-q              |                     |",
            "| e      | 4        | r-2              | 2026-11-29T11:00:00 |",
            "| f      | 1        | r-l              | 2026-11-29T07:00:00 |",
            "+--------+----------+------------------+---------------------+",
        ];
        assert_eq!(found, expected.join("\n"));
    }

    #[test]
    fn every_query_starts_with_its_contract() {
        for query in super::all().chain(super::ADVISE) {
            assert!(
                query.text.starts_with(&format!("-- {}:", query.name)),
                "sql/{}.sql lacks its header comment",
                query.name
            );
        }
    }

    #[test]
    fn every_sql_file_is_embedded() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sql");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().into_string().ok())
            .filter_map(|name| name.strip_suffix(".sql").map(str::to_string))
            .collect();
        files.sort();
        let mut embedded: Vec<String> =
            super::all().chain(super::ADVISE).map(|q| q.name.to_string()).collect();
        embedded.sort();
        assert_eq!(files, embedded);
    }
}
