//! The session routes: `/sessions/{id}` (the next turn, the turns, delete) and its actions (`resume`, `fork`,
//! `discard-pending`). A session's turns are runs `<id>.turn-<n>` ([`crate::runtime::Session`]).

use super::{parse_body, required_body, Api, ApiRequest, ApiResponse};
use crate::core::error::{Error, ErrorCode, Result};
use crate::front::contract::{NothingToResume, SessionDeleted, SessionDiscarded, SessionHistory};
use crate::runtime::SessionForkOptions;
use serde::Deserialize;
use serde_json::Value;

/// The body of `POST /sessions/{id}/fork`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SessionForkBody {
    from_step: u32,
    #[serde(default)]
    new_id: Option<String>,
}

impl Api {
    /// `POST /sessions/{id}`: the session's next turn, answered like a send (SSE with
    /// `Accept: text/event-stream`).
    pub(super) async fn session_send(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let (input, start, opts, frames) = self.send_parts(req)?;
        let agent = self.agent.clone();
        let session_id = id.to_string();
        let run = async move {
            let res = match agent.session(&session_id) {
                Ok(s) => s.send(input, opts).await,
                Err(e) => Err(e),
            };
            res.map_or_else(|e| ApiResponse::error(&e), |r| ApiResponse::sent(&r))
        };
        // In strict mode, in the object of the turn it executes first (a task of the object's, as a run's send).
        Ok(self.execute(req, start, Box::pin(run), frames).await)
    }

    /// `GET /sessions/{id}?limit=`: the turns, newest first; a session with no turn is
    /// `STEADFAST_CHECKPOINT_NOT_FOUND`.
    pub(super) async fn session_history(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let session = self.agent.session(id)?;
        let limit = super::limit(req)?;
        let turns = session.history(limit).await?;
        if turns.is_empty() {
            return Err(Error::new(ErrorCode::CheckpointNotFound, format!("session '{id}' has no turn")));
        }
        Ok(ApiResponse::ok(&SessionHistory { session_id: id.to_string(), turns }))
    }

    /// `DELETE /sessions/{id}`: every turn.
    pub(super) async fn session_delete(&self, id: &str) -> Result<ApiResponse> {
        let deleted_turns = self.agent.session(id)?.delete().await?;
        Ok(ApiResponse::ok(&SessionDeleted { session_id: id.to_string(), deleted_turns }))
    }

    /// `POST /sessions/{id}/resume`: finish an interrupted newest turn; [`NothingToResume`] when there is none.
    pub(super) async fn session_resume(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        parse_body::<Value>(&req.body, true)?;
        let (sink, opts) = self.start_sink(req.send_options());
        let agent = self.agent.clone();
        let session_id = id.to_string();
        let run = async move {
            let resumed = match agent.session(&session_id) {
                Ok(s) => s.resume(opts).await,
                Err(e) => Err(e),
            };
            match resumed {
                Ok(Some(r)) => ApiResponse::ok(&r),
                Ok(None) => ApiResponse::ok(&NothingToResume::session(session_id)),
                Err(e) => ApiResponse::error(&e),
            }
        };
        Ok(self.execute(req, sink, Box::pin(run), None).await)
    }

    /// `POST /sessions/{id}/fork`: `{fromStep, newId?}` → `201` and the new session.
    pub(super) async fn session_fork(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let session = self.agent.session(id)?;
        let body: SessionForkBody = required_body(req)?;
        let fork = session.fork(SessionForkOptions { from_step: body.from_step, new_id: body.new_id }).await?;
        Ok(ApiResponse::with(201, &fork))
    }

    /// `POST /sessions/{id}/discard-pending`: drop an unfinished newest turn.
    pub(super) async fn session_discard_pending(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let session = self.agent.session(id)?;
        parse_body::<Value>(&req.body, true)?;
        let discarded = session.discard_pending().await?;
        Ok(ApiResponse::ok(&SessionDiscarded { session_id: id.to_string(), discarded }))
    }
}
