//! The one integration test binary (every extra `tests/*.rs` would relink DataFusion).
//!
//! * `advise`       — `advise` recovers the consumer lag `gen` was given; its rules parse.
//! * `answer_figures` — docs/REVERSIBLE-SKIPS.md's policy table is what `simulate` prints
//!   for the page's own command (a moved figure fails until the page is regenerated).
//! * `bad_input`    — every kind of bad input gets its own clear error and no manifest.
//! * `cli`          — the binary: exit codes, summaries, the read-only `sql` command.
//! * `cluster`      — `run --engine ballista://…` on a real scheduler and two executors
//!   (child processes on loopback ports): byte-identical to in-process over the tiny
//!   fixture, several seeds and a chain of nights; a silent cluster, a killed executor,
//!   executors that cannot reach the snapshot.
//! * `common`       — shared helpers: the tiny fixture, running `run` and the binary,
//!   formatting outputs.
//! * `databases`    — the MariaDB/PostgreSQL servers of the tests (fresh database per test).
//! * `differential` — batch sizes {1, 7, 8192} × target partitions {1, 2, 4} agree.
//! * `export`       — `export`/`nightly` against SQLite (always) and MariaDB/PostgreSQL (when
//!   `EFFECT_RECON_TEST_MYSQL_URL` / `EFFECT_RECON_TEST_PG_URL` are set): round trips, errors.
//! * `export_chunking` — the fast export paths (pushed chunk ranges, binary COPY, several
//!   connections) export what the plain path does and fail as it does (same databases).
//! * `fixture`      — `run` on the committed tiny snapshot equals the hand-checked outputs.
//! * `gen`          — the synthetic workload: determinism, topic layout, planted faults,
//!   gen → run → verify equal to the ground truth; the msg-7391 incident.
//! * `handler`      — a reference effect handler under concurrency on MariaDB/PostgreSQL (same
//!   variables as `export`): 24 partitions, 8 consumers, rebalances, zombies; the question's
//!   naive handler loses and doubles effects, the obligation handler of
//!   sql/schema/obligation.*.sql loses, doubles and leaves in force on voided orders none;
//!   prints its counts.
//! * `incremental`  — incremental nights on a database changed in place (SQLite always,
//!   MariaDB/PostgreSQL with their variables): every night's chain equals a full
//!   re-export and runs the same; a watermark without its safety terms loses a late commit.
//! * `lifecycle`    — across nights (docs/SEMANTICS.md) through `run`: chains, overlapping windows,
//!   byte-identical reruns, self-checks (INCOMPLETE), refused previous runs, `history`.
//! * `links`        — README.md and docs/ have no dead links in a fresh clone.
//! * `messages`     — what a new user sees: one cause once, naming the argument; every
//!   `--help` example runs against the tiny fixture.
//! * `nights`       — `gen --nights`: deterministic, a truth that never drops an open
//!   finding (§9), and chained runs equal to every night's truth.
//! * `notify`       — `--metrics-file` (a Prometheus textfile equal to `summary.json`, written
//!   atomically; read back by the Prometheus Python client when `EFFECT_RECON_TEST_PYTHON` is
//!   set) and `--alert-webhook` (one POST to a local server; a failing one changes nothing).
//! * `order_now`    — one order judged live through the job config (`explain --config`,
//!   `reopen --order`, `reopen --msg-id`): disagreements with the last run said, guards,
//!   audit and undo kept, unknown orders refused (same databases as `export`).
//! * `publish`      — `publish`, `reopen` (dry run, apply, undo, audit, races, a killed
//!   connection), `explain`, and gen → load → export → run → reopen → consumer → next night,
//!   against SQLite (always) and MariaDB/PostgreSQL (same variables).
//! * `reliability`  — docs/RELIABILITY.md: kill -9 anywhere, concurrent writers, failing
//!   storage, mutated Parquet, hostile SQL, a canary password; prints its counts.
//! * `report`       — `report` and nightly's `report.html`, opened by headless chromium (when
//!   installed; `.ci/run` installs it): every summary.json value in the DOM, charts drawn,
//!   a non-blank screenshot, nothing fetched from a URL.
//! * `s3`           — gen → run → verify through an S3 bucket (when
//!   `EFFECT_RECON_TEST_S3_BUCKET` is set; `.ci/run` starts a local S3 server).
//! * `scaling`      — a pass over one order_id range keeps all 16 partitions busy; passes
//!   only when memory requires them.
//! * `simulate`     — consumer policies over one world: same world per seed, `skip` = `gen`
//!   byte for byte, costs that add up, the incident revoked, every policy's net exact.
//! * `slt`          — sqllogictest files of `tests/slt/` against the exact text of `sql/`.
//! * `snapshots`    — reviewed insta snapshots of what the binary prints (filtered).
//! * `watch`        — `watch` on a database written between cycles (SQLite always, MariaDB
//!   with its variable): each planted finding alerted once, quiet cycles silent, a killed
//!   cycle resumed, nothing of the day NEW again at night; the loop stops on SIGTERM.
//! * `zh_docs`      — the Chinese pages of docs/zh/ carry the English pages' figures,
//!   numeral for numeral (the answer page; the README's first screen).

mod advise;
mod answer_figures;
mod bad_input;
mod cli;
#[cfg(feature = "ballista")]
mod cluster;
mod common;
mod databases;
mod differential;
mod export;
mod export_chunking;
mod fixture;
mod gen;
mod handler;
mod incremental;
mod lifecycle;
mod links;
mod messages;
mod nights;
mod notify;
mod order_now;
mod publish;
mod reliability;
mod report;
mod s3;
mod scaling;
mod simulate;
mod slt;
mod snapshots;
mod watch;
mod zh_docs;
