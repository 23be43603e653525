//! The key-value backend trait the journal store runs on ([`KvBackend`]), shaped after Workers KV, and
//! [`MemoryKv`], a strongly consistent in-process implementation.
//!
//! # Contract
//! * `get_many` takes at most [`MAX_BULK_GET`] keys and counts as one operation.
//! * `put` values are strings; `metadata` is JSON of at most [`MAX_METADATA_BYTES`] bytes, returned by
//!   `list`; `expiration_ttl_s`, when set, is at least [`MIN_EXPIRATION_TTL_S`].
//! * `list` returns keys with the prefix in byte order, at most [`MAX_LIST_LIMIT`] per page, with a cursor.
//! * Keys are at most [`MAX_KEY_BYTES`] bytes and not empty.
//! * Errors: `STEADFAST_STORE_RATE_LIMITED` (HTTP 429: more than one write per second to a key; retryable),
//!   `STEADFAST_STORE_UNAVAILABLE` (transient), `STEADFAST_STORE_FAILED` (permanent: bad key, too large).
//! * Visibility is backend-specific: `MemoryKv` is strongly consistent; Workers KV (and `SimKv`) may serve a
//!   value (or a cached miss) up to the propagation delay old in another location.

use crate::core::error::{Error, ErrorCode, Result};
use async_trait::async_trait;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Most keys in one bulk get.
pub const MAX_BULK_GET: usize = 100;
/// Most keys in one list page.
pub const MAX_LIST_LIMIT: usize = 1_000;
/// Longest key.
pub const MAX_KEY_BYTES: usize = 512;
/// Largest metadata (serialised JSON).
pub const MAX_METADATA_BYTES: usize = 1_024;
/// Shortest expiration TTL.
pub const MIN_EXPIRATION_TTL_S: u64 = 60;

/// Options of a put.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PutOptions {
    /// Metadata returned by `list` (≤ 1 KiB serialised).
    pub metadata: Option<Value>,
    /// Expire the key after this many seconds (≥ 60).
    pub expiration_ttl_s: Option<u64>,
}

/// One key of a list page.
#[derive(Clone, Debug, PartialEq)]
pub struct ListKey {
    /// Key.
    pub name: String,
    /// Its metadata.
    pub metadata: Option<Value>,
}

/// A list page.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    /// Keys, in byte order.
    pub keys: Vec<ListKey>,
    /// Cursor for the next page (`None` when complete).
    pub cursor: Option<String>,
}

/// A Workers-KV-shaped backend.
#[async_trait(?Send)]
pub trait KvBackend {
    /// Reads one key.
    async fn get(&self, key: &str) -> Result<Option<String>>;
    /// Reads up to 100 keys at once (one operation).
    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>>;
    /// Writes a key.
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()>;
    /// Deletes a key.
    async fn delete(&self, key: &str) -> Result<()>;
    /// Lists keys by prefix.
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage>;
}

/// Checks a key against the KV rules.
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key == "." || key == ".." {
        return Err(Error::new(ErrorCode::StoreFailed, format!("KV key {key:?} is not allowed")));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::new(ErrorCode::StoreFailed, format!("KV key is {} bytes (max {MAX_KEY_BYTES})", key.len())));
    }
    Ok(())
}

/// Checks put options against the KV rules.
pub fn check_put(key: &str, opts: &PutOptions) -> Result<()> {
    check_key(key)?;
    if let Some(m) = &opts.metadata {
        let n = serde_json::to_string(m).map(|s| s.len()).unwrap_or(usize::MAX);
        if n > MAX_METADATA_BYTES {
            return Err(Error::new(
                ErrorCode::StoreFailed,
                format!("KV metadata is {n} bytes (max {MAX_METADATA_BYTES})"),
            ));
        }
    }
    if let Some(ttl) = opts.expiration_ttl_s {
        if ttl < MIN_EXPIRATION_TTL_S {
            return Err(Error::new(
                ErrorCode::StoreFailed,
                format!("KV expiration TTL {ttl}s is below {MIN_EXPIRATION_TTL_S}s"),
            ));
        }
    }
    Ok(())
}

/// Checks a bulk get size.
pub fn check_bulk(keys: &[String]) -> Result<()> {
    if keys.len() > MAX_BULK_GET {
        return Err(Error::new(
            ErrorCode::StoreFailed,
            format!("bulk get of {} keys (max {MAX_BULK_GET})", keys.len()),
        ));
    }
    keys.iter().try_for_each(|k| check_key(k))
}

/// Lists one page from an ordered map (shared by in-memory backends).
pub fn list_page(
    entries: &BTreeMap<String, (String, Option<Value>)>,
    prefix: &str,
    cursor: Option<&str>,
    limit: usize,
) -> ListPage {
    let limit = limit.clamp(1, MAX_LIST_LIMIT);
    let start = cursor.unwrap_or(prefix).to_string();
    let mut keys = Vec::new();
    let mut next = None;
    for (k, (_, meta)) in entries.range(start..) {
        if !k.starts_with(prefix) {
            break;
        }
        if cursor == Some(k.as_str()) {
            continue;
        }
        if keys.len() == limit {
            next = keys.last().map(|l: &ListKey| l.name.clone());
            break;
        }
        keys.push(ListKey { name: k.clone(), metadata: meta.clone() });
    }
    ListPage { keys, cursor: next }
}

