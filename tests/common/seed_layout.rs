//! The seed's KV layout, as a comparison baseline (not shipped): every boundary rewrites the whole checkpoint
//! under one key, writes a whole-checkpoint history entry, and rewrites the history index (read-modify-write).
//! Rate-limited writes are retried with backoff from 1 s, as the KV docs recommend.
#![allow(dead_code)]

use async_trait::async_trait;
use std::cell::Cell;
use std::rc::Rc;
use steadfast::core::approval::ApprovalRecord;
use steadfast::core::checkpoint::{Checkpoint, JournalEntry};
use steadfast::runtime::Sleep;
use steadfast::store::kv::{KvBackend, PutOptions};
use steadfast::store::{HistoryEntry, Lease, LeaseOptions, PendingRun, RunStore, StoreCounters};
use steadfast::{Error, ErrorCode, Result};

pub struct SeedLayoutStore<K: KvBackend> {
    pub kv: K,
    pub sleep: Rc<dyn Sleep>,
    pub history_limit: usize,
    pub writes: Cell<u64>,
    pub reads: Cell<u64>,
    pub bytes: Cell<u64>,
    pub commits: Cell<u64>,
    pub rate_limited: Cell<u64>,
}

impl<K: KvBackend> SeedLayoutStore<K> {
    pub fn new(kv: K, sleep: Rc<dyn Sleep>) -> Self {
        SeedLayoutStore {
            kv,
            sleep,
            history_limit: 50,
            writes: Cell::new(0),
            reads: Cell::new(0),
            bytes: Cell::new(0),
            commits: Cell::new(0),
            rate_limited: Cell::new(0),
        }
    }

    async fn put(&self, key: &str, value: &str) -> Result<()> {
        let mut delay = 1_000;
        for _ in 0..8 {
            self.writes.set(self.writes.get() + 1);
            self.bytes.set(self.bytes.get() + value.len() as u64);
            match self.kv.put(key, value, PutOptions::default()).await {
                Err(e) if e.code == ErrorCode::StoreRateLimited => {
                    self.rate_limited.set(self.rate_limited.get() + 1);
                    self.sleep.sleep(delay).await;
                    delay *= 2;
                }
                other => return other,
            }
        }
        Err(Error::new(ErrorCode::StoreRateLimited, "gave up"))
    }

    async fn get(&self, key: &str) -> Result<Option<String>> {
        self.reads.set(self.reads.get() + 1);
        self.kv.get(key).await
    }
}

