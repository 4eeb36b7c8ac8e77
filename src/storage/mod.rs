//! Where snapshots and runs live: a local directory, a `file://` URL or an `s3://` URL,
//! each resolved once into an object store plus a prefix.
//!
//! Everything that reads or writes snapshot and run files goes through [`Location`], so
//! the same code serves a laptop directory and a bucket. [`claim`] keeps one writer per
//! folder; [`parquet_parts`] writes numbered Parquet parts with row counts and SHA-256.

pub(crate) mod claim;
pub mod parquet_parts;

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use url::Url;

use crate::error::{Error, Result};

/// A folder in an object store.
#[derive(Debug, Clone)]
pub struct Location {
    store: Arc<dyn ObjectStore>,
    /// Root URL of the store (`file:///`, `s3://bucket/`), as DataFusion registers it.
    store_url: Url,
    prefix: Path,
    display: String,
}

/// The location as users see it: a local path or the URL as given.
impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl Location {
    /// Resolves a directory path, `file://` URL or `s3://` URL (credentials from the
    /// usual `AWS_*` environment variables).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |message: String| Error::Location { location: text.to_string(), message };
        if let Some(rest) = text.strip_prefix("s3://") {
            let url = Url::parse(text).map_err(|e| bad(e.to_string()))?;
            let bucket =
                url.host_str().ok_or_else(|| bad("no bucket in the URL".into()))?.to_string();
            let store = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(&bucket)
                .build()
                .map_err(|e| Error::store(text, e))?;
            let prefix = Path::from(rest.trim_start_matches(&bucket).trim_matches('/'));
            let store_url =
                Url::parse(&format!("s3://{bucket}/")).map_err(|e| bad(e.to_string()))?;
            return Ok(Location {
                store: naming(Arc::new(store), &store_url),
                store_url,
                prefix,
                display: text.trim_end_matches('/').to_string(),
            });
        }
        let local = match text.strip_prefix("file://") {
            Some(path) => std::path::PathBuf::from(path),
            None if text.contains("://") => {
                return Err(bad("unsupported scheme; use a directory, file:// or s3://".into()))
            }
            None => std::path::PathBuf::from(text),
        };
        let absolute = if local.is_absolute() {
            local
        } else {
            std::env::current_dir()
                .map_err(|e| Error::Io { path: ".".into(), source: e })?
                .join(local)
        };
        let absolute = normalize(&absolute);
        let prefix = Path::from_absolute_path(&absolute).map_err(|e| bad(e.to_string()))?;
        let store_url = Url::parse("file:///").map_err(|e| bad(e.to_string()))?;
        Ok(Location {
            store: naming(Arc::new(LocalFileSystem::new()), &store_url),
            store_url,
            prefix,
            display: absolute.display().to_string(),
        })
    }

    /// A sub-folder of this location.
    pub fn join(&self, child: &str) -> Self {
        let mut prefix = self.prefix.clone();
        for part in child.split('/').filter(|p| !p.is_empty()) {
            prefix = prefix.join(part);
        }
        Location {
            store: Arc::clone(&self.store),
            store_url: self.store_url.clone(),
            prefix,
            display: format!("{}/{}", self.display, child.trim_matches('/')),
        }
    }

    /// The same folder through another store (a wrapper of this one: caching, metrics, the
    /// fault injection of the reliability tests).
    pub fn with_store(&self, store: Arc<dyn ObjectStore>) -> Self {
        Location { store: naming(store, &self.store_url), ..self.clone() }
    }

    /// The object store behind this location. Its errors name the object they concern
    /// (the query engine's own errors do not), so a failed read deep in a query still says
    /// which file.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Root URL of the store, to register it with DataFusion.
    pub fn store_url(&self) -> &Url {
        &self.store_url
    }

    /// The object path of `relative` inside this location; a `..` part steps up one folder
    /// (an incremental snapshot lists files of the snapshots before it as `../snapshot=…/`).
    pub fn path(&self, relative: &str) -> Path {
        if !relative.split('/').any(|p| p == "..") {
            let mut path = self.prefix.clone();
            for part in relative.split('/').filter(|p| !p.is_empty()) {
                path = path.join(part);
            }
            return path;
        }
        let mut parts: Vec<object_store::path::PathPart<'_>> = self.prefix.parts().collect();
        for part in relative.split('/').filter(|p| !p.is_empty()) {
            if part == ".." {
                parts.pop();
            } else {
                parts.push(part.into());
            }
        }
        Path::from_iter(parts)
    }

    /// The folder this one is in (`None` at the store's root).
    pub fn parent(&self) -> Option<Self> {
        let parts: Vec<_> = self.prefix.parts().collect();
        let (_, above) = parts.split_last()?;
        let display = match self.display.rsplit_once('/') {
            Some((head, _)) if !head.is_empty() => head.to_string(),
            _ => self.display.clone(),
        };
        Some(Location {
            store: Arc::clone(&self.store),
            store_url: self.store_url.clone(),
            prefix: Path::from_iter(above.iter().cloned()),
            display,
        })
    }

    /// A full URL of `relative`, as DataFusion's table paths take it.
    pub fn url(&self, relative: &str) -> String {
        format!("{}{}", self.store_url, self.path(relative))
    }

    /// How a file `relative` to the location is shown to users (the location itself is
    /// shown by its `Display`).
    pub fn display(&self, relative: &str) -> String {
        if relative.is_empty() {
            self.display.clone()
        } else {
            format!("{}/{}", self.display, relative)
        }
    }

    /// The directory of a local location (`None` on an object store).
    pub fn local_dir(&self) -> Option<std::path::PathBuf> {
        (self.store_url.scheme() == "file").then(|| std::path::PathBuf::from(&self.display))
    }

    /// Why this location cannot be a folder: `Some("does not exist")` or `Some("is a file,
    /// not a folder")`; `None` when it is one (on an object store: when any object lies
    /// under it). Used to explain a missing manifest by its real cause.
    pub async fn not_a_folder(&self) -> Option<&'static str> {
        if self.store_url.scheme() == "file" {
            return match std::fs::metadata(&self.display) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist"),
                Ok(meta) if !meta.is_dir() => Some("is a file, not a folder"),
                _ => None,
            };
        }
        match self.store.list_with_delimiter(Some(&self.prefix)).await {
            Ok(listing) if listing.objects.is_empty() && listing.common_prefixes.is_empty() => {
                Some("does not exist (nothing under this prefix)")
            }
            _ => None,
        }
    }

    /// Reads a whole object; `Ok(None)` when it does not exist.
    pub async fn read_optional(&self, relative: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.path(relative)).await {
            Ok(result) => {
                Ok(Some(result.bytes().await.map_err(|e| Error::store(self.display(relative), e))?))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::store(self.display(relative), e)),
        }
    }

    /// Whether an object exists.
    pub async fn exists(&self, relative: &str) -> Result<bool> {
        match self.store.head(&self.path(relative)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(Error::store(self.display(relative), e)),
        }
    }

    /// Writes an object, replacing any previous one.
    pub async fn write(&self, relative: &str, bytes: Bytes) -> Result<()> {
        self.store
            .put(&self.path(relative), PutPayload::from(bytes))
            .await
            .map_err(|e| Error::store(self.display(relative), e))?;
        Ok(())
    }

    /// Writes an object only if none exists yet; `Ok(false)` when one already did.
    pub async fn create(&self, relative: &str, bytes: Bytes) -> Result<bool> {
        let options = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.store.put_opts(&self.path(relative), PutPayload::from(bytes), options).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(Error::store(self.display(relative), e)),
        }
    }

    /// The names of the immediate sub-folders of this location (`run=…`, `snapshot=…`),
    /// sorted; an absent location has none.
    pub async fn list_folders(&self) -> Result<Vec<String>> {
        let listing = match self.store.list_with_delimiter(Some(&self.prefix)).await {
            Ok(listing) => listing,
            Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(Error::store(self.to_string(), e)),
        };
        let mut names: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Deletes every object under this location (used by `--replace`).
    pub async fn delete_all(&self) -> Result<()> {
        let objects: Vec<_> = self
            .store
            .list(Some(&self.prefix))
            .try_collect()
            .await
            .map_err(|e| Error::store(self.to_string(), e))?;
        for object in objects {
            match self.store.delete(&object.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(Error::store(object.location.to_string(), e)),
            }
        }
        Ok(())
    }
}

