//! Functions the SQL of `sql/` needs beyond DataFusion's own.
//!
//! `in_orders(order_id)`: whether an order is one of a set fixed when the function is
//! made (the orders a chained run judges, `recon::judged`). A plain predicate, unlike a
//! semi-join, is pushed below the merge of an incremental snapshot's segments, so only
//! the judged orders' rows are merged. In process only: a cluster's executors do not
//! know it.
//!
//! `key_hash(text)`: a fixed 64-bit hash (foldhash, fixed seed), so a uniqueness check can
//! group by an integer instead of by the strings themselves — several times faster and
//! far smaller on a day of tens of millions of messages. Equal hashes are only
//! candidates: the exact check on the strings follows (`sql/duplicate_msg_ids.sql`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::array::{AsArray, BooleanArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::common::HashSet;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Seed of `key_hash`: fixed, so hashes are the same in every run.
const SEED: u64 = 0x5eed_0fe4_4ec7;

#[derive(Debug, PartialEq, Eq, Hash)]
struct KeyHash {
    signature: Signature,
}

impl ScalarUDFImpl for KeyHash {
    fn name(&self) -> &str {
        "key_hash"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::UInt64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let rows = arrays.first().map_or(args.number_rows, |a| a.len());
        let mut hashes = vec![0u64; rows];
        create_hashes(&arrays, &RandomState::with_seed(SEED), &mut hashes)?;
        Ok(ColumnarValue::Array(Arc::new(UInt64Array::from(hashes)) as ArrayRef))
    }
}

/// `key_hash(value)`, for registering in a session.
pub(crate) fn key_hash() -> ScalarUDF {
    ScalarUDF::from(KeyHash { signature: Signature::any(1, Volatility::Immutable) })
}

/// The set of orders `in_orders` answers for.
#[derive(Debug)]
struct InOrders {
    signature: Signature,
    orders: HashSet<i64>,
    /// The sorted ids: what equality and hashing of the function compare.
    sorted: Vec<i64>,
}

impl PartialEq for InOrders {
    fn eq(&self, other: &Self) -> bool {
        self.sorted == other.sorted
    }
}

impl Eq for InOrders {}

impl std::hash::Hash for InOrders {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.sorted.hash(state);
    }
}

impl ScalarUDFImpl for InOrders {
    fn name(&self) -> &str {
        "in_orders"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ids = arrays[0].as_primitive::<Int64Type>();
        let found: BooleanArray =
            ids.iter().map(|id| Some(id.is_some_and(|id| self.orders.contains(&id)))).collect();
        Ok(ColumnarValue::Array(Arc::new(found) as ArrayRef))
    }
}

/// `in_orders(order_id)` over the sorted, distinct `orders`.
pub(crate) fn in_orders(sorted: Vec<i64>) -> ScalarUDF {
    ScalarUDF::from(InOrders {
        signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
        orders: sorted.iter().copied().collect(),
        sorted,
    })
}
