//! A reference effect handler, proven under concurrency on a real database: MariaDB/MySQL
//! and PostgreSQL when `EFFECT_RECON_TEST_MYSQL_URL` / `EFFECT_RECON_TEST_PG_URL` are set
//! (unset: the test prints `SKIPPED ... NOT run` and returns). docs/OBLIGATIONS.md explains
//! the protocol and quotes the `handler:` lines printed here.
//!
//! **The team's setup**, in memory around the real database. `order-event` has 24
//! partitions; an order's events go to the partition of its id's hash, in order. A consumer
//! group of 8 tokio tasks polls up to 3 messages of one partition, handles them, then
//! commits. Eager rebalances (every 150 handled messages, and whenever a consumer is evicted
//! or rejoins) revoke every partition: a batch handled but not yet committed is redelivered
//! to the new owner (at-least-once). An order service (4 tasks) changes an order's status
//! in the database, then publishes the event. It changes an order again only once the
//! consumers have committed its previous event: the consumer lag is shorter than the time
//! between two changes, the 90 % of the question in which the conditional skip works.
//!
//! **Zombies**: a consumer stalls holding a message, is evicted, and completes the message
//! late. Which message, and when it wakes, is decided by the seed and by message counts,
//! never by sleeps:
//! * *commit-ahead* (the incident): the message's offset was committed before it was
//!   processed (auto-commit with a worker pool), so the new owner never sees it. The zombie
//!   wakes once the order's NEXT event has been handled and committed.
//! * *redelivered*: nothing was committed, so the new owner handles the message again. The
//!   zombie wakes when the new owner is past its first database step; the new owner waits
//!   for the zombie's own first step, then both go on: a real race, every time.
//!
//! Planted in every load, whatever the seed: order 8821's ORDER_PAID, commit-ahead (the
//! incident); 8822's, redelivered, stalled before the provider call; 8823's, redelivered,
//! stalled after the call. The provider also fails the first call of a seeded 7 % of keys:
//! 4 % refused (nothing done), 3 % done but the response lost.
//!
//! **The same load through two handlers:**
//! * the *naive handler* of the question: `SELECT ... FOR UPDATE` on the ledger row; the
//!   order's current status; equal to the message's → call the provider inside the
//!   transaction, INSERT DONE; else INSERT SKIPPED. The test shows it losing effects (a
//!   SKIPPED written after a reorder) and granting twice on both databases, and
//!   deadlocking on MariaDB (1213: two gap locks, two inserts).
//! * the *obligation handler* (sql/schema/obligation.*.sql): the status change writes or
//!   voids the obligations in its own transaction; a message only wakes a worker, which
//!   claims with a lease and a fencing generation, calls the provider OUTSIDE any
//!   transaction with the business key `{effect}:{order_id}`, and finishes with an UPDATE
//!   guarded on (claimed_by, generation). A sweeper claims what no message did. Run three
//!   times: with a provider that deduplicates on the key (every fault) → 0 lost, 0 double,
//!   0 effects in force on voided orders, 0 failures; without provider dedup but only
//!   faults that strike before the provider acts → the fencing alone keeps doubles at 0;
//!   without dedup and with every fault → doubles > 0 (a lost response, a zombie stalled
//!   after its call): the business key is what covers those.
//!
//! **The nightly run over the result.** After each load, `effect-recon nightly` exports
//! what the handler left (the consumers' `idempotent_msg`, kept by the obligation handler
//! only to deduplicate deliveries; the order service's `order_status_history`, written in
//! its status transaction; the provider's grants, a reversed one read REVERSED) and runs the
//! default rules at a 1 s grace. Its BREAK findings must be exactly what DESIGN §5/§10.1
//! make of the rows, judged here in plain Rust, and its missing effects exactly the effects
//! the handler lost (shown failing once by reading reversed grants as SUCCEEDED).
//!
//! Before the load, `protocol_steps` replays the protocol on each database without the
//! group, every outcome exact: a zombie fenced before its call, a zombie fenced at its
//! finish after its call, a void while claimed, a late PAID after the tombstone, a grant
//! refused after the reversal.
//!
//! Leases use a logical clock, advanced by 31 s at every rebalance (an eviction means
//! `max.poll.interval.ms` has passed), so a lease expires exactly when a consumer was
//! evicted, never because the machine was slow. The counts of the obligation handler are
//! exact for every seed (all zero); the naive handler's are bounded below by the planted
//! faults. `EFFECT_RECON_SOAK=1` runs 4,000 orders instead of 400; `EFFECT_RECON_SOAK_SEED`
//! changes the seed (13).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sqlx::mysql::{MySqlDatabaseError, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::{Executor, Row as _};
use tokio::sync::{mpsc, oneshot, watch, RwLock, RwLockReadGuard};
use tokio::task::JoinSet;

use effect_recon::datafusion::arrow::array::AsArray;
use effect_recon::datafusion::arrow::compute::cast;
use effect_recon::datafusion::arrow::datatypes::DataType;
use effect_recon::vocabulary::Class;

use super::common::{command, read_output, repo, text};
use super::databases::{env_url, mysql_database, pg_schema, MYSQL_ENV, PG_ENV};
use super::reliability::{seed, soak};

const PARTITIONS: usize = 24;
const CONSUMERS: usize = 8;
/// Order-service tasks changing statuses concurrently.
const PRODUCERS: usize = 4;
/// Orders whose story is under way at once, over all producers.
const ACTIVE_ORDERS: usize = 48;
/// `max.poll.records`.
const POLL_MAX: usize = 3;
/// A scheduled rebalance (a broker's rolling restart) every this many handled messages.
const REBALANCE_EVERY: u64 = 150;
/// The lease of a claim, in seconds of the logical clock; a rebalance advances it by more.
const LEASE_S: i64 = 30;
/// The provider call's timeout: a worker calls only with at least this much lease left.
const CALL_TIMEOUT_S: i64 = 10;
/// Seeded zombies beyond this many consumers evicted at once are not triggered.
const MAX_EVICTED: usize = 2;
/// Deadlocks and lock-wait timeouts retried per statement or transaction before failing.
const MAX_TRIES: u32 = 30;
/// Share of eligible messages (PAID, SHIPPED, CANCELLED, REFUNDED) that make a zombie.
const ZOMBIE_RATE: f64 = 0.012;
const FIRST_ORDER: i64 = 8501;
/// The planted incident: ORDER_PAID committed ahead, handled after ORDER_SHIPPED.
const INCIDENT: i64 = 8821;
/// ORDER_PAID redelivered while its zombie completes it: stalled before the provider call.
const RACE: i64 = 8822;
/// The same, stalled after the provider call (before the finish).
const RACE_AFTER_CALL: i64 = 8823;
/// A happy order whose first points grant is made but its response lost.
const LOST_RESPONSE: i64 = 8824;

// ---------------------------------------------------------------- the order domain

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Created,
    Paid,
    Shipped,
    Delivered,
    Cancelled,
    Refunded,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Created => "CREATED",
            Status::Paid => "PAID",
            Status::Shipped => "SHIPPED",
            Status::Delivered => "DELIVERED",
            Status::Cancelled => "CANCELLED",
            Status::Refunded => "REFUNDED",
        }
    }

    fn event(self) -> &'static str {
        match self {
            Status::Created => "ORDER_CREATED",
            Status::Paid => "ORDER_PAID",
            Status::Shipped => "ORDER_SHIPPED",
            Status::Delivered => "ORDER_DELIVERED",
            Status::Cancelled => "ORDER_CANCELLED",
            Status::Refunded => "ORDER_REFUNDED",
        }
    }
}

/// A side effect, as in fixtures/rules.toml.
struct Effect {
    name: &'static str,
    due: Status,
    voids: &'static [Status],
    reverse_on_void: bool,
}

const EFFECTS: [Effect; 3] = [
    Effect {
        name: "points_grant",
        due: Status::Paid,
        voids: &[Status::Cancelled, Status::Refunded],
        reverse_on_void: true,
    },
    Effect {
        name: "wms_lock",
        due: Status::Paid,
        voids: &[Status::Cancelled, Status::Refunded],
        reverse_on_void: true,
    },
    Effect {
        name: "logistics_waybill",
        due: Status::Shipped,
        voids: &[Status::Cancelled],
        reverse_on_void: false,
    },
];

fn effect(name: &str) -> &'static Effect {
    EFFECTS.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("unknown effect {name}"))
}

/// The business idempotency key of an effect (docs/OUTPUTS.md, compensation_tasks).
fn business_key(effect: &Effect, order: i64) -> String {
    format!("{}:{order}", effect.name)
}

/// One status change of an order. `applies = false`: the order service records the event
/// (a payment callback after the cancellation) but the order keeps its status.
#[derive(Clone, Copy, Debug)]
struct Change {
    status: Status,
    applies: bool,
}

// ---------------------------------------------------------------- the load

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stall {
    BeforeCall,
    AfterCall,
}

#[derive(Clone, Copy, Debug)]
struct ZombiePlan {
    commit_ahead: bool,
    stall: Stall,
    planted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The provider refuses the call and does nothing.
    Refuse,
    /// The provider performs the effect, then the response is lost (a timeout).
    LoseResponse,
}

/// Everything the seed decides: stories, zombies, provider faults.
struct Load {
    seed: u64,
    orders: Vec<i64>,
    stories: Vec<Vec<Change>>,
    zombies: HashMap<String, ZombiePlan>,
    /// Business key → the fault of the first grant call for it.
    faults: HashMap<String, Fault>,
}

fn msg_id(order: i64, k: usize) -> String {
    format!("msg-{order}-{k}")
}