/// Operation counts of a backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvCounts {
    /// Single-key reads.
    pub gets: u64,
    /// Bulk reads (one operation each).
    pub bulk_gets: u64,
    /// Keys read by bulk reads (billed per key).
    pub bulk_keys: u64,
    /// Writes.
    pub puts: u64,
    /// Bytes written (values).
    pub bytes_written: u64,
    /// Deletes.
    pub deletes: u64,
    /// List calls.
    pub lists: u64,
    /// Writes refused with 429.
    pub rate_limited: u64,
}

impl KvCounts {
    /// Operations toward the per-invocation limit (a bulk get is one).
    pub fn operations(&self) -> u64 {
        self.gets + self.bulk_gets + self.puts + self.deletes + self.lists
    }

    /// Reads (single + bulk operations).
    pub fn reads(&self) -> u64 {
        self.gets + self.bulk_gets
    }

    /// Writes (puts + deletes: both billed as writes).
    pub fn writes(&self) -> u64 {
        self.puts + self.deletes
    }
}

#[derive(Default)]
struct MemInner {
    map: BTreeMap<String, (String, Option<Value>)>,
    counts: KvCounts,
}

/// A strongly consistent in-memory KV (no propagation delay, no rate limit). Clones share data.
#[derive(Clone, Default)]
pub struct MemoryKv(Rc<RefCell<MemInner>>);

impl MemoryKv {
    /// A new empty KV.
    pub fn new() -> MemoryKv {
        MemoryKv::default()
    }

    /// Operation counts so far.
    pub fn counts(&self) -> KvCounts {
        self.0.borrow().counts
    }

    /// Every key (for tests comparing listings).
    pub fn keys(&self) -> Vec<String> {
        self.0.borrow().map.keys().cloned().collect()
    }

    /// Raw value of a key (test helper, not counted).
    pub fn raw(&self, key: &str) -> Option<String> {
        self.0.borrow().map.get(key).map(|(v, _)| v.clone())
    }

    /// Overwrites a raw value (test helper, not counted).
    pub fn set_raw(&self, key: &str, value: &str) {
        let mut inner = self.0.borrow_mut();
        let meta = inner.map.get(key).and_then(|(_, m)| m.clone());
        inner.map.insert(key.to_string(), (value.to_string(), meta));
    }
}

#[async_trait(?Send)]
impl KvBackend for MemoryKv {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        check_key(key)?;
        let mut inner = self.0.borrow_mut();
        inner.counts.gets += 1;
        Ok(inner.map.get(key).map(|(v, _)| v.clone()))
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        check_bulk(keys)?;
        let mut inner = self.0.borrow_mut();
        inner.counts.bulk_gets += 1;
        inner.counts.bulk_keys += keys.len() as u64;
        Ok(keys.iter().map(|k| inner.map.get(k).map(|(v, _)| v.clone())).collect())
    }

    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        check_put(key, &opts)?;
        let mut inner = self.0.borrow_mut();
        inner.counts.puts += 1;
        inner.counts.bytes_written += value.len() as u64;
        inner.map.insert(key.to_string(), (value.to_string(), opts.metadata));
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<()> {
        check_key(key)?;
        let mut inner = self.0.borrow_mut();
        inner.counts.deletes += 1;
        inner.map.remove(key);
        Ok(())
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        let mut inner = self.0.borrow_mut();
        inner.counts.lists += 1;
        Ok(list_page(&inner.map, prefix, cursor, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_kv_basics_and_limits() {
        futures::executor::block_on(async {
            let kv = MemoryKv::new();
            kv.put("a/1", "x", PutOptions { metadata: Some(serde_json::json!({"s": 1})), ..Default::default() })
                .await
                .unwrap();
            kv.put("a/2", "y", PutOptions::default()).await.unwrap();
            kv.put("b/1", "z", PutOptions::default()).await.unwrap();
            assert_eq!(kv.get("a/1").await.unwrap().as_deref(), Some("x"));
            assert_eq!(kv.get_many(&["a/2".into(), "nope".into()]).await.unwrap(), vec![Some("y".into()), None]);
            let page = kv.list("a/", None, 1).await.unwrap();
            assert_eq!(page.keys.len(), 1);
            assert_eq!(page.keys[0].metadata, Some(serde_json::json!({"s": 1})));
            let page2 = kv.list("a/", page.cursor.as_deref(), 1).await.unwrap();
            assert_eq!(page2.keys[0].name, "a/2");
            assert!(page2.cursor.is_none(), "the last page has no cursor");
            assert_eq!(
                kv.put(&"k".repeat(513), "v", PutOptions::default()).await.unwrap_err().code,
                ErrorCode::StoreFailed
            );
            let big = PutOptions { metadata: Some(serde_json::json!("m".repeat(1100))), ..Default::default() };
            assert_eq!(kv.put("m", "v", big).await.unwrap_err().code, ErrorCode::StoreFailed);
            let ttl = PutOptions { expiration_ttl_s: Some(10), ..Default::default() };
            assert_eq!(kv.put("t", "v", ttl).await.unwrap_err().code, ErrorCode::StoreFailed);
            let many: Vec<String> = (0..101).map(|i| format!("k{i}")).collect();
            assert_eq!(kv.get_many(&many).await.unwrap_err().code, ErrorCode::StoreFailed);
            kv.delete("a/1").await.unwrap();
            assert_eq!(kv.get("a/1").await.unwrap(), None);
            let c = kv.counts();
            assert_eq!((c.puts, c.deletes, c.bulk_gets), (3, 1, 1));
        });
    }
}
