//! The run routes: `/runs` (listing), `/runs/{id}` (send, state, delete) and below (`resume`, `events`,
//! `history`, `fork`), and `/compare/{a}/{b}`.

use super::sse::{frame_queue, sse_frame, sse_id, PacedFrames};
use super::{bad, parse_body, required_body, Api, ApiRequest, ApiResponse};
use crate::core::checkpoint::RunStatus;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::EventEnvelope;
use crate::core::fork::ForkPatch;
use crate::core::ids::validate_run_id;
use crate::core::replay::Cursor;
use crate::front::contract::{ListedRun, NothingToResume, RunDeleted, RunList, RunView};
use crate::runtime::{ForkOptions, WatchStart, Watched};
use serde::Deserialize;
use serde_json::Value;

/// The body of `POST /runs/{id}/fork`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ForkBody {
    from_step: u32,
    #[serde(default)]
    patch: ForkPatch,
    #[serde(default)]
    new_id: Option<String>,
}

/// `run '{id}' has no checkpoint`.
fn no_checkpoint(id: &str) -> Error {
    Error::new(ErrorCode::CheckpointNotFound, format!("run '{id}' has no checkpoint")).with_run(id)
}

impl Api {
    /// `GET /runs?status=`: the unfinished runs (of one status), each with the sweep's next attempt.
    pub(super) async fn list_runs(&self, req: &ApiRequest) -> Result<ApiResponse> {
        let status = match req.query("status") {
            None => None,
            Some("in-progress") => Some(RunStatus::InProgress),
            Some("awaiting-approval") => Some(RunStatus::AwaitingApproval),
            Some(other) => return Err(bad(format!("unknown status {other:?} (in-progress | awaiting-approval)"))),
        };
        let runs: Vec<_> =
            self.agent.pending().await?.into_iter().filter(|r| status.is_none_or(|s| r.status == s)).collect();
        let next = self.agent.next_attempts(&runs, &self.recovery).await?;
        let runs = runs.into_iter().zip(next).map(|(run, next)| ListedRun { run, next }).collect();
        Ok(ApiResponse::ok(&RunList { runs }))
    }

    /// `POST /runs/{id}`: start or continue the run (SSE with `Accept: text/event-stream`).
    pub(super) async fn send(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let (input, start, opts, frames) = self.send_parts(req)?;
        let agent = self.agent.clone();
        let run_id = id.to_string();
        let run = async move {
            agent.send(&run_id, input, opts).await.map_or_else(|e| ApiResponse::error(&e), |r| ApiResponse::sent(&r))
        };
        Ok(self.execute(req, start, Box::pin(run), frames).await)
    }

    /// `GET /runs/{id}`: the run's state as a [`RunView`].
    pub(super) async fn get_run(&self, id: &str) -> Result<ApiResponse> {
        let cp = self.agent.load(id).await?.ok_or_else(|| no_checkpoint(id))?;
        let children = self.agent.children(&cp).await?;
        Ok(ApiResponse::ok(&RunView::with_children(cp, children)))
    }

    /// `DELETE /runs/{id}`.
    pub(super) async fn delete_run(&self, id: &str) -> Result<ApiResponse> {
        self.agent.delete(id).await?;
        Ok(ApiResponse::ok(&RunDeleted { run_id: id.to_string(), deleted: true }))
    }

    /// `POST /runs/{id}/resume`: finish the unfinished run; [`NothingToResume`] when there is nothing to finish.
    pub(super) async fn resume(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        parse_body::<Value>(&req.body, true)?;
        let (sink, opts) = self.start_sink(req.send_options());
        let agent = self.agent.clone();
        let run_id = id.to_string();
        let run = async move {
            match agent.resume(&run_id, opts).await {
                Ok(Some(r)) => ApiResponse::ok(&r),
                Ok(None) => ApiResponse::ok(&NothingToResume::run(run_id)),
                Err(e) => ApiResponse::error(&e),
            }
        };
        Ok(self.execute(req, sink, Box::pin(run), None).await)
    }

    /// `GET /runs/{id}/history?limit=`: past states, newest first.
    pub(super) async fn history(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let limit = super::limit(req)?;
        Ok(ApiResponse::ok(&self.agent.history(id, limit).await?))
    }

    /// `POST /runs/{id}/fork`: `{fromStep, patch?, newId?}` → `201` and the fork.
    pub(super) async fn fork(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let body: ForkBody = required_body(req)?;
        if let Some(n) = &body.new_id {
            validate_run_id(n)?;
        }
        let fork = self
            .agent
            .fork(id, ForkOptions { from_step: body.from_step, patch: body.patch, new_id: body.new_id })
            .await?;
        Ok(ApiResponse::with(201, &fork))
    }

    /// `GET /compare/{a}/{b}`.
    pub(super) async fn compare(&self, a: &str, b: &str) -> Result<ApiResponse> {
        Ok(ApiResponse::ok(&self.agent.compare(a, b).await?))
    }

    /// `GET /runs/{id}/events`: the run's recorded events after the `Last-Event-ID` header's cursor (or the
    /// `after` query parameter; neither: from the start), then the new ones as they are recorded, as SSE, until
    /// the run finishes or pauses ([`crate::runtime::Agent::watch`]). `204` when the cursor already says the run
    /// ended at its newest position (an SSE client stops reconnecting).
    pub(super) async fn watch(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let from = match req.header("last-event-id").filter(|v| !v.trim().is_empty()).or(req.query("after")) {
            Some(c) => Cursor::parse(c)?,
            None => Cursor::default(),
        };
        match self.agent.watch_start(id, from).await? {
            WatchStart::NotFound => return Err(no_checkpoint(id)),
            WatchStart::UpToDate => return Ok(ApiResponse::no_content()),
            WatchStart::Stream => {}
        }
        let (sender, frames) = frame_queue();
        let agent = self.agent.clone();
        let hub = self.watchers.clone();
        let run_id = id.to_string();
        let opts = self.watch;
        let task = async move {
            let seq = std::cell::Cell::new(0u64);
            let push = |w: Watched| {
                if sender.gone() {
                    return false;
                }
                match w {
                    Watched::Event(event, at) => {
                        let at = at.unwrap_or_else(|| agent.deps.now());
                        let e = EventEnvelope {
                            v: crate::core::events::EVENT_SCHEMA_VERSION,
                            seq: seq.replace(seq.get() + 1),
                            run_id: run_id.clone(),
                            at,
                            subagent: None,
                            event,
                        };
                        sender.send(sse_frame(&e));
                    }
                    // As it came: its own run id and seq, tagged with its sub-agent.
                    Watched::Child(e) => sender.send(sse_frame(&e)),
                    Watched::ChildJson(e) => sender.send(super::sse::sse_json_frame(&e)),
                    Watched::Through(c) => sender.send(sse_id(c)),
                    // About to wait: not for a client that left.
                    Watched::Waiting => {}
                }
                true
            };
            // The journal's entries at the client's pace; live events as they come (a client that falls
            // SSE_BACKLOG_BYTES behind them is cut off).
            let sink = PacedFrames { push: &push, frames: &sender };
            if let Err(e) = agent.watch(&run_id, from, hub.as_ref(), opts, &sink).await {
                push(Watched::Event(crate::core::events::Event::Error { error: e.info() }, None));
            }
            sender.close();
        };
        Ok(self.live(frames, Some(Box::pin(task))))
    }
}
