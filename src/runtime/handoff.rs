//! Handoffs: a lead agent declares the agents its runs may hand the conversation to
//! ([`super::AgentBuilder::handoff`]); together they are the run's team. Every agent of the team sees a
//! `transfer_to_<name>` tool for each other one. The run state machine answers those calls and moves the
//! conversation ([`crate::core::machine`], "Handoffs"); the driver calls the model, gates and runs the tools of
//! the agent the checkpoint's `agent` names ([`Deps::member`]). Run-level settings (limits, retry, lease,
//! drift policy, steering), hooks, the store and the clock are the lead's.

use super::deps::Deps;
use super::traits::{Tool, ToolContext, ToolError, ToolOutput};
use crate::core::error::Error;
use crate::core::machine::{Team, TeamMember, HANDOFF_PREFIX};
use async_trait::async_trait;
use serde_json::{json, Value};

/// A `transfer_to_<name>` tool as the model sees it. It never runs: the run state machine answers its calls.
pub(crate) struct TransferTool {
    name: String,
    description: String,
    schema: Value,
}

impl TransferTool {
    /// The tool that hands the conversation to agent `to` (`description`: what that agent does).
    pub(crate) fn new(to: &str, description: &str) -> TransferTool {
        TransferTool {
            name: format!("{HANDOFF_PREFIX}{to}"),
            description: format!("Hand the conversation to '{to}': {description}"),
            schema: json!({"type": "object", "properties": {}}),
        }
    }
}

#[async_trait(?Send)]
impl Tool for TransferTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn input_schema(&self) -> &Value {
        &self.schema
    }
    async fn execute(&self, _args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Propagate(Error::internal(format!(
            "run '{}': a handoff call reached its tool; the run itself answers it",
            ctx.run_id
        ))))
    }
}

impl Deps {
    /// The run state machine's view of this agent's team (no members: no handoffs).
    pub(crate) fn team(&self) -> Team {
        Team {
            lead: self.team_name.clone(),
            members: self
                .handoffs
                .iter()
                .map(|(name, d)| TeamMember {
                    name: name.clone(),
                    fingerprint: d.fingerprint.clone(),
                    tool_names: {
                        // Inserted, not collected (a collect sorts with a ~3 KB instance of the standard sort).
                        let mut names = std::collections::BTreeSet::new();
                        names.extend(d.tools.iter().map(|t| t.tool.name().to_string()));
                        names
                    },
                    instructions: d.instructions.clone(),
                })
                .collect(),
            max_handoffs: self.options.max_handoffs,
        }
    }

    /// The agent of this agent's team a run's conversation is with (`agent`: the checkpoint's; this agent for
    /// `None`, its own name, or a name the team does not have: the machine refuses such a run before any model
    /// call).
    pub(crate) fn member(&self, agent: Option<&str>) -> &Deps {
        agent.and_then(|a| self.handoffs.iter().find(|(n, _)| n == a)).map_or(self, |(_, d)| d)
    }

    /// The sub-agent `name` of this agent or of one of its team's agents.
    pub(crate) fn subagent(&self, name: &str) -> Option<&Deps> {
        let mut all = self.subagents.iter().chain(self.handoffs.iter().flat_map(|(_, d)| d.subagents.iter()));
        all.find(|(n, _)| n == name).map(|(_, d)| &**d)
    }

    /// Whether this agent or an agent of its team declares sub-agents.
    pub(crate) fn has_subagents(&self) -> bool {
        !self.subagents.is_empty() || self.handoffs.iter().any(|(_, d)| !d.subagents.is_empty())
    }
}
