//! The key-value backend trait the journal store runs on ([`KvBackend`]), shaped after Workers KV, and
//! [`MemoryKv`], a strongly consistent in-process implementation.
//!
//! # Contract
//! * `get_many` takes at most [`MAX_BULK_GET`] keys and counts as one operation. When the values it would
//!   return total more than [`MAX_BULK_GET_BYTES`] (Workers KV: "25 MB", HTTP 413 "Total size of request
//!   exceeds the limit of 25MB") the whole read fails with `STEADFAST_STORE_FAILED` and status 413
//!   ([`bulk_too_large`] builds that error, [`is_bulk_too_large`] recognises it); it still counts as an
//!   operation. Such keys can be read in smaller bulk gets, and a single value (≤ 25 MiB) always with `get`.
//! * `put` values are strings of at most [`MAX_VALUE_BYTES`] bytes; `metadata` is JSON of at most
//!   [`MAX_METADATA_BYTES`] bytes, returned by `list`; `expiration_ttl_s`, when set, is at least
//!   [`MIN_EXPIRATION_TTL_S`]. Every backend checks a write with [`check_put`] before it changes anything.
//! * `list` returns keys with the prefix in byte order, at most [`MAX_LIST_LIMIT`] per page, with a cursor.
//! * Keys are at most [`MAX_KEY_BYTES`] bytes and not empty.
//! * Errors: `STEADFAST_STORE_RATE_LIMITED` (HTTP 429: more than one write per second to a key; retryable),
//!   `STEADFAST_STORE_UNAVAILABLE` (transient), `STEADFAST_STORE_FAILED` (permanent: bad key, too large; a
//!   retry would fail the same way). Backends over the real binding classify its errors with
//!   [`kv_error_code`].
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
/// Most bytes of values one bulk get may return. Workers KV documents "25 MB" (and Miniflare counts UTF-16 code
/// units against 25 MiB); counted here in UTF-8 bytes (never fewer than either), against the decimal 25 MB: a
/// read within this bound is within KV's on every count.
pub const MAX_BULK_GET_BYTES: usize = 25_000_000;
/// Most keys in one list page.
pub const MAX_LIST_LIMIT: usize = 1_000;
/// Largest value (25 MiB).
pub const MAX_VALUE_BYTES: usize = 25 * 1024 * 1024;
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

/// A backend whose every operation is also counted for the run being executed ([`super::meter`]), as KV bills
/// it: a read per key (a bulk read per key asked), a write, a delete, a list; made, whether it then succeeds or
/// not.
pub struct Metered<K>(pub K);

#[async_trait(?Send)]
impl<K: KvBackend> KvBackend for Metered<K> {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        super::meter::record(|u| u.reads += 1);
        self.0.get(key).await
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        super::meter::record(|u| u.reads += keys.len() as u64);
        self.0.get_many(keys).await
    }

    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        super::meter::record(|u| {
            u.writes += 1;
            u.bytes_written += value.len() as u64;
        });
        self.0.put(key, value, opts).await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        super::meter::record(|u| u.deletes += 1);
        self.0.delete(key).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        super::meter::record(|u| u.lists += 1);
        self.0.list(prefix, cursor, limit).await
    }
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

/// Checks a value against the KV size limit.
pub fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::new(
            ErrorCode::StoreFailed,
            format!("KV value is {} bytes (max {MAX_VALUE_BYTES})", value.len()),
        ));
    }
    Ok(())
}

