//! Forks and comparisons (M8, M9): [`Agent::fork`] starts a new run from a step of another run's history;
//! [`Agent::compare`] lines two stored runs up.

use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::fork::{apply_patch, default_fork_id, pick_history_step, ForkPatch};
use crate::core::ids::{validate_new_run_id, validate_run_id};
use crate::core::trajectory::{compare_checkpoints, Comparison};
use crate::runtime::Agent;
use serde::{Deserialize, Serialize};

/// `fork` options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ForkOptions {
    /// The step to fork from (the newest kept history entry of that step).
    pub from_step: u32,
    /// Changes to the forked checkpoint.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(optional = nullable))]
    pub patch: ForkPatch,
    /// Id of the new run (default `<id>.fork-<n>`, the first free n).
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub new_id: Option<String>,
}

/// A created fork.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ForkResult {
    /// The new run's id.
    pub run_id: String,
    /// The step it was forked from.
    pub step: u32,
    /// Its checkpoint (in progress; resume it to run it).
    pub checkpoint: Checkpoint,
}

impl Agent {
    /// Starts a new run from a step of another run's history (M8): the newest kept entry of `from_step`,
    /// patched, saved as the new run's in-progress checkpoint. Resume it to run it. Refuses an existing target
    /// id (`STEADFAST_SESSION_EXISTS`) and an unknown step (`STEADFAST_CHECKPOINT_NOT_FOUND`, listing the kept
    /// steps).
    /// A `newId` ending with `.heal` is refused (`STEADFAST_SESSION_ID_INVALID`): only the recovery sweep
    /// creates diagnosis forks.
    pub async fn fork(&self, run_id: &str, opts: ForkOptions) -> Result<ForkResult> {
        if let Some(id) = &opts.new_id {
            validate_new_run_id(id)?;
        }
        self.fork_adjusted(run_id, opts, |_| {}).await
    }

    pub(super) async fn fork_adjusted(
        &self,
        run_id: &str,
        opts: ForkOptions,
        adjust: impl FnOnce(&mut Checkpoint),
    ) -> Result<ForkResult> {
        validate_run_id(run_id)?;
        let store = self.store().clone();
        let history = store.history(run_id, usize::MAX).await?;
        let kept: Vec<(u32, u64)> = history.iter().map(|h| (h.step, h.seq)).collect();
        let seq = pick_history_step(&kept, opts.from_step, run_id)?;
        let Some(entry) = history.into_iter().find(|h| h.seq == seq) else {
            return Err(Error::internal("picked history entry vanished"));
        };
        let new_id = match opts.new_id {
            Some(id) => id,
            None => {
                let mut n = 1;
                loop {
                    let id = default_fork_id(run_id, n);
                    if store.load(&id).await?.is_none() {
                        break id;
                    }
                    n += 1;
                    if n > 1_000 {
                        return Err(Error::invalid_input(format!("run '{run_id}' has 1,000 forks already")));
                    }
                }
            }
        };
        validate_run_id(&new_id)?;
        if store.load(&new_id).await?.is_some() {
            return Err(run_exists(&new_id));
        }
        let mut cp = apply_patch(&entry.checkpoint, &new_id, &opts.patch)?;
        // A fork is a new run: it is a diagnosis fork only if `adjust` (the sweep) marks it so.
        cp.heal_of = None;
        adjust(&mut cp);
        let checkpoint = self.write_new_run(&new_id, cp).await?;
        Ok(ForkResult { run_id: new_id, step: entry.step, checkpoint })
    }

    /// Writes `cp` as the whole first entry (a snapshot) of the new run `new_id` and returns what was written.
    /// The run exists once that entry is written by a confirmed owner of its lease. It gets an idempotency-key
    /// scope of its own (`cp.copied_scopes` says which keys the calls it copied keep). A run created under that
    /// id since the caller looked (a send, another fork, an overlapping sweep tick) is never replaced: the run is
    /// read again under the lease, and the store refuses a first entry over an existing journal; both answer
    /// `STEADFAST_SESSION_EXISTS`.
    pub(crate) async fn write_new_run(&self, new_id: &str, mut cp: Checkpoint) -> Result<Checkpoint> {
        let store = self.store().clone();
        let now = self.deps.now();
        cp.key_scope = Some(self.deps.new_key_scope(new_id));
        cp.seq = 1;
        cp.saved_at = now;
        let commit = JournalEntry { seq: 1, at: now, body: EntryBody::Snapshot { state: Box::new(cp.clone()) } };
        self.deps
            .with_lease(new_id, true, async |lease, existing| {
                if existing.is_some() {
                    return Err(run_exists(new_id));
                }
                store.commit(lease, &commit, &cp).await?;
                store.confirm_lease(lease).await
            })
            .await?;
        Ok(cp)
    }

    /// Compares two stored runs (M9): their steps, where they diverge, and the drift.
    pub async fn compare(&self, a: &str, b: &str) -> Result<Comparison> {
        let load = |id: &str| {
            let id = id.to_string();
            async move {
                self.load(&id).await?.ok_or_else(|| {
                    Error::new(ErrorCode::CheckpointNotFound, format!("run '{id}' has no checkpoint")).with_run(&id)
                })
            }
        };
        let (ca, cb) = (load(a).await?, load(b).await?);
        Ok(compare_checkpoints(&ca, &cb))
    }
}

/// The refusal of a new run whose id is taken.
fn run_exists(new_id: &str) -> Error {
    Error::new(ErrorCode::SessionExists, format!("a run '{new_id}' exists already; pick another id")).with_run(new_id)
}
