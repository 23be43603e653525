//! The journal store's KV operations with its retries (the second, deliberate layer: see the parent module's
//! *Retries*): reads retried on transient failures, writes off the hot path retried with backoff.

use super::JournalStore;
use crate::core::backoff::Backoff;
use crate::core::error::{ErrorCode, Result};
use crate::store::kv::{KvBackend, PutOptions, MAX_LIST_LIMIT};
use std::future::Future;

/// Reads that fail transiently: 200, 400, 800 ms (`READ_RETRIES` retries).
pub(super) const READ_BACKOFF: Backoff = Backoff::exponential(200, u64::MAX);
/// Retries of a read that fails transiently.
pub(super) const READ_RETRIES: u32 = 3;
/// Writes off the hot path and lease renewals: 1 s, 2 s, 4 s … (`write_retries` retries; a renewal stops at its
/// lease's expiry).
pub(super) const WRITE_BACKOFF: Backoff = Backoff::exponential(1_000, u64::MAX);
/// A lease write refused with 429 while acquiring: KV's one second per key, every time.
pub(super) const LEASE_RATE_LIMITED: Backoff = Backoff::constant(1_000);
/// A lease write that failed transiently while acquiring: a short look again, every time.
pub(super) const LEASE_TRANSIENT: Backoff = Backoff::constant(200);

impl<K: KvBackend> JournalStore<K> {
    /// A read, retried (`READ_BACKOFF`, at most `READ_RETRIES` times) when the backend fails transiently.
    pub(super) async fn read_retrying<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut retries = 0;
        loop {
            self.count(|c| c.reads += 1);
            match op().await {
                Err(e) if e.code == ErrorCode::StoreUnavailable && retries < READ_RETRIES => {
                    self.sleep.sleep(READ_BACKOFF.window(retries)).await;
                    retries += 1;
                }
                other => return other,
            }
        }
    }

    pub(super) async fn get(&self, key: &str) -> Result<Option<String>> {
        self.read_retrying(|| self.kv.get(key)).await
    }

    /// `keys`' values (at most [`MAX_BULK_GET`] keys), in bulk gets sized to KV's limits
    /// ([`JournalStore::get_many_sized`]).
    pub(super) async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        self.get_many_sized(keys).await
    }

    pub(super) async fn list(&self, prefix: &str, cursor: Option<&str>) -> Result<crate::store::kv::ListPage> {
        self.read_retrying(|| self.kv.list(prefix, cursor, MAX_LIST_LIMIT)).await
    }

    /// A write off the hot path: retried (`WRITE_BACKOFF`, at most `write_retries` times) on 429 and
    /// transient failures.
    pub(super) async fn write_retrying<F, Fut>(&self, mut op: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let mut retries = 0;
        loop {
            self.count(|c| c.writes += 1);
            match op().await {
                Ok(()) => return Ok(()),
                Err(e) if e.retryable && retries < self.opts.write_retries => {
                    self.count(|c| c.write_retries += 1);
                    self.sleep.sleep(WRITE_BACKOFF.window(retries)).await;
                    retries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) async fn put_retrying(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        self.count(|c| c.bytes_written += value.len() as u64);
        self.write_retrying(|| self.kv.put(key, value, opts.clone())).await
    }

    pub(super) async fn delete_retrying(&self, key: &str) -> Result<()> {
        self.write_retrying(|| self.kv.delete(key)).await
    }
}
