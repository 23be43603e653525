//! [`SimKv`]: a [`KvBackend`] that behaves like production Workers KV, in simulated time.
//!
//! * **Locations.** One shared origin and a read cache per location ([`SimKv::at`]). A read serves the
//!   location's cached entry while it is younger than `propagation_ms`, including a cached **miss** (negative
//!   caching); otherwise it reads the origin and caches the result. The writing location sees its own write at
//!   once; other locations keep their cached copies until they expire.
//! * **Rate limit.** At most one write (put or delete) per key per `write_interval_ms`, by any location;
//!   a faster write fails with `STEADFAST_STORE_RATE_LIMITED` ("KV PUT failed: 429 Too Many Requests") and
//!   changes nothing. Last write wins.
//! * **List.** Eventually consistent: the origin key set as it was `list_lag_ms` ago, plus the listing
//!   location's own writes since then. Expired keys are never listed.
//! * **Counts.** Every operation counts in the location where it ran, and per key. Refused (429) writes count
//!   in `rate_limited` only; writes rejected by validation count nowhere.

use super::kv::{check_bulk, check_key, check_put, list_page, KvBackend, KvCounts, ListPage, PutOptions};
use crate::core::error::{Error, ErrorCode, Result};
use crate::runtime::traits::Clock;
use async_trait::async_trait;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Options of a [`SimKv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimOptions {
    /// Number of locations (default 1; 0 is treated as 1).
    pub locations: usize,
    /// How long a location serves a cached entry or miss (default 60 s, the default `cacheTtl`).
    pub propagation_ms: u64,
    /// Minimum time between two writes to one key (default 1 s).
    pub write_interval_ms: u64,
    /// How old the key set `list` sees is (default `None`: `propagation_ms`).
    pub list_lag_ms: Option<u64>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { locations: 1, propagation_ms: 60_000, write_interval_ms: 1_000, list_lag_ms: None }
    }
}

/// Value, metadata, expiry (ms).
type Entry = (String, Option<Value>, Option<u64>);

struct Version {
    at: u64,
    entry: Option<Entry>,
}

#[derive(Default)]
struct OriginKey {
    /// Versions in time order; pruned to what lists still need.
    versions: Vec<Version>,
    last_write: Option<u64>,
}

impl OriginKey {
    fn as_of(&self, t: u64) -> Option<&Entry> {
        self.versions.iter().rev().find(|v| v.at <= t).and_then(|v| v.entry.as_ref())
    }

    fn latest(&self) -> Option<&Entry> {
        self.versions.last().and_then(|v| v.entry.as_ref())
    }
}

fn live(e: Option<&Entry>, now: u64) -> Option<&Entry> {
    e.filter(|e| e.2.is_none_or(|x| now < x))
}

struct Inner {
    opts: SimOptions,
    origin: BTreeMap<String, OriginKey>,
    /// Per location: key → (entry or miss, cached at).
    caches: Vec<HashMap<String, (Option<Entry>, u64)>>,
    /// Per location: its own writes, key → (time, entry or tombstone).
    own: Vec<BTreeMap<String, (u64, Option<Entry>)>>,
    counts: Vec<KvCounts>,
    key_counts: HashMap<String, KvCounts>,
}

impl Inner {
    fn list_lag(&self) -> u64 {
        self.opts.list_lag_ms.unwrap_or(self.opts.propagation_ms)
    }

    fn count(&mut self, loc: Option<usize>, key: Option<&str>, f: impl Fn(&mut KvCounts)) {
        let Some(l) = loc else { return };
        f(&mut self.counts[l]);
        if let Some(k) = key {
            f(self.key_counts.entry(k.to_string()).or_default());
        }
    }

    fn current(&self, key: &str, now: u64) -> Option<&Entry> {
        live(self.origin.get(key).and_then(OriginKey::latest), now)
    }

    fn read(&mut self, loc: Option<usize>, key: &str, now: u64) -> Option<String> {
        let Some(l) = loc else { return self.current(key, now).map(|e| e.0.clone()) };
        let prop = self.opts.propagation_ms;
        let cached = self.caches[l].get(key).filter(|(_, at)| now.saturating_sub(*at) < prop).map(|(e, _)| e.clone());
        let entry = cached.unwrap_or_else(|| {
            let e = self.current(key, now).cloned();
            self.caches[l].insert(key.to_string(), (e.clone(), now));
            e
        });
        live(entry.as_ref(), now).map(|e| e.0.clone())
    }

    /// A put (`entry` set) or delete, rate-limited per key.
    fn write(&mut self, loc: Option<usize>, key: &str, entry: Option<Entry>, now: u64) -> Result<()> {
        let (interval, lag) = (self.opts.write_interval_ms, self.list_lag());
        let last = self.origin.get(key).and_then(|k| k.last_write);
        if last.is_some_and(|t| now.saturating_sub(t) < interval) {
            self.count(loc, Some(key), |c| c.rate_limited += 1);
            let op = if entry.is_some() { "PUT" } else { "DELETE" };
            let msg = format!("KV {op} failed: 429 Too Many Requests");
            return Err(Error::new(ErrorCode::StoreRateLimited, msg).with_status(429));
        }
        match entry.as_ref().map(|e| e.0.len() as u64) {
            Some(n) => self.count(loc, Some(key), |c| {
                c.puts += 1;
                c.bytes_written += n;
            }),
            None => self.count(loc, Some(key), |c| c.deletes += 1),
        }
        let k = self.origin.entry(key.to_string()).or_default();
        k.last_write = Some(now);
        k.versions.push(Version { at: now, entry: entry.clone() });
        let cut = now.saturating_sub(lag);
        if let Some(i) = k.versions.iter().rposition(|v| v.at <= cut) {
            k.versions.drain(..i);
        }
        if let Some(l) = loc {
            self.caches[l].insert(key.to_string(), (entry.clone(), now));
            self.own[l].insert(key.to_string(), (now, entry));
        }
        Ok(())
    }

    fn list(&self, loc: Option<usize>, prefix: &str, cursor: Option<&str>, limit: usize, now: u64) -> ListPage {
        let t = if loc.is_some() { now.saturating_sub(self.list_lag()) } else { now };
        let mut map = BTreeMap::new();
        for (k, ok) in self.origin.range(prefix.to_string()..).take_while(|(k, _)| k.starts_with(prefix)) {
            if let Some(e) = live(ok.as_of(t), now) {
                map.insert(k.clone(), (String::new(), e.1.clone()));
            }
        }
        if let Some(l) = loc {
            for (k, (at, e)) in self.own[l].range(prefix.to_string()..).take_while(|(k, _)| k.starts_with(prefix)) {
                if *at > t {
                    match live(e.as_ref(), now) {
                        Some(e) => map.insert(k.clone(), (String::new(), e.1.clone())),
                        None => map.remove(k),
                    };
                }
            }
        }
        list_page(&map, prefix, cursor, limit)
    }
}

/// A simulated multi-location Workers KV (see the module docs). Clones share the state and location.
#[derive(Clone)]
pub struct SimKv {
    inner: Rc<RefCell<Inner>>,
    clock: Rc<dyn Clock>,
    /// `None`: the origin oracle.
    loc: Option<usize>,
}

impl SimKv {
    /// A new empty KV; the handle is location 0.
    pub fn new(clock: Rc<dyn Clock>, opts: SimOptions) -> SimKv {
        let opts = SimOptions { locations: opts.locations.max(1), ..opts };
        let n = opts.locations;
        let inner = Inner {
            opts,
            origin: BTreeMap::new(),
            caches: vec![HashMap::new(); n],
            own: vec![BTreeMap::new(); n],
            counts: vec![KvCounts::default(); n],
            key_counts: HashMap::new(),
        };
        SimKv { inner: Rc::new(RefCell::new(inner)), clock, loc: Some(0) }
    }

    fn check_location(&self, location: usize) {
        let n = self.inner.borrow().opts.locations;
        assert!(location < n, "SimKv location {location} out of range (the KV has {n} locations)");
    }

    /// A handle on `location` over the same state.
    ///
    /// # Panics
    /// When `location` is not below `SimOptions::locations` (a test utility: a wrong location is a test bug).
    pub fn at(&self, location: usize) -> SimKv {
        self.check_location(location);
        SimKv { inner: self.inner.clone(), clock: self.clock.clone(), loc: Some(location) }
    }

    /// An oracle handle with no cache and no list lag: reads and lists see the latest origin state. Its writes
    /// go to the origin (rate-limited like any write). Nothing it does is counted.
    pub fn origin(&self) -> SimKv {
        SimKv { inner: self.inner.clone(), clock: self.clock.clone(), loc: None }
    }

    /// This handle's location (`None` for the origin oracle).
    pub fn location(&self) -> Option<usize> {
        self.loc
    }

    /// The options (with `locations` at least 1).
    pub fn options(&self) -> SimOptions {
        self.inner.borrow().opts
    }

    /// Operation counts summed over every location.
    pub fn counts(&self) -> KvCounts {
        self.inner.borrow().counts.iter().fold(KvCounts::default(), |a, c| KvCounts {
            gets: a.gets + c.gets,
            bulk_gets: a.bulk_gets + c.bulk_gets,
            bulk_keys: a.bulk_keys + c.bulk_keys,
            puts: a.puts + c.puts,
            bytes_written: a.bytes_written + c.bytes_written,
            deletes: a.deletes + c.deletes,
            lists: a.lists + c.lists,
            rate_limited: a.rate_limited + c.rate_limited,
        })
    }

    /// Operation counts of one location.
    ///
    /// # Panics
    /// When `location` is out of range, like [`SimKv::at`].
    pub fn counts_at(&self, location: usize) -> KvCounts {
        self.check_location(location);
        self.inner.borrow().counts[location]
    }

    /// Counts of one key over every location: `gets`, `bulk_keys` (reads inside bulk gets), `puts`,
    /// `bytes_written`, `deletes`, `rate_limited`.
    pub fn key_counts(&self, key: &str) -> KvCounts {
        self.inner.borrow().key_counts.get(key).copied().unwrap_or_default()
    }

    /// Zeroes every count.
    pub fn reset_counts(&self) {
        let mut inner = self.inner.borrow_mut();
        inner.counts.iter_mut().for_each(|c| *c = KvCounts::default());
        inner.key_counts.clear();
    }

    /// Every live key at the origin, in byte order (test helper, not counted).
    pub fn keys(&self) -> Vec<String> {
        let now = self.clock.now_ms();
        let inner = self.inner.borrow();
        inner.origin.iter().filter(|(_, k)| live(k.latest(), now).is_some()).map(|(k, _)| k.clone()).collect()
    }

    /// The origin's current value of a key (test helper, not counted).
    pub fn raw(&self, key: &str) -> Option<String> {
        self.inner.borrow().current(key, self.clock.now_ms()).map(|e| e.0.clone())
    }

    /// Overwrites a value at the origin, keeping its metadata and expiry (test helper: not counted, not
    /// rate-limited). Every location's cache entry for the key is dropped, so all reads see it at once. A key
    /// that was absent shows up in other locations' lists after the list lag, like a write.
    pub fn set_raw(&self, key: &str, value: &str) {
        let now = self.clock.now_ms();
        let mut inner = self.inner.borrow_mut();
        let k = inner.origin.entry(key.to_string()).or_default();
        match k.versions.last_mut() {
            Some(Version { entry: Some(e), .. }) if e.2.is_none_or(|x| now < x) => e.0 = value.to_string(),
            _ => k.versions.push(Version { at: now, entry: Some((value.to_string(), None, None)) }),
        }
        for c in inner.caches.iter_mut() {
            c.remove(key);
        }
    }
}

#[async_trait(?Send)]
impl KvBackend for SimKv {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        check_key(key)?;
        let mut inner = self.inner.borrow_mut();
        inner.count(self.loc, Some(key), |c| c.gets += 1);
        Ok(inner.read(self.loc, key, self.clock.now_ms()))
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        check_bulk(keys)?;
        let now = self.clock.now_ms();
        let mut inner = self.inner.borrow_mut();
        inner.count(self.loc, None, |c| {
            c.bulk_gets += 1;
            c.bulk_keys += keys.len() as u64;
        });
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if self.loc.is_some() {
                inner.key_counts.entry(k.clone()).or_default().bulk_keys += 1;
            }
            out.push(inner.read(self.loc, k, now));
        }
        Ok(out)
    }

    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        check_put(key, value, &opts)?;
        let now = self.clock.now_ms();
        let expires = opts.expiration_ttl_s.map(|s| now.saturating_add(s.saturating_mul(1_000)));
        let entry = (value.to_string(), opts.metadata, expires);
        self.inner.borrow_mut().write(self.loc, key, Some(entry), now)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        check_key(key)?;
        self.inner.borrow_mut().write(self.loc, key, None, self.clock.now_ms())
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        let mut inner = self.inner.borrow_mut();
        inner.count(self.loc, None, |c| c.lists += 1);
        Ok(inner.list(self.loc, prefix, cursor, limit, self.clock.now_ms()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::platform::ManualClock;
    use futures::executor::block_on;
    use serde_json::json;

    fn sim(locations: usize) -> (ManualClock, SimKv) {
        let clock = ManualClock::new(1_000_000);
        (clock.clone(), SimKv::new(Rc::new(clock), SimOptions { locations, ..Default::default() }))
    }
    fn put(kv: &SimKv, k: &str, v: &str) -> Result<()> {
        block_on(kv.put(k, v, PutOptions::default()))
    }
    fn get(kv: &SimKv, k: &str) -> Option<String> {
        block_on(kv.get(k)).unwrap()
    }
    fn names(kv: &SimKv, prefix: &str) -> Vec<String> {
        block_on(kv.list(prefix, None, 1000)).unwrap().keys.into_iter().map(|k| k.name).collect()
    }

    #[test]
    fn write_then_read_in_same_location_is_immediate() {
        let (_, kv) = sim(2);
        put(&kv, "a", "1").unwrap();
        assert_eq!(get(&kv, "a").as_deref(), Some("1"));
        let e = block_on(kv.get_many(&vec!["x".to_string(); 101])).unwrap_err();
        assert_eq!(e.code, ErrorCode::StoreFailed, "validated like MemoryKv");
        assert_eq!(put(&kv, "", "v").unwrap_err().code, ErrorCode::StoreFailed);
    }

    #[test]
    fn other_location_serves_stale_value_until_propagation() {
        let (clock, kv) = sim(2);
        put(&kv, "a", "1").unwrap();
        assert_eq!(get(&kv.at(1), "a").as_deref(), Some("1"));
        clock.advance(1_000);
        put(&kv, "a", "2").unwrap();
        assert_eq!(get(&kv, "a").as_deref(), Some("2"));
        assert_eq!(get(&kv.at(1), "a").as_deref(), Some("1"), "stale in location 1");
        clock.advance(59_000);
        assert_eq!(get(&kv.at(1), "a").as_deref(), Some("2"), "fresh once propagation passed");
    }

    #[test]
    fn negative_caching_hides_a_new_write() {
        let (clock, kv) = sim(2);
        assert_eq!(get(&kv.at(1), "a"), None);
        put(&kv, "a", "1").unwrap();
        clock.advance(59_999);
        assert_eq!(block_on(kv.at(1).get_many(&["a".into()])).unwrap(), vec![None], "cached miss");
        clock.advance(1);
        assert_eq!(get(&kv.at(1), "a").as_deref(), Some("1"));
    }

    #[test]
    fn same_key_writes_are_rate_limited_per_second() {
        let (clock, kv) = sim(2);
        put(&kv, "a", "1").unwrap();
        put(&kv, "b", "1").unwrap();
        clock.advance(999);
        let e = put(&kv.at(1), "a", "2").unwrap_err();
        assert_eq!((e.code, e.retryable, e.status), (ErrorCode::StoreRateLimited, true, Some(429)));
        assert!(e.message.contains("429 Too Many Requests"));
        assert_eq!(block_on(kv.delete("a")).unwrap_err().code, ErrorCode::StoreRateLimited);
        assert_eq!(kv.raw("a").as_deref(), Some("1"), "a refused write changes nothing");
        clock.advance(1);
        put(&kv.at(1), "a", "2").unwrap();
        assert_eq!(kv.raw("a").as_deref(), Some("2"));
    }

    #[test]
    fn last_write_wins_across_locations() {
        let (clock, kv) = sim(3);
        put(&kv.at(1), "a", "one").unwrap();
        clock.advance(1_000);
        put(&kv.at(2), "a", "two").unwrap();
        assert_eq!((get(&kv.at(1), "a").as_deref(), get(&kv.at(2), "a").as_deref()), (Some("one"), Some("two")));
        assert_eq!(get(&kv.origin(), "a").as_deref(), Some("two"), "the oracle sees the latest at once");
        clock.advance(60_000);
        assert_eq!((get(&kv.at(0), "a"), get(&kv.at(1), "a")), (Some("two".into()), Some("two".into())));
    }

    #[test]
    fn list_lags_elsewhere_but_not_for_the_writer() {
        let (clock, kv) = sim(2);
        let meta = PutOptions { metadata: Some(json!({"s": 1})), ..Default::default() };
        block_on(kv.put("p/a", "1", meta)).unwrap();
        put(&kv, "p/b", "1").unwrap();
        assert_eq!(names(&kv, "p/"), ["p/a", "p/b"]);
        assert!(names(&kv.at(1), "p/").is_empty());
        assert_eq!(names(&kv.origin(), "p/"), ["p/a", "p/b"]);
        clock.advance(60_000);
        let page = block_on(kv.at(1).list("p/", None, 1)).unwrap();
        assert_eq!((page.keys[0].name.as_str(), &page.keys[0].metadata), ("p/a", &Some(json!({"s": 1}))));
        let page2 = block_on(kv.at(1).list("p/", page.cursor.as_deref(), 1)).unwrap();
        assert_eq!((page2.keys[0].name.as_str(), page2.cursor), ("p/b", None));
        block_on(kv.delete("p/a")).unwrap();
        assert_eq!(names(&kv, "p/"), ["p/b"]);
        assert_eq!(names(&kv.at(1), "p/"), ["p/a", "p/b"], "the delete is not listed elsewhere yet");
        clock.advance(60_000);
        assert_eq!(names(&kv.at(1), "p/"), ["p/b"]);
        assert_eq!(kv.keys(), ["p/b"]);
    }

    #[test]
    fn expiration_ttl_expires_keys() {
        let (clock, kv) = sim(1);
        let ttl = |s| PutOptions { expiration_ttl_s: Some(s), ..Default::default() };
        assert_eq!(block_on(kv.put("t", "v", ttl(10))).unwrap_err().code, ErrorCode::StoreFailed);
        block_on(kv.put("t", "v", ttl(60))).unwrap();
        clock.advance(59_999);
        assert_eq!(get(&kv, "t").as_deref(), Some("v"));
        clock.advance(1);
        assert_eq!((get(&kv, "t"), kv.raw("t"), kv.keys().len(), names(&kv, "").len()), (None, None, 0, 0));
    }

    #[test]
    fn counters_per_key_per_location_and_total() {
        let (clock, kv) = sim(2);
        put(&kv, "a", "xyz").unwrap();
        assert!(put(&kv.at(1), "a", "q").is_err());
        get(&kv.at(1), "a");
        block_on(kv.at(1).get_many(&["a".into(), "b".into()])).unwrap();
        names(&kv, "");
        clock.advance(1_000);
        block_on(kv.at(1).delete("a")).unwrap();
        let a = kv.key_counts("a");
        assert_eq!((a.gets, a.bulk_keys, a.puts, a.bytes_written, a.rate_limited, a.deletes), (1, 1, 1, 3, 1, 1));
        let (c0, c1, t) = (kv.counts_at(0), kv.counts_at(1), kv.counts());
        assert_eq!((c0.puts, c0.lists, c0.gets, c0.rate_limited), (1, 1, 0, 0));
        assert_eq!((c1.gets, c1.bulk_gets, c1.bulk_keys, c1.rate_limited, c1.deletes), (1, 1, 2, 1, 1));
        assert_eq!((t.operations(), t.rate_limited, t.bytes_written), (5, 1, 3));
        get(&kv.origin(), "a");
        assert_eq!(kv.counts(), t, "the oracle is not counted");
        kv.reset_counts();
        assert_eq!((kv.counts(), kv.key_counts("a")), (KvCounts::default(), KvCounts::default()));
    }

    #[test]
    fn set_raw_bypasses_limits_and_caches() {
        let (_, kv) = sim(2);
        put(&kv, "a", "1").unwrap();
        get(&kv.at(1), "a");
        kv.set_raw("a", "garbage");
        assert_eq!((get(&kv, "a"), get(&kv.at(1), "a")), (Some("garbage".into()), Some("garbage".into())));
        assert_eq!(kv.counts().puts, 1);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn unknown_location_panics() {
        sim(2).1.at(2);
    }
}
