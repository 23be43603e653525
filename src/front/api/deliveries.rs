//! The delivery route: `POST /deliveries/{deliveryId}` runs a delivered job once
//! ([`crate::runtime::Agent::run_once`]) and answers its [`crate::runtime::Delivery`].

use super::{required_body, Api, ApiRequest, ApiResponse};
use crate::core::error::Result;
use crate::front::contract::SendRequest;

impl Api {
    /// `POST /deliveries/{id}`: a [`SendRequest`], executed once for the delivery.
    pub(super) async fn deliver(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let body: SendRequest = required_body(req)?;
        let mut opts = req.send_options();
        let input = body.into_options(&mut opts)?;
        let (sink, opts) = self.start_sink(opts);
        let agent = self.agent.clone();
        let delivery_id = id.to_string();
        let run = async move {
            let ran = agent.run_once(&delivery_id, input, opts).await;
            ran.map_or_else(|e| ApiResponse::error(&e), |d| ApiResponse::ok(&d))
        };
        Ok(self.execute(req, sink, Box::pin(run), None).await)
    }
}
