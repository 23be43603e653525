//! The approval routes: `GET /approvals` (pending) and `POST /approvals/{id}` (resolve; the run resumes when it
//! was the last approval of its pause).

use super::{required_body, Api, ApiRequest, ApiResponse};
use crate::core::error::Result;
use crate::runtime::Resolve;
use serde::Deserialize;

/// The body of `POST /approvals/{id}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResolveBody {
    /// Required, except beside an `answer` (a question answered is approved).
    #[serde(default)]
    approved: Option<bool>,
    #[serde(default)]
    note: Option<String>,
    /// A question's answer.
    #[serde(default)]
    answer: Option<serde_json::Value>,
}

impl Api {
    /// `GET /approvals`: the pending approvals.
    pub(super) async fn list_approvals(&self) -> Result<ApiResponse> {
        Ok(ApiResponse::ok(&self.agent.approvals().list().await?))
    }

    /// `POST /approvals/{id}`: `{approved, note?}`, or `{answer, note?}` for a question; answers the run's
    /// result (executed as a send is).
    pub(super) async fn resolve(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let body: ResolveBody = required_body(req)?;
        let decision = Resolve::new(id.to_string(), body.approved, body.note, body.answer)?;
        let (sink, opts) = self.start_sink(req.send_options());
        let agent = self.agent.clone();
        let run = async move {
            let resolved = agent.approvals().resolve_with(decision, opts).await;
            resolved.map_or_else(|e| ApiResponse::error(&e), |r| ApiResponse::ok(&r))
        };
        Ok(self.execute(req, sink, Box::pin(run), None).await)
    }
}