fn draw_load(seed: u64, orders: usize) -> Load {
    use Status::*;
    let happy = [Created, Paid, Shipped, Delivered];
    let mut load = Load {
        seed,
        orders: Vec::new(),
        stories: Vec::new(),
        zombies: HashMap::new(),
        faults: HashMap::new(),
    };
    for i in 0..orders {
        let order = FIRST_ORDER + i as i64;
        let mut rng =
            StdRng::seed_from_u64(seed ^ (order as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let planted = [INCIDENT, RACE, RACE_AFTER_CALL, LOST_RESPONSE].contains(&order);
        let statuses: &[Status] = match if planted { 0 } else { rng.gen_range(0..100) } {
            0..=59 => &happy,
            60..=71 => &[Created, Paid, Cancelled],
            72..=79 => &[Created, Paid, Shipped, Refunded],
            80..=91 => &[Created, Cancelled],
            _ => &[Created, Cancelled, Paid], // a late payment callback
        };
        let story: Vec<Change> = statuses
            .iter()
            .enumerate()
            .map(|(k, &status)| Change {
                status,
                applies: !(status == Paid && statuses[..k].contains(&Cancelled)),
            })
            .collect();
        for (k, change) in story.iter().enumerate() {
            if !planted
                && matches!(change.status, Paid | Shipped | Cancelled | Refunded)
                && rng.gen_bool(ZOMBIE_RATE)
            {
                let stall = if rng.gen_bool(0.5) { Stall::BeforeCall } else { Stall::AfterCall };
                let plan = ZombiePlan { commit_ahead: rng.gen_bool(0.5), stall, planted: false };
                load.zombies.insert(msg_id(order, k), plan);
            }
        }
        for effect in EFFECTS.iter().filter(|_| !planted) {
            let draw: f64 = rng.gen();
            let fault = match draw {
                d if d < 0.04 => Some(Fault::Refuse),
                d if d < 0.07 => Some(Fault::LoseResponse),
                _ => None,
            };
            if let Some(fault) = fault {
                load.faults.insert(business_key(effect, order), fault);
            }
        }
        load.orders.push(order);
        load.stories.push(story);
    }
    let planted = [
        (INCIDENT, true, Stall::BeforeCall),
        (RACE, false, Stall::BeforeCall),
        (RACE_AFTER_CALL, false, Stall::AfterCall),
    ];
    for (order, commit_ahead, stall) in planted {
        if load.orders.contains(&order) {
            load.zombies
                .insert(msg_id(order, 1), ZombiePlan { commit_ahead, stall, planted: true });
        }
    }
    if load.orders.contains(&LOST_RESPONSE) {
        load.faults.insert(business_key(&EFFECTS[0], LOST_RESPONSE), Fault::LoseResponse);
    }
    load
}

/// Who owes what: an (effect, order) is owed when the story reaches the due status and
/// never a void status; voided when it reaches a void status.
struct Truth {
    owed: BTreeSet<(String, i64)>,
    voided: BTreeSet<(String, i64)>,
}

fn truth(load: &Load) -> Truth {
    let mut truth = Truth { owed: BTreeSet::new(), voided: BTreeSet::new() };
    for (order, story) in load.orders.iter().zip(&load.stories) {
        for effect in &EFFECTS {
            let reached = story.iter().any(|c| c.status == effect.due);
            let voided = story.iter().any(|c| effect.voids.contains(&c.status));
            if voided {
                truth.voided.insert((effect.name.to_string(), *order));
            } else if reached {
                truth.owed.insert((effect.name.to_string(), *order));
            }
        }
    }
    truth
}

// ---------------------------------------------------------------- one API over both databases

/// A bound parameter.
#[derive(Clone, Debug)]
enum V {
    I(i64),
    S(String),
    T(DateTime<Utc>),
}

impl From<i64> for V {
    fn from(v: i64) -> V {
        V::I(v)
    }
}
impl From<&str> for V {
    fn from(v: &str) -> V {
        V::S(v.to_string())
    }
}
impl From<&String> for V {
    fn from(v: &String) -> V {
        V::S(v.clone())
    }
}
impl From<DateTime<Utc>> for V {
    fn from(v: DateTime<Utc>) -> V {
        V::T(v)
    }
}

macro_rules! vals {
    ($($x:expr),* $(,)?) => { &[$(V::from($x)),*] };
}

#[derive(Clone)]
enum Db {
    My(MySqlPool),
    Pg(PgPool),
}

enum Tx {
    My(sqlx::Transaction<'static, sqlx::MySql>),
    Pg(sqlx::Transaction<'static, sqlx::Postgres>),
}

enum Row {
    My(MySqlRow),
    Pg(PgRow),
}

impl Row {
    fn int(&self, i: usize) -> i64 {
        match self {
            Row::My(r) => r.try_get::<i64, _>(i).unwrap(),
            Row::Pg(r) => {
                r.try_get::<i64, _>(i).or_else(|_| r.try_get::<i32, _>(i).map(i64::from)).unwrap()
            }
        }
    }

    fn text(&self, i: usize) -> String {
        match self {
            Row::My(r) => r.try_get::<String, _>(i).unwrap(),
            Row::Pg(r) => r.try_get::<String, _>(i).unwrap(),
        }
    }
}

type MyQuery<'q> = sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>;
type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

fn my_query<'q>(sql: &'q str, vals: &[V]) -> MyQuery<'q> {
    vals.iter().fold(sqlx::query(sql), |q, v| match v {
        V::I(i) => q.bind(*i),
        V::S(s) => q.bind(s.clone()),
        V::T(t) => q.bind(t.naive_utc()),
    })
}

fn pg_query<'q>(sql: &'q str, vals: &[V]) -> PgQuery<'q> {
    vals.iter().fold(sqlx::query(sql), |q, v| match v {
        V::I(i) => q.bind(*i),
        V::S(s) => q.bind(s.clone()),
        V::T(t) => q.bind(*t),
    })
}

/// `?` placeholders as PostgreSQL's `$1, $2, ...` (no statement here has a `?` in a string).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

impl Db {
    async fn connect(url: &str, connections: u32) -> Db {
        if url.starts_with("mysql") {
            let pool = MySqlPoolOptions::new()
                .max_connections(connections)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute("SET SESSION innodb_lock_wait_timeout = 20").await?;
                        Ok(())
                    })
                })
                .connect(url)
                .await
                .unwrap();
            Db::My(pool)
        } else {
            Db::Pg(PgPoolOptions::new().max_connections(connections).connect(url).await.unwrap())
        }
    }

    fn is_mysql(&self) -> bool {
        matches!(self, Db::My(_))
    }

    /// The statement of this database's dialect.
    fn pick<'a>(&self, mysql: &'a str, postgres: &'a str) -> &'a str {
        if self.is_mysql() {
            mysql
        } else {
            postgres
        }
    }

    async fn exec(&self, sql: &str, vals: &[V]) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Db::My(pool) => my_query(sql, vals).execute(pool).await?.rows_affected(),
            Db::Pg(pool) => pg_query(&numbered(sql), vals).execute(pool).await?.rows_affected(),
        })
    }

    async fn rows(&self, sql: &str, vals: &[V]) -> Result<Vec<Row>, sqlx::Error> {
        Ok(match self {
            Db::My(pool) => {
                my_query(sql, vals).fetch_all(pool).await?.into_iter().map(Row::My).collect()
            }
            Db::Pg(pool) => pg_query(&numbered(sql), vals)
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(Row::Pg)
                .collect(),
        })
    }

    async fn begin(&self) -> Result<Tx, sqlx::Error> {
        Ok(match self {
            Db::My(pool) => Tx::My(pool.begin().await?),
            Db::Pg(pool) => Tx::Pg(pool.begin().await?),
        })
    }

    /// A script of several statements (DDL).
    async fn script(&self, text: &str) {
        match self {
            Db::My(pool) => sqlx::raw_sql(text).execute(pool).await.map(drop),
            Db::Pg(pool) => sqlx::raw_sql(text).execute(pool).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{e} in\n{text}"));
    }
}

impl Tx {
    async fn exec(&mut self, sql: &str, vals: &[V]) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Tx::My(tx) => my_query(sql, vals).execute(&mut **tx).await?.rows_affected(),
            Tx::Pg(tx) => pg_query(&numbered(sql), vals).execute(&mut **tx).await?.rows_affected(),
        })
    }

    async fn rows(&mut self, sql: &str, vals: &[V]) -> Result<Vec<Row>, sqlx::Error> {
        Ok(match self {
            Tx::My(tx) => {
                my_query(sql, vals).fetch_all(&mut **tx).await?.into_iter().map(Row::My).collect()
            }
            Tx::Pg(tx) => pg_query(&numbered(sql), vals)
                .fetch_all(&mut **tx)
                .await?
                .into_iter()
                .map(Row::Pg)
                .collect(),
        })
    }

    async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::My(tx) => tx.commit().await,
            Tx::Pg(tx) => tx.commit().await,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conflict {
    /// MySQL 1213, PostgreSQL 40P01 (or 40001).
    Deadlock,
    /// MySQL 1205, PostgreSQL 55P03.
    LockTimeout,
    /// MySQL 1062, PostgreSQL 23505.
    DuplicateKey,
}

fn conflict(e: &sqlx::Error) -> Option<Conflict> {
    let db = e.as_database_error()?;
    if let Some(mysql) = db.try_downcast_ref::<MySqlDatabaseError>() {
        return match mysql.number() {
            1213 => Some(Conflict::Deadlock),
            1205 => Some(Conflict::LockTimeout),
            1062 => Some(Conflict::DuplicateKey),
            _ => None,
        };
    }
    match db.code().as_deref() {
        Some("40P01" | "40001") => Some(Conflict::Deadlock),
        Some("55P03") => Some(Conflict::LockTimeout),
        Some("23505") => Some(Conflict::DuplicateKey),
        _ => None,
    }
}

/// Awaits `$e` (a `Result<T, sqlx::Error>` future, built again for every try) and retries it
/// after a deadlock or a lock-wait timeout, counting each; any other error, or more than
/// `MAX_TRIES` conflicts in a row, fails the test (a failure surfaced).
macro_rules! retried {
    ($world:expr, $what:expr, $e:expr) => {{
        let mut tries = 0;
        loop {
            match $e.await {
                Ok(value) => break value,
                Err(e) => {
                    tries += 1;
                    match conflict(&e) {
                        Some(c @ (Conflict::Deadlock | Conflict::LockTimeout))
                            if tries < MAX_TRIES =>
                        {
                            $world.counts.conflict(c)
                        }
                        _ => panic!("{}: {e} (try {tries})", $what),
                    }
                }
            }
        }
    }};
}

// ---------------------------------------------------------------- the statements

/// The orders table of the order service (test-only: the status the naive handler reads).
const ORDERS_MYSQL: &str = "CREATE TABLE orders (order_id BIGINT NOT NULL PRIMARY KEY, \
    status VARCHAR(32) NOT NULL, version INT NOT NULL) ENGINE = InnoDB";
const ORDERS_PG: &str =
    "CREATE TABLE orders (order_id bigint PRIMARY KEY, status text NOT NULL, version integer NOT NULL)";
const ORDER_CREATE: &str = "INSERT INTO orders (order_id, status, version) VALUES (?, ?, 1)";
const ORDER_CHANGE: &str = "UPDATE orders SET status = ?, version = version + 1 WHERE order_id = ?";
/// The status history the nightly run reads (sql/schema's table), in wall-clock time as the
/// provider's receipts are: the leases' logical clock would put every change of a
/// rebalance interval at one instant.
const HISTORY_INSERT: &str =
    "INSERT INTO order_status_history (order_id, status, changed_at) VALUES (?, ?, ?)";

/// The provider's own table: one row per grant (or per reversal tombstone). With dedup the
/// business key is UNIQUE and a grant or reversal of a key already there does nothing new.
fn provider_ddl(mysql: bool, dedup: bool) -> String {
    let unique = if dedup { "UNIQUE " } else { "" };
    if mysql {
        format!(
            "CREATE TABLE provider_receipt (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
             business_key VARCHAR(128) NOT NULL, effect VARCHAR(64) NOT NULL, \
             order_id BIGINT NOT NULL, request_key VARCHAR(128) NOT NULL, \
             caller VARCHAR(64) NOT NULL, receipt_id VARCHAR(64) NOT NULL, \
             granted_at DATETIME(6) NULL, reversed_at DATETIME(6) NULL, \
             {unique}KEY ix_provider_receipt_key (business_key)) ENGINE = InnoDB"
        )
    } else {
        format!(
            "CREATE TABLE provider_receipt (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
             business_key text NOT NULL, effect text NOT NULL, order_id bigint NOT NULL, \
             request_key text NOT NULL, caller text NOT NULL, receipt_id text NOT NULL, \
             granted_at timestamptz NULL, reversed_at timestamptz NULL); \
             CREATE {unique}INDEX ix_provider_receipt_key ON provider_receipt (business_key)"
        )
    }
}

const GRANT: &str = "INSERT INTO provider_receipt (business_key, effect, order_id, request_key, \
    caller, receipt_id, granted_at) VALUES (?, ?, ?, ?, ?, ?, CURRENT_TIMESTAMP(6))";
