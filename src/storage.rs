//! Where snapshots and runs live: a local directory, a `file://` URL or an `s3://` URL,
//! each resolved once into an object store plus a prefix.
//!
//! Everything that reads or writes snapshot and run files goes through [`Location`], so
//! the same code serves a laptop directory and a bucket.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
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
                store: Arc::new(store),
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
            store: Arc::new(LocalFileSystem::new()),
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
        Location { store, ..self.clone() }
    }

    /// The object store behind this location.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Root URL of the store, to register it with DataFusion.
    pub fn store_url(&self) -> &Url {
        &self.store_url
    }

    /// The object path of `relative` inside this location.
    pub fn path(&self, relative: &str) -> Path {
        let mut path = self.prefix.clone();
        for part in relative.split('/').filter(|p| !p.is_empty()) {
            path = path.join(part);
        }
        path
    }

    /// A full URL of `relative`, as DataFusion's table paths take it.
    pub fn url(&self, relative: &str) -> String {
        format!("{}{}", self.store_url, self.path(relative))
    }

    /// How the location is shown to users.
    pub fn display(&self, relative: &str) -> String {
        if relative.is_empty() {
            self.display.clone()
        } else {
            format!("{}/{}", self.display, relative)
        }
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
            Err(e) => return Err(Error::store(self.display(""), e)),
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
            .map_err(|e| Error::store(self.display(""), e))?;
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
