//! Sessions (M23): [`Agent::session`] is a multi-turn conversation whose every turn is its own checkpointed
//! run, `<id>.turn-<n>` (n from 1). Turn n+1 starts from turn n's finished conversation (its messages, business
//! state, usage so far and extension state) with the new input; its first journal entry is that whole state
//! (a snapshot), so each turn stands alone: it is resumed, approved, listed, swept and deleted like any run.
//!
//! # Finding the newest turn
//! The store keeps a hint, the state document `session/<id>`: a turn number at or below the newest. The hint is
//! only a starting point: a lookup loads the turn it names and walks up while a newer turn exists (one load per
//! turn the hint lags), and down while the named turn is gone (a discarded turn). A lookup that walked
//! [`HINT_LAG`] turns or more writes the hint anew, so the hint costs one KV write per few turns, not one per
//! send: two sends a second apart never write the same key twice within a second (Workers KV's per-key limit),
//! and a lookup loads at most [`HINT_LAG`] turns past the newest it needs. A session works whether or not a
//! hint write landed; on Workers KV a turn made in another location moments ago may not be visible yet (best
//! effort across locations, as every KV read).
//!
//! # Concurrency
//! Two sends of one session at once: both see turn n finished and both try to create turn n+1; the run lease
//! lets one through and the other fails with `STEADFAST_SESSION_BUSY` (retryable: sent again, it continues
//! after the winner's turn). A send while turn n is unfinished finishes turn n first (pending calls, then the
//! model), then starts turn n+1; while turn n waits on an approval it fails with
//! `STEADFAST_SESSION_AWAITING_APPROVAL` and runs nothing. A send with `queue: true` while turn n is unfinished
//! is a message to turn n instead ([`crate::core::steer`]): queued for the execution that holds it, or applied
//! by this call when none does.

use crate::core::checkpoint::{Checkpoint, FinishReason, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::ids::{turn_run_id, validate_session_id};
use crate::core::machine::Start;
use crate::core::transcript::{Message, Usage};
use crate::runtime::{Agent, Input, RunResult, SendOptions};
use serde::{Deserialize, Serialize};

/// A lookup that walks this many turns from the hint writes the hint anew.
pub const HINT_LAG: u32 = 4;

/// Most turns a lookup walks from the hint before it gives up (a session whose hint lags this far is repaired
/// by the next send's hint write).
const MAX_WALK: u32 = 10_000;

/// A session handle (see the module docs). Cheap: it holds the agent and the id.
pub struct Session<'a> {
    agent: &'a Agent,
    id: String,
}

/// One turn of a session, as [`Session::history`] lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct SessionTurn {
    /// Turn number (from 1).
    pub turn: u32,
    /// The turn's run id (`<session>.turn-<n>`).
    pub run_id: String,
    /// The turn's status.
    pub status: RunStatus,
    /// Why it finished (finished turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub finish_reason: Option<FinishReason>,
    /// The turn's input messages.
    pub input: Vec<Message>,
    /// The turn's last assistant text.
    pub text: String,
    /// Model turns the turn took.
    pub steps: u32,
    /// The turn's usage.
    pub usage: Usage,
    /// Pending approvals (a turn awaiting approval).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_ids: Vec<String>,
    /// Last save time (ms since the epoch).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub saved_at: u64,
}

impl SessionTurn {
    fn of(turn: u32, cp: &Checkpoint) -> SessionTurn {
        let input_end = (cp.input_start + cp.input_len).min(cp.messages.len());
        let input = cp.messages.get(cp.input_start.min(input_end)..input_end).unwrap_or(&[]).to_vec();
        let result = RunResult::stored(cp);
        SessionTurn {
            turn,
            run_id: cp.run_id.clone(),
            status: cp.status,
            finish_reason: cp.finish_reason,
            input,
            text: result.text,
            steps: cp.step_index,
            usage: cp.usage,
            approval_ids: cp.approval_ids.clone(),
            saved_at: cp.saved_at,
        }
    }
}

