//! Failing storage ends in a clear error or the fault-free result, never in a corrupt one:
//! a seeded fault-injecting `ObjectStore` wrapper under `run`, `sql` and `export`. For
//! every kind of operation (put, get, head, list, delete) the k-th one fails, returns
//! truncated bytes (with and without an error), or times out the way a client timeout does.
//! Every case must end, within a bound, in either a clear error naming the object (the
//! binary maps every error to exit 2) or a success equal to the fault-free result; never a
//! panic, never a manifest over missing or bad files.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use futures::FutureExt;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use effect_recon::config::JobConfig;
use effect_recon::db::export::{self, ExportPlan};
use effect_recon::engine::session::SessionOptions;
use effect_recon::events::Events;
use effect_recon::inspect;
use effect_recon::recon;
use effect_recon::storage::Location;
use effect_recon::time::parse_instant;

use super::super::common::{plan, repo};
use super::{comparable_tree, manifest_problems, say, seed, soak, Rng, CUT, RUN};

/// The kinds of operation a fault can hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Op {
    Put,
    Get,
    Head,
    List,
    Delete,
}

const OPS: [Op; 5] = [Op::Put, Op::Get, Op::Head, Op::List, Op::Delete];

/// What happens to the k-th operation of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// An error, as a dropped connection gives.
    Fail,
    /// Half the bytes, then an error (the body ended early); on a put, the lost
    /// acknowledgement (the object landed, the client hears an error).
    TruncatedError,
    /// Half the bytes and a range that says so, no error.
    TruncatedSilent,
    /// 100 ms, then a client timeout.
    Timeout,
}

/// Which operation to hit, what it has seen, and what it hit.
#[derive(Debug, Default)]
struct State {
    target: Option<(Op, u64, Fault)>,
    counts: Mutex<std::collections::BTreeMap<Op, u64>>,
    injected: Mutex<Option<String>>,
}

impl State {
    /// Counts an operation; the fault to inject into it, if this is the target.
    fn hit(&self, op: Op, path: &str) -> Option<Fault> {
        let mut counts = self.counts.lock().unwrap();
        let n = counts.entry(op).or_default();
        *n += 1;
        let (target_op, k, fault) = self.target?;
        if target_op == op && *n == k {
            *self.injected.lock().unwrap() = Some(path.to_string());
            return Some(fault);
        }
        None
    }
}

/// A store that counts operations per kind and injects one fault.
#[derive(Debug)]
struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<State>,
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

fn injected_error(what: &str) -> object_store::Error {
    object_store::Error::Generic { store: "FaultStore", source: what.to_string().into() }
}

async fn fail(fault: Fault) -> object_store::Error {
    if fault == Fault::Timeout {
        tokio::time::sleep(Duration::from_millis(100)).await;
        return injected_error("operation timed out (client timeout)");
    }
    injected_error("connection reset by peer")
}

