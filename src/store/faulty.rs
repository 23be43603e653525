//! [`FaultyKv`]: a fault-injecting [`KvBackend`] wrapper, deterministic from a seed.
//!
//! Each operation draws its faults from a [`SplitMix64`] stream in a fixed order, so a seed and the same
//! sequence of calls (and inner results) give the same faults:
//! * `put`: `rate_limit` (429, nothing written), `transient` (unavailable, nothing written), `drop_write`
//!   (`Ok`, nothing written: a lost write), `ack_lost` (written, then unavailable: a timeout after commit).
//! * `delete`: `rate_limit`, `transient` (nothing deleted).
//! * `get` / `get_many`: `transient`, then `corrupt_read` for each `Some` value (replaced by [`CORRUPT_VALUE`]).
//! * `list`: `transient`.
//!
//! Only the first fault drawn for an operation is injected.

use super::kv::{KvBackend, ListPage, PutOptions};
use crate::core::error::{Error, ErrorCode, Result};
use crate::rng::{Rng, SplitMix64};
use async_trait::async_trait;
use std::cell::{Cell, RefCell};

/// What a corrupted read returns (not JSON).
pub const CORRUPT_VALUE: &str = "\u{0}corrupt";

/// Fault probabilities (each in [0, 1]; 0 never, 1 always) and the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultOptions {
    /// A put/delete fails with `STEADFAST_STORE_RATE_LIMITED` (429) without writing.
    pub rate_limit: f64,
    /// Any operation fails with `STEADFAST_STORE_UNAVAILABLE` (writes: without writing).
    pub transient: f64,
    /// A put returns `Ok` but writes nothing.
    pub drop_write: f64,
    /// A put writes, then fails with `STEADFAST_STORE_UNAVAILABLE`.
    pub ack_lost: f64,
    /// A read value is replaced by [`CORRUPT_VALUE`].
    pub corrupt_read: f64,
    /// Seed of the random stream.
    pub seed: u64,
}

/// How many faults of each kind were injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Writes refused with 429.
    pub rate_limited: u64,
    /// Operations failed as unavailable before running.
    pub transient: u64,
    /// Puts acknowledged but not written.
    pub dropped_writes: u64,
    /// Puts written but answered with an error.
    pub acks_lost: u64,
    /// Read values corrupted.
    pub corrupted_reads: u64,
}

/// A fault-injecting wrapper around a [`KvBackend`] (see the module docs).
pub struct FaultyKv<K: KvBackend> {
    inner: K,
    opts: Cell<FaultOptions>,
    rng: RefCell<SplitMix64>,
    injected: Cell<FaultCounts>,
}

