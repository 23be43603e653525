//! Idempotency keys of tool calls (M18): one *call key* per tool call, derived from the checkpoint.
//!
//! A call key is what a tool sends as its idempotency key ([`crate::runtime::ToolContext::idempotency_key`]
//! for a call that was not approved, a webhook's `Idempotency-Key`) and what [`crate::runtime::Tool::reconcile`]
//! looks an effect up by: 32 hex digits of SHA-256 over the call's *scope* and its call id.
//!
//! * **Unique across runs.** A run's scope is its id and a random nonce, drawn from the agent's injected `Rng`
//!   when the run is created and written by its first snapshot ([`Checkpoint::key_scope`]; deltas never carry
//!   it). Call ids alone are not unique: providers that omit them (Workers AI, many OpenAI-compatible servers)
//!   give every run's first call the id `call_1_0`, and a run deleted and started again under the same id
//!   gets the same ids; their keys differ, so an endpoint that honours the key never answers one run's call with
//!   another's result. A run written before scopes existed has the run id alone as its scope.
//! * **Stable across resumes.** The scope is read from the checkpoint, so a call run again after a crash (on any
//!   process) has the key it first ran under.
//! * **Forks.** A fork is a new run with a scope of its own, but the calls it copies from its source keep the
//!   source's keys: it records which scope covers the messages it copied ([`Checkpoint::copied_scopes`], nested
//!   for a fork of a fork). A pending call the source may already have run is then sent again with the same key
//!   (or reconciled under it), and an endpoint that honours the key answers with the source's result instead of
//!   acting twice. A diagnosis fork (`<id>.heal`) is the same run tried again, so its calls keep the original's
//!   keys too. Calls made by the fork's own model turns get the fork's scope; a `messages` patch that rewrites
//!   the transcript makes every call the fork's own.

use super::checkpoint::Checkpoint;
pub use super::checkpoint::CopiedScope;
use super::fingerprint::sha256_hex;

/// Length of a call key (hex digits: 128 bits of SHA-256).
pub const CALL_KEY_LEN: usize = 32;

/// The key scope of a new run: `<run id>:<nonce as 32 hex digits>`.
pub fn new_scope(run_id: &str, nonce: (u64, u64)) -> String {
    format!("{run_id}:{:016x}{:016x}", nonce.0, nonce.1)
}

/// The key of call `call_id` under `scope`: the first [`CALL_KEY_LEN`] hex digits of SHA-256 over both (the
/// scope's length first, so no two pairs hash the same bytes).
pub fn call_key(scope: &str, call_id: &str) -> String {
    let mut bytes = Vec::with_capacity(32 + scope.len() + call_id.len());
    bytes.extend_from_slice(b"steadfast call key\n");
    bytes.extend_from_slice(scope.len().to_string().as_bytes());
    bytes.push(b':');
    bytes.extend_from_slice(scope.as_bytes());
    bytes.extend_from_slice(call_id.as_bytes());
    let mut key = sha256_hex(&bytes);
    key.truncate(CALL_KEY_LEN);
    key
}

impl Checkpoint {
    /// The scope of this run's own calls: [`Checkpoint::key_scope`], or the run id for a run written before
    /// scopes existed.
    pub fn own_key_scope(&self) -> &str {
        self.key_scope.as_deref().unwrap_or(&self.run_id)
    }

    /// The key scope of the calls of message `index`.
    pub fn key_scope_at(&self, index: usize) -> &str {
        match self.copied_scopes.iter().find(|c| index < c.messages) {
            Some(c) => &c.scope,
            None => self.own_key_scope(),
        }
    }

    /// The call key of tool call `call_id` (see the module docs); `None` when no message of the transcript has
    /// that call.
    pub fn call_key(&self, call_id: &str) -> Option<String> {
        let index = self.messages.iter().rposition(|m| m.tool_calls().iter().any(|c| c.id == call_id))?;
        Some(call_key(self.key_scope_at(index), call_id))
    }

