//! Recovery fanned out through a queue (KV mode at scale): a sweep tick that has a [`RecoveryQueue`] sends one
//! message per due run instead of resuming runs itself ([`Agent::sweep_fanning_out`]), and queue consumers
//! resume them ([`Agent::consume_recovery`]), as many at once as the platform runs consumers. The run's lease is
//! the only exclusion: a message delivered twice, late or to two consumers at once is harmless (the second finds
//! the run busy, finished, or not due).

use super::sweep::{candidate, exec_opts, SweepListener};
use crate::core::checkpoint::RunStatus;
use crate::core::error::{Error, ErrorCode, ErrorInfo, Result};
use crate::core::sweep::{plan, Plan, SweepOptions, SweepState};
use crate::runtime::Agent;
use crate::store::PendingRun;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Messages a queue takes in one batch (Cloudflare Queues: 100).
pub const MAX_QUEUE_BATCH: usize = 100;

/// Where a sweep tick sends the runs it wants resumed (the Worker: a Cloudflare Queue's producer binding).
#[async_trait(?Send)]
pub trait RecoveryQueue {
    /// Sends `bodies` (at most [`MAX_QUEUE_BATCH`], each a [`RecoveryMessage`] as JSON). An error means none or
    /// only some were sent: the tick resumes the rest of its runs itself, and the unsent ones come round again.
    async fn send_batch(&self, bodies: Vec<String>) -> Result<()>;
}

/// One message of the recovery queue: a run to resume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryMessage {
    /// The run.
    pub run_id: String,
    /// For a diagnosis fork: the run it heals (as listed; confirmed by the fork's own checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heal_of: Option<String>,
}