impl<K: KvBackend> FaultyKv<K> {
    /// Wraps `inner`.
    pub fn new(inner: K, opts: FaultOptions) -> FaultyKv<K> {
        FaultyKv {
            inner,
            opts: Cell::new(opts),
            rng: RefCell::new(SplitMix64::new(opts.seed)),
            injected: Cell::new(FaultCounts::default()),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &K {
        &self.inner
    }

    /// The current options.
    pub fn options(&self) -> FaultOptions {
        self.opts.get()
    }

    /// Replaces the options (e.g. all zero to let a run finish). The random stream restarts only when the
    /// seed changes.
    pub fn set_options(&self, opts: FaultOptions) {
        if opts.seed != self.opts.get().seed {
            *self.rng.borrow_mut() = SplitMix64::new(opts.seed);
        }
        self.opts.set(opts);
    }

    /// Faults injected so far.
    pub fn injected(&self) -> FaultCounts {
        self.injected.get()
    }

    fn roll(&self, p: impl Fn(&FaultOptions) -> f64) -> bool {
        let u = self.rng.borrow().unit();
        u < p(&self.opts.get())
    }

    fn note(&self, f: impl Fn(&mut FaultCounts)) {
        let mut c = self.injected.get();
        f(&mut c);
        self.injected.set(c);
    }

    fn transient(&self, op: &str) -> Result<()> {
        if self.roll(|o| o.transient) {
            self.note(|c| c.transient += 1);
            let msg = format!("KV {op} failed: 503 Service Unavailable (injected)");
            return Err(Error::new(ErrorCode::StoreUnavailable, msg).with_status(503));
        }
        Ok(())
    }

    fn write_faults(&self, op: &str) -> Result<()> {
        if self.roll(|o| o.rate_limit) {
            self.note(|c| c.rate_limited += 1);
            let msg = format!("KV {op} failed: 429 Too Many Requests (injected)");
            return Err(Error::new(ErrorCode::StoreRateLimited, msg).with_status(429));
        }
        self.transient(op)
    }

    fn corrupt(&self, v: Option<String>) -> Option<String> {
        v.map(|v| {
            if self.roll(|o| o.corrupt_read) {
                self.note(|c| c.corrupted_reads += 1);
                CORRUPT_VALUE.to_string()
            } else {
                v
            }
        })
    }
}

#[async_trait(?Send)]
impl<K: KvBackend> KvBackend for FaultyKv<K> {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        self.transient("GET")?;
        let v = self.inner.get(key).await?;
        Ok(self.corrupt(v))
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        self.transient("GET")?;
        let vs = self.inner.get_many(keys).await?;
        Ok(vs.into_iter().map(|v| self.corrupt(v)).collect())
    }

    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        self.write_faults("PUT")?;
        if self.roll(|o| o.drop_write) {
            self.note(|c| c.dropped_writes += 1);
            return Ok(());
        }
        let ack_lost = self.roll(|o| o.ack_lost);
        self.inner.put(key, value, opts).await?;
        if ack_lost {
            self.note(|c| c.acks_lost += 1);
            let msg = "KV PUT timed out after the write committed (injected)";
            return Err(Error::new(ErrorCode::StoreUnavailable, msg));
        }
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.write_faults("DELETE")?;
        self.inner.delete(key).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        self.transient("LIST")?;
        self.inner.list(prefix, cursor, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::kv::MemoryKv;
    use futures::executor::block_on;

    fn faulty(f: impl Fn(&mut FaultOptions)) -> FaultyKv<MemoryKv> {
        let mut o = FaultOptions { seed: 42, ..Default::default() };
        f(&mut o);
        FaultyKv::new(MemoryKv::new(), o)
    }
    fn put(kv: &FaultyKv<MemoryKv>, k: &str, v: &str) -> Result<()> {
        block_on(kv.put(k, v, PutOptions::default()))
    }

    #[test]
    fn rate_limit_refuses_every_write_without_writing() {
        let kv = faulty(|o| o.rate_limit = 1.0);
        kv.inner().set_raw("d", "x");
        for i in 0..20 {
            let e = put(&kv, &format!("k{i}"), "v").unwrap_err();
            assert_eq!((e.code, e.retryable, e.status), (ErrorCode::StoreRateLimited, true, Some(429)));
        }
        assert_eq!(block_on(kv.delete("d")).unwrap_err().code, ErrorCode::StoreRateLimited);
        assert_eq!((kv.inner().keys(), kv.injected().rate_limited), (vec!["d".to_string()], 21));
        assert_eq!(block_on(kv.get("d")).unwrap().as_deref(), Some("x"), "reads are untouched");
    }

    #[test]
    fn transient_fails_every_operation() {
        let kv = faulty(|o| o.transient = 1.0);
        kv.inner().set_raw("a", "1");
        assert_eq!(put(&kv, "b", "v").unwrap_err().code, ErrorCode::StoreUnavailable);
        assert_eq!(block_on(kv.delete("a")).unwrap_err().code, ErrorCode::StoreUnavailable);
        assert_eq!(block_on(kv.get("a")).unwrap_err().code, ErrorCode::StoreUnavailable);
        assert_eq!(block_on(kv.get_many(&["a".into()])).unwrap_err().code, ErrorCode::StoreUnavailable);
        assert_eq!(block_on(kv.list("", None, 10)).unwrap_err().code, ErrorCode::StoreUnavailable);
        assert!(block_on(kv.get("a")).unwrap_err().retryable);
        assert_eq!((kv.inner().keys(), kv.injected().transient), (vec!["a".to_string()], 6));
    }

    #[test]
    fn drop_write_acknowledges_but_writes_nothing() {
        let kv = faulty(|o| o.drop_write = 1.0);
        for i in 0..10 {
            put(&kv, &format!("k{i}"), "v").unwrap();
        }
        assert!(kv.inner().keys().is_empty());
        assert_eq!((kv.inner().counts().puts, kv.injected().dropped_writes), (0, 10));
    }

    #[test]
    fn ack_lost_writes_then_fails() {
        let kv = faulty(|o| o.ack_lost = 1.0);
        for i in 0..10 {
            let e = put(&kv, &format!("k{i}"), "v").unwrap_err();
            assert_eq!((e.code, e.retryable), (ErrorCode::StoreUnavailable, true));
            assert_eq!(kv.inner().raw(&format!("k{i}")).as_deref(), Some("v"), "written despite the error");
        }
        assert_eq!(kv.injected().acks_lost, 10);
    }

    #[test]
    fn corrupt_read_garbles_every_present_value() {
        let kv = faulty(|o| o.corrupt_read = 1.0);
        put(&kv, "a", "{\"ok\":true}").unwrap();
        assert_eq!(block_on(kv.get("a")).unwrap().as_deref(), Some(CORRUPT_VALUE));
        let many = block_on(kv.get_many(&["a".into(), "none".into()])).unwrap();
        assert_eq!(many, vec![Some(CORRUPT_VALUE.to_string()), None]);
        assert!(serde_json::from_str::<serde_json::Value>(CORRUPT_VALUE).is_err());
        assert_eq!(kv.inner().raw("a").as_deref(), Some("{\"ok\":true}"), "the stored value is intact");
        assert_eq!(kv.injected().corrupted_reads, 2);
    }

    #[test]
    fn zero_probabilities_are_transparent() {
        let kv = faulty(|_| {});
        for i in 0..50 {
            put(&kv, &format!("k{i:02}"), &i.to_string()).unwrap();
            assert_eq!(block_on(kv.get(&format!("k{i:02}"))).unwrap(), Some(i.to_string()));
        }
        block_on(kv.delete("k00")).unwrap();
        assert_eq!(block_on(kv.list("k", None, 1000)).unwrap().keys.len(), 49);
        assert_eq!(kv.injected(), FaultCounts::default());
    }

    #[test]
    fn deterministic_for_a_seed_and_switchable() {
        let run = |seed: u64| {
            let kv = faulty(|o| {
                *o = FaultOptions {
                    rate_limit: 0.2,
                    transient: 0.2,
                    drop_write: 0.2,
                    ack_lost: 0.2,
                    corrupt_read: 0.3,
                    seed,
                }
            });
            let out: Vec<String> = (0..200)
                .map(|i| {
                    let w = put(&kv, &format!("k{}", i % 7), "v").map_err(|e| e.code);
                    let r = block_on(kv.get(&format!("k{}", i % 5))).map_err(|e| e.code);
                    format!("{w:?}{r:?}")
                })
                .collect();
            (out, kv.inner().keys(), kv.injected(), kv)
        };
        let (a, b) = (run(7), run(7));
        assert_eq!((&a.0, &a.1, a.2), (&b.0, &b.1, b.2));
        assert_ne!(a.0, run(8).0, "another seed gives other faults");
        let c = a.2;
        assert!(
            c.rate_limited > 0 && c.transient > 0 && c.dropped_writes > 0 && c.acks_lost > 0 && c.corrupted_reads > 0
        );
        a.3.set_options(FaultOptions { seed: 7, ..Default::default() });
        put(&a.3, "k0", "w").unwrap();
        assert_eq!((block_on(a.3.get("k0")).unwrap().as_deref(), a.3.injected()), (Some("w"), c));
    }
}