/// Checks a put (key, value size, options) against the KV rules. Every backend calls it before writing, so
/// a write KV would refuse fails the same way everywhere, with `STEADFAST_STORE_FAILED`, and changes nothing.
pub fn check_put(key: &str, value: &str, opts: &PutOptions) -> Result<()> {
    check_key(key)?;
    check_value(value)?;
    if let Some(m) = &opts.metadata {
        // Ignored: a `Value` always serialises (and `usize::MAX` would refuse the put, never let it through).
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

/// The code of an error the Workers KV binding threw, from its text. The binding reports a refused request as
/// `KV <METHOD> failed: <status> <text>` (workerd `kv.c++`): 429 is the per-key write rate
/// (`STEADFAST_STORE_RATE_LIMITED`); any other 4xx — 400 (bad TTL, bad cursor, illegal key), 413 (value or
/// metadata too large, a bulk get over 25 MB), 414 (key too long) — is a request KV will never accept as it is
/// (`STEADFAST_STORE_FAILED`);
/// so are the binding's own validation errors (`TypeError`s about key names, serialisation failures). Anything
/// else (5xx, network, the per-invocation operation limit) is transient (`STEADFAST_STORE_UNAVAILABLE`).
pub fn kv_error_code(text: &str) -> ErrorCode {
    match kv_status(text) {
        Some(429) => ErrorCode::StoreRateLimited,
        Some(408) => ErrorCode::StoreUnavailable,
        Some(s) if (400..500).contains(&s) => ErrorCode::StoreFailed,
        Some(_) => ErrorCode::StoreUnavailable,
        None if text.contains("Too Many Requests") => ErrorCode::StoreRateLimited,
        None if [
            "Key name cannot be empty",
            "is not allowed as a key name",
            "Illegal key name",
            "exceeds limit of",
            "exceeds key length limit",
            "unable to serialize",
            "invalid kv store",
        ]
        .iter()
        .any(|needle| text.contains(needle)) =>
        {
            ErrorCode::StoreFailed
        }
        None => ErrorCode::StoreUnavailable,
    }
}

/// The crate error for an error the Workers KV binding threw, from its text: the code from [`kv_error_code`],
/// and the HTTP status when the text names one (a bulk get over 25 MB is `KV GET_BULK failed: 413 …`, which
/// [`is_bulk_too_large`] then recognises).
pub fn kv_error(text: &str) -> Error {
    let err = match kv_error_code(text) {
        ErrorCode::StoreRateLimited => {
            Error::new(ErrorCode::StoreRateLimited, format!("Workers KV refused the write (429): {text}"))
        }
        code => Error::new(code, format!("Workers KV failed: {text}")),
    };
    match kv_status(text) {
        Some(status) => err.with_status(status),
        None => err,
    }
}

/// The HTTP status in a binding's error text (`KV <METHOD> failed: <status> <text>`).
fn kv_status(text: &str) -> Option<u16> {
    let i = text.find(" failed: ")?;
    let rest = &text[i + " failed: ".len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    (digits.len() == 3).then(|| digits.parse::<u16>().ok()).flatten()
}

/// The error of a bulk get whose values total `total` bytes, over [`MAX_BULK_GET_BYTES`]: what Workers KV
/// answers (HTTP 413), as every in-process backend reports it.
pub fn bulk_too_large(total: usize) -> Error {
    Error::new(
        ErrorCode::StoreFailed,
        format!(
            "KV GET_BULK failed: 413 Total size of request exceeds the limit of 25MB ({total} bytes, max \
             {MAX_BULK_GET_BYTES})"
        ),
    )
    .with_status(413)
}

/// Whether a failed `get_many` was refused because its values total over [`MAX_BULK_GET_BYTES`] (the same keys
/// can be read in smaller bulk gets).
pub fn is_bulk_too_large(e: &Error) -> bool {
    e.code == ErrorCode::StoreFailed && e.status == Some(413)
}

/// Checks the values a bulk get read against [`MAX_BULK_GET_BYTES`] ([`bulk_too_large`] when over).
pub fn check_bulk_bytes(values: &[Option<String>]) -> Result<()> {
    let total: usize = values.iter().flatten().map(String::len).sum();
    if total > MAX_BULK_GET_BYTES {
        return Err(bulk_too_large(total));
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
    /// Bulk reads refused because their values totalled over [`MAX_BULK_GET_BYTES`] (each also counted in
    /// `bulk_gets`: an operation toward the per-invocation limit).
    pub bulk_refused: u64,
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
        let total: usize = keys.iter().filter_map(|k| inner.map.get(k)).map(|(v, _)| v.len()).sum();
        if total > MAX_BULK_GET_BYTES {
            inner.counts.bulk_refused += 1;
            return Err(bulk_too_large(total));
        }
        inner.counts.bulk_keys += keys.len() as u64;
        Ok(keys.iter().map(|k| inner.map.get(k).map(|(v, _)| v.clone())).collect())
    }

    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        check_put(key, value, &opts)?;
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
            let too_big = "v".repeat(MAX_VALUE_BYTES + 1);
            assert_eq!(kv.put("big", &too_big, PutOptions::default()).await.unwrap_err().code, ErrorCode::StoreFailed);
            let many: Vec<String> = (0..101).map(|i| format!("k{i}")).collect();
            assert_eq!(kv.get_many(&many).await.unwrap_err().code, ErrorCode::StoreFailed);
            kv.delete("a/1").await.unwrap();
            assert_eq!(kv.get("a/1").await.unwrap(), None);
            let c = kv.counts();
            assert_eq!((c.puts, c.deletes, c.bulk_gets), (3, 1, 1));
        });
    }

    #[test]
    fn values_over_25_mib_are_refused_permanently_and_write_nothing() {
        futures::executor::block_on(async {
            let kv = MemoryKv::new();
            let mut value = "é".repeat(MAX_VALUE_BYTES / 2);
            kv.put("at-limit", &value, PutOptions::default()).await.expect("exactly 25 MiB (bytes) fits");
            value.push('x');
            let err = kv.put("over", &value, PutOptions::default()).await.unwrap_err();
            assert_eq!((err.code, err.retryable), (ErrorCode::StoreFailed, false), "{err}");
            assert!(err.message.contains(&(MAX_VALUE_BYTES + 1).to_string()), "{err}");
            assert_eq!(kv.get("over").await.unwrap(), None, "nothing written");
            assert_eq!(kv.counts().puts, 1, "the refused write did not count as a write");
            // The same check every backend calls, on its own.
            assert!(check_put("k", &value[..MAX_VALUE_BYTES], &PutOptions::default()).is_ok());
            assert_eq!(check_put("k", &value, &PutOptions::default()).unwrap_err().code, ErrorCode::StoreFailed);
        });
    }

    /// A bulk get whose values total over 25 MB fails as a whole, like Workers KV's 413, with an error the
    /// journal store recognises; it counts as an operation; the same keys read in smaller bulk gets, and a value
    /// over 25 MB alone with `get`.
    #[test]
    fn bulk_gets_over_25_mb_are_refused_as_a_whole_with_a_recognisable_413() {
        futures::executor::block_on(async {
            let kv = MemoryKv::new();
            let twelve = "x".repeat(12_000_000);
            for k in ["a", "b", "c"] {
                kv.put(k, &twelve, PutOptions::default()).await.unwrap();
            }
            kv.put("big", &"y".repeat(MAX_VALUE_BYTES), PutOptions::default()).await.unwrap();
            let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<String>>();
            let err = kv.get_many(&keys(&["a", "b", "c"])).await.unwrap_err();
            assert!(is_bulk_too_large(&err), "{err:?}");
            assert_eq!((err.code, err.retryable, err.status), (ErrorCode::StoreFailed, false, Some(413)));
            assert!(err.message.contains("36000000 bytes"), "{err}");
            let two = kv.get_many(&keys(&["a", "b", "missing"])).await.unwrap();
            assert_eq!(two.iter().flatten().map(String::len).sum::<usize>(), 24_000_000, "exactly within the limit");
            assert!(is_bulk_too_large(&kv.get_many(&keys(&["big"])).await.unwrap_err()), "one value over 25 MB");
            assert_eq!(kv.get("big").await.unwrap().map(|v| v.len()), Some(MAX_VALUE_BYTES));
            let c = kv.counts();
            assert_eq!((c.bulk_gets, c.bulk_refused, c.bulk_keys, c.gets), (3, 2, 3, 1), "{c:?}");
            // At the limit exactly it is read; one byte more is refused.
            let at = MemoryKv::new();
            at.put("p", &"p".repeat(MAX_BULK_GET_BYTES - 1), PutOptions::default()).await.unwrap();
            at.put("q", "q", PutOptions::default()).await.unwrap();
            assert!(at.get_many(&keys(&["p", "q"])).await.is_ok());
            at.put("q", "qq", PutOptions::default()).await.unwrap();
            assert!(is_bulk_too_large(&at.get_many(&keys(&["p", "q"])).await.unwrap_err()));
            assert!(check_bulk_bytes(&[Some("p".repeat(MAX_BULK_GET_BYTES))]).is_ok());
            assert!(is_bulk_too_large(&check_bulk_bytes(&[Some("p".repeat(MAX_BULK_GET_BYTES + 1))]).unwrap_err()));
        });
    }

    /// The binding's 413 on a bulk get over 25 MB (workerd: `KV GET_BULK failed: <status> <text>`) is the same
    /// error as the simulators': the journal store reads those keys in smaller bulk gets. Other 413s (a value
    /// or metadata too large) keep their status too, and a status-less text gets none.
    #[test]
    fn the_bindings_bulk_read_413_is_recognised_as_too_large() {
        let e = kv_error("Error: KV GET_BULK failed: 413 Total size of request exceeds the limit of 25MB");
        assert!(is_bulk_too_large(&e), "{e:?}");
        assert_eq!((e.code, e.retryable, e.status), (ErrorCode::StoreFailed, false, Some(413)));
        let e = kv_error("js error: JsValue(Error: KV GET_BULK failed: 413 Payload Too Large\n    at f)");
        assert!(is_bulk_too_large(&e), "{e:?}");
        let e = kv_error("Error: KV PUT failed: 429 Too Many Requests");
        assert_eq!((e.code, e.status), (ErrorCode::StoreRateLimited, Some(429)));
        let e = kv_error("Error: KV GET_BULK failed: 502 Bad Gateway");
        assert_eq!((e.code, e.retryable, e.status), (ErrorCode::StoreUnavailable, true, Some(502)));
        assert!(!is_bulk_too_large(&e));
        let e = kv_error("Error: Network connection lost (key run/413/lease)");
        assert_eq!((e.code, e.status), (ErrorCode::StoreUnavailable, None));
        assert!(!is_bulk_too_large(&bulk_too_large(1).with_retryable(true).with_status(414)));
    }

    /// The texts the Workers KV binding throws (workerd `kv.c++`, miniflare's validator): a request KV will
    /// never accept is a permanent failure, the write rate is a 429, the rest is transient.
    #[test]
    fn kv_binding_errors_map_to_permanent_rate_limited_or_transient() {
        let cases = [
            ("js error: JsValue(Error: KV PUT failed: 413 Value length of 27262976 exceeds limit of 26214400.\n    at f)", ErrorCode::StoreFailed),
            ("Error: KV PUT failed: 413 Metadata length of 1100 exceeds limit of 1024.", ErrorCode::StoreFailed),
            ("Error: KV PUT failed: 414 UTF-8 encoded length of 600 exceeds key length limit of 512.", ErrorCode::StoreFailed),
            ("Error: KV GET failed: 414 UTF-8 encoded length of 513 exceeds key length limit of 512.", ErrorCode::StoreFailed),
            ("Error: KV PUT failed: 400 Invalid expiration_ttl of 10. Expiration TTL must be at least 60.", ErrorCode::StoreFailed),
            ("Error: KV GET failed: 400 Invalid cursor", ErrorCode::StoreFailed),
            ("TypeError: Key name cannot be empty.", ErrorCode::StoreFailed),
            ("TypeError: \"..\" is not allowed as a key name.", ErrorCode::StoreFailed),
            ("unable to serialize/deserialize: key must be a string", ErrorCode::StoreFailed),
            ("invalid kv store: RUNS", ErrorCode::StoreFailed),
            ("Error: KV PUT failed: 429 Too Many Requests", ErrorCode::StoreRateLimited),
            ("KV PUT failed: 429 Too many requests.", ErrorCode::StoreRateLimited),
            ("Too Many Requests", ErrorCode::StoreRateLimited),
            ("Error: KV GET failed: 500 Internal Server Error", ErrorCode::StoreUnavailable),
            ("Error: KV PUT failed: 503 Service Unavailable", ErrorCode::StoreUnavailable),
            ("Error: KV PUT failed: 408 Request Timeout", ErrorCode::StoreUnavailable),
            ("Error: Too many API requests by single Worker invocation.", ErrorCode::StoreUnavailable),
            ("Error: Network connection lost.", ErrorCode::StoreUnavailable),
            ("js error: JsValue(Error: KV GET_BULK failed: 502 Bad Gateway)", ErrorCode::StoreUnavailable),
        ];
        for (text, code) in cases {
            assert_eq!(kv_error_code(text), code, "{text}");
        }
        // A key that happens to contain 429 or 413 is not a status.
        assert_eq!(kv_error_code("Error: Network connection lost (key run/429/lease)"), ErrorCode::StoreUnavailable);
    }
}
