//! The one integration test binary (each extra tests/*.rs would relink DataFusion).
//!
//! * `gen` — the synthetic workload: determinism, topic layout, planted faults, and
//!   gen → run → verify equal to the ground truth; the msg-7391 incident.

mod gen;
