//! sqllogictest files (`tests/slt/*.slt`) run against the exact text of `sql/`.
//!
//! Besides plain SQL the harness understands two statements of its own:
//!
//! * `recon rules <path>` — registers the `rules` table from a rules TOML file
//!   (relative to the repository root), through the same code as `run`;
//! * `recon views since <ISO> cut <ISO> [list_since <ISO>] [expire_before <ISO>] [run <ID>]`
//!   — conforms the tables `ledger_input`, `status_history_input` and `receipts_input` to
//!   the contract types (as the snapshot reader does), registers them as `ledger`,
//!   `status_history`, `receipts`; registers the previous run's tables
//!   (`previous_discrepancies`, `previous_tasks`, `previous_skip_verdicts`) from
//!   `<name>_input` cast to the output schemas, or empty when the file made none; and
//!   registers every query of `sql/` as a view of its own name with the bounds bound
//!   (`list_since` defaults to `since`, `run` to `r1`).
//!
//! Plans use a fixed `target_partitions` so results do not depend on the machine.

use effect_recon::config::RuleSet;
use effect_recon::datafusion::arrow::record_batch::RecordBatch;
use effect_recon::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use effect_recon::datafusion::prelude::SessionContext;
use effect_recon::datafusion::prelude::{cast, col, Expr};
use effect_recon::engine::queries;
use effect_recon::engine::session::{self, SessionOptions};
use effect_recon::recon::{rules_table, Bounds, Window};
use effect_recon::run_folder::tables::OutputTable;
use effect_recon::snapshot::{reader::conform_frame, Table};
use effect_recon::time::parse_instant;
use sqllogictest::{DBOutput, DefaultColumnType};

use super::common::repo;

struct ReconDb {
    ctx: SessionContext,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SltError(String);

impl ReconDb {
    fn new() -> Self {
        let ctx = session::build(&SessionOptions {
            target_partitions: 2,
            batch_size: 8192,
            ..SessionOptions::default()
        })
        .unwrap();
        ReconDb { ctx }
    }

    async fn recon_statement(&mut self, words: &[&str]) -> Result<(), SltError> {
        let fail = |e: effect_recon::Error| SltError(e.to_string());
        match words {
            ["rules", path] => {
                let rules = RuleSet::load(Some(&repo(path))).map_err(fail)?;
                let _ = self.ctx.deregister_table(rules_table::RULES_TABLE);
                rules_table::register(&self.ctx, &rules).map_err(fail)
            }
            ["views", "since", since, "cut", cut, options @ ..] => {
                let instant = |t: &str| parse_instant(t).map_err(SltError);
                let window = Window { since: instant(since)?, cut: instant(cut)? };
                let mut bounds = Bounds::standalone(window, "r1");
                for pair in options.chunks(2) {
                    match pair {
                        ["list_since", t] => bounds.list_since = instant(t)?,
                        ["expire_before", t] => bounds.expire_before = instant(t)?,
                        ["run", id] => bounds.run_id = id.to_string(),
                        _ => return Err(SltError(format!("unknown views option {pair:?}"))),
                    }
                }
                self.register_previous().await?;
                for table in Table::ALL {
                    let input = self
                        .ctx
                        .table(format!("{}_input", table.name()))
                        .await
                        .map_err(|e| SltError(e.to_string()))?;
                    let frame = conform_frame(input, table).map_err(fail)?;
                    let _ = self.ctx.deregister_table(table.name());
                    self.ctx
                        .register_table(table.name(), frame.into_view())
                        .map_err(|e| SltError(e.to_string()))?;
                }
                for query in queries::PIPELINE {
                    let _ = self.ctx.deregister_table(query.name);
                    queries::register_view(&self.ctx, query, &bounds.params())
                        .await
                        .map_err(fail)?;
                }
                Ok(())
            }
            _ => Err(SltError(format!("unknown harness statement: recon {}", words.join(" ")))),
        }
    }

    /// `previous_*` from `previous_*_input` cast to the output schemas, or empty.
    async fn register_previous(&mut self) -> Result<(), SltError> {
        let error = |e: &dyn std::fmt::Display| SltError(e.to_string());
        let tables = [
            ("previous_discrepancies", OutputTable::Discrepancies),
            ("previous_tasks", OutputTable::CompensationTasks),
            ("previous_skip_verdicts", OutputTable::SkipVerdicts),
        ];
        for (name, output) in tables {
            let schema = output.schema();
            let input = format!("{name}_input");
            let frame = if self.ctx.table_exist(input.as_str()).map_err(|e| error(&e))? {
                let frame = self.ctx.table(input.as_str()).await.map_err(|e| error(&e))?;
                let columns: Vec<Expr> = schema
                    .fields()
                    .iter()
                    .map(|f| cast(col(f.name()), f.data_type().clone()).alias(f.name()))
                    .collect();
                frame.select(columns).map_err(|e| error(&e))?
            } else {
                let empty = RecordBatch::new_empty(schema);
                self.ctx.read_batch(empty).map_err(|e| error(&e))?
            };
            let _ = self.ctx.deregister_table(name);
            self.ctx.register_table(name, frame.into_view()).map_err(|e| error(&e))?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl sqllogictest::AsyncDB for ReconDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let words: Vec<&str> = sql.split_whitespace().collect();
        if words.first() == Some(&"recon") {
            self.recon_statement(&words[1..]).await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let frame = self.ctx.sql(sql).await.map_err(|e| SltError(e.to_string()))?;
        let schema = frame.schema().as_arrow().clone();
        let batches = frame.collect().await.map_err(|e| SltError(e.to_string()))?;
        let is_statement = schema.fields().len() == 1
            && schema.field(0).name() == "count"
            && !sql.trim_start().to_lowercase().starts_with("select");
        if is_statement || schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        let options = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        for batch in &batches {
            let formatters: Vec<_> = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
                .collect();
            for row in 0..batch.num_rows() {
                rows.push(formatters.iter().map(|f| f.value(row).to_string()).collect());
            }
        }
        Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; schema.fields().len()], rows })
    }

    async fn shutdown(&mut self) {}
}

#[tokio::test]
async fn sqllogictest_files_pass() {
    let mut files: Vec<_> = std::fs::read_dir(repo("tests/slt"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files found");
    let mut failures = Vec::new();
    for file in &files {
        let mut runner = sqllogictest::Runner::new(|| async { Ok(ReconDb::new()) });
        if let Err(e) = runner.run_file_async(file).await {
            failures.push(format!("{}: {e}", file.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} slt files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}
