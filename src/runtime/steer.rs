//! Messages to a running run (steering, [`crate::core::steer`]): a send with `queue: true`, and the sweep's
//! take-up of queued messages no execution read.

use super::{Agent, RunResult, SendOptions};
use crate::core::checkpoint::{Checkpoint, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::machine::Start;
use crate::core::steer::{disposition, Disposition, QueuedMessage};
use crate::core::transcript::Message;
use crate::runtime::result::QueuedSend;
use crate::store::DueWait;

impl Agent {
    /// A send with `queue: true` (see [`SendOptions::queue`]). The message is recorded in the run's queue (its
    /// due entry first, so the sweep finds it even if nothing else reads it); then this call tries to apply it
    /// itself (a drain: [`Start::Drain`]). While another execution holds the run, or the run waits on an
    /// approval, that fails at once and nothing runs here: the result is the stored run with `queued.applied`
    /// false. A run that does not exist is created, as by a send.
    pub(crate) async fn send_queued(&self, run_id: &str, input: Vec<Message>, opts: SendOptions) -> Result<RunResult> {
        let deps = &self.deps;
        let Some(cp) = deps.store.load(run_id).await? else {
            let res = self.execute(run_id, Start::Send(input), &opts).await?;
            return res.ok_or_else(|| Error::internal("send produced no result"));
        };
        if deps.options.steer_poll_ms.is_none() {
            return Err(Error::invalid_input(format!(
                "run '{run_id}': this agent does not read queued messages (steering is off: steerPollMs is null)"
            ))
            .with_run(run_id));
        }
        let msg = QueuedMessage::new(&cp, deps.new_id("msg"), deps.now(), input, opts.interrupt)?;
        // The due entry first: one whose message never landed is dropped when it comes due.
        deps.store.put_due(&due_of(&msg)).await?;
        deps.store.put_queued(&msg).await?;
        let queued = |cp: &Checkpoint, applied: bool| {
            let mut res = RunResult::stored(cp);
            res.queued = Some(QueuedSend { message_id: msg.id.clone(), applied });
            res
        };
        match self.execute_steered(run_id, Start::Drain, &opts).await {
            Ok(Some((mut res, steered))) => {
                res.queued = Some(QueuedSend { message_id: msg.id.clone(), applied: steered.contains(&msg.id) });
                Ok(res)
            }
            Ok(None) => Ok(queued(&cp, false)),
            Err(e) if e.code == ErrorCode::SessionBusy || e.code == ErrorCode::SessionAwaitingApproval => {
                Ok(queued(&cp, false))
            }
            Err(e) => Err(e),
        }
    }

    /// The sweep's take-up of a queued message's due entry: `Ok(true)` when the entry is done with (the message
    /// was applied, by this drain or before; its run is gone; or the run is unfinished, so its next execution
    /// reads the queue), `Ok(false)` when it stays for the next time (an execution holds the finished run, or
    /// the message was not listed yet), an error when the drain failed. Only a finished run is drained here.
    pub(crate) async fn drain_due(&self, entry: &DueWait, opts: &SendOptions) -> Result<bool> {
        let store = &self.deps.store;
        let run_id = entry.run_id.as_str();
        let cp = store.load(run_id).await?;
        let queue = store.list_queued(run_id).await?;
        let Some(q) = queue.into_iter().find(|q| q.id == entry.wait_id) else {
            // Applied and deleted, or never landed.
            return Ok(true);
        };
        let cp = match cp {
            Some(cp) if disposition(&cp, &q) == Disposition::Apply => cp,
            // Applied already, queued for a deleted run, or its run is gone: the entry goes.
            _ => {
                // Ignored: a spent entry left behind is deleted by whoever lists it next.
                let _ = store.delete_queued(&q).await;
                return Ok(true);
            }
        };
        if cp.status != RunStatus::Finished {
            // Its next execution reads the queue: the resumption after its approval, or (unfinished) the sweep's
            // own resumption, with its backoff and quarantine, which a drain here would bypass.
            return Ok(true);
        }
        match self.execute_steered(run_id, Start::Drain, opts).await {
            Ok(Some((_, steered))) => Ok(steered.contains(&q.id)),
            Ok(None) => Ok(true),
            Err(e) if e.code == ErrorCode::SessionBusy || e.code == ErrorCode::SessionAwaitingApproval => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A queued message's due-index entry.
pub(crate) fn due_of(q: &QueuedMessage) -> DueWait {
    DueWait { at: q.due_at(), wait_id: q.id.clone(), run_id: q.run_id.clone() }
}