const GRANT_DEDUP_MYSQL: &str = "INSERT INTO provider_receipt (business_key, effect, order_id, \
    request_key, caller, receipt_id, granted_at) VALUES (?, ?, ?, ?, ?, ?, CURRENT_TIMESTAMP(6)) \
    ON DUPLICATE KEY UPDATE id = id";
const GRANT_DEDUP_PG: &str = "INSERT INTO provider_receipt (business_key, effect, order_id, \
    request_key, caller, receipt_id, granted_at) VALUES (?, ?, ?, ?, ?, ?, CURRENT_TIMESTAMP(6)) \
    ON CONFLICT (business_key) DO NOTHING";
const GRANTED_RECEIPT: &str =
    "SELECT receipt_id FROM provider_receipt WHERE business_key = ? AND granted_at IS NOT NULL";
const REVERSE: &str = "UPDATE provider_receipt SET reversed_at = CURRENT_TIMESTAMP(6) \
    WHERE business_key = ? AND granted_at IS NOT NULL AND reversed_at IS NULL";
/// With dedup a reversal of a key never granted leaves a tombstone: a grant arriving later
/// (an in-flight call) is refused.
const REVERSE_DEDUP_MYSQL: &str = "INSERT INTO provider_receipt (business_key, effect, order_id, \
    request_key, caller, receipt_id, reversed_at) VALUES (?, ?, ?, ?, ?, ?, CURRENT_TIMESTAMP(6)) \
    ON DUPLICATE KEY UPDATE reversed_at = COALESCE(reversed_at, CURRENT_TIMESTAMP(6))";
const REVERSE_DEDUP_PG: &str = "INSERT INTO provider_receipt (business_key, effect, order_id, \
    request_key, caller, receipt_id, reversed_at) VALUES (?, ?, ?, ?, ?, ?, CURRENT_TIMESTAMP(6)) \
    ON CONFLICT (business_key) DO UPDATE \
    SET reversed_at = COALESCE(provider_receipt.reversed_at, CURRENT_TIMESTAMP(6))";

// The obligation handler's delivery record: a plain INSERT, a duplicate ignored.
const DELIVERY_MYSQL: &str = "INSERT IGNORE INTO idempotent_msg (msg_id, order_id, event_type, \
    expected_status, action, topic, kafka_partition, kafka_offset, consumer_id, decided_at) \
    VALUES (?, ?, ?, ?, 'DONE', 'order-event', ?, ?, ?, ?)";
const DELIVERY_PG: &str = "INSERT INTO idempotent_msg (msg_id, order_id, event_type, \
    expected_status, action, topic, kafka_partition, kafka_offset, consumer_id, decided_at) \
    VALUES (?, ?, ?, ?, 'DONE', 'order-event', ?, ?, ?, ?) ON CONFLICT (msg_id) DO NOTHING";

// The naive handler's statements (the ledger is sql/schema/{mysql,postgres}.sql's).
const LEDGER_LOCK: &str = "SELECT action FROM idempotent_msg WHERE msg_id = ? FOR UPDATE";
const ORDER_STATUS: &str = "SELECT status FROM orders WHERE order_id = ?";
const LEDGER_INSERT: &str = "INSERT INTO idempotent_msg (msg_id, order_id, event_type, \
    expected_status, action, observed_status, topic, kafka_partition, kafka_offset, \
    consumer_id, decided_at) VALUES (?, ?, ?, ?, ?, ?, 'order-event', ?, ?, ?, ?)";

// The obligation protocol: sql/schema/obligation.*.sql, steps 1 to 5, with the logical clock
// bound where the files say NOW(6) / now().
const DUE_MYSQL: &str = "INSERT INTO effect_obligation (order_id, effect, state, business_key, \
    due_at, next_attempt_at) VALUES (?, ?, 'OWED', ?, ?, ?) ON DUPLICATE KEY UPDATE order_id = order_id";
const DUE_PG: &str = "INSERT INTO effect_obligation (order_id, effect, state, business_key, \
    due_at, next_attempt_at) VALUES (?, ?, 'OWED', ?, ?, ?) ON CONFLICT (order_id, effect) DO NOTHING";
const TOMBSTONE_MYSQL: &str = "INSERT INTO effect_obligation (order_id, effect, state, \
    business_key, voided_at) VALUES (?, ?, 'VOIDED', ?, ?) ON DUPLICATE KEY UPDATE order_id = order_id";
const TOMBSTONE_PG: &str = "INSERT INTO effect_obligation (order_id, effect, state, \
    business_key, voided_at) VALUES (?, ?, 'VOIDED', ?, ?) ON CONFLICT (order_id, effect) DO NOTHING";
const VOID_NEVER_CLAIMED: &str = "UPDATE effect_obligation SET state = 'VOIDED', \
    generation = generation + 1, lease_until = NULL, next_attempt_at = NULL, voided_at = ? \
    WHERE order_id = ? AND effect = ? AND state = 'OWED' AND attempts = 0";
const VOID_TO_REVERSE: &str = "UPDATE effect_obligation SET state = 'REVERSE_OWED', \
    generation = generation + 1, lease_until = NULL, next_attempt_at = ?, voided_at = ? \
    WHERE order_id = ? AND effect = ? \
    AND (state IN ('CLAIMED', 'DONE', 'FAILED') OR (state = 'OWED' AND attempts > 0))";
const VOID_NOT_REVERSED: &str = "UPDATE effect_obligation SET state = 'VOIDED', \
    generation = generation + 1, lease_until = NULL, next_attempt_at = NULL, voided_at = ? \
    WHERE order_id = ? AND effect = ? AND state IN ('OWED', 'CLAIMED', 'FAILED')";
const CANDIDATES: &str = "SELECT effect, state, generation FROM effect_obligation \
    WHERE order_id = ? AND next_attempt_at <= ?";
const SWEEP: &str = "SELECT order_id, effect, state, generation FROM effect_obligation \
    WHERE next_attempt_at <= ? ORDER BY next_attempt_at LIMIT 100";
const CLAIM: &str = "UPDATE effect_obligation SET state = ?, claimed_by = ?, \
    generation = generation + 1, attempts = attempts + 1, lease_until = ?, next_attempt_at = ? \
    WHERE order_id = ? AND effect = ? AND generation = ? AND next_attempt_at <= ?";
const FENCE: &str = "SELECT generation FROM effect_obligation WHERE order_id = ? AND effect = ? \
    AND claimed_by = ? AND generation = ? AND lease_until > ?";
const FINISH_DONE: &str = "UPDATE effect_obligation SET state = 'DONE', receipt_id = ?, \
    lease_until = NULL, next_attempt_at = NULL, done_at = ? \
    WHERE order_id = ? AND effect = ? AND claimed_by = ? AND generation = ?";
const FINISH_REVERSED: &str = "UPDATE effect_obligation SET state = 'REVERSED', \
    reversal_receipt_id = ?, lease_until = NULL, next_attempt_at = NULL, done_at = ? \
    WHERE order_id = ? AND effect = ? AND claimed_by = ? AND generation = ?";
const RELEASE: &str = "UPDATE effect_obligation SET state = ?, lease_until = NULL, \
    next_attempt_at = ?, last_error = ? \
    WHERE order_id = ? AND effect = ? AND claimed_by = ? AND generation = ?";

// ---------------------------------------------------------------- the world of one run

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handler {
    Naive,
    Obligation {
        /// The provider deduplicates on the business key.
        dedup: bool,
        /// Faults that strike after the provider acted (a lost response, a zombie stalled
        /// after its call) stay as drawn; false moves them before the provider acts.
        faults_after_provider: bool,
    },
}

impl Handler {
    fn label(self) -> &'static str {
        match self {
            Handler::Naive => "naive handler (the question's)",
            Handler::Obligation { dedup: true, .. } => "obligation handler",
            Handler::Obligation { faults_after_provider: false, .. } => {
                "obligation handler, provider WITHOUT dedup, faults before the provider acts"
            }
            Handler::Obligation { .. } => "obligation handler, provider WITHOUT dedup, all faults",
        }
    }

    fn dedup(self) -> bool {
        matches!(self, Handler::Obligation { dedup: true, .. })
    }

    fn faults_after_provider(self) -> bool {
        !matches!(self, Handler::Obligation { faults_after_provider: false, .. })
    }
}

#[derive(Clone, Debug)]
struct Msg {
    id: String,
    order: i64,
    /// Index of the order in the load.
    ix: usize,
    /// Index of the change in the order's story.
    k: usize,
    status: Status,
    partition: usize,
    offset: usize,
}