    /// What a fork that copies this whole transcript records as its copied scopes: this run's own (nested ones
    /// first, as far as they reach), then this run's scope up to its last message.
    pub fn scopes_for_fork(&self) -> Vec<CopiedScope> {
        let len = self.messages.len();
        let mut out = Vec::new();
        for c in &self.copied_scopes {
            let messages = c.messages.min(len);
            if out.last().is_none_or(|l: &CopiedScope| l.messages < messages) {
                out.push(CopiedScope { messages, scope: c.scope.clone() });
            }
        }
        if len > 0 && out.last().is_none_or(|l| l.messages < len) {
            out.push(CopiedScope { messages: len, scope: self.own_key_scope().to_string() });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::transcript::{Message, ToolCall};
    use serde_json::json;

    fn turn(ids: &[&str]) -> Message {
        Message::assistant(
            "",
            ids.iter()
                .map(|id| ToolCall { id: id.to_string(), name: "t".into(), args: json!({}), invalid: None })
                .collect(),
        )
    }

    #[test]
    fn keys_are_fixed_length_hex_and_differ_by_scope_and_call() {
        let k = call_key("r:00", "call_1_0");
        assert_eq!(k.len(), CALL_KEY_LEN);
        assert!(k.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(k, call_key("r:00", "call_1_0"), "deterministic");
        assert_ne!(k, call_key("r:01", "call_1_0"));
        assert_ne!(k, call_key("r:00", "call_1_1"));
        // The scope's length is hashed: moving a character between scope and call id changes the key.
        assert_ne!(call_key("ab", "c"), call_key("a", "bc"));
        assert_eq!(new_scope("r", (1, 0xab)), "r:000000000000000100000000000000ab");
    }

    #[test]
    fn a_run_without_a_scope_keys_its_calls_by_its_id_alone() {
        let mut cp = Checkpoint::new("order-7");
        cp.messages = vec![Message::user("go"), turn(&["call_1_0"])];
        assert_eq!(cp.call_key("call_1_0"), Some(call_key("order-7", "call_1_0")));
        assert_eq!(cp.call_key("nope"), None);
        cp.key_scope = Some(new_scope("order-7", (7, 7)));
        assert_eq!(cp.call_key("call_1_0"), Some(call_key(&new_scope("order-7", (7, 7)), "call_1_0")));
    }

    /// A fork of a fork: each copied stretch keeps the scope of the run that made its calls, the fork's own calls
    /// get its own scope.
    #[test]
    fn copied_messages_keep_the_scope_of_the_run_that_made_them() {
        let mut a = Checkpoint::new("a");
        a.key_scope = Some("a:1".into());
        a.messages = vec![Message::user("go"), turn(&["c1"])];
        let mut b = a.clone();
        b.run_id = "b".into();
        b.key_scope = Some("b:2".into());
        b.copied_scopes = a.scopes_for_fork();
        assert_eq!(b.copied_scopes, vec![CopiedScope { messages: 2, scope: "a:1".into() }]);
        b.messages.push(turn(&["c2"]));
        let mut c = b.clone();
        c.run_id = "c".into();
        c.key_scope = Some("c:3".into());
        c.copied_scopes = b.scopes_for_fork();
        c.messages.push(turn(&["c3"]));
        assert_eq!(c.call_key("c1"), a.call_key("c1"));
        assert_eq!(c.call_key("c2"), b.call_key("c2"));
        assert_eq!(c.call_key("c2"), Some(call_key("b:2", "c2")));
        assert_eq!(c.call_key("c3"), Some(call_key("c:3", "c3")));
        // A fork of a history state shorter than a copied stretch (never written, but read safely).
        let mut short = c.clone();
        short.messages.truncate(1);
        assert_eq!(short.scopes_for_fork(), vec![CopiedScope { messages: 1, scope: "a:1".into() }]);
        assert!(Checkpoint::new("empty").scopes_for_fork().is_empty());
    }
}
