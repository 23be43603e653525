//! The service's own routes, about no run: `/health`, `/sweep` (the recovery sweep's stored state),
//! `/schedules` (the configured schedules' status) and `/demo/counts` (the demo tools' counters).

use super::{Api, ApiResponse};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::sweep::SweepState;
use crate::front::contract::{Breaker, Health, ScheduleList, SweepView};
use serde_json::Value;

/// `GET /health` (no token), with the process's circuit breakers (`breakers`: their JSON array, `""` for none).
pub(super) fn health(breakers: &str) -> ApiResponse {
    let mut r = ApiResponse::ok(&Health::now());
    if !breakers.is_empty() && r.body.ends_with('}') {
        r.body.pop();
        r.body.push_str(",\"breakers\":");
        r.body.push_str(breakers);
        r.body.push('}');
    }
    r
}

impl Api {
    /// What the recovery sweep keeps between ticks, as `GET /sweep` shows it: its stored state as the sweep
    /// wrote it (`providerFailures` in a row, the open breaker's `outage` record or `null`, the last run examined
    /// as `cursor`, `lastOutageEnd`; the listing position `page` and the remembered `probe` run when set) plus
    /// `breaker`: `open` or `closed`. No stored state is the sweep's initial one. `lastTickAt` is when a tick last
    /// wrote the state: every tick that changes something, an idle one at most every ten minutes. A stored state
    /// the sweep could not read is `STEADFAST_CHECKPOINT_CORRUPT` (the next tick replaces it).
    pub(super) async fn sweep_state(&self) -> Result<ApiResponse> {
        // Read the way the sweep reads it (the same parser), then shown as stored.
        let text = match self.agent.store().get_state("sweep").await? {
            Some(s) => s,
            // Ignored: a SweepState (numbers, strings, options) always serialises.
            None => serde_json::to_string(&SweepState::default()).unwrap_or_default(),
        };
        let unreadable = || {
            Error::new(
                ErrorCode::CheckpointCorrupt,
                "the stored sweep state cannot be read; the next sweep tick replaces it",
            )
        };
        let state: SweepState = serde_json::from_str(&text).map_err(|_| unreadable())?;
        let Ok(Value::Object(shown)) = serde_json::from_str::<Value>(&text) else {
            return Err(unreadable());
        };
        let breaker = if state.outage.is_some() { Breaker::Open } else { Breaker::Closed };
        Ok(ApiResponse::ok(&SweepView { state: shown, breaker }))
    }

    /// `GET /schedules`: each configured schedule's status, in the configuration's order.
    pub(super) async fn schedules(&self) -> Result<ApiResponse> {
        let mut schedules = Vec::with_capacity(self.schedules.len());
        for s in &self.schedules {
            schedules.push(self.agent.schedule_status(s).await?);
        }
        Ok(ApiResponse::ok(&ScheduleList { schedules }))
    }

    /// `GET /demo/counts`: the demo tools' counters; without the demo tools `204`, no counters (a client such as
    /// the console asks without an error).
    pub(super) async fn demo_counts(&self) -> Result<ApiResponse> {
        match &self.demo {
            Some(counts) => Ok(ApiResponse::ok(&counts().await?)),
            None => Ok(ApiResponse::no_content()),
        }
    }
}