/// `session.fork` options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct SessionForkOptions {
    /// The turn to fork after: the new session's conversation is this turn's (its latest state).
    pub from_step: u32,
    /// Id of the new session (default `<id>-fork-<n>`, the first n with no turn).
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub new_id: Option<String>,
}

/// A forked session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct SessionFork {
    /// The new session's id.
    pub session_id: String,
    /// The turn it was forked after.
    pub step: u32,
    /// The new session's first turn (`<new id>.turn-1`): the conversation as of that turn. An unfinished
    /// turn stays unfinished (resume the new session to finish it).
    pub checkpoint: Checkpoint,
}

/// The run a session's next send or resume executes first ([`Session::next_execution`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextExecution {
    /// The turn's run id.
    pub run_id: String,
    /// Whether it is the session's newest turn, in progress (interrupted, or executing elsewhere): a send
    /// finishes it before it starts the next turn.
    pub in_progress: bool,
}

impl Agent {
    /// The session `id` (1–128 characters of `A-Za-z0-9_-`, else `STEADFAST_SESSION_ID_INVALID`).
    pub fn session(&self, id: &str) -> Result<Session<'_>> {
        validate_session_id(id)?;
        Ok(Session { agent: self, id: id.to_string() })
    }
}

impl Session<'_> {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The newest turn and its state (`None` for a session with no turn).
    pub async fn latest(&self) -> Result<Option<(u32, Checkpoint)>> {
        let hint = self.hint().await;
        let store = self.agent.store();
        let mut n = hint;
        let mut cp = if n > 0 { store.load(&turn_run_id(&self.id, n)).await? } else { None };
        let mut walked = 0;
        if n > 0 && cp.is_none() {
            // The hinted turn is gone (discarded): walk down.
            while n > 0 && cp.is_none() && walked < MAX_WALK {
                n -= 1;
                walked += 1;
                cp = if n > 0 { store.load(&turn_run_id(&self.id, n)).await? } else { None };
            }
        } else {
            // Walk up while a newer turn exists (the hint lags, or was never written).
            while walked < MAX_WALK {
                match store.load(&turn_run_id(&self.id, n + 1)).await? {
                    Some(next) => {
                        n += 1;
                        cp = Some(next);
                        walked += 1;
                    }
                    None => break,
                }
            }
        }
        if walked >= HINT_LAG || (n < hint && walked > 0) {
            self.set_hint(n).await;
        }
        Ok(cp.map(|cp| (n, cp)))
    }

    /// The run this session's next send or resume executes first: its newest turn while that is unfinished,
    /// else the next turn (`<id>.turn-1` for a session with none). Strict mode serves such a request in that
    /// run's object; a send to a session whose newest turn is in progress first finishes that turn in its own
    /// object, then goes to the next turn's.
    pub async fn next_execution(&self) -> Result<NextExecution> {
        Ok(match self.latest().await? {
            None => NextExecution { run_id: turn_run_id(&self.id, 1), in_progress: false },
            Some((n, cp)) if cp.status == RunStatus::Finished => {
                NextExecution { run_id: turn_run_id(&self.id, n + 1), in_progress: false }
            }
            Some((n, cp)) => {
                NextExecution { run_id: turn_run_id(&self.id, n), in_progress: cp.status == RunStatus::InProgress }
            }
        })
    }

    /// Sends the next turn: finishes an unfinished newest turn first (its pending calls, then the model), then
    /// starts turn n+1 from the conversation so far with `input`. When finishing that turn is aborted (the
    /// options' signal), its result is returned and `input` is not sent. Refused with
    /// `STEADFAST_SESSION_AWAITING_APPROVAL` while the newest turn waits on an approval, and with
    /// `STEADFAST_SESSION_BUSY` while another execution holds it or created the next turn meanwhile.
    pub async fn send(&self, input: impl Into<Input>, opts: SendOptions) -> Result<RunResult> {
        let input = input.into().0;
        let latest = self.latest().await?;
        if opts.queue {
            // Steering: a message for the newest turn while it is unfinished (see `SendOptions::queue`).
            if let Some((_, cp)) = latest.as_ref().filter(|(_, cp)| cp.status != RunStatus::Finished) {
                return self.agent.send_queued(&cp.run_id, input, opts).await;
            }
        }
        let (n, prior) = match latest {
            None => (0, None),
            Some((n, cp)) => match cp.status {
                RunStatus::Finished => (n, Some(cp)),
                RunStatus::AwaitingApproval => {
                    let approval = cp.approval_ids.first().cloned().unwrap_or_default();
                    return Err(Error::new(
                        ErrorCode::SessionAwaitingApproval,
                        format!(
                            "session '{}' waits on approval '{approval}' (turn {n}): resolve it before sending",
                            self.id
                        ),
                    )
                    .with_run(&cp.run_id)
                    .with_approval(approval));
                }
                RunStatus::InProgress => {
                    let finished = self.agent.execute(&cp.run_id, Start::Resume, &opts).await?;
                    match finished {
                        // Aborted by the caller's signal (or otherwise left unfinished): its result, as a send
                        // that is aborted answers; the new input was not sent.
                        Some(r) if r.status == RunStatus::InProgress => return Ok(r),
                        Some(r) if r.status == RunStatus::AwaitingApproval => {
                            // It paused on an approval: the new input waits for the decision.
                            return Err(Error::new(
                                ErrorCode::SessionAwaitingApproval,
                                format!(
                                    "session '{}': turn {n} paused on approval '{}' while it was finished; resolve \
                                     it before sending",
                                    self.id,
                                    r.approval_id.clone().unwrap_or_default()
                                ),
                            )
                            .with_run(&r.run_id)
                            .with_approval(r.approval_id.unwrap_or_default()));
                        }
                        _ => {}
                    }
                    let cp = self.agent.store().load(&cp.run_id).await?.ok_or_else(|| {
                        Error::new(
                            ErrorCode::SessionBusy,
                            format!("turn '{}' vanished while it was finished", cp.run_id),
                        )
                    })?;
                    (n, Some(cp))
                }
            },
        };
        let run_id = turn_run_id(&self.id, n + 1);
        let start = Start::Turn { prior: prior.map(Box::new), input };
        // The hint is not written here: the next lookups walk up from it (see the module docs).
        let res = self.agent.execute(&run_id, start, &opts).await?;
        self.agent.deps.verdict(res.ok_or_else(|| Error::internal("a session turn produced no result"))?)
    }

    /// Finishes an interrupted newest turn; `None` when there is none (no turn, or the newest is finished).
    /// A turn waiting on an approval fails with `STEADFAST_SESSION_AWAITING_APPROVAL`. A turn that finished on
    /// its budget goes on once the limit is raised (as [`Agent::resume`]).
    pub async fn resume(&self, opts: SendOptions) -> Result<Option<RunResult>> {
        match self.latest().await? {
            Some((_, cp)) if cp.resumable() => {
                let res = self.agent.execute(&cp.run_id, Start::Resume, &opts).await?;
                res.map(|r| self.agent.deps.verdict(r)).transpose()
            }
            _ => Ok(None),
        }
    }

    /// Up to `limit` turns, newest first (one load per turn listed).
    pub async fn history(&self, limit: usize) -> Result<Vec<SessionTurn>> {
        let Some((n, cp)) = self.latest().await? else { return Ok(Vec::new()) };
        let mut out = vec![SessionTurn::of(n, &cp)];
        let mut turn = n;
        while turn > 1 && out.len() < limit {
            turn -= 1;
            if let Some(cp) = self.agent.store().load(&turn_run_id(&self.id, turn)).await? {
                out.push(SessionTurn::of(turn, &cp));
            }
        }
        out.truncate(limit);
        Ok(out)
    }

    /// Starts a new session whose conversation is this one's as of turn `from_step` (its latest state): the
    /// new session's turn 1. Refuses an unknown turn (`STEADFAST_CHECKPOINT_NOT_FOUND`), a turn waiting on an
    /// approval (`STEADFAST_SESSION_AWAITING_APPROVAL`: its approvals belong to it) and a target session that
    /// has turns (`STEADFAST_SESSION_EXISTS`). This session is unchanged.
    pub async fn fork(&self, opts: SessionForkOptions) -> Result<SessionFork> {
        let store = self.agent.store().clone();
        let source_id = turn_run_id(&self.id, opts.from_step.max(1));
        let source = match opts.from_step {
            0 => None,
            _ => store.load(&source_id).await?,
        };
        let Some(source) = source else {
            let kept = self.latest().await?.map(|(n, _)| n).unwrap_or(0);
            return Err(Error::new(
                ErrorCode::CheckpointNotFound,
                format!("session '{}' has no turn {} (its turns are 1..={kept})", self.id, opts.from_step),
            ));
        };
        if source.status == RunStatus::AwaitingApproval {
            return Err(Error::new(
                ErrorCode::SessionAwaitingApproval,
                format!("turn {} of session '{}' waits on an approval: resolve it, then fork", opts.from_step, self.id),
            )
            .with_run(&source.run_id));
        }
        let new_id = match opts.new_id {
            Some(id) => {
                validate_session_id(&id)?;
                id
            }
            None => {
                let mut n = 1;
                loop {
                    let id = format!("{}-fork-{n}", self.id);
                    if id.len() > crate::core::ids::MAX_SESSION_ID_LEN {
                        return Err(Error::invalid_input(format!(
                            "session '{}' is too long an id for a default fork id: pass newId",
                            self.id
                        )));
                    }
                    if store.load(&turn_run_id(&id, 1)).await?.is_none() {
                        break id;
                    }
                    n += 1;
                    if n > 1_000 {
                        return Err(Error::invalid_input(format!("session '{}' has 1,000 forks already", self.id)));
                    }
                }
            }
        };
        let first = turn_run_id(&new_id, 1);
        if store.load(&first).await?.is_some() {
            return Err(Error::new(
                ErrorCode::SessionExists,
                format!("a session '{new_id}' exists already; pick another id"),
            ));
        }
        let mut cp = source;
        // The calls it copies keep the source turn's idempotency keys (a pending one may have run there).
        cp.copied_scopes = cp.scopes_for_fork();
        cp.run_id = first.clone();
        cp.heal_of = None;
        let checkpoint = self.agent.write_new_run(&first, cp).await?;
        Ok(SessionFork { session_id: new_id, step: opts.from_step, checkpoint })
    }

    /// Drops an unfinished newest turn (interrupted, failing, or waiting on an approval): withdraws its
    /// approvals (they leave the inbox) and deletes its run, so the session continues from the turn before.
    /// Returns the dropped run id (`None`: nothing was pending).
    pub async fn discard_pending(&self) -> Result<Option<String>> {
        match self.latest().await? {
            Some((n, cp)) if cp.status != RunStatus::Finished => {
                let store = self.agent.store();
                for id in &cp.approval_ids {
                    store.delete_approval(id).await?;
                }
                self.agent.delete(&cp.run_id).await?;
                self.set_hint(n - 1).await;
                Ok(Some(cp.run_id))
            }
            _ => Ok(None),
        }
    }

    /// Deletes every turn of the session (newest first); a later send starts it over at turn 1. Returns how
    /// many turns were deleted.
    pub async fn delete(&self) -> Result<u32> {
        let Some((n, _)) = self.latest().await? else { return Ok(0) };
        for turn in (1..=n).rev() {
            self.agent.delete(&turn_run_id(&self.id, turn)).await?;
        }
        self.set_hint(0).await;
        Ok(n)
    }

    fn hint_name(&self) -> String {
        format!("session/{}", self.id)
    }

    /// The hinted newest turn (0 when there is no hint or it cannot be read: the lookup walks from there).
    async fn hint(&self) -> u32 {
        match self.agent.store().get_state(&self.hint_name()).await {
            Ok(Some(text)) => text.trim().parse().unwrap_or(0),
            _ => 0,
        }
    }

    /// Best effort: a hint that is not written only makes the next lookup walk further.
    async fn set_hint(&self, n: u32) {
        // Deliberately ignored: see above.
        let _ = self.agent.store().put_state(&self.hint_name(), &n.to_string()).await;
    }
}
