//! Recovery fanned out through a queue (KV mode at scale): a sweep tick that has a [`RecoveryQueue`] sends one
//! message per due run instead of resuming runs itself (`Agent::sweep_fanning_out`), and queue consumers
//! resume them (`Agent::consume_recovery`, beside the alarm it shares its step with), as many at once as the platform runs consumers. The run's lease is
//! the only exclusion: a message delivered twice, late or to two consumers at once is harmless (the second finds
//! the run busy, finished, or not due).

use crate::core::error::{Error, ErrorCode, Result};
use crate::core::wire::json_text;
use async_trait::async_trait;
use serde_json::Value;

/// Messages a queue takes in one batch (Cloudflare Queues: 100).
pub const MAX_QUEUE_BATCH: usize = 100;

/// Where a sweep tick sends the runs it wants resumed (the Worker: a Cloudflare Queue's producer binding).
#[async_trait(?Send)]
pub trait RecoveryQueue {
    /// Sends `bodies` (at most [`MAX_QUEUE_BATCH`], each a [`RecoveryMessage`] as JSON). An error means none or
    /// only some were sent: the tick resumes the rest of its runs itself, and the unsent ones come round again.
    async fn send_batch(&self, bodies: Vec<String>) -> Result<()>;
}

/// One message of the recovery queue: a run to resume, as JSON `{"runId": …, "healOf"?: …}` (read and written by
/// hand over `serde_json::Value`: a derive would cost the Worker's wasm more).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryMessage {
    /// The run.
    pub run_id: String,
    /// For a diagnosis fork: the run it heals (as listed; confirmed by the fork's own checkpoint).
    pub heal_of: Option<String>,
}

impl RecoveryMessage {
    /// The message as JSON.
    pub fn to_json(&self) -> String {
        let id = json_text(&Value::String(self.run_id.clone()));
        match &self.heal_of {
            Some(h) => format!("{{\"runId\":{id},\"healOf\":{}}}", json_text(&Value::String(h.clone()))),
            None => format!("{{\"runId\":{id}}}"),
        }
    }

    /// Reads a message body; anything else is `STEADFAST_INVALID_INPUT` (other fields are ignored).
    pub fn parse(body: &str) -> Result<RecoveryMessage> {
        let bad = |why: String| Error::new(ErrorCode::InvalidInput, format!("not a recovery message: {why}"));
        let v: Value = serde_json::from_str(body).map_err(|e| bad(e.to_string()))?;
        let text = |k: &str| {
            v.get(k).filter(|x| !x.is_null()).map(|x| x.as_str().ok_or_else(|| bad(format!("{k} is not a string"))))
        };
        let run_id = text("runId").ok_or_else(|| bad("no runId".into()))??.to_string();
        let heal_of = text("healOf").transpose()?.map(String::from);
        crate::core::ids::validate_run_id(&run_id).map_err(|e| bad(e.message))?;
        Ok(RecoveryMessage { run_id, heal_of })
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
