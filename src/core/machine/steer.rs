//! Reading the run's message queue at step boundaries and applying what it holds ([`crate::core::steer`]).
//!
//! The machine asks for a read ([`Effect::ReadQueue`](super::Effect::ReadQueue)) only when its state is
//! committed (reads are actions, which run after the commit), so the ids in the state's `steered` are durable
//! when the runtime decides which listed entries are spent ([`RunMachine::queue_entry_spent`]). The entries it
//! applies are committed with their ids, in the next commit, before anything that depends on them.

use super::step::result;
use super::{Outcome, Phase, RunMachine, Wait};
use crate::core::checkpoint::RunStatus;
use crate::core::error::Result;
use crate::core::events::Event;
use crate::core::steer::{disposition, not_run_content, Disposition, QueuedMessage};
use crate::core::transcript::{Message, ResultKind};

impl RunMachine {
    /// Whether a listed queue entry is spent: applied by this run already (its id is committed), or queued for
    /// another run of the same id. The runtime deletes spent entries and hands the others to
    /// [`RunMachine::notify_queue`].
    pub fn queue_entry_spent(&self, q: &QueuedMessage) -> bool {
        disposition(&self.cp, q) == Disposition::Spent
    }

    /// The entries the last [`Effect::ReadQueue`](super::Effect::ReadQueue) listed, in queue order. Each entry
    /// not applied before is applied now: its messages are queued behind the current turn's calls (placed after
    /// their results) and its id recorded; an `interrupt` entry first stops the calls that have not started (a
    /// `not-run` result each, in call order). A finished run (a drain) continues with the messages as with a send,
    /// or ends unchanged when there are none.
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when the machine does not wait for the queue; nothing changes. Tolerated: after an
    /// abort or a failure, the entries are accepted and ignored (they stay queued).
    pub fn notify_queue(&mut self, entries: Vec<QueuedMessage>) -> Result<()> {
        if !self.awaits(Wait::Queue, "notify_queue")? {
            return Ok(());
        }
        self.waiting = None;
        let before_tools = self.calls.has_open();
        if before_tools {
            self.queue_reads.before_tools = true;
        } else {
            self.queue_reads.before_model = true;
        }
        self.queue_reads.last_at = Some(self.now);
        let mut input: Vec<Message> = Vec::new();
        for q in entries {
            if self.queue_entry_spent(&q) || self.cp.steered.contains(&q.id) {
                continue;
            }
            let mut stopped = Vec::new();
            if q.interrupt {
                for call in self.calls.unstarted() {
                    let content = not_run_content(&q.id, &call.name);
                    self.record(result(&call, content, true, ResultKind::NotRun));
                    stopped.push(call.id);
                }
            }
            self.emit(Event::MessageApplied { message_id: q.id.clone(), stopped_tool_call_ids: stopped });
            self.cp.steered.push(q.id);
            input.extend(q.messages.into_iter().filter(|m| !m.is_system()));
            self.dirty = true;
        }
        if self.cp.status == RunStatus::Finished {
            if input.is_empty() {
                // A drain of a finished run with nothing queued: it ends as it is.
                let outcome = Outcome {
                    status: RunStatus::Finished,
                    finish_reason: self.cp.finish_reason,
                    note: None,
                    error: None,
                };
                self.phase = Phase::Ending(outcome);
            } else {
                self.reopen(input);
            }
        } else {
            self.cp.queued_input.extend(input);
        }
        self.advance();
        Ok(())
    }
}