#[async_trait::async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        match self.state.hit(Op::Put, location.as_ref()) {
            // Object stores put whole objects or none; the fault here is the lost
            // acknowledgement: the object landed, the client hears an error.
            Some(Fault::TruncatedError | Fault::TruncatedSilent) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(injected_error("connection reset by peer before the response"))
            }
            Some(fault) => Err(fail(fault).await),
            None => self.inner.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        match self.state.hit(Op::Put, location.as_ref()) {
            Some(fault) => Err(fail(fault).await),
            None => self.inner.put_multipart_opts(location, opts).await,
        }
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let op = if options.head { Op::Head } else { Op::Get };
        match self.state.hit(op, location.as_ref()) {
            None => self.inner.get_opts(location, options).await,
            Some(fault @ (Fault::Fail | Fault::Timeout)) => Err(fail(fault).await),
            Some(_) if op == Op::Head => Err(injected_error("connection reset by peer")),
            Some(truncated) => {
                let result = self.inner.get_opts(location, options).await?;
                let (meta, range, attributes) =
                    (result.meta.clone(), result.range.clone(), result.attributes.clone());
                let bytes = result.bytes().await?;
                let half = bytes.slice(..bytes.len() / 2);
                let (range, items): (Range<u64>, Vec<object_store::Result<Bytes>>) =
                    if truncated == Fault::TruncatedSilent {
                        (range.start..range.start + half.len() as u64, vec![Ok(half)])
                    } else {
                        let cut = injected_error("connection closed before the body ended");
                        (range, vec![Ok(half), Err(cut)])
                    };
                Ok(GetResult {
                    payload: GetResultPayload::Stream(stream::iter(items).boxed()),
                    meta,
                    range,
                    attributes,
                })
            }
        }
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        // One read of several ranges (what the Parquet reader asks for) is one `Get`.
        match self.state.hit(Op::Get, location.as_ref()) {
            None => self.inner.get_ranges(location, ranges).await,
            Some(fault @ (Fault::Fail | Fault::Timeout)) => Err(fail(fault).await),
            Some(Fault::TruncatedError) => {
                Err(injected_error("connection closed before the body ended"))
            }
            Some(Fault::TruncatedSilent) => {
                let mut parts = self.inner.get_ranges(location, ranges).await?;
                if let Some(first) = parts.first_mut() {
                    *first = first.slice(..first.len() / 2);
                }
                Ok(parts)
            }
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        let (inner, state) = (Arc::clone(&self.inner), Arc::clone(&self.state));
        locations
            .then(move |path| {
                let (inner, state) = (Arc::clone(&inner), Arc::clone(&state));
                async move {
                    let path = path?;
                    if let Some(fault) = state.hit(Op::Delete, path.as_ref()) {
                        return Err(fail(fault).await);
                    }
                    let mut one = inner.delete_stream(stream::iter([Ok(path)]).boxed());
                    one.next().await.unwrap_or_else(|| Err(injected_error("no result")))
                }
            })
            .boxed()
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let shown = prefix.map(|p| p.to_string()).unwrap_or_default();
        match self.state.hit(Op::List, &shown) {
            Some(_) => stream::iter([Err(injected_error("connection reset by peer"))]).boxed(),
            None => self.inner.list(prefix),
        }
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        let shown = prefix.map(|p| p.to_string()).unwrap_or_default();
        match self.state.hit(Op::List, &shown) {
            Some(fault) => Err(fail(fault).await),
            None => self.inner.list_with_delimiter(prefix).await,
        }
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// `location` through a fault store sharing `state`.
fn faulty(location: &Location, state: &Arc<State>) -> Location {
    let store = FaultStore { inner: Arc::clone(location.store()), state: Arc::clone(state) };
    location.with_store(Arc::new(store))
}

/// How one case ended.
#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    not_reached: usize,
    succeeded: usize,
    errors_naming_the_object: usize,
}

/// What a command under faults gives back: `Ok(comparable)` or the error text.
type Outcome = Result<Vec<(String, Vec<u8>)>, String>;

/// Runs every fault against `command` (given the shared state and a fresh output dir);
/// `expected` is the fault-free outcome. Returns the tally.
async fn sweep<F, Fut>(name: &str, command: F) -> Tally
where
    F: Fn(Arc<State>, std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    // A fault-free pass: the expected outcome and how many operations of each kind.
    let clean = Arc::new(State::default());
    let dir = tempfile::tempdir().unwrap();
    let expected = command(Arc::clone(&clean), dir.path().to_path_buf()).await.expect("fault-free");
    let counts = clean.counts.lock().unwrap().clone();
    let mut rng = Rng::new(seed() ^ 0x5707 ^ name.len() as u64);
    let faults = [Fault::Fail, Fault::TruncatedError, Fault::TruncatedSilent, Fault::Timeout];
    let mut cases = Vec::new();
    for op in OPS {
        let seen = counts.get(&op).copied().unwrap_or(0);
        for fault in faults {
            let meaningful = match op {
                Op::Get => true,
                Op::Put => fault != Fault::TruncatedSilent,
                Op::Head | Op::List | Op::Delete => matches!(fault, Fault::Fail | Fault::Timeout),
            };
            if !meaningful {
                continue;
            }
            // Every k in the soak; otherwise the first, the last and two seeded ones.
            let mut ks: Vec<u64> = if soak() {
                (1..=seen).collect()
            } else {
                let mut ks = vec![1, seen];
                ks.extend((0..2).map(|_| 1 + rng.below(seen.max(1))));
                ks
            };
            ks.retain(|k| *k >= 1 && *k <= seen);
            ks.sort();
            ks.dedup();
            cases.extend(ks.into_iter().map(|k| (op, k, fault)));
        }
    }
    let mut tally = Tally::default();
    for (op, k, fault) in cases {
        let state = Arc::new(State { target: Some((op, k, fault)), ..State::default() });
        let dir = tempfile::tempdir().unwrap();
        let task =
            std::panic::AssertUnwindSafe(command(Arc::clone(&state), dir.path().to_path_buf()))
                .catch_unwind();
        let joined = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .unwrap_or_else(|_| panic!("{name} {op:?} #{k} {fault:?}: hung for 60 s"));
        let outcome = joined.unwrap_or_else(|e| {
            panic!("{name} {op:?} #{k} {fault:?}: panicked: {}", super::mutations::panic_text(&e))
        });
        tally.cases += 1;
        let injected = state.injected.lock().unwrap().clone();
        assert_eq!(
            manifest_problems(dir.path()),
            Vec::<String>::new(),
            "{name} {op:?} #{k} {fault:?}"
        );
        match (outcome, injected) {
            (Ok(found), injected) => {
                assert!(
                    found == expected,
                    "{name} {op:?} #{k} {fault:?} (hit {injected:?}): succeeded with other outputs"
                );
                if injected.is_some() {
                    tally.succeeded += 1
                } else {
                    tally.not_reached += 1
                }
            }
            (Err(message), Some(path)) => {
                let file = path.rsplit('/').next().unwrap_or(&path);
                let parent = path.rsplit('/').nth(1).unwrap_or_default();
                assert!(
                    message.contains(file) || message.contains(parent),
                    "{name} {op:?} #{k} {fault:?}: the error does not name {path}: {message}"
                );
                assert!(!message.contains("internal error"), "{message}");
                tally.errors_naming_the_object += 1;
            }
            (Err(message), None) => {
                panic!("{name} {op:?} #{k} {fault:?}: failed without a fault: {message}")
            }
        }
    }
    say(&format!(
        "storage faults {name}: {}/{} faults ended in an error naming the object or an identical success ({} errors naming the object, {} identical successes, {} not reached; 0 panics, 0 hangs, 0 manifests over bad files; operations of a clean pass: {counts:?})",
        tally.errors_naming_the_object + tally.succeeded + tally.not_reached,
        tally.cases,
        tally.errors_naming_the_object,
        tally.succeeded,
        tally.not_reached,
    ));
    tally
}

