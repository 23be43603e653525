//! Handoffs ([the module docs](super#handoffs)): the machine answers a turn's `transfer_to_<name>` calls itself
//! and, once the turn is complete, hands the conversation to the agent the honoured one names.

use super::step::result;
use super::types::Team;
use super::RunMachine;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::Event;
use crate::core::fingerprint::Fingerprint;
use crate::core::transcript::{Message, ResultKind, ToolCall};
use crate::core::wire::json_text;
use serde_json::json;
use std::collections::BTreeSet;

/// The prefix of a handoff tool's name: `transfer_to_<agent name>`.
pub const HANDOFF_PREFIX: &str = "transfer_to_";

impl Team {
    /// The agent a handoff tool named `tool` hands to (`None`: not a handoff tool of this team).
    pub fn target_of<'t>(&self, tool: &'t str) -> Option<&'t str> {
        if self.members.is_empty() {
            return None;
        }
        let name = tool.strip_prefix(HANDOFF_PREFIX)?;
        (name == self.lead || self.members.iter().any(|m| m.name == name)).then_some(name)
    }
}

impl RunMachine {
    /// The name of the agent the conversation is with.
    fn active_name(&self) -> &str {
        self.cp.agent.as_deref().unwrap_or(&self.cfg.team.lead)
    }

    /// What the machine checks of agent `name` (`None`: the run's own): its fingerprint, tool names and
    /// instructions; `None` when the team has no such agent.
    fn profile(&self, name: Option<&str>) -> Option<(&Fingerprint, &BTreeSet<String>, &str)> {
        match name {
            None => Some((&self.cfg.fingerprint, &self.cfg.tool_names, &self.cfg.instructions)),
            Some(n) if n == self.cfg.team.lead => self.profile(None),
            Some(n) => self
                .cfg
                .team
                .members
                .iter()
                .find(|m| m.name == n)
                .map(|m| (&m.fingerprint, &m.tool_names, m.instructions.as_str())),
        }
    }

    /// The fingerprint and tool names of the agent the conversation is with; `STEADFAST_AGENT_DRIFT` when the
    /// checkpoint names an agent the team no longer has (the run cannot go on without it).
    pub(super) fn active(&self) -> Result<(&Fingerprint, &BTreeSet<String>)> {
        match self.profile(self.cp.agent.as_deref()) {
            Some((fp, tools, _)) => Ok((fp, tools)),
            None => Err(Error::new(
                ErrorCode::AgentDrift,
                format!(
                    "run '{}' was handed to agent '{}', which this agent's team no longer has",
                    self.cfg.run_id,
                    self.active_name()
                ),
            )
            .with_run(&self.cfg.run_id)),
        }
    }

    /// Whether `call` is a handoff; if so, records its answer (see [the module docs](super#handoffs)).
    pub(super) fn answer_handoff(&mut self, call: &ToolCall) -> bool {
        let Some(to) = self.cfg.team.target_of(&call.name) else { return false };
        let first = self
            .cp
            .messages
            .iter()
            .rev()
            .find(|m| matches!(m, Message::Assistant { .. }))
            .and_then(|m| m.tool_calls().iter().find(|c| self.cfg.team.target_of(&c.name).is_some()));
        let (content, is_error, kind) = match first {
            Some(f) if f.id != call.id => (
                format!("not run: only the first handoff of a turn is taken ('{}' was)", f.name),
                true,
                ResultKind::NotRun,
            ),
            _ if to == self.active_name() => {
                (format!("'{to}' has the conversation already"), true, ResultKind::Validation)
            }
            _ if self.cp.handoffs >= self.cfg.team.max_handoffs => (
                format!(
                    "{}: this run handed the conversation off {} times, its limit (maxHandoffs); '{}' keeps it",
                    ErrorCode::HandoffLimit.as_str(),
                    self.cp.handoffs,
                    self.active_name()
                ),
                true,
                ResultKind::Validation,
            ),
            _ => (json_text(&json!({ "transferredTo": to })), false, ResultKind::Execution),
        };
        self.record(result(call, content, is_error, kind));
        true
    }

    /// Once every call of the turn has its result: the turn's handoff (its transfer result that is not an
    /// error), if it has one not yet taken, moves the conversation to its agent.
    pub(super) fn take_handoff(&mut self) {
        if self.cfg.team.members.is_empty() || self.calls.has_open() {
            return;
        }
        let msgs = &self.cp.messages;
        let Some(turn) = msgs.iter().rposition(|m| matches!(m, Message::Assistant { .. })) else { return };
        let taken = msgs[turn + 1..].iter().find_map(|m| match m {
            Message::Tool(r) if !r.is_error => {
                self.cfg.team.target_of(&r.name).map(|to| (r.tool_call_id.clone(), to.to_string()))
            }
            _ => None,
        });
        let Some((tool_call_id, to)) = taken else { return };
        if to == self.active_name() {
            return;
        }
        let Some((fingerprint, _, instructions)) = self.profile(Some(&to)) else { return };
        let (fingerprint, instructions) = (fingerprint.clone(), instructions.to_string());
        self.cp.fingerprint = Some(fingerprint);
        if !instructions.is_empty() {
            self.cp.messages.push(Message::system(instructions));
        }
        self.cp.agent = Some(to.clone());
        self.cp.handoffs += 1;
        self.emit(Event::Handoff { tool_call_id, to });
        self.progress();
    }
}