fn partition_of(order: i64) -> usize {
    ((order as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % PARTITIONS
}

struct Group {
    owner: Vec<Option<usize>>,
    epoch: Vec<u64>,
    evicted: BTreeSet<usize>,
    rng: StdRng,
}

impl Group {
    /// An eager rebalance: every partition revoked, then assigned over the members.
    fn reassign(&mut self) {
        let mut members: Vec<usize> =
            (0..CONSUMERS).filter(|c| !self.evicted.contains(c)).collect();
        members.shuffle(&mut self.rng);
        for p in 0..PARTITIONS {
            self.owner[p] = (!members.is_empty()).then(|| members[p % members.len()]);
            self.epoch[p] += 1;
        }
    }
}

#[derive(Default)]
struct Counts {
    handled: AtomicU64,
    redelivered: AtomicU64,
    rebalances: AtomicU64,
    zombies: AtomicU64,
    deadlocks: AtomicU64,
    lock_timeouts: AtomicU64,
    duplicate_keys: AtomicU64,
    failures: AtomicU64,
    fenced_before_call: AtomicU64,
    fenced_at_finish: AtomicU64,
    /// Claims a zombie held across its stall, those it held before calling the provider,
    /// and those its late steps found fenced.
    zombie_claims: AtomicU64,
    zombie_claims_uncalled: AtomicU64,
    zombie_claims_fenced: AtomicU64,
    done_by_message: AtomicU64,
    done_by_sweeper: AtomicU64,
    provider_calls: AtomicU64,
    provider_dedup_hits: AtomicU64,
    provider_refused: AtomicU64,
    provider_failed: AtomicU64,
}

impl Counts {
    fn conflict(&self, c: Conflict) {
        match c {
            Conflict::Deadlock => &self.deadlocks,
            Conflict::LockTimeout => &self.lock_timeouts,
            Conflict::DuplicateKey => &self.duplicate_keys,
        }
        .fetch_add(1, SeqCst);
    }
}

enum Request {
    Rebalance,
    Stop,
}

struct World {
    db: Db,
    provider: Db,
    load: Arc<Load>,
    handler: Handler,
    logs: Vec<Mutex<Vec<Msg>>>,
    committed: Vec<AtomicUsize>,
    /// Per order: how many of its messages are committed (a prefix).
    order_committed: Vec<AtomicUsize>,
    group: Mutex<Group>,
    /// Handling holds it shared; a rebalance takes it exclusively (the group's barrier).
    barrier: RwLock<()>,
    progress: watch::Sender<u64>,
    /// Seconds of the logical clock since `epoch_base()`.
    clock: AtomicI64,
    requests: mpsc::UnboundedSender<Request>,
    /// Redelivered zombies waiting for the new owner: msg_id → where to send the ack channel.
    rendezvous: Mutex<HashMap<String, oneshot::Sender<oneshot::Sender<()>>>>,
    triggered: Mutex<HashSet<String>>,
    seen: Mutex<HashSet<String>>,
    first_grant: Mutex<HashSet<String>>,
    receipts: AtomicU64,
    ended: AtomicBool,
    producers_done: AtomicUsize,
    counts: Counts,
    latencies: Mutex<Vec<Duration>>,
}

fn epoch_base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap()
}

impl World {
    fn now(&self) -> DateTime<Utc> {
        epoch_base() + chrono::Duration::seconds(self.clock.load(SeqCst))
    }

    fn later(&self, seconds: i64) -> DateTime<Utc> {
        self.now() + chrono::Duration::seconds(seconds)
    }

    fn bump(&self) {
        self.progress.send_modify(|v| *v += 1);
    }

    fn request(&self, request: Request) {
        let _ = self.requests.send(request);
    }

    async fn wait_until(&self, done: impl Fn() -> bool) {
        let mut progress = self.progress.subscribe();
        loop {
            progress.borrow_and_update();
            if done() {
                return;
            }
            let _ = progress.changed().await;
        }
    }

    fn ended(&self) -> bool {
        self.ended.load(SeqCst)
    }

    fn publish(&self, ix: usize, k: usize, status: Status) {
        let order = self.load.orders[ix];
        let partition = partition_of(order);
        let mut log = self.logs[partition].lock().unwrap();
        let offset = log.len();
        log.push(Msg { id: msg_id(order, k), order, ix, k, status, partition, offset });
        drop(log);
        self.bump();
    }

    /// `commitSync(position)`: refused (CommitFailedException) once the partition was
    /// revoked; the batch is then redelivered to the new owner.
    fn commit(&self, me: usize, p: usize, epoch: u64, position: usize) -> bool {
        let group = self.group.lock().unwrap();
        if group.owner[p] != Some(me) || group.epoch[p] != epoch {
            return false;
        }
        let old = self.committed[p].load(SeqCst);
        if position > old {
            self.committed[p].store(position, SeqCst);
            let log = self.logs[p].lock().unwrap();
            for m in &log[old..position] {
                self.order_committed[m.ix].fetch_max(m.k + 1, SeqCst);
            }
        }
        drop(group);
        self.bump();
        true
    }

    fn owns(&self, me: usize, p: usize, epoch: u64) -> bool {
        let group = self.group.lock().unwrap();
        group.owner[p] == Some(me) && group.epoch[p] == epoch
    }

    /// The consumer's partitions after a rebalance: a new epoch restarts at the committed offset.
    fn sync(&self, me: usize, held: &mut BTreeMap<usize, (u64, usize)>) {
        let group = self.group.lock().unwrap();
        held.retain(|p, (epoch, _)| group.owner[*p] == Some(me) && group.epoch[*p] == *epoch);
        for p in 0..PARTITIONS {
            if group.owner[p] == Some(me) && !held.contains_key(&p) {
                held.insert(p, (group.epoch[p], self.committed[p].load(SeqCst)));
            }
        }
    }

    /// One `poll()`: up to `POLL_MAX` messages of the next partition that has some.
    fn poll(
        &self,
        held: &BTreeMap<usize, (u64, usize)>,
        rr: &mut usize,
    ) -> Option<(usize, u64, Vec<Msg>)> {
        for i in 0..PARTITIONS {
            let p = (*rr + i) % PARTITIONS;
            let Some(&(epoch, position)) = held.get(&p) else { continue };
            let log = self.logs[p].lock().unwrap();
            if position < log.len() {
                *rr = p + 1;
                let end = (position + POLL_MAX).min(log.len());
                return Some((p, epoch, log[position..end].to_vec()));
            }
        }
        None
    }

    /// The zombie plan of a message, the first time it is fetched (a seeded one only while
    /// few consumers are evicted, so the group always keeps members).
    fn zombie_plan(&self, msg: &Msg) -> Option<ZombiePlan> {
        let plan = *self.load.zombies.get(&msg.id)?;
        if !self.triggered.lock().unwrap().insert(msg.id.clone()) {
            return None;
        }
        if !plan.planted && self.group.lock().unwrap().evicted.len() >= MAX_EVICTED {
            return None;
        }
        Some(plan)
    }

    fn stall(&self, plan: ZombiePlan) -> Stall {
        if self.handler.faults_after_provider() {
            plan.stall
        } else {
            Stall::BeforeCall
        }
    }

    /// What a stuck run looks like: uncommitted partitions, evicted consumers, waiting zombies.
    fn state(&self) -> String {
        let behind: Vec<String> = (0..PARTITIONS)
            .filter_map(|p| {
                let (committed, len) =
                    (self.committed[p].load(SeqCst), self.logs[p].lock().unwrap().len());
                (committed < len).then(|| format!("p{p} {committed}/{len}"))
            })
            .collect();
        let group = self.group.lock().unwrap();
        let waiting: Vec<String> = self.rendezvous.lock().unwrap().keys().cloned().collect();
        format!(
            "producers done {}/{PRODUCERS}; behind: {behind:?}; owners {:?}; evicted {:?}; \
             zombies waiting for a redelivery {waiting:?}",
            self.producers_done.load(SeqCst),
            group.owner,
            group.evicted
        )
    }

    fn handled(&self, msg: &Msg) {
        if !self.seen.lock().unwrap().insert(msg.id.clone()) {
            self.counts.redelivered.fetch_add(1, SeqCst);
        }
        if (self.counts.handled.fetch_add(1, SeqCst) + 1).is_multiple_of(REBALANCE_EVERY) {
            self.request(Request::Rebalance);
        }
    }
}

/// What a handler does at its first database step: a live handler of a message a zombie
/// still holds wakes the zombie and waits for the zombie's own first step; the zombie
/// acknowledges after its step. So both are inside the same window, every time.
enum Role {
    Live,
    Zombie(Option<oneshot::Sender<()>>),
}

impl Role {
    async fn first_step_done(&mut self, world: &World, msg: &Msg) {
        match self {
            Role::Live => {
                let zombie = world.rendezvous.lock().unwrap().remove(&msg.id);
                if let Some(zombie) = zombie {
                    let (ack, acked) = oneshot::channel();
                    if zombie.send(ack).is_ok() {
                        let _ = acked.await;
                    }
                }
            }
            Role::Zombie(ack) => {
                if let Some(ack) = ack.take() {
                    let _ = ack.send(());
                }
            }
        }
    }
}

// ---------------------------------------------------------------- the provider

/// The outcome of one provider call.
enum Call {
    Done(String),
    Failed(String),
}

/// One provider call (a grant, or a reversal) of `effect` for `order`, sent with
/// `request_key`: the provider's own dedup (when the run has it) is on the business key.
async fn provider_call(
    world: &World,
    effect: &'static Effect,
    order: i64,
    reverse: bool,
    request_key: &str,
    caller: &str,
) -> Call {
    let counts = &world.counts;
    counts.provider_calls.fetch_add(1, SeqCst);
    let key = business_key(effect, order);
    let receipt = format!("rcpt-{}", world.receipts.fetch_add(1, SeqCst));
    let db = &world.provider;
    let dedup = world.handler.dedup();
    let row = vals![&key, effect.name, order, request_key, caller, &receipt];
    if reverse {
        if dedup {
            let sql = db.pick(REVERSE_DEDUP_MYSQL, REVERSE_DEDUP_PG);
            retried!(world, "provider reverse", db.exec(sql, row));
        } else {
            retried!(world, "provider reverse", db.exec(REVERSE, vals![&key]));
        }
        return Call::Done(receipt);
    }
    let first = world.first_grant.lock().unwrap().insert(key.clone());
    let fault = first.then(|| world.load.faults.get(&key).copied()).flatten().map(|f| {
        if world.handler.faults_after_provider() {
            f
        } else {
            Fault::Refuse
        }
    });
    if fault == Some(Fault::Refuse) {
        counts.provider_failed.fetch_add(1, SeqCst);
        return Call::Failed("503 from the provider: nothing done".into());
    }
    let receipt = if dedup {
        // Which receipt the key has now tells what happened (not the affected-row count:
        // sqlx sets CLIENT_FOUND_ROWS, so a no-op ON DUPLICATE KEY UPDATE reports 1 row).
        let sql = db.pick(GRANT_DEDUP_MYSQL, GRANT_DEDUP_PG);
        retried!(world, "provider grant", db.exec(sql, row));
        let granted = retried!(world, "provider read", db.rows(GRANTED_RECEIPT, vals![&key]));
        match granted.first().map(|r| r.text(0)) {
            Some(existing) if existing == receipt => receipt,
            Some(existing) => {
                counts.provider_dedup_hits.fetch_add(1, SeqCst);
                existing
            }
            None => {
                counts.provider_refused.fetch_add(1, SeqCst);
                return Call::Failed("refused: the key was reversed before any grant".into());
            }
        }
    } else {
        retried!(world, "provider grant", db.exec(GRANT, row));
        receipt
    };
    if fault == Some(Fault::LoseResponse) {
        counts.provider_failed.fetch_add(1, SeqCst);
        return Call::Failed("timeout: the response was lost (the grant was made)".into());
    }
    Call::Done(receipt)
}

// ---------------------------------------------------------------- the naive handler

enum NaiveError {
    Db(sqlx::Error),
    /// The provider failed the call (and may have acted): roll back, handle again.
    Provider,
}

impl From<sqlx::Error> for NaiveError {
    fn from(e: sqlx::Error) -> NaiveError {
        NaiveError::Db(e)
    }
}

/// The effects an event performs when the status matches, and whether each reverses.
fn actions(status: Status) -> Vec<(&'static Effect, bool)> {
    EFFECTS
        .iter()
        .filter_map(|e| {
            if e.due == status {
                Some((e, false))
            } else if e.reverse_on_void && e.voids.contains(&status) {
                Some((e, true))
            } else {
                None
            }
        })
        .collect()
}

/// The question's handler, with the question's attempt of `SELECT ... FOR UPDATE` on the
/// ledger row, retried as its consumer would: a deadlock, a duplicate key or a failed
/// provider call rolls back and handles the message again (at-least-once).
async fn naive(world: &World, me: usize, msg: &Msg, role: &mut Role) {
    for _ in 0..MAX_TRIES {
        match naive_once(world, me, msg, role).await {
            Ok(()) => return,
            Err(NaiveError::Provider) => {}
            Err(NaiveError::Db(e)) => match conflict(&e) {
                Some(c) => world.counts.conflict(c),
                None => panic!("naive handler, {}: {e}", msg.id),
            },
        }
    }
    // Given up: the consumer logs it and commits the offset anyway.
    world.counts.failures.fetch_add(1, SeqCst);
}

async fn naive_once(
    world: &World,
    me: usize,
    msg: &Msg,
    role: &mut Role,
) -> Result<(), NaiveError> {
    let mut tx = world.db.begin().await?;
    // MySQL/MariaDB under REPEATABLE READ: the first time a message is seen its ledger row
    // does not exist, and this locking read takes a GAP lock where the row would go. Gap
    // locks are compatible, so a redelivery and a zombie (or two messages whose msg_ids fall
    // in one gap) both get one; their INSERTs below then each wait for the other's gap lock:
    // a deadlock (1213), one of them rolled back. On PostgreSQL it locks nothing at all.
    let seen = tx.rows(LEDGER_LOCK, vals![&msg.id]).await?;
    role.first_step_done(world, msg).await;
    if !seen.is_empty() {
        tx.commit().await?;
        return Ok(());
    }
    let observed = tx.rows(ORDER_STATUS, vals![msg.order]).await?[0].text(0);
    let action = if observed == msg.status.as_str() {
        // The provider is called INSIDE the transaction, holding its locks; a rollback
        // after this (the deadlock above, the duplicate key on PostgreSQL) cannot undo the
        // call, and the retry calls it again: a double grant.
        for (effect, reverse) in actions(msg.status) {
            let caller = format!("consumer-{me}");
            if let Call::Failed(_) =
                provider_call(world, effect, msg.order, reverse, &msg.id, &caller).await
            {
                return Err(NaiveError::Provider);
            }
        }
        "DONE"
    } else {
        // The skip the question is about: judged on the CURRENT status, written for good.
        "SKIPPED"
    };
    let row = vals![
        &msg.id,
        msg.order,
        msg.status.event(),
        msg.status.as_str(),
        action,
        &observed,
        msg.partition as i64,
        msg.offset as i64,
        &format!("consumer-{me}"),
        Utc::now(),
    ];
    tx.exec(LEDGER_INSERT, row).await?;
    tx.commit().await?;
    Ok(())
}

// ---------------------------------------------------------------- the obligation handler
//
// What it does differently on MySQL 8.0 / MariaDB (REPEATABLE READ, the default):
// * It never locks a row that may not exist. The naive handler's `SELECT ... FOR UPDATE` of
//   a missing ledger row takes a gap lock, and two of them deadlock on their INSERTs (1213).
//   Here every UPDATE names an existing row by its full primary key: a record lock only.
// * A row that may not exist yet is claimed by INSERT: the status change inserts the
//   obligation, and a duplicate (1062, here `ON DUPLICATE KEY UPDATE` on the primary key,
//   an exclusive record lock) means "already there": a tombstone wins. A consumer ledger
//   would do the same: `INSERT ... (msg_id, 'PROCESSING')` on its own, 1062 = "claimed by
//   someone else", then read the row without FOR UPDATE.
// * No network call inside a transaction: the claim is one autocommit UPDATE, the provider
//   call runs with no connection checked out, the finish is one more UPDATE. The naive
//   handler calls inside its transaction, so a rollback (deadlock, duplicate key) cannot
//   undo the call, and the retry calls again.

/// A claim this worker holds: the row's generation after its claim is the fencing token.
struct Claim {
    order: i64,
    effect: &'static Effect,
    reverse: bool,
    generation: i64,
    worker: String,
}

/// Step 3 for one row: compare-and-set on the generation read; `None` when someone else
/// claimed it first (or a void came in between).
async fn claim_one(
    world: &World,
    worker: &str,
    order: i64,
    row: (&str, &str, i64),
) -> Option<Claim> {
    let (effect_name, state, generation) = row;
    let reverse = matches!(state, "REVERSE_OWED" | "REVERSING");
    let new_state = if reverse { "REVERSING" } else { "CLAIMED" };
    let (now, lease) = (world.now(), world.later(LEASE_S));
    let claimed = retried!(
        world,
        "claim",
        world.db.exec(
            CLAIM,
            vals![new_state, worker, lease, lease, order, effect_name, generation, now]
        )
    );
    (claimed == 1).then(|| Claim {
        order,
        effect: effect(effect_name),
        reverse,
        generation: generation + 1,
        worker: worker.to_string(),
    })
}

/// Step 3 on a message: claim every row of the order that a worker may take now.
async fn claim_order(world: &World, worker: &str, order: i64) -> Vec<Claim> {
    let now = world.now();
    let rows = retried!(world, "candidates", world.db.rows(CANDIDATES, vals![order, now]));
    let mut claims = Vec::new();
    for row in rows {
        let (effect_name, state) = (row.text(0), row.text(1));
        if let Some(claim) =
            claim_one(world, worker, order, (&effect_name, &state, row.int(2))).await
        {
            claims.push(claim);
        }
    }
    claims
}

/// Step 4: the fence, then the provider call, outside any transaction (no connection of
/// the worker is even checked out while it runs). `None`: fenced, nothing called.
async fn fence_and_call(world: &World, claim: &Claim) -> Option<Call> {
    let must_last = world.later(CALL_TIMEOUT_S);
    let vals = vals![claim.order, claim.effect.name, &claim.worker, claim.generation, must_last];
    if retried!(world, "fence", world.db.rows(FENCE, vals)).is_empty() {
        world.counts.fenced_before_call.fetch_add(1, SeqCst);
        return None;
    }
    let key = business_key(claim.effect, claim.order);
    let request_key = if claim.reverse { format!("{key}:reverse") } else { key };
    let call =
        provider_call(world, claim.effect, claim.order, claim.reverse, &request_key, &claim.worker)
            .await;
    Some(call)
}

/// Step 5: the guarded finish (or the guarded release after a failed call); false when
/// fenced (0 rows).
async fn finish(world: &World, claim: &Claim, call: Call) -> bool {
    let (order, effect, worker, generation) =
        (claim.order, claim.effect.name, &claim.worker, claim.generation);
    let now = world.now();
    let changed = match &call {
        Call::Done(receipt) => {
            let sql = if claim.reverse { FINISH_REVERSED } else { FINISH_DONE };
            let vals = vals![receipt, now, order, effect, worker, generation];
            retried!(world, "finish", world.db.exec(sql, vals))
        }
        Call::Failed(error) => {
            let back = if claim.reverse { "REVERSE_OWED" } else { "OWED" };
            let vals =
                vals![back, world.later(1), error.as_str(), order, effect, worker, generation];
            retried!(world, "release", world.db.exec(RELEASE, vals))
        }
    };
    if changed == 0 {
        world.counts.fenced_at_finish.fetch_add(1, SeqCst);
    } else if matches!(call, Call::Done(_)) {
        let by = if worker == "sweeper" {
            &world.counts.done_by_sweeper
        } else {
            &world.counts.done_by_message
        };
        by.fetch_add(1, SeqCst);
    }
    changed > 0
}

/// Steps 4 and 5; false when fenced (before the call or at the finish).
async fn perform(world: &World, claim: &Claim) -> bool {
    match fence_and_call(world, claim).await {
        Some(call) => finish(world, claim, call).await,
        None => false,
    }
}

/// The sweeper: claims rows due since before `horizon` that no message worked, one page at
/// a time (the claim query of `ix_effect_obligation_next`).
async fn sweep(world: &World, horizon: DateTime<Utc>) {
    loop {
        let rows = retried!(world, "sweep", world.db.rows(SWEEP, vals![horizon]));
        let mut claimed = 0;
        for row in &rows {
            let (order, effect_name, state) = (row.int(0), row.text(1), row.text(2));
            let candidate = (effect_name.as_str(), state.as_str(), row.int(3));
            if let Some(claim) = claim_one(world, "sweeper", order, candidate).await {
                claimed += 1;
                perform(world, &claim).await;
            }
        }
        if claimed == 0 {
            return;
        }
    }
}

/// Handles one message, live.
async fn handle(world: &World, me: usize, msg: &Msg) {
    let mut role = Role::Live;
    match world.handler {
        Handler::Naive => naive(world, me, msg, &mut role).await,
        Handler::Obligation { .. } => {
            // No status comparison, no skip: the message only says "this order may have
            // work". Every row of the order that is owed now gets done.
            let claims = claim_order(world, &format!("consumer-{me}"), msg.order).await;
            role.first_step_done(world, msg).await;
            for claim in &claims {
                perform(world, claim).await;
            }
            record_delivery(world, me, msg).await;
        }
    }
}

/// The obligation handler's consumers keep `idempotent_msg` only to deduplicate
/// deliveries: one DONE row per message, claimed by INSERT on its own (a duplicate, 1062 /
/// 23505, is a redelivery: nothing to do), never a verdict on the order's status.
async fn record_delivery(world: &World, me: usize, msg: &Msg) {
    let sql = world.db.pick(DELIVERY_MYSQL, DELIVERY_PG);
    let row = vals![
        &msg.id,
        msg.order,
        msg.status.event(),
        msg.status.as_str(),
        msg.partition as i64,
        msg.offset as i64,
        &format!("consumer-{me}"),
        Utc::now(),
    ];
    retried!(world, "delivery record", world.db.exec(sql, row));
}

// ---------------------------------------------------------------- zombies

/// A consumer that stalls holding `msg` (and its claims, for the obligation handler), is
/// evicted by the rebalance its silence causes, then completes the message late.
async fn zombie(
    world: &World,
    me: usize,
    (p, epoch): (usize, u64),
    msg: &Msg,
    plan: ZombiePlan,
    member: RwLockReadGuard<'_, ()>,
) {
    let stall = world.stall(plan);
    if plan.commit_ahead {
        // Auto-commit of the polled position: the offset passes the message before any work.
        world.commit(me, p, epoch, msg.offset + 1);
    }
    let wake = (!plan.commit_ahead).then(|| {
        let (tx, rx) = oneshot::channel();
        world.rendezvous.lock().unwrap().insert(msg.id.clone(), tx);
        rx
    });
    // The work done before the stall, while still a member.
    let worker = format!("consumer-{me}");
    let mut held: Vec<(Claim, Option<Call>)> = Vec::new();
    if let Handler::Obligation { .. } = world.handler {
        for claim in claim_order(world, &worker, msg.order).await {
            let call = match stall {
                Stall::BeforeCall => None,
                Stall::AfterCall => match fence_and_call(world, &claim).await {
                    Some(call) => Some(call),
                    None => {
                        // Fenced already: a commit-ahead zombie's offset is committed, so the
                        // order's next change (a void) does not wait for it and can land
                        // between its claim and its call.
                        let c = &world.counts;
                        for count in
                            [&c.zombie_claims, &c.zombie_claims_uncalled, &c.zombie_claims_fenced]
                        {
                            count.fetch_add(1, SeqCst);
                        }
                        continue;
                    }
                },
            };
            held.push((claim, call));
        }
    }
    world.group.lock().unwrap().evicted.insert(me);
    world.counts.zombies.fetch_add(1, SeqCst);
    world.request(Request::Rebalance);
    drop(member);

    // Stalled: no transaction, no lock, no longer a member.
    let mut role = match wake {
        None => {
            let (ix, k) = (msg.ix, msg.k);
            world
                .wait_until(|| world.order_committed[ix].load(SeqCst) > k + 1 || world.ended())
                .await;
            Role::Zombie(None)
        }
        Some(rx) => {
            let ack = tokio::select! {
                ack = rx => ack.ok(),
                () = world.wait_until(|| world.ended()) => None,
            };
            Role::Zombie(ack)
        }
    };

    // Completes the message late, as if nothing had happened.
    match world.handler {
        Handler::Naive => naive(world, me, msg, &mut role).await,
        Handler::Obligation { .. } => {
            let uncalled = held.iter().filter(|(_, call)| call.is_none()).count();
            world.counts.zombie_claims.fetch_add(held.len() as u64, SeqCst);
            world.counts.zombie_claims_uncalled.fetch_add(uncalled as u64, SeqCst);
            for (claim, call) in held {
                let went_through = match call {
                    // Its lease expired at the eviction: fenced before any call.
                    None => perform(world, &claim).await,
                    // Called before the stall: 0 rows if someone took the row over (or a
                    // void came); if nobody did, its finish is right and goes through.
                    Some(call) => finish(world, &claim, call).await,
                };
                if !went_through {
                    world.counts.zombie_claims_fenced.fetch_add(1, SeqCst);
                }
            }
            role.first_step_done(world, msg).await;
        }
    }
    world.group.lock().unwrap().evicted.remove(&me);
    if !world.ended() {
        world.request(Request::Rebalance); // rejoins the group
    }
}

// ---------------------------------------------------------------- the tasks

async fn consumer(world: Arc<World>, me: usize) {
    let mut held: BTreeMap<usize, (u64, usize)> = BTreeMap::new();
    let mut rr = me * 3;
    let mut progress = world.progress.subscribe();
    while !world.ended() {
        progress.borrow_and_update();
        let polled = {
            let _member = world.barrier.read().await;
            world.sync(me, &mut held);
            world.poll(&held, &mut rr)
        };
        let Some((p, epoch, batch)) = polled else {
            let _ = progress.changed().await;
            continue;
        };
        let mut position = None;
        for msg in batch {
            let member = world.barrier.read().await;
            if !world.owns(me, p, epoch) {
                break; // revoked mid-batch: the rest, and what is uncommitted, is redelivered
            }
            if let Some(plan) = world.zombie_plan(&msg) {
                zombie(&world, me, (p, epoch), &msg, plan, member).await;
                held.clear();
                position = None;
                break;
            }
            let started = Instant::now();
            handle(&world, me, &msg).await;
            world.latencies.lock().unwrap().push(started.elapsed());
            world.handled(&msg);
            position = Some(msg.offset + 1);
            if let Some(entry) = held.get_mut(&p) {
                entry.1 = msg.offset + 1;
            }
        }
        if let Some(position) = position {
            let _member = world.barrier.read().await;
            world.commit(me, p, epoch, position);
        }
    }
}

/// The order service: one transaction per status change, then the event is published.
async fn producer(world: Arc<World>, j: usize) {
    let n = world.load.orders.len();
    let mut queue = (0..n).filter(|ix| ix % PRODUCERS == j);
    let mut active: Vec<usize> = Vec::new();
    let mut published = vec![0usize; n];
    let mut progress = world.progress.subscribe();
    loop {
        progress.borrow_and_update();
        while active.len() < ACTIVE_ORDERS / PRODUCERS {
            match queue.next() {
                Some(ix) => active.push(ix),
                None => break,
            }
        }
        if active.is_empty() {
            break;
        }
        let mut moved = false;
        for &ix in &active {
            let k = published[ix];
            let story = &world.load.stories[ix];
            // The next change only once the previous event is committed.
            if k < story.len() && world.order_committed[ix].load(SeqCst) >= k {
                let _member = world.barrier.read().await;
                change_status(&world, ix, k, story[k]).await;
                world.publish(ix, k, story[k].status);
                published[ix] += 1;
                moved = true;
            }
        }
        let before = active.len();
        active.retain(|&ix| {
            let len = world.load.stories[ix].len();
            published[ix] < len || world.order_committed[ix].load(SeqCst) < len
        });
        if !moved && active.len() == before {
            let _ = progress.changed().await;
        }
    }
    world.producers_done.fetch_add(1, SeqCst);
    world.bump();
}

/// Steps 1 and 2: the status change and, for the obligation handler, its obligations, in
/// ONE transaction.
async fn change_status(world: &World, ix: usize, k: usize, change: Change) {
    retried!(world, "status change", change_status_once(world, ix, k, change));
}

async fn change_status_once(
    world: &World,
    ix: usize,
    k: usize,
    change: Change,
) -> Result<(), sqlx::Error> {
    let (db, order, now) = (&world.db, world.load.orders[ix], world.now());
    let mut tx = db.begin().await?;
    let status = change.status.as_str();
    if k == 0 {
        tx.exec(ORDER_CREATE, vals![order, status]).await?;
    } else if change.applies {
        tx.exec(ORDER_CHANGE, vals![status, order]).await?;
    }
    if k == 0 || change.applies {
        tx.exec(HISTORY_INSERT, vals![order, status, Utc::now()]).await?;
    }
    if let Handler::Obligation { .. } = world.handler {
        for effect in &EFFECTS {
            let key = business_key(effect, order);
            if effect.due == change.status {
                let due = db.pick(DUE_MYSQL, DUE_PG);
                tx.exec(due, vals![order, effect.name, &key, now, now]).await?;
            }
            if effect.voids.contains(&change.status) {
                let tombstone = db.pick(TOMBSTONE_MYSQL, TOMBSTONE_PG);
                tx.exec(tombstone, vals![order, effect.name, &key, now]).await?;
                if effect.reverse_on_void {
                    tx.exec(VOID_NEVER_CLAIMED, vals![now, order, effect.name]).await?;
                    tx.exec(VOID_TO_REVERSE, vals![now, now, order, effect.name]).await?;
                } else {
                    tx.exec(VOID_NOT_REVERSED, vals![now, order, effect.name]).await?;
                }
            }
        }
    }
    tx.commit().await
}

/// The group coordinator: every rebalance waits for the handling in progress (not for a
/// zombie's), lets the sweeper claim what waited a whole lease, advances the clock past
/// every lease given so far, and reassigns every partition.
async fn coordinator(world: Arc<World>, mut requests: mpsc::UnboundedReceiver<Request>) {
    while let Some(Request::Rebalance) = requests.recv().await {
        let _all = world.barrier.write().await;
        if let Handler::Obligation { .. } = world.handler {
            sweep(&world, world.later(-LEASE_S)).await;
        }
        world.clock.fetch_add(LEASE_S + 1, SeqCst);
        world.group.lock().unwrap().reassign();
        world.counts.rebalances.fetch_add(1, SeqCst);
        world.bump();
    }
}

// ---------------------------------------------------------------- one run

/// What one run did, and what it left in the provider's receipts.
#[derive(Debug, Default)]
struct Outcome {
    orders: usize,
    messages: usize,
    handled: u64,
    redelivered: u64,
    rebalances: u64,
    zombies: u64,
    owed: usize,
    lost: usize,
    double: usize,
    on_voided: usize,
    uncaused: usize,
    open: i64,
    misplaced: usize,
    wrong_skips: usize,
    deadlocks: u64,
    lock_timeouts: u64,
    duplicate_keys: u64,
    failures: u64,
    fenced_before_call: u64,
    fenced_at_finish: u64,
    zombie_claims: u64,
    zombie_claims_uncalled: u64,
    zombie_claims_fenced: u64,
    done_by_message: u64,
    done_by_sweeper: u64,
    provider_calls: u64,
    provider_dedup_hits: u64,
    provider_refused: u64,
    provider_failed: u64,
    wall: Duration,
    p50: Duration,
    p99: Duration,
    /// What the nightly run over the handler's tables found (checked against the rows).
    net: String,
}

async fn fresh_tables(db: &Db, handler: Handler) {
    db.script(
        "DROP TABLE IF EXISTS orders, idempotent_msg, order_status_history, effect_obligation, \
         provider_receipt",
    )
    .await;
    db.script(db.pick(ORDERS_MYSQL, ORDERS_PG)).await;
    db.script(&provider_ddl(db.is_mysql(), handler.dedup())).await;
    // The ledger and the status history the nightly run reads, for both handlers.
    db.script(db.pick(
        include_str!("../../sql/schema/mysql.sql"),
        include_str!("../../sql/schema/postgres.sql"),
    ))
    .await;
    if let Handler::Obligation { .. } = handler {
        db.script(db.pick(
            include_str!("../../sql/schema/obligation.mysql.sql"),
            include_str!("../../sql/schema/obligation.postgres.sql"),
        ))
        .await
    }
}

/// A world on fresh tables of the database at `url`, with its coordinator's request queue.
async fn world(
    url: &str,
    load: &Arc<Load>,
    handler: Handler,
) -> (Arc<World>, mpsc::UnboundedReceiver<Request>) {
    let db = Db::connect(url, 16).await;
    let provider = Db::connect(url, 12).await;
    fresh_tables(&db, handler).await;
    let (requests, incoming) = mpsc::unbounded_channel();
    let n = load.orders.len();
    let mut group = Group {
        owner: vec![None; PARTITIONS],
        epoch: vec![0; PARTITIONS],
        evicted: BTreeSet::new(),
        rng: StdRng::seed_from_u64(load.seed),
    };
    group.reassign();
    let world = Arc::new(World {
        db,
        provider,
        load: Arc::clone(load),
        handler,
        logs: (0..PARTITIONS).map(|_| Mutex::new(Vec::new())).collect(),
        committed: (0..PARTITIONS).map(|_| AtomicUsize::new(0)).collect(),
        order_committed: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        group: Mutex::new(group),
        barrier: RwLock::new(()),
        progress: watch::channel(0).0,
        clock: AtomicI64::new(0),
        requests,
        rendezvous: Mutex::new(HashMap::new()),
        triggered: Mutex::new(HashSet::new()),
        seen: Mutex::new(HashSet::new()),
        first_grant: Mutex::new(HashSet::new()),
        receipts: AtomicU64::new(0),
        ended: AtomicBool::new(false),
        producers_done: AtomicUsize::new(0),
        counts: Counts::default(),
        latencies: Mutex::new(Vec::new()),
    });
    (world, incoming)
}

/// A step of a run that must end within [`STEP_LIMIT`]: a stuck step fails the test with
/// the group's state, never hangs the suite.
async fn bounded<T>(world: &World, what: &str, step: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(STEP_LIMIT, step).await {
        Ok(value) => value,
        Err(_) => {
            panic!("{}: {what} stuck for {STEP_LIMIT:?}: {}", world.handler.label(), world.state())
        }
    }
}

/// The longest any step of a run may take (a whole run takes seconds).
const STEP_LIMIT: Duration = Duration::from_secs(240);

async fn run(url: &str, load: &Arc<Load>, handler: Handler) -> Outcome {
    let (world, incoming) = tokio::time::timeout(STEP_LIMIT, world(url, load, handler))
        .await
        .unwrap_or_else(|_| panic!("{}: fresh tables stuck for {STEP_LIMIT:?}", handler.label()));

    let started = Instant::now();
    let mut coordination = JoinSet::new();
    coordination.spawn(coordinator(Arc::clone(&world), incoming));
    let mut tasks = JoinSet::new();
    for j in 0..PRODUCERS {
        tasks.spawn(producer(Arc::clone(&world), j));
    }
    for me in 0..CONSUMERS {
        tasks.spawn(consumer(Arc::clone(&world), me));
    }
    let all_committed = || {
        world.producers_done.load(SeqCst) == PRODUCERS
            && (0..PARTITIONS)
                .all(|p| world.committed[p].load(SeqCst) == world.logs[p].lock().unwrap().len())
    };
    // Until every event is published and committed; a task that panics fails the test at
    // once, and a stuck step fails it with the group's state.
    bounded(&world, "the load", async {
        loop {
            tokio::select! {
                () = world.wait_until(all_committed) => break,
                Some(joined) = tasks.join_next() => rethrow(joined),
                Some(joined) = coordination.join_next() => rethrow(joined),
            }
        }
    })
    .await;
    let wall = started.elapsed();
    world.ended.store(true, SeqCst);
    world.bump();
    bounded(&world, "the consumers' and producers' ending", async {
        while let Some(joined) = tasks.join_next().await {
            rethrow(joined);
        }
    })
    .await;
    world.request(Request::Stop);
    bounded(&world, "the coordinator's ending", async {
        while let Some(joined) = coordination.join_next().await {
            rethrow(joined);
        }
    })
    .await;
    if let Handler::Obligation { .. } = handler {
        // The last sweeps: every lease expired, every back-off over.
        bounded(&world, "the last sweeps", async {
            for _ in 0..10 {
                world.clock.fetch_add(LEASE_S + 1, SeqCst);
                sweep(&world, world.now()).await;
            }
        })
        .await;
    }
    let mut outcome = bounded(&world, "the outcome", outcome(&world, wall)).await;
    outcome.net = bounded(&world, "the nightly run", nightly_net(url, &world, &outcome)).await;
    outcome
}

fn rethrow(joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn outcome(world: &World, wall: Duration) -> Outcome {
    let truth = truth(&world.load);
    let db = &world.db;
    let receipts = db
        .rows(
            "SELECT effect, order_id, COUNT(granted_at), \
             COUNT(CASE WHEN granted_at IS NOT NULL AND reversed_at IS NULL THEN 1 END) \
             FROM provider_receipt GROUP BY effect, order_id",
            &[],
        )
        .await
        .unwrap();
    let receipts: BTreeMap<(String, i64), (i64, i64)> =
        receipts.iter().map(|r| ((r.text(0), r.int(1)), (r.int(2), r.int(3)))).collect();
    let granted = |pair: &(String, i64)| receipts.get(pair).map_or(0, |r| r.0);
    let in_force = |pair: &(String, i64)| receipts.get(pair).map_or(0, |r| r.1);
    let c = &world.counts;
    let mut latencies = world.latencies.lock().unwrap().clone();
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
    };
    let mut out = Outcome {
        orders: world.load.orders.len(),
        messages: world.logs.iter().map(|l| l.lock().unwrap().len()).sum(),
        handled: c.handled.load(SeqCst),
        redelivered: c.redelivered.load(SeqCst),
        rebalances: c.rebalances.load(SeqCst),
        zombies: c.zombies.load(SeqCst),
        owed: truth.owed.len(),
        lost: truth.owed.iter().filter(|p| granted(p) == 0).count(),
        double: receipts.values().filter(|r| r.0 > 1).count(),
        on_voided: truth.voided.iter().filter(|p| in_force(p) > 0).count(),
        uncaused: receipts
            .iter()
            .filter(|(p, r)| r.0 > 0 && !truth.owed.contains(p) && !truth.voided.contains(p))
            .count(),
        deadlocks: c.deadlocks.load(SeqCst),
        lock_timeouts: c.lock_timeouts.load(SeqCst),
        duplicate_keys: c.duplicate_keys.load(SeqCst),
        failures: c.failures.load(SeqCst),
        fenced_before_call: c.fenced_before_call.load(SeqCst),
        fenced_at_finish: c.fenced_at_finish.load(SeqCst),
        zombie_claims: c.zombie_claims.load(SeqCst),
        zombie_claims_uncalled: c.zombie_claims_uncalled.load(SeqCst),
        zombie_claims_fenced: c.zombie_claims_fenced.load(SeqCst),
        done_by_message: c.done_by_message.load(SeqCst),
        done_by_sweeper: c.done_by_sweeper.load(SeqCst),
        provider_calls: c.provider_calls.load(SeqCst),
        provider_dedup_hits: c.provider_dedup_hits.load(SeqCst),
        provider_refused: c.provider_refused.load(SeqCst),
        provider_failed: c.provider_failed.load(SeqCst),
        wall,
        p50: at(0.50).copied().unwrap_or_default(),
        p99: at(0.99).copied().unwrap_or_default(),
        ..Outcome::default()
    };
    match world.handler {
        Handler::Naive => {
            let skipped = db
                .rows(
                    "SELECT order_id, event_type FROM idempotent_msg WHERE action = 'SKIPPED'",
                    &[],
                )
                .await
                .unwrap();
            out.wrong_skips = skipped
                .iter()
                .filter(|r| {
                    EFFECTS.iter().any(|e| {
                        e.due.event() == r.text(1)
                            && truth.owed.contains(&(e.name.into(), r.int(0)))
                    })
                })
                .count();
        }
        Handler::Obligation { .. } => {
            let open = "SELECT COUNT(*) FROM effect_obligation WHERE next_attempt_at IS NOT NULL";
            out.open = db.rows(open, &[]).await.unwrap()[0].int(0);
            let states = db
                .rows("SELECT effect, order_id, state FROM effect_obligation", &[])
                .await
                .unwrap();
            out.misplaced = states
                .iter()
                .filter(|r| {
                    let (pair, state) = ((r.text(0), r.int(1)), r.text(2));
                    if truth.owed.contains(&pair) {
                        state != "DONE"
                    } else {
                        !matches!(state.as_str(), "VOIDED" | "REVERSED")
                    }
                })
                .count();
        }
    }
    out
}

/// A `handler:` line on stderr, past the test harness's capture (as reliability's counts).
fn say_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn say(database: &str, seed: u64, handler: Handler, o: &Outcome) {
    let per_second = o.handled as f64 / o.wall.as_secs_f64().max(1e-9);
    let mut line = format!(
        "handler: {database} {}, seed {seed}: {} orders, {} messages, {} handled ({} redelivered), \
         {} rebalances, {} zombies; owed {}: lost {}, double {}, in force on voided {}, uncaused {}; ",
        handler.label(),
        o.orders,
        o.messages,
        o.handled,
        o.redelivered,
        o.rebalances,
        o.zombies,
        o.owed,
        o.lost,
        o.double,
        o.on_voided,
        o.uncaused,
    );
    line.push_str(&format!(
        "deadlocks {} (retried), lock waits timed out {}, duplicate keys {}, failures {}; ",
        o.deadlocks, o.lock_timeouts, o.duplicate_keys, o.failures
    ));
    match handler {
        Handler::Naive => line.push_str(&format!("wrong SKIPPED rows {}; ", o.wrong_skips)),
        Handler::Obligation { .. } => line.push_str(&format!(
            "open obligations {}, misplaced {}; zombies held {} claims ({} not yet called): {} \
             fenced ({} before the call, {} at the finish); done by a message {}, by the sweeper {}; ",
            o.open,
            o.misplaced,
            o.zombie_claims,
            o.zombie_claims_uncalled,
            o.zombie_claims_fenced,
            o.fenced_before_call,
            o.fenced_at_finish,
            o.done_by_message,
            o.done_by_sweeper
        )),
    }
    line.push_str(&format!(
        "provider {} calls ({} answered from its key, {} refused after a reversal, {} failed); \
         {:.0} messages/s, handling p50 {:.1} ms, p99 {:.1} ms, {:.2} s",
        o.provider_calls,
        o.provider_dedup_hits,
        o.provider_refused,
        o.provider_failed,
        per_second,
        o.p50.as_secs_f64() * 1e3,
        o.p99.as_secs_f64() * 1e3,
        o.wall.as_secs_f64(),
    ));
    line.push_str(&format!("; {}", o.net));
    say_line(&line);
}

// ---------------------------------------------------------------- the nightly run over the result

/// The job config of the nightly run over what a handler left: its consumers' ledger, the
/// order service's status history and the provider's receipts (one source per effect; a
/// reversed grant reads REVERSED), with the default rules at a grace of 1 s.
fn net_job(url: &str, dir: &std::path::Path) -> String {
    let rules = std::fs::read_to_string(repo("fixtures/rules.toml")).unwrap();
    let (thirty, one) = ("grace         = \"30m\"", "grace         = \"1s\"");
    assert_eq!(rules.matches(thirty).count(), EFFECTS.len(), "every default rule's grace is 30m");
    std::fs::write(dir.join("rules.toml"), rules.replace(thirty, one)).unwrap();
    let (lower, cut) = if url.starts_with("postgres") { ("$1", "$2") } else { ("?", "?") };
    let source = |table: &str, name: &str, query: &str| {
        format!("\n[[source]]\ntable = \"{table}\"\nname = \"{name}\"\nurl = \"{url}\"\nquery = \"\"\"\n{query}\n\"\"\"\n")
    };
    let mut job = format!("root = \"{}\"\nrules = \"rules.toml\"\n", dir.join("recon").display());
    job += &source(
        "ledger",
        "consumers",
        &format!(
            "SELECT msg_id, order_id, event_type, expected_status, action, observed_status, topic, \
             kafka_partition, kafka_offset, consumer_id, decided_at FROM idempotent_msg \
             WHERE decided_at > {lower} AND decided_at <= {cut}"
        ),
    );
    job += &source(
        "status_history",
        "orders",
        &format!(
            "SELECT order_id, status, changed_at FROM order_status_history \
             WHERE changed_at > {lower} AND changed_at <= {cut}"
        ),
    );
    for effect in &EFFECTS {
        let query = format!(
            "SELECT receipt_id, order_id, effect, request_key AS msg_id, \
             CASE WHEN reversed_at IS NULL THEN 'SUCCEEDED' ELSE 'REVERSED' END AS status, \
             granted_at AS created_at FROM provider_receipt WHERE effect = '{}' \
             AND granted_at > {lower} AND granted_at <= {cut}",
            effect.name
        );
        job += &source("receipts", effect.name, &query);
    }
    job
}

/// What DESIGN §5 and §10.1 make of the handler's tables, computed here from the rows
/// (never by the run's SQL): per (effect, order), MISSING (due, never voided, no grant in
/// force), ORPHAN_EFFECT, UNREVERSED_EFFECT, DUPLICATE_EFFECT; every one a BREAK once the
/// 1 s grace has passed.
async fn judged_from_rows(world: &World) -> BTreeSet<(String, i64, String)> {
    let db = &world.db;
    let history: HashSet<(i64, String)> = db
        .rows("SELECT order_id, status FROM order_status_history", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.int(0), r.text(1)))
        .collect();
    let reached = |order: i64, statuses: &[Status]| {
        statuses.iter().any(|s| history.contains(&(order, s.as_str().to_string())))
    };
    let in_force: HashMap<(String, i64), i64> = db
        .rows(
            "SELECT effect, order_id, \
             COUNT(CASE WHEN granted_at IS NOT NULL AND reversed_at IS NULL THEN 1 END) \
             FROM provider_receipt GROUP BY effect, order_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| ((r.text(0), r.int(1)), r.int(2)))
        .collect();
    let ok =
        |effect: &str, order: i64| in_force.get(&(effect.to_string(), order)).copied().unwrap_or(0);
    let mut judged = BTreeSet::new();
    for &order in &world.load.orders {
        for effect in &EFFECTS {
            let (due, voided) = (reached(order, &[effect.due]), reached(order, effect.voids));
            let ok = ok(effect.name, order);
            let class = match () {
                _ if due && !voided && ok == 0 => "MISSING",
                _ if !due && ok >= 1 => "ORPHAN_EFFECT",
                _ if due && voided && effect.reverse_on_void && ok >= 1 => "UNREVERSED_EFFECT",
                _ if due && ok >= 2 => "DUPLICATE_EFFECT",
                _ => continue,
            };
            judged.insert((effect.name.to_string(), order, class.to_string()));
        }
    }
    judged
}

/// Runs `effect-recon nightly` over the tables a handler left and checks its BREAK
/// findings are exactly what the rows say, and its missing effects exactly the effects
/// the handler lost.
async fn nightly_net(url: &str, world: &World, outcome: &Outcome) -> String {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.toml");
    std::fs::write(&job, net_job(url, dir.path())).unwrap();
    // Every row is in the tables now. The cut is the whole second at least one grace (1 s)
    // after that, given explicitly (the default cut, now truncated to the second, could
    // fall less than a grace after the last row), and the nightly starts once it passed.
    let cut = Utc.timestamp_opt(Utc::now().timestamp() + 2, 0).unwrap();
    let wait = (cut - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(100)).await;
    let cut = cut.to_rfc3339();
    let mut nightly = command(&["nightly", "--config", job.to_str().unwrap(), "--cut", &cut, "-q"]);
    // Off the runtime's workers, so that the step's time limit can still fire.
    let output = tokio::task::spawn_blocking(move || nightly.output()).await.unwrap().unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "nightly over the handler's tables: {stdout}{stderr}"
    );
    let recon = dir.path().join("recon");
    let run = std::fs::read_dir(&recon)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("run="))
        .expect("the nightly's run folder");
    let mut found = BTreeSet::new();
    for batch in read_output(&run, "discrepancies") {
        let column =
            |name: &str| cast(batch.column_by_name(name).unwrap(), &DataType::Utf8).unwrap();
        let (effect, order, class, verdict) =
            (column("effect"), column("order_id"), column("class"), column("verdict"));
        let (effect, order, class, verdict) = (
            effect.as_string::<i32>(),
            order.as_string::<i32>(),
            class.as_string::<i32>(),
            verdict.as_string::<i32>(),
        );
        for i in 0..batch.num_rows() {
            assert_eq!(verdict.value(i), "BREAK", "every grace is over");
            let class: Class = class.value(i).parse().unwrap();
            let class = if class.is_missing() { "MISSING".to_string() } else { class.to_string() };
            found.insert((
                effect.value(i).to_string(),
                order.value(i).parse::<i64>().unwrap(),
                class,
            ));
        }
    }
    let judged = judged_from_rows(world).await;
    assert_eq!(
        found, judged,
        "the nightly run over the handler's tables against the rows' own judgement"
    );
    let missing = found.iter().filter(|f| f.2 == "MISSING").count();
    assert_eq!(missing, outcome.lost, "the run's missing effects are the handler's lost ones");
    let count = |class: &str| found.iter().filter(|f| f.2 == class).count();
    format!(
        "the nightly run over its tables: {} BREAK (missing {missing}, duplicate {}, unreversed {}, orphan {}), \
         equal to the rows' own judgement",
        found.len(),
        count("DUPLICATE_EFFECT"),
        count("UNREVERSED_EFFECT"),
        count("ORPHAN_EFFECT")
    )
}