fn tiny() -> Location {
    Location::parse(repo("fixtures/tiny/snapshot").to_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_under_failing_storage_errs_clearly_or_succeeds_identically() {
    sweep("run", |state, dir| async move {
        let out = Location::parse(dir.to_str().unwrap()).unwrap();
        let plan = plan(&faulty(&tiny(), &state), &faulty(&out, &state));
        match recon::run(&plan, &Events::none()).await {
            Ok(_) => Ok(comparable_tree(&dir.join(RUN)).0),
            Err(e) => Err(format!("{e:#}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_under_failing_storage_errs_clearly_or_answers_identically() {
    // A run to query alongside the snapshot.
    let runs = tempfile::tempdir().unwrap().keep();
    let out = Location::parse(runs.to_str().unwrap()).unwrap();
    recon::run(&plan(&tiny(), &out), &Events::none()).await.unwrap();
    sweep("sql", move |state, _dir| {
        let run = out.join(RUN);
        async move {
            let rules = effect_recon::config::RuleSet::default_rules().unwrap();
            let options = SessionOptions { target_partitions: 2, ..SessionOptions::default() };
            let run = faulty(&run, &state);
            let answer = async {
                let ctx = inspect::sql::open(&faulty(&tiny(), &state), Some(&run), &rules, &options).await?;
                let sql = "SELECT (SELECT count(*) FROM ledger) AS ledger,                            (SELECT count(*) FROM discrepancies) AS findings,                            (SELECT sum(order_id) FROM receipts) AS receipts";
                let frame = inspect::sql::read_only_query(&ctx, sql).await?;
                let batches = frame.collect().await.map_err(|e| effect_recon::Error::query("sql", e))?;
                Ok::<_, effect_recon::Error>(super::super::common::psv(&batches))
            };
            match answer.await {
                Ok(text) => Ok(vec![("answer".to_string(), text.into_bytes())]),
                Err(e) => Err(format!("{e:#}")),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_under_failing_storage_errs_clearly_or_succeeds_identically() {
    let jobs = tempfile::tempdir().unwrap().keep();
    let job = JobConfig::load(&super::sqlite_job(&jobs)).unwrap();
    sweep("export", move |state, dir| {
        let job = job.clone();
        async move {
            let out = Location::parse(dir.join("s").to_str().unwrap()).unwrap();
            let plan =
                ExportPlan { job, out: faulty(&out, &state), cut: parse_instant(CUT).unwrap() };
            match export::export(&plan, &Events::none()).await {
                Ok(_) => Ok(comparable_tree(&dir.join("s")).0),
                Err(e) => Err(format!("{e:#}")),
            }
        }
    })
    .await;
}
