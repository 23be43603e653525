//! The event route: `POST /events/{token}` delivers its body to the event wait whose token is in the path
//! ([`crate::runtime::Events::deliver_with`]) and answers the [`crate::runtime::EventDelivery`]. It needs no
//! bearer token (the wait's token is the capability); a token that opens nothing — malformed, guessed, spent, or
//! its run deleted — gets `STEADFAST_WAIT_NOT_FOUND`, the same answer in every case.

use super::{bad, Api, ApiRequest, ApiResponse};
use crate::core::error::Result;
use serde_json::Value;

impl Api {
    /// `POST /events/{token}`: the body (any JSON value; an empty one is refused) is the event's payload; the
    /// run resumes when it was the last wait of its pause (executed as a send is: SSE, `Prefer: respond-async`).
    pub(super) async fn deliver_event(&self, req: &ApiRequest, token: &str) -> Result<ApiResponse> {
        let text = std::str::from_utf8(&req.body).ok().filter(|t| !t.trim().is_empty());
        let text = text.ok_or_else(|| bad("the body must be the event's payload: JSON text"))?;
        let payload: Value = serde_json::from_str(text).map_err(|_| bad("the body is not JSON"))?;
        let (sink, opts) = self.start_sink(req.send_options());
        let agent = self.agent.clone();
        let token = token.to_string();
        let run = async move {
            let delivered = agent.events().deliver_with(&token, payload, opts).await;
            delivered.map_or_else(|e| ApiResponse::error(&e), |d| ApiResponse::ok(&d))
        };
        Ok(self.execute(req, sink, Box::pin(run), None).await)
    }
}