// ---------------------------------------------------------------- the tests

/// An order's obligations: (effect, state, generation), by effect.
async fn states(world: &World, order: i64) -> Vec<(String, String, i64)> {
    let sql = "SELECT effect, state, generation FROM effect_obligation WHERE order_id = ? \
               ORDER BY effect";
    let rows = world.db.rows(sql, vals![order]).await.unwrap();
    rows.iter().map(|r| (r.text(0), r.text(1), r.int(2))).collect()
}

fn as_strs(states: &[(String, String, i64)]) -> Vec<(&str, &str, i64)> {
    states.iter().map(|(e, s, g)| (e.as_str(), s.as_str(), *g)).collect()
}

/// The protocol step by step, without the consumer group, every outcome exact: a claim
/// taken over after its lease expired (the zombie is fenced before its call); a zombie
/// whose call was made (the provider answers the new owner from the key, the zombie's
/// finish changes nothing); a void while claimed (fenced, a reversal owed and done, the
/// late PAID a no-op, a late grant refused by the provider's tombstone).
async fn protocol_steps(url: &str) {
    use Status::*;
    let change = |status| Change { status, applies: true };
    let late_paid = Change { status: Paid, applies: false };
    let (a, b, c) = (9001, 9002, 9003);
    let paid = vec![change(Created), change(Paid)];
    let load = Arc::new(Load {
        seed: 0,
        orders: vec![a, b, c],
        stories: vec![
            paid.clone(),
            paid,
            vec![change(Created), change(Paid), change(Cancelled), late_paid],
        ],
        zombies: HashMap::new(),
        faults: HashMap::new(),
    });
    let handler = Handler::Obligation { dedup: true, faults_after_provider: true };
    let (w, _requests) = world(url, &load, handler).await;
    for ix in 0..3 {
        change_status(&w, ix, 0, load.stories[ix][0]).await;
        change_status(&w, ix, 1, load.stories[ix][1]).await;
    }
    let evicted = || w.clock.fetch_add(LEASE_S + 1, SeqCst);

    // 1. consumer-1 claims and stalls; its eviction passes the lease; consumer-2 takes over.
    let zombie = claim_order(&w, "consumer-1", a).await;
    assert_eq!(zombie.len(), 2, "points_grant and wms_lock are owed");
    evicted();
    let live = claim_order(&w, "consumer-2", a).await;
    assert_eq!(live.len(), 2, "an expired lease is claimable again");
    for claim in &zombie {
        assert!(!perform(&w, claim).await, "the zombie is fenced before its call");
    }
    for claim in &live {
        assert!(perform(&w, claim).await);
    }
    let done = [("points_grant", "DONE", 2), ("wms_lock", "DONE", 2)];
    assert_eq!(as_strs(&states(&w, a).await), done);

    // 2. consumer-1 called, then stalled before its finish; consumer-2 takes over and calls
    //    again with the same business key.
    let zombie = claim_order(&w, "consumer-1", b).await;
    let mut calls = Vec::new();
    for claim in &zombie {
        calls.push(fence_and_call(&w, claim).await.expect("a fresh claim passes the fence"));
    }
    evicted();
    for claim in &claim_order(&w, "consumer-2", b).await {
        assert!(perform(&w, claim).await);
    }
    for (claim, call) in zombie.iter().zip(calls) {
        assert!(!finish(&w, claim, call).await, "the zombie's finish matches no row");
    }
    assert_eq!(as_strs(&states(&w, b).await), done);
    assert_eq!(w.counts.provider_dedup_hits.load(SeqCst), 2, "answered from the key");

    // 3. consumer-1 claims; the order is cancelled before it calls.
    let zombie = claim_order(&w, "consumer-1", c).await;
    change_status(&w, 2, 2, load.stories[2][2]).await;
    let voided = [
        ("logistics_waybill", "VOIDED", 0), // a tombstone: a later SHIPPED cannot make it due
        ("points_grant", "REVERSE_OWED", 2),
        ("wms_lock", "REVERSE_OWED", 2),
    ];
    assert_eq!(as_strs(&states(&w, c).await), voided, "claimed rows may have been performed");
    for claim in &zombie {
        assert!(!perform(&w, claim).await, "the void fenced the claim");
    }
    for claim in &claim_order(&w, "consumer-2", c).await {
        assert!(claim.reverse && perform(&w, claim).await, "the reversal is claimed and done");
    }
    change_status(&w, 2, 3, load.stories[2][3]).await; // the late payment callback
    let reversed = [
        ("logistics_waybill", "VOIDED", 0),
        ("points_grant", "REVERSED", 3),
        ("wms_lock", "REVERSED", 3),
    ];
    assert_eq!(as_strs(&states(&w, c).await), reversed, "the late PAID is a no-op");
    let late = provider_call(&w, &EFFECTS[0], c, false, "points_grant:9003", "late").await;
    assert!(matches!(late, Call::Failed(_)), "a grant after the reversal is refused");

    let in_force =
        w.db.rows(
            "SELECT order_id, COUNT(granted_at), COUNT(CASE WHEN reversed_at IS NULL \
             AND granted_at IS NOT NULL THEN 1 END) FROM provider_receipt GROUP BY order_id \
             ORDER BY order_id",
            &[],
        )
        .await
        .unwrap();
    let in_force: Vec<(i64, i64, i64)> =
        in_force.iter().map(|r| (r.int(0), r.int(1), r.int(2))).collect();
    assert_eq!(in_force, [(a, 2, 2), (b, 2, 2), (c, 0, 0)], "one grant per effect, none on c");
    let name = if w.db.is_mysql() { "MySQL/MariaDB" } else { "PostgreSQL" };
    say_line(&format!(
        "handler: {name} protocol steps: a zombie fenced before its call after its lease \
         expired; a zombie that called, fenced at its finish, its re-call answered from the \
         key; a void while claimed fenced the claim, the reversal done, the late PAID a no-op, \
         a late grant refused: exact"
    ));
}