impl RecoveryMessage {
    /// The message as JSON.
    pub fn to_json(&self) -> String {
        // Ignored (`unwrap_or_default`): two strings always serialise.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a message body; anything else is `STEADFAST_INVALID_INPUT`.
    pub fn parse(body: &str) -> Result<RecoveryMessage> {
        let m: RecoveryMessage = serde_json::from_str(body)
            .map_err(|e| Error::new(ErrorCode::InvalidInput, format!("not a recovery message: {e}")))?;
        crate::core::ids::validate_run_id(&m.run_id)
            .map_err(|e| Error::new(ErrorCode::InvalidInput, format!("recovery message: {}", e.message)))?;
        Ok(m)
    }
}

/// What a consumer did with one recovery message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Consumed {
    /// The run the message named (empty for a message that could not be read).
    pub run_id: String,
    /// `recovered` (resumed and finished), `resumed` (resumed; it paused or stopped again), `failed` (resumed; it
    /// failed again: its attempt is recorded and the sweep sends it again after its backoff), `busy` (another
    /// execution holds its lease), `not-due` (its backoff has not passed, it waits for a person, it is
    /// quarantined or not retryable, or it is at the attempt cap: the sweep decides those), `outage` (the outage
    /// breaker is open: the sweep's probe goes first), `gone` (finished or deleted), `invalid` (not a recovery
    /// message).
    pub outcome: String,
    /// Why, for `failed` and `invalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

impl Consumed {
    fn new(run_id: &str, outcome: &str) -> Consumed {
        Consumed { run_id: run_id.to_string(), outcome: outcome.to_string(), error: None }
    }
}

impl Agent {
    /// Resumes the run one recovery message names, if the sweep's plan for it, read again now, still says to
    /// resume it: a message may come late, twice, or after another consumer finished the run. Acknowledge the
    /// message on `Ok` (whatever the outcome: a run it did not resume comes round with a later tick); on `Err`
    /// (the run or the sweep state could not be read) let the queue deliver it again. A message that is not a
    /// recovery message is `Ok` with outcome `invalid` (delivering it again would not help).
    pub async fn consume_recovery(
        &self,
        body: &str,
        opts: &SweepOptions,
        listener: &dyn SweepListener,
    ) -> Result<Consumed> {
        let msg = match RecoveryMessage::parse(body) {
            Ok(m) => m,
            Err(e) => return Ok(Consumed { error: Some(e.info()), ..Consumed::new("", "invalid") }),
        };
        let id = msg.run_id.as_str();
        let state: SweepState = match self.store().get_state("sweep").await? {
            // A state the sweep cannot read is replaced by its next tick with the initial one.
            Some(text) => serde_json::from_str(&text).unwrap_or_default(),
            None => SweepState::default(),
        };
        let Some(cp) = self.store().load(id).await? else { return Ok(Consumed::new(id, "gone")) };
        if cp.status == RunStatus::Finished {
            return Ok(Consumed::new(id, "gone"));
        }
        let run = PendingRun::of(&cp);
        match plan(opts, &state, self.deps.now(), &candidate(&run)) {
            Plan::Resume => {}
            Plan::Outage => return Ok(Consumed::new(id, "outage")),
            _ => return Ok(Consumed::new(id, "not-due")),
        }
        let res = self.resume_run(id, exec_opts(listener)).await;
        Ok(match res {
            Ok(Some(result)) if result.status == RunStatus::Finished => {
                // A diagnosis fork that finished replaces its original: the fork's own marker confirms it.
                let original = msg.heal_of.as_deref().filter(|o| cp.heal_of.as_deref() == Some(*o));
                let mut report = super::SweepReport::default();
                self.recovered(id, original, &result, &mut report, listener).await;
                Consumed::new(id, "recovered")
            }
            Ok(Some(_)) => Consumed::new(id, "resumed"),
            Ok(None) => Consumed::new(id, "gone"),
            Err(e) if e.code == ErrorCode::SessionBusy => Consumed::new(id, "busy"),
            Err(e) => {
                // Ignored: the listener's own failure has no one else to tell.
                let _ = listener.on_error(&e, Some(id));
                Consumed { error: Some(e.info()), ..Consumed::new(id, "failed") }
            }
        })
    }
}

/// A recovery queue in memory for tests (feature `testing`): what was sent waits in order until taken; a send can
/// be made to fail.
#[cfg(feature = "testing")]
#[derive(Clone, Default)]
pub struct SimQueue(std::rc::Rc<SimQueueState>);

#[cfg(feature = "testing")]
#[derive(Default)]
struct SimQueueState {
    waiting: std::cell::RefCell<std::collections::VecDeque<String>>,
    sends: std::cell::Cell<u64>,
    sent: std::cell::Cell<u64>,
    fail_sends: std::cell::Cell<u32>,
}

#[cfg(feature = "testing")]
impl SimQueue {
    /// An empty queue.
    pub fn new() -> SimQueue {
        SimQueue::default()
    }
    /// The next `n` sends fail (with `STEADFAST_STORE_UNAVAILABLE`, sending nothing).
    pub fn fail_sends(&self, n: u32) {
        self.0.fail_sends.set(n);
    }
    /// Takes up to `n` messages from the front.
    pub fn take(&self, n: usize) -> Vec<String> {
        let mut w = self.0.waiting.borrow_mut();
        let n = n.min(w.len());
        w.drain(..n).collect()
    }
    /// Puts a message back (a redelivery), at the back.
    pub fn push(&self, body: String) {
        self.0.waiting.borrow_mut().push_back(body);
    }
    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.0.waiting.borrow().len()
    }
    /// Whether no message waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Batches sent (failed ones included) and messages accepted, since the queue was made.
    pub fn counts(&self) -> (u64, u64) {
        (self.0.sends.get(), self.0.sent.get())
    }
}

#[cfg(feature = "testing")]
#[async_trait(?Send)]
impl RecoveryQueue for SimQueue {
    async fn send_batch(&self, bodies: Vec<String>) -> Result<()> {
        self.0.sends.set(self.0.sends.get() + 1);
        if bodies.len() > MAX_QUEUE_BATCH {
            return Err(Error::new(ErrorCode::Internal, format!("a batch of {} messages", bodies.len())));
        }
        if self.0.fail_sends.get() > 0 {
            self.0.fail_sends.set(self.0.fail_sends.get() - 1);
            return Err(Error::new(ErrorCode::StoreUnavailable, "queue send failed (simulated)"));
        }
        self.0.sent.set(self.0.sent.get() + bodies.len() as u64);
        self.0.waiting.borrow_mut().extend(bodies);
        Ok(())
    }
}
