//! Sessions from JS (mirrors `js/src/session.ts`): every method takes the session id and checks it
//! (`STEADFAST_SESSION_ID_INVALID`).

use super::agent::JsAgent;
use super::args::limit_of;
use super::calls::{prepare, request_of, with_events};
use super::errors::{decode_known, js_error, promise};
use crate::core::error::Result;
use crate::front::contract::NothingToResume;
use crate::runtime::{Agent, SessionForkOptions};
use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;

/// A session handle's id, checked (`STEADFAST_SESSION_ID_INVALID`).
pub(super) fn session_of<'a>(agent: &'a Agent, id: &str) -> Result<crate::runtime::Session<'a>> {
    agent.session(id)
}

#[wasm_bindgen]
impl JsAgent {
    /// Checks a session id (`Agent::session`): throws `STEADFAST_SESSION_ID_INVALID` for a bad one.
    #[wasm_bindgen(js_name = sessionCheck)]
    pub fn session_check(&self, id: &str) -> std::result::Result<(), JsValue> {
        session_of(&self.agent, id).map(|_| ()).map_err(|e| js_error(&e))
    }

    /// Sends the next turn of session `id` (`Session::send`; the other arguments as for `send`). Resolves to
    /// the RunResult JSON.
    #[wasm_bindgen(js_name = sessionSend)]
    pub fn session_send(
        &self,
        id: String,
        request_json: String,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let session = session_of(&agent, &id)?;
            let mut p = prepare(options_json, on_event, signal, "session send options")?;
            let input = request_of(&request_json, &mut p.opts)?;
            let result = session.send(input, p.opts).await?;
            with_events(&result, p.sink)
        })
    }

    /// Finishes session `id`'s interrupted newest turn (`Session::resume`; the arguments as for `resume`).
    /// Resolves to the RunResult JSON, or [`NothingToResume`] (`{sessionId, resumed: false, reason}`, as
    /// `POST /sessions/{id}/resume` answers) when there was nothing to do.
    #[wasm_bindgen(js_name = sessionResume)]
    pub fn session_resume(
        &self,
        id: String,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let session = session_of(&agent, &id)?;
            let p = prepare(options_json, on_event, signal, "session resume options")?;
            match session.resume(p.opts).await? {
                Some(result) => with_events(&result, p.sink),
                None => with_events(&NothingToResume::session(id), None),
            }
        })
    }

    /// Session `id`'s turns, newest first (`Session::history`; `limit` absent: every turn). Resolves to the
    /// SessionTurn JSON array.
    #[wasm_bindgen(js_name = sessionHistory)]
    pub fn session_history(&self, id: String, limit: JsValue) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let limit = limit_of(&limit)?;
            session_of(&agent, &id)?.history(limit).await
        })
    }

    /// Forks session `id` (`Session::fork`; `options_json`: `{fromStep, newId?}`). Resolves to the SessionFork
    /// JSON.
    #[wasm_bindgen(js_name = sessionFork)]
    pub fn session_fork(&self, id: String, options_json: String) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let opts: SessionForkOptions = decode_known(Some(options_json), "session fork options")?;
            session_of(&agent, &id)?.fork(opts).await
        })
    }

    /// Drops session `id`'s unfinished newest turn (`Session::discard_pending`). Resolves to the dropped run id
    /// JSON, or `null`.
    #[wasm_bindgen(js_name = sessionDiscardPending)]
    pub fn session_discard_pending(&self, id: String) -> Promise {
        let agent = self.agent.clone();
        promise(async move { session_of(&agent, &id)?.discard_pending().await })
    }

    /// Deletes every turn of session `id` (`Session::delete`). Resolves to the number of turns deleted.
    #[wasm_bindgen(js_name = sessionDelete)]
    pub fn session_delete(&self, id: String) -> Promise {
        let agent = self.agent.clone();
        promise(async move { session_of(&agent, &id)?.delete().await })
    }
}
