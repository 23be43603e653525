//! Self-healing hooks (M17, M24): [`ProgressGuard`] stops a run that keeps failing the same way;
//! [`OutputCheck`] checks what a tool produced, not only whether it failed. Both keep their counters in the
//! checkpoint (through [`HookContext::state`]), so a crash or a resume does not reset them, and report every
//! action as a `heal.action` event.

use super::hooks::{Hook, HookContext, ToolResultDraft, Verdict};
use crate::core::error::{cap_chars, Error, ErrorCode, Result};
use crate::core::events::Event;
use crate::core::fingerprint::sha256_hex;
use crate::core::transcript::ToolCall;
use crate::core::wire::json_text;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Options of the progress guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ProgressGuardOptions {
    /// After this many identical failures of a tool, its result gets a hint (default 2).
    pub hint_after: u32,
    /// After this many identical failures, further calls of the tool are denied (default 3).
    pub deny_after: u32,
    /// After this many denials, the next denial stops the run with `STEADFAST_RUN_NO_PROGRESS` (default 3).
    pub max_denials: u32,
}

impl Default for ProgressGuardOptions {
    fn default() -> Self {
        ProgressGuardOptions { hint_after: 2, deny_after: 3, max_denials: 3 }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct GuardState {
    /// tool name → (error signature, identical failures in a row)
    failures: BTreeMap<String, (String, u32)>,
    denials: u32,
}

/// Stops a run that keeps calling a tool that fails the same way: hint, then deny, then stop.
#[derive(Clone, Debug, Default)]
pub struct ProgressGuard {
    opts: ProgressGuardOptions,
}

const GUARD_KEY: &str = "progressGuard";

impl ProgressGuard {
    /// A guard with these options.
    pub fn new(opts: ProgressGuardOptions) -> ProgressGuard {
        ProgressGuard { opts }
    }

    fn load(ctx: &HookContext<'_>) -> GuardState {
        // Ignored: a guard state this hook cannot read (another version's) restarts its counts, so the guard
        // trips again after as many failures; failing the run instead would stop it for good.
        // Read from its text (`from_str`, as every stored value is: `from_value` would add a second deserializer to
        // the Worker's wasm).
        ctx.peek(GUARD_KEY).and_then(|v| serde_json::from_str(&json_text(v)).ok()).unwrap_or_default()
    }

    fn save(ctx: &mut HookContext<'_>, st: &GuardState) {
        // Ignored: a GuardState (numbers and strings) always serialises. Through its text (as it is read).
        *ctx.state(GUARD_KEY) =
            serde_json::to_string(st).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null);
    }

    fn action(ctx: &mut HookContext<'_>, call: &ToolCall, action: &str, reason: String, count: u32) {
        ctx.emit(Event::HealAction {
            tool: call.name.clone(),
            tool_call_id: call.id.clone(),
            action: action.into(),
            reason,
            count,
        });
    }
}

/// The error signature: the message without the hint a previous round may have added.
fn signature(content: &str) -> String {
    let base = content.split("\n\n[steadfast]").next().unwrap_or(content);
    sha256_hex(base.as_bytes())[..16].to_string()
}

#[async_trait(?Send)]
impl Hook for ProgressGuard {
    fn name(&self) -> &str {
        "progressGuard"
    }

    async fn before_tool(&self, ctx: &mut HookContext<'_>, call: &mut ToolCall) -> Result<Verdict> {
        if ctx.resumed_after_approval {
            return Ok(Verdict::Continue);
        }
        let mut st = Self::load(ctx);
        let Some((_, n)) = st.failures.get(&call.name).cloned() else { return Ok(Verdict::Continue) };
        if n < self.opts.deny_after {
            return Ok(Verdict::Continue);
        }
        if st.denials >= self.opts.max_denials {
            let reason = format!(
                "'{}' failed the same way {n} times and {} calls were denied: the run makes no progress",
                call.name, st.denials
            );
            Self::action(ctx, call, "stop", reason.clone(), st.denials + 1);
            return Err(Error::new(ErrorCode::RunNoProgress, reason).with_retryable(false).with_run(ctx.run_id));
        }
        st.denials += 1;
        let reason = format!(
            "'{}' failed the same way {n} times in a row; it is blocked. Try a different tool or approach.",
            call.name
        );
        Self::action(ctx, call, "deny", reason.clone(), st.denials);
        Self::save(ctx, &st);
        Ok(Verdict::Deny(reason))
    }

    async fn after_tool(&self, ctx: &mut HookContext<'_>, call: &ToolCall, result: &mut ToolResultDraft) -> Result<()> {
        let mut st = Self::load(ctx);
        if !result.is_error {
            if st.failures.contains_key(&call.name) {
                // The other tools' counts kept, this one's dropped: the map rebuilt by inserts rather than
                // `remove`, whose instance (the tree's rebalancing, ~3 KB) this was the Worker's only use of.
                for (tool, count) in std::mem::take(&mut st.failures) {
                    if tool != call.name {
                        st.failures.insert(tool, count);
                    }
                }
                Self::save(ctx, &st);
            }
            return Ok(());
        }
        let sig = signature(&result.content);
        let n = match st.failures.get(&call.name) {
            Some((s, n)) if *s == sig => n + 1,
            _ => 1,
        };
        st.failures.insert(call.name.clone(), (sig, n));
        if n >= self.opts.hint_after {
            result.content.push_str(&format!(
                "\n\n[steadfast] '{}' has failed the same way {n} times in a row. Do not repeat the same call: \
                 change the arguments, use another tool, or explain what is blocking you.",
                call.name
            ));
            Self::action(ctx, call, "hint", format!("failed the same way {n} times"), n);
        }
        Self::save(ctx, &st);
        Ok(())
    }
}

type Check = Rc<dyn Fn(&ToolCall, &str) -> std::result::Result<(), String>>;

/// Checks what a tool produced: a successful result that fails the check becomes an error result the model
/// reads (with the reason and the original output, capped).
#[derive(Clone)]
pub struct OutputCheck {
    name: String,
    check: Check,
}

impl OutputCheck {
    /// A check named `name` (the `replacedBy` mark) running `check(call, content)`.
    pub fn new(
        name: impl Into<String>,
        check: impl Fn(&ToolCall, &str) -> std::result::Result<(), String> + 'static,
    ) -> OutputCheck {
        OutputCheck { name: name.into(), check: Rc::new(check) }
    }
}

#[async_trait(?Send)]
impl Hook for OutputCheck {
    fn name(&self) -> &str {
        &self.name
    }

    async fn after_tool(&self, ctx: &mut HookContext<'_>, call: &ToolCall, result: &mut ToolResultDraft) -> Result<()> {
        if result.is_error {
            return Ok(());
        }
        if let Err(why) = (self.check)(call, &result.content) {
            let count = {
                let v = ctx.state(&format!("outputCheck:{}", self.name));
                let n = v.as_u64().unwrap_or(0) + 1;
                *v = Value::from(n);
                n as u32
            };
            ctx.emit(Event::HealAction {
                tool: call.name.clone(),
                tool_call_id: call.id.clone(),
                action: "check".into(),
                reason: why.clone(),
                count,
            });
            result.content =
                format!("output check failed: {why}\n\nThe tool returned:\n{}", cap_chars(&result.content, 1_000));
            result.is_error = true;
        }
        Ok(())
    }
}
