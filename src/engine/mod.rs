//! The query engine boundary: the one DataFusion session ([`session`]), the SQL of `sql/`
//! ([`queries`]), our own SQL functions ([`udf`]), the tables a run builds in memory
//! ([`staging`]) and the Ballista cluster engine ([`cluster`], cargo feature `ballista`).

#[cfg(feature = "ballista")]
pub mod cluster;
pub mod queries;
pub mod session;
pub(crate) mod staging;
pub(crate) mod udf;