/// The four runs over one load, and what each must show.
async fn story(url: &str) {
    let database = {
        let db = Db::connect(url, 1).await;
        let version = db.rows("SELECT VERSION()", &[]).await.unwrap()[0].text(0);
        if !db.is_mysql() {
            "PostgreSQL"
        } else if version.contains("MariaDB") {
            "MariaDB"
        } else {
            "MySQL"
        }
    };
    protocol_steps(url).await;
    let orders = if soak() { 4000 } else { 400 };
    let load = Arc::new(draw_load(seed(), orders));

    let naive = run(url, &load, Handler::Naive).await;
    say(database, load.seed, Handler::Naive, &naive);
    assert!(naive.lost > 0, "the naive handler must lose the incident's effects: {naive:?}");
    assert!(naive.wrong_skips > 0, "a SKIPPED row after the reorder: {naive:?}");
    assert!(naive.double > 0, "the planted races must grant twice: {naive:?}");
    if database == "PostgreSQL" {
        assert!(naive.duplicate_keys > 0, "two INSERTs of one msg_id: 23505: {naive:?}");
    } else {
        assert!(naive.deadlocks > 0, "two gap locks, two INSERTs: 1213: {naive:?}");
    }

    let runs = [
        Handler::Obligation { dedup: true, faults_after_provider: true },
        Handler::Obligation { dedup: false, faults_after_provider: false },
        Handler::Obligation { dedup: false, faults_after_provider: true },
    ];
    for handler in runs {
        let o = run(url, &load, handler).await;
        say(database, load.seed, handler, &o);
        let name = handler.label();
        assert_eq!((o.lost, o.on_voided, o.uncaused), (0, 0, 0), "{name}: {o:?}");
        assert_eq!((o.open, o.misplaced, o.failures), (0, 0, 0), "{name}: {o:?}");
        // A zombie never calls once its lease expired, and only zombies are ever fenced (a
        // lease expires at an eviction, never under a live worker).
        assert!(o.zombies >= 3, "{name}: the planted zombies: {o:?}");
        assert_eq!(o.fenced_before_call, o.zombie_claims_uncalled, "{name}: {o:?}");
        assert_eq!(
            o.fenced_before_call + o.fenced_at_finish,
            o.zombie_claims_fenced,
            "{name}: {o:?}"
        );
        if handler.dedup() || !handler.faults_after_provider() {
            assert_eq!(o.double, 0, "{name}: {o:?}");
        } else {
            assert!(o.double > 0, "{name}: a call repeated after the provider acted: {o:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_obligations_lose_and_double_nothing_where_the_naive_handler_does() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    story(&mysql_database(&base, "er_it_handler").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_obligations_lose_and_double_nothing_where_the_naive_handler_does() {
    let Some(base) = env_url(PG_ENV) else { return };
    story(&pg_schema(&base, "er_it_handler").await).await;
}
