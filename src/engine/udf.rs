//! Functions the SQL of `sql/` needs beyond DataFusion's own.
//!
//! `key_hash(text)`: a fixed 64-bit hash (foldhash, fixed seed), so a uniqueness check can
//! group by an integer instead of by the strings themselves — several times faster and
//! far smaller on a day of tens of millions of messages. Equal hashes are only
//! candidates: the exact check on the strings follows (`sql/duplicate_msg_ids.sql`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::hash_utils::{create_hashes, RandomState};
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
