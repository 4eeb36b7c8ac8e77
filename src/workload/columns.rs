//! Arrow builders for the three snapshot tables, filled straight from simulated rows so
//! the hot loop formats ids in place and allocates nothing per row.

use std::fmt::Write;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::record_batch::RecordBatch;

use super::world::{OrderRows, Provider, TOPIC};
use crate::error::{Error, Result};
use crate::snapshot::{Table, UTC};

fn timestamps() -> TimestampMicrosecondBuilder {
    TimestampMicrosecondBuilder::new().with_timezone(UTC)
}

fn batch(table: Table, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    RecordBatch::try_new(table.schema(), columns).map_err(|e| Error::Output {
        location: table.name().into(),
        message: format!("building a batch: {e}"),
        source: Some(Box::new(e)),
    })
}

/// `ledger` rows of a block of orders.
pub(super) struct LedgerColumns {
    msg_id: StringBuilder,
    order_id: Int64Builder,
    event_type: StringBuilder,
    expected_status: StringBuilder,
    action: StringBuilder,
    observed_status: StringBuilder,
    topic: StringBuilder,
    kafka_partition: Int32Builder,
    kafka_offset: Int64Builder,
    consumer_id: StringBuilder,
    decided_at: TimestampMicrosecondBuilder,
}

impl Default for LedgerColumns {
    fn default() -> Self {
        LedgerColumns {
            msg_id: StringBuilder::new(),
            order_id: Int64Builder::new(),
            event_type: StringBuilder::new(),
            expected_status: StringBuilder::new(),
            action: StringBuilder::new(),
            observed_status: StringBuilder::new(),
            topic: StringBuilder::new(),
            kafka_partition: Int32Builder::new(),
            kafka_offset: Int64Builder::new(),
            consumer_id: StringBuilder::new(),
            decided_at: timestamps(),
        }
    }
}

impl LedgerColumns {
    /// Appends an order's ledger rows.
    pub(super) fn push(&mut self, order: &OrderRows) {
        for e in &order.ledger {
            let _ = write!(self.msg_id, "{}", e.msg_id);
            self.msg_id.append_value("");
            self.order_id.append_value(order.order_id);
            self.event_type.append_value(e.event.event_type());
            self.expected_status.append_value(e.event.name());
            self.action.append_value(e.action.as_str());
            self.observed_status.append_value(e.observed.name());
            self.topic.append_value(TOPIC);
            self.kafka_partition.append_value(e.partition);
            self.kafka_offset.append_value(e.offset);
            let _ = write!(self.consumer_id, "consumer-{}", e.consumer);
            self.consumer_id.append_value("");
            self.decided_at.append_value(e.decided_at);
        }
    }

    /// The rows as a batch; the builders start over.
    pub(super) fn finish(&mut self) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.msg_id.finish()),
            Arc::new(self.order_id.finish()),
            Arc::new(self.event_type.finish()),
            Arc::new(self.expected_status.finish()),
            Arc::new(self.action.finish()),
            Arc::new(self.observed_status.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.kafka_partition.finish()),
            Arc::new(self.kafka_offset.finish()),
            Arc::new(self.consumer_id.finish()),
            Arc::new(self.decided_at.finish()),
        ];
        batch(Table::Ledger, columns)
    }
}

/// `status_history` rows of a block of orders.
pub(super) struct HistoryColumns {
    order_id: Int64Builder,
    status: StringBuilder,
    changed_at: TimestampMicrosecondBuilder,
}

impl Default for HistoryColumns {
    fn default() -> Self {
        HistoryColumns {
            order_id: Int64Builder::new(),
            status: StringBuilder::new(),
            changed_at: timestamps(),
        }
    }
}

impl HistoryColumns {
    /// Appends an order's status changes.
    pub(super) fn push(&mut self, order: &OrderRows) {
        for change in &order.history {
            self.order_id.append_value(order.order_id);
            self.status.append_value(change.status.name());
            self.changed_at.append_value(change.at);
        }
    }

    /// The rows as a batch; the builders start over.
    pub(super) fn finish(&mut self) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.order_id.finish()),
            Arc::new(self.status.finish()),
            Arc::new(self.changed_at.finish()),
        ];
        batch(Table::StatusHistory, columns)
    }
}

/// `receipts` rows of one provider for a block of orders.
pub(super) struct ReceiptColumns {
    provider: Provider,
    receipt_id: StringBuilder,
    order_id: Int64Builder,
    effect: StringBuilder,
    msg_id: StringBuilder,
    status: StringBuilder,
    created_at: TimestampMicrosecondBuilder,
}

impl ReceiptColumns {
    /// Builders for `provider`'s receipts.
    pub(super) fn new(provider: Provider) -> Self {
        ReceiptColumns {
            provider,
            receipt_id: StringBuilder::new(),
            order_id: Int64Builder::new(),
            effect: StringBuilder::new(),
            msg_id: StringBuilder::new(),
            status: StringBuilder::new(),
            created_at: timestamps(),
        }
    }

    /// Appends an order's receipts of this provider.
    pub(super) fn push(&mut self, order: &OrderRows) {
        for r in order.receipts.iter().filter(|r| r.provider == self.provider) {
            let _ =
                write!(self.receipt_id, "{}-{}-{}", self.provider.source(), order.order_id, r.seq);
            self.receipt_id.append_value("");
            self.order_id.append_value(order.order_id);
            self.effect.append_value(self.provider.effect());
            match r.msg_id {
                Some(id) => {
                    let _ = write!(self.msg_id, "{id}");
                    self.msg_id.append_value("");
                }
                None => self.msg_id.append_null(),
            }
            self.status.append_value(r.status.as_str());
            self.created_at.append_value(r.created_at);
        }
    }

    /// The rows as a batch; the builders start over.
    pub(super) fn finish(&mut self) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.receipt_id.finish()),
            Arc::new(self.order_id.finish()),
            Arc::new(self.effect.finish()),
            Arc::new(self.msg_id.finish()),
            Arc::new(self.status.finish()),
            Arc::new(self.created_at.finish()),
        ];
        batch(Table::Receipts, columns)
    }
}
