//! The one integration test binary (each extra `tests/*.rs` would relink DataFusion).
//!
//! * [`export`] — `export`/`nightly` against SQLite (always) and MariaDB/PostgreSQL (when
//!   `EFFECT_RECON_TEST_MYSQL_URL` / `EFFECT_RECON_TEST_PG_URL` are set): round trips and errors.

mod export;