#[async_trait(?Send)]
impl<K: KvBackend> RunStore for SeedLayoutStore<K> {
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        match self.get(&format!("cp/{run_id}")).await? {
            None => Ok(None),
            Some(s) => {
                serde_json::from_str(&s).map(Some).map_err(|e| Error::new(ErrorCode::CheckpointCorrupt, e.to_string()))
            }
        }
    }

    async fn acquire_lease(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let lease = Lease { run_id: run_id.into(), owner: owner.into(), epoch: 1, expires_at: now_ms + opts.ttl_ms };
        self.get(&format!("cp/{run_id}#lease")).await?;
        self.put(&format!("cp/{run_id}#lease"), &serde_json::to_string(&lease).unwrap()).await?;
        self.get(&format!("cp/{run_id}#lease")).await?;
        Ok(lease)
    }

    async fn renew_lease(&self, lease: &Lease, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let l = Lease { expires_at: now_ms + opts.ttl_ms, ..lease.clone() };
        self.put(&format!("cp/{}#lease", lease.run_id), &serde_json::to_string(&l).unwrap()).await?;
        Ok(l)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.put(&format!("cp/{}#lease", lease.run_id), "{}").await
    }

    async fn commit(&self, lease: &Lease, entry: &JournalEntry, state: &Checkpoint) -> Result<()> {
        let id = &lease.run_id;
        self.commits.set(self.commits.get() + 1);
        let full = serde_json::to_string(state).unwrap();
        self.put(&format!("cp/{id}"), &full).await?;
        self.put(&format!("cp/{id}#history/{}", entry.seq), &full).await?;
        let idx = self.get(&format!("cp/{id}#history")).await?;
        let mut ids: Vec<u64> = idx.and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default();
        ids.push(entry.seq);
        while ids.len() > self.history_limit {
            let gone = ids.remove(0);
            self.writes.set(self.writes.get() + 1);
            let _ = self.kv.delete(&format!("cp/{id}#history/{gone}")).await;
        }
        self.put(&format!("cp/{id}#history"), &serde_json::to_string(&ids).unwrap()).await
    }

    async fn delete(&self, run_id: &str) -> Result<()> {
        self.kv.delete(&format!("cp/{run_id}")).await
    }

    async fn history(&self, _run_id: &str, _limit: usize) -> Result<Vec<HistoryEntry>> {
        Ok(Vec::new())
    }

    async fn pending(&self) -> Result<Vec<PendingRun>> {
        Ok(Vec::new())
    }

    async fn put_approval(&self, record: &ApprovalRecord) -> Result<()> {
        self.put(&format!("approval/{}", record.id), &serde_json::to_string(record).unwrap()).await
    }

    async fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>> {
        Ok(self.get(&format!("approval/{id}")).await?.and_then(|s| serde_json::from_str(&s).ok()))
    }

    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        Ok(Vec::new())
    }

    async fn delete_approval(&self, id: &str) -> Result<()> {
        self.kv.delete(&format!("approval/{id}")).await
    }

    /// The seed had no waits; this keeps them as the journal store does (one key each, time-ordered).
    async fn put_due(&self, due: &steadfast::store::DueWait) -> Result<()> {
        self.put(&format!("due/{:016}/{}/{}", due.at, due.wait_id, due.run_id), "").await
    }

    async fn list_due(&self, until: u64, limit: usize) -> Result<Vec<steadfast::store::DueWait>> {
        let page = self.kv.list("due/", None, 1_000).await?;
        let mut out = Vec::new();
        for k in page.keys {
            let mut parts = k.name["due/".len()..].splitn(3, '/');
            let (Some(at), Some(wait), Some(run)) = (parts.next(), parts.next(), parts.next()) else { continue };
            let at: u64 = at.parse().unwrap_or(u64::MAX);
            if at > until || out.len() >= limit {
                break;
            }
            out.push(steadfast::store::DueWait { at, wait_id: wait.into(), run_id: run.into() });
        }
        Ok(out)
    }

    async fn delete_due(&self, due: &steadfast::store::DueWait) -> Result<()> {
        self.kv.delete(&format!("due/{:016}/{}/{}", due.at, due.wait_id, due.run_id)).await
    }

    /// The seed had no queues; this keeps them as the journal store does (one key each, in queue order).
    async fn put_queued(&self, msg: &steadfast::store::QueuedMessage) -> Result<()> {
        self.put(&format!("queue/{}/{}", msg.run_id, msg.order_key()), &serde_json::to_string(msg).unwrap()).await
    }

    async fn list_queued(&self, run_id: &str) -> Result<Vec<steadfast::store::QueuedMessage>> {
        let page = self.kv.list(&format!("queue/{run_id}/"), None, 1_000).await?;
        let mut out = Vec::new();
        for k in page.keys {
            if let Some(v) = self.get(&k.name).await? {
                out.extend(serde_json::from_str(&v).ok());
            }
        }
        Ok(out)
    }

    async fn delete_queued(&self, msg: &steadfast::store::QueuedMessage) -> Result<()> {
        self.kv.delete(&format!("queue/{}/{}", msg.run_id, msg.order_key())).await
    }

    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        self.get(&format!("state/{name}")).await
    }

    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        self.put(&format!("state/{name}"), value).await
    }

    fn counters(&self) -> StoreCounters {
        StoreCounters {
            reads: self.reads.get(),
            writes: self.writes.get(),
            bytes_written: self.bytes.get(),
            write_retries: self.rate_limited.get(),
            commits: self.commits.get(),
            commit_writes: 0,
            commit_bytes: 0,
        }
    }
}

pub fn transcript_bytes(messages: &[steadfast::core::transcript::Message]) -> u64 {
    serde_json::to_string(messages).map(|s| s.len() as u64).unwrap_or(0)
}