/// Removes `.` and `..` parts so prefixes are canonical without touching the file system.
fn normalize(path: &std::path::Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `store` behind [`NamingStore`].
fn naming(store: Arc<dyn ObjectStore>, root: &Url) -> Arc<dyn ObjectStore> {
    Arc::new(NamingStore { inner: store, root: root.to_string() })
}

/// An object store whose errors name the object (or prefix) they concern. The variants
/// callers match on (`NotFound`, `AlreadyExists`, `Precondition`, ...) pass unchanged; the
/// others (a dropped connection, a timeout, a truncated body) become `Generic` errors that
/// start with the object's path.
#[derive(Debug)]
struct NamingStore {
    inner: Arc<dyn ObjectStore>,
    /// The store's URL (`file:///`, `s3://bucket/`), shown before each path.
    root: String,
}

impl std::fmt::Display for NamingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// An error with the object it concerns.
#[derive(Debug)]
struct Named {
    path: String,
    source: object_store::Error,
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.source)
    }
}

impl std::error::Error for Named {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn generic(message: String) -> object_store::Error {
    object_store::Error::Generic { store: "object store", source: message.into() }
}

fn named(error: object_store::Error, root: &str, path: &str) -> object_store::Error {
    use object_store::Error as E;
    match error {
        E::NotFound { .. }
        | E::AlreadyExists { .. }
        | E::Precondition { .. }
        | E::NotModified { .. }
        | E::NotImplemented { .. }
        | E::NotSupported { .. }
        | E::InvalidPath { .. }
        | E::UnknownConfigurationKey { .. } => error,
        other if path.is_empty() || other.to_string().contains(path) => other,
        other => E::Generic {
            store: "object store",
            source: Box::new(Named { path: format!("{root}{path}"), source: other }),
        },
    }
}

#[async_trait::async_trait]
impl ObjectStore for NamingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner
            .put_opts(location, payload, opts)
            .await
            .map_err(|e| named(e, &self.root, location.as_ref()))
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner
            .put_multipart_opts(location, opts)
            .await
            .map_err(|e| named(e, &self.root, location.as_ref()))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let shown = location.to_string();
        let (asked, head) = (options.range.clone(), options.head);
        let mut result = self
            .inner
            .get_opts(location, options)
            .await
            .map_err(|e| named(e, &self.root, &shown))?;
        if head {
            return Ok(result);
        }
        // A store that answers with fewer bytes than asked for must not reach the Parquet
        // reader, which trusts the lengths (and panics on a short buffer).
        let size = result.meta.size;
        let wanted = match &asked {
            None => Some(0..size),
            Some(object_store::GetRange::Bounded(r)) => Some(r.start..r.end.min(size)),
            Some(object_store::GetRange::Offset(o)) => Some(*o..size),
            Some(object_store::GetRange::Suffix(n)) => Some(size.saturating_sub(*n)..size),
        };
        if let Some(wanted) = wanted.filter(|w| *w != result.range) {
            let short = format!(
                "the store returned bytes {:?} of the {:?} asked for (a truncated read)",
                result.range, wanted
            );
            return Err(named(generic(short), &self.root, &shown));
        }
        if let object_store::GetResultPayload::Stream(stream) = result.payload {
            let expected = result.range.end - result.range.start;
            let (root, path) = (self.root.clone(), shown.clone());
            let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let counted = Arc::clone(&seen);
            let stream = stream
                .map_ok(move |bytes| {
                    counted.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::SeqCst);
                    bytes
                })
                .map_err(move |e| named(e, &root, &path));
            let (root, path) = (self.root.clone(), shown);
            let end = futures::stream::once(async move {
                let got = seen.load(std::sync::atomic::Ordering::SeqCst);
                (got < expected).then(|| {
                    let short = format!(
                        "the body ended after {got} of {expected} bytes (a truncated read)"
                    );
                    Err(named(generic(short), &root, &path))
                })
            })
            .filter_map(futures::future::ready);
            result.payload = object_store::GetResultPayload::Stream(Box::pin(stream.chain(end)));
        }
        Ok(result)
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let shown = location.to_string();
        let parts = self
            .inner
            .get_ranges(location, ranges)
            .await
            .map_err(|e| named(e, &self.root, &shown))?;
        for (range, bytes) in ranges.iter().zip(&parts) {
            if bytes.len() as u64 != range.end - range.start {
                let short = format!(
                    "the store returned {} bytes for range {range:?} (a truncated read)",
                    bytes.len()
                );
                return Err(named(generic(short), &self.root, &shown));
            }
        }
        if parts.len() != ranges.len() {
            let short = format!("the store returned {} of {} ranges", parts.len(), ranges.len());
            return Err(named(generic(short), &self.root, &shown));
        }
        Ok(parts)
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        let shown = prefix.map(|p| p.to_string()).unwrap_or_default();
        let root = self.root.clone();
        Box::pin(self.inner.list(prefix).map_err(move |e| named(e, &root, &shown)))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        let shown = prefix.map(|p| p.to_string()).unwrap_or_default();
        let root = self.root.clone();
        let listed = self.inner.list_with_offset(prefix, offset);
        Box::pin(listed.map_err(move |e| named(e, &root, &shown)))
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        let shown = prefix.map(|p| p.to_string()).unwrap_or_default();
        self.inner.list_with_delimiter(prefix).await.map_err(|e| named(e, &self.root, &shown))
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner
            .copy_opts(from, to, options)
            .await
            .map_err(|e| named(e, &self.root, from.as_ref()))
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::RenameOptions,
    ) -> object_store::Result<()> {
        self.inner
            .rename_opts(from, to, options)
            .await
            .map_err(|e| named(e, &self.root, from.as_ref()))
    }
}
