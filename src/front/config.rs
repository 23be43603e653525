//! [`AgentConfig`]: the agent as configuration, not code (M19). The Worker reads one JSON document — model,
//! instructions, limits, drift policy, lease and recovery timing, webhook tools, MCP servers and the hosts they
//! may call — and combines it with the providers and the platform.
//!
//! The agent's options are the runtime's [`AgentOptions`], under the names the npm package gives them: the four
//! limits (`maxSteps`, `toolConcurrency`, `loopWindow`, `maxToolResultBytes`) in the `limits` section, and
//! `onAgentDrift`, `retry` and `lease` at the top level ([`AgentConfig::agent_options`]).
//!
//! ```json
//! {
//!   "model": {"provider": "openai", "model": "gpt-4o-mini", "maxTokens": 1024},
//!   "instructions": "You process orders.",
//!   "limits": {"maxSteps": 12},
//!   "onAgentDrift": "warn",
//!   "retry": {"maxAttempts": 3},
//!   "tools": [{"name": "create_ticket", "url": "https://api.example.com/tickets",
//!              "inputSchema": {"type": "object", "required": ["title"]}, "sideEffecting": true}],
//!   "mcp": [{"url": "https://mcp.example.com/mcp",
//!            "headers": {"Authorization": {"secret": "MCP_TOKEN", "prefix": "Bearer "}, "X-Team": "ops"}}],
//!   "allowedHosts": ["api.example.com", "mcp.example.com"],
//!   "waitTools": ["ask_question", "sleep_for", "sleep_until"],
//!   "schedules": [{"id": "daily-report", "cron": "0 9 * * 1-5", "input": "Write the daily report"}]
//! }
//! ```
//!
//! Budgets: `limits` also takes `maxInputTokens`, `maxOutputTokens`, `maxTotalTokens`, `maxDurationMs`,
//! `maxCostUsd` and `onExceeded`; `sessionBudget` the token and cost limits of a whole conversation; `prices`
//! (`{"<model id>": {"input": 0.15, "output": 0.6, "cachedInput": 0.075}}`, dollars per million tokens; also
//! `cacheWrite` and `reasoning`) adds to and overrides the built-in prices ([`crate::core::cost`]).
//!
//! Every object refuses unknown fields (a typo is an error, not a silently ignored setting), and every error
//! is `STEADFAST_CONFIG_INVALID` naming the field (`model.provider`, `tools[1].url`, …). `{}` is a valid
//! configuration: the offline mock model with the demo tools.
//!
//! `waitTools` opts into the built-in tools that wait ([`crate::runtime::WaitTool`]; default none):
//! `ask_question {question, choices?}` pauses the run on a question, answered with `POST /approvals/{id}`
//! `{"answer": …}` (one of its choices when it offers any); `sleep_for {seconds}` and `sleep_until {at}` (RFC 3339
//! or ms since the epoch) park the run until then, woken by the cron sweep (KV mode) or the run object's alarm
//! (strict mode). An unknown name is `STEADFAST_CONFIG_INVALID` at `waitTools[i]`; a name also used by another
//! tool is refused when the agent is built.
//!
//! `mcp` names MCP servers (Streamable HTTP) whose tools the agent gets as its own ([`crate::tools::mcp`]):
//! `url` (its host on `allowedHosts`, like a webhook's), `headers` (each a string, or `{"secret": "NAME"}` with
//! an optional `"prefix"`: the value of the Worker secret `NAME`, as `model.apiKeySecret` names the provider
//! key), `timeoutMs` (one exchange; default 30000). The servers are listed when the agent is built, once per
//! isolate and again after a minute ([`crate::tools::mcp::McpCache`]).

use crate::core::budget::{OnExceeded, TokenLimits};
use crate::core::cost::PriceTable;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::machine::DriftPolicy;
use crate::core::retry::RetryPolicy;
use crate::core::schedule::{compile_all, CompiledSchedule, Schedule};
use crate::core::sweep::SweepOptions;
use crate::core::wire::json_text;
use crate::http::HttpClient;
use crate::providers::{
    AnthropicModel, AnthropicOptions, ModelPlatform, OpenAiModel, OpenAiOptions, WorkersAiModel, WorkersAiOptions,
};
use crate::runtime::mock::{MockError, MockTurn};
use crate::runtime::traits::Tool;
use crate::runtime::{Agent, AgentBuilder, AgentOptions, SubagentOptions, DEFAULT_MAX_SUBAGENT_DEPTH};
use crate::runtime::{MockModel, Model};
use crate::store::LeaseOptions;
use crate::tools::demo::{demo_script, DEMO_TOOL_NAMES};
use crate::tools::mcp::{check_servers, McpCache, McpServerConfig};
use crate::tools::webhook::{Allowlist, ParsedUrl, WebhookTool, WebhookToolConfig};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::rc::Rc;

/// Default number of past states kept per run.
pub const DEFAULT_HISTORY_LIMIT: usize = 50;

/// Most errors [`AgentConfig::validate`] reports at once.
const MAX_REPORTED: usize = 10;

/// Adds `name` to the names taken unless it is there already (`false`: it was). A list, not a `BTreeSet<&str>`:
/// a handful of names, and no ~2 KB instance of the set's insert for this one use.
fn insert_name<'a>(taken: &mut Vec<&'a str>, name: &'a str) -> bool {
    let new = !taken.contains(&name);
    if new {
        taken.push(name);
    }
    new
}

fn config_err(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::ConfigInvalid, message)
}

/// The model provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum Provider {
    /// The scripted mock model (offline; the default).
    #[default]
    #[serde(rename = "mock")]
    Mock,
    /// OpenAI-compatible chat completions.
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic messages.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// The Cloudflare Workers AI binding.
    #[serde(rename = "workers-ai")]
    WorkersAi,
}

crate::core::wire::unit_enum_de!(Provider {
    "mock" => Mock,
    "openai" => OpenAi,
    "anthropic" => Anthropic,
    "workers-ai" => WorkersAi,
});

impl Provider {
    /// The configuration string (`mock`, `openai`, `anthropic`, `workers-ai`).
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Mock => "mock",
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::WorkersAi => "workers-ai",
        }
    }

    /// The secret holding the API key unless `apiKeySecret` says otherwise (`None`: no key needed).
    pub fn default_api_key_secret(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("OPENAI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            Provider::Mock | Provider::WorkersAi => None,
        }
    }
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// A tool call in a configured mock script.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// Tool name.
    pub name: String,
    /// Arguments (default `{}`).
    #[serde(default = "empty_object")]
    pub args: Value,
}

/// A scripted provider failure in a configured mock script.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScriptError {
    /// HTTP status to imitate (400-599: 429 rate limit, 5xx outage, 401 auth, …).
    pub status: u16,
    /// Retry-After hint (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Message (default `scripted HTTP <status>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One turn of a configured mock script: `{"text": "..."}`, `{"toolCalls": [{"name", "args"}], "text"?}` or
/// `{"error": {"status", "retryAfterMs"?}}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScriptTurn {
    /// The answer's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ScriptCall>>,
    /// A scripted failure instead of an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptError>,
}

impl ScriptTurn {
    /// Checks the turn's shape (an answer or an error, not both, not neither).
    pub fn check(&self) -> std::result::Result<(), String> {
        let calls = self.tool_calls.as_deref();
        if let Some(e) = &self.error {
            if self.text.is_some() || calls.is_some() {
                return Err("a turn is either an error or an answer (text / toolCalls), not both".into());
            }
            if !(400..=599).contains(&e.status) {
                return Err(format!("error.status {} is not an HTTP error status (400-599)", e.status));
            }
            return Ok(());
        }
        match calls {
            Some([]) => Err("toolCalls is empty (use {\"text\": ...} for a final answer)".into()),
            Some(calls) => match calls.iter().position(|c| c.name.trim().is_empty()) {
                Some(i) => Err(format!("toolCalls[{i}].name is empty")),
                None => Ok(()),
            },
            None if self.text.is_some() => Ok(()),
            None => Err("a turn needs \"text\", \"toolCalls\" or \"error\"".into()),
        }
    }

    /// The [`MockTurn`] it stands for.
    pub fn to_mock_turn(&self) -> MockTurn {
        if let Some(e) = &self.error {
            return MockTurn::Error(MockError {
                status: e.status,
                retry_after_ms: e.retry_after_ms,
                message: e.message.clone().unwrap_or_else(|| format!("scripted HTTP {}", e.status)),
            });
        }
        let text = self.text.clone().unwrap_or_default();
        match self.tool_calls.as_deref() {
            Some(calls) if !calls.is_empty() => {
                MockTurn::tools(calls.iter().map(|c| (c.name.clone(), c.args.clone()))).with_text(text)
            }
            _ => MockTurn::text(text),
        }
    }
}

/// The model section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    /// Provider (default `mock`).
    #[serde(default)]
    pub provider: Provider,
    /// Model id (required for every provider but `mock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// API base URL (the provider's own by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The NAME of the secret holding the API key (default `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret: Option<String>,
    /// Output token cap (OpenAI: sent as `max_completion_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// OpenAI-compatible servers that only know the older field: send the cap as `max_tokens`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legacy_max_tokens: bool,
    /// `openai` / `anthropic` / `workers-ai`: ask for streamed answers, so text arrives as `text.delta` events
    /// while the run's events are listened to (the recorded turns are the same); `mock`: stream the script's
    /// texts word by word.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Sampling temperature (0-2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// How long one model call may take, in ms (an HTTP exchange, or a Workers AI call and its stream); past
    /// it the call fails with `STEADFAST_PROVIDER_TIMEOUT` (retryable). Default: 60000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Extra provider parameters, merged into the request body.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub params: Map<String, Value>,
    /// For `mock`: the script (default: the demo script, [`demo_script`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<Vec<ScriptTurn>>,
}

impl ModelConfig {
    /// The model id: the configured one, else `mock` for the mock provider (empty otherwise).
    pub fn model_id(&self) -> &str {
        match (&self.model, self.provider) {
            (Some(m), _) => m,
            (None, Provider::Mock) => "mock",
            (None, _) => "",
        }
    }

    /// The name of the secret holding the API key: `apiKeySecret`, else the provider's default.
    pub fn api_key_secret_name(&self) -> Option<&str> {
        self.api_key_secret.as_deref().or(self.provider.default_api_key_secret())
    }

    /// The OpenAI provider's options: model id, temperature, `maxTokens`, extra `params`, `baseUrl` (else the
    /// provider's own).
    pub fn openai_options(&self) -> OpenAiOptions {
        let mut o = OpenAiOptions {
            model: self.model_id().to_string(),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            legacy_max_tokens: self.legacy_max_tokens,
            stream: self.stream,
            extra: self.params.clone(),
            timeout_ms: self.timeout_ms.unwrap_or(0),
            ..OpenAiOptions::default()
        };
        if let Some(b) = &self.base_url {
            o.base_url = b.clone();
        }
        o
    }

    /// The Anthropic provider's options: model id, temperature, extra `params`, `baseUrl` and `maxTokens`
    /// (else the provider's defaults; the API requires a token cap).
    pub fn anthropic_options(&self) -> AnthropicOptions {
        let mut o = AnthropicOptions {
            model: self.model_id().to_string(),
            temperature: self.temperature,
            stream: self.stream,
            extra: self.params.clone(),
            timeout_ms: self.timeout_ms.unwrap_or(0),
            ..AnthropicOptions::default()
        };
        if let Some(b) = &self.base_url {
            o.base_url = b.clone();
        }
        if let Some(t) = self.max_tokens {
            o.max_tokens = t;
        }
        o
    }

    /// The Workers AI provider's options: model id, temperature, `maxTokens`, `stream`, extra `params`.
    pub fn workers_ai_options(&self) -> WorkersAiOptions {
        WorkersAiOptions {
            model: self.model_id().to_string(),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            extra: self.params.clone(),
            stream: self.stream,
            timeout_ms: self.timeout_ms.unwrap_or(0),
        }
    }
}

/// The `limits` section: the limits of [`AgentOptions`] (same names, meanings and defaults): steps, tool
/// concurrency, the loop window, tool results' size, and the run's budget (tokens, time, `onExceeded`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// [`AgentOptions::max_steps`].
    pub max_steps: u32,
    /// [`AgentOptions::tool_concurrency`].
    pub tool_concurrency: usize,
    /// [`AgentOptions::loop_window`].
    pub loop_window: u32,
    /// [`AgentOptions::max_tool_result_bytes`].
    pub max_tool_result_bytes: usize,
    /// [`AgentOptions::max_input_tokens`].
    pub max_input_tokens: Option<u64>,
    /// [`AgentOptions::max_output_tokens`].
    pub max_output_tokens: Option<u64>,
    /// [`AgentOptions::max_total_tokens`].
    pub max_total_tokens: Option<u64>,
    /// [`AgentOptions::max_duration_ms`].
    pub max_duration_ms: Option<u64>,
    /// [`AgentOptions::max_cost_usd`] (dollars on the wire).
    #[serde(with = "crate::core::cost::usd_limit")]
    pub max_cost_usd: Option<u64>,
    /// [`AgentOptions::on_exceeded`].
    pub on_exceeded: OnExceeded,
}

impl Default for Limits {
    fn default() -> Self {
        let o = AgentOptions::default();
        Limits {
            max_steps: o.max_steps,
            tool_concurrency: o.tool_concurrency,
            loop_window: o.loop_window,
            max_tool_result_bytes: o.max_tool_result_bytes,
            max_input_tokens: o.max_input_tokens,
            max_output_tokens: o.max_output_tokens,
            max_total_tokens: o.max_total_tokens,
            max_duration_ms: o.max_duration_ms,
            max_cost_usd: o.max_cost_usd,
            on_exceeded: o.on_exceeded,
        }
    }
}

fn default_history_limit() -> usize {
    DEFAULT_HISTORY_LIMIT
}

/// Where the Worker keeps its runs (`"store"` in the configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum StoreMode {
    /// Workers KV (the journal store; the default): best-effort exclusion, runs driven by the request that
    /// starts them and recovered by the cron sweep.
    #[default]
    #[serde(rename = "kv")]
    Kv,
    /// Strict mode: each run in its own Durable Object (`RUN_OBJECTS`), which holds its journal and lease
    /// (strict fencing) and executes the run, independent of the client connection.
    #[serde(rename = "durable-object")]
    DurableObject,
}

crate::core::wire::unit_enum_de!(StoreMode {
    "kv" => Kv,
    "durable-object" => DurableObject,
});

/// The agent's configuration (one JSON document; see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    /// Where runs are kept: `"kv"` (default) or `"durable-object"` (strict mode).
    #[serde(default)]
    pub store: StoreMode,
    /// The model.
    #[serde(default)]
    pub model: ModelConfig,
    /// Instructions (system prompt of new runs).
    #[serde(default)]
    pub instructions: String,
    /// Run limits.
    #[serde(default)]
    pub limits: Limits,
    /// [`AgentOptions::on_agent_drift`]: `warn` (default), `error` or `ignore`.
    #[serde(default)]
    pub on_agent_drift: DriftPolicy,
    /// [`AgentOptions::retry`] (`maxAttempts`, `baseMs`, `capMs`, `deadlineMs`).
    #[serde(default)]
    pub retry: RetryPolicy,
    /// [`AgentOptions::lease`] (`ttlMs`, `renewEveryMs`, `graceMs`).
    #[serde(default)]
    pub lease: LeaseOptions,
    /// Recovery sweep settings (`intervalMs`, `maxBackoffMs`, `maxAttempts`, `maxRuns`, `opBudget`,
    /// `outageThreshold`, `retryWithDiagnosis`, `pageSize`, `maxPages`).
    #[serde(default)]
    pub recovery: SweepOptions,
    /// Webhook tools.
    #[serde(default)]
    pub tools: Vec<WebhookToolConfig>,
    /// Built-in tools that wait (`ask_question`, `sleep_for`, `sleep_until`; default none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait_tools: Vec<crate::runtime::WaitTool>,
    /// MCP servers whose tools the agent gets: `{url, headers?, timeoutMs?}` each (see the module docs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<McpServerConfig>,
    /// Hosts webhook tools and MCP servers may call (exact, or `*.example.com`); empty refuses every host.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Add the demo tools (`charge`, `ship`, `refund`); default: on for the mock provider, off otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demo_tools: Option<bool>,
    /// Past states kept per run for history and fork (default 50).
    #[serde(default = "default_history_limit")]
    pub history_limit: usize,
    /// The KV lease settle window in ms (default 1000; see `JournalOptions::settle_ms`).
    #[serde(default = "default_settle_ms")]
    pub settle_ms: u64,
    /// How often a run reads its message queue at step boundaries, at most (ms, default 1000; `null`: steering
    /// off, and sends with `queue` are refused). See `AgentOptions::steer_poll_ms`.
    #[serde(default = "default_steer_poll_ms")]
    pub steer_poll_ms: Option<u64>,
    /// Schedules (M23): `{id, cron, input, missed?, graceMs?}` each, fired by the Worker's cron trigger.
    #[serde(default)]
    pub schedules: Vec<Schedule>,
    /// The progress guard (M17: hint, then deny, then stop a tool that keeps failing the same way):
    /// `{hintAfter?, denyAfter?, maxDenials?}` turns it on (`{}`: the defaults 2, 3, 3); absent: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_guard: Option<crate::runtime::ProgressGuardOptions>,
    /// Sub-agents (`{name, description, instructions?, model?, limits?, tools?, waitTools?, demoTools?,
    /// subagents?}` each): the model sees a tool per sub-agent whose call runs it as a child run. A sub-agent
    /// without a `model` or `limits` uses the lead's; the lead's `retry`, `lease`, `onAgentDrift`,
    /// `steerPollMs` and `allowedHosts` hold for all. Nested at most three levels deep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentConfig>,
    /// Agents a run may hand its conversation to (`{name, description, instructions?, model?, tools?,
    /// waitTools?, demoTools?, subagents?}` each, as a sub-agent; its `limits` are the lead's): every agent of the
    /// team sees a `transfer_to_<name>` tool for each other one, the lead as [`AgentConfig::name`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handoffs: Vec<SubagentConfig>,
    /// The lead's name in its handoff team (default `lead`).
    #[serde(default = "default_team_name")]
    pub name: String,
    /// Handoffs a run may take (default 5).
    #[serde(default = "default_max_handoffs")]
    pub max_handoffs: u32,
    /// [`AgentOptions::session_budget`]: token and cost limits of a whole conversation (default none).
    #[serde(default)]
    pub session_budget: TokenLimits,
    /// [`AgentOptions::breaker`]: a circuit breaker per provider, webhook and MCP host (`{windowMs?, minCalls?,
    /// failurePercent?, coolDownMs?}`; default none), shared by the requests of an isolate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<crate::core::breaker::BreakerOptions>,
    /// Fallback models (each as `model`), tried in order when a model call's retries run out with a retryable
    /// failure (see `AgentBuilder::fallback`); a sub-agent with a model of its own has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<ModelConfig>,
    /// [`AgentOptions::prices`]: prices per model id, in US dollars per million tokens, added to the built-in
    /// ones.
    #[serde(default, skip_serializing_if = "is_default")]
    pub prices: PriceTable,
    /// [`AgentOptions::storage_prices`]: what a store operation costs (`usage.storage.costUsd`), in US dollars
    /// per million operations (`{read?, write?, delete?, list?, request?, rowWritten?}`); default: Cloudflare's
    /// published prices.
    #[serde(default, skip_serializing_if = "is_default")]
    pub storage_prices: crate::core::cost::StoragePrices,
    /// Traces (OpenTelemetry GenAI spans over OTLP/HTTP JSON): `{endpoint, headers?, contents?, serviceName?,
    /// maxBufferedSpans?, timeoutMs?}` (see [`TracingConfig`]); absent: no traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfig>,
}

/// Where the Worker sends its executions' spans, as OTLP/HTTP JSON (`POST` of an `ExportTraceServiceRequest`),
/// after each request, cron tick, alarm and queue batch (`waitUntil`: never before the reply).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TracingConfig {
    /// The OTLP/HTTP traces endpoint (`https://…/v1/traces`; `http://` for a local collector).
    pub endpoint: String,
    /// Headers sent with each export: strings, or `{"secret": "NAME", "prefix"?: "Bearer "}` (a Worker secret's
    /// value), as an MCP server's.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, crate::tools::mcp::HeaderValue>,
    /// Put message contents on the spans (tool arguments, the model's input and output): default off, as the
    /// GenAI conventions advise (they may hold personal data).
    #[serde(default)]
    pub contents: bool,
    /// The `service.name` of the spans' resource (default `steadfast`).
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Spans an isolate keeps until they are sent, at most (default 2,048): past it spans are dropped, and
    /// counted (`GET /metrics`' `steadfast_trace_spans_dropped_total`).
    #[serde(default = "default_max_buffered_spans")]
    pub max_buffered_spans: usize,
    /// Give up on one export after this many milliseconds (default 10,000; its spans are dropped and counted).
    #[serde(default = "default_export_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_service_name() -> String {
    "steadfast".into()
}

fn default_max_buffered_spans() -> usize {
    crate::runtime::DEFAULT_MAX_BUFFERED_SPANS
}

fn default_export_timeout_ms() -> u64 {
    10_000
}

impl TracingConfig {
    /// The export's URL, checked (`http` or `https`).
    pub fn check(&self) -> Vec<String> {
        let mut errs = crate::tools::mcp::check_headers(&self.headers, &["content-type"], "is set by the exporter");
        if let Err(e) = ParsedUrl::parse(&self.endpoint) {
            errs.push(format!("endpoint: {}", e.message));
        }
        if self.max_buffered_spans == 0 {
            errs.push("maxBufferedSpans must be at least 1".into());
        }
        if self.timeout_ms == 0 {
            errs.push("timeoutMs must be at least 1".into());
        }
        errs.into_iter().map(|e| format!("tracing.{e}")).collect()
    }

    /// The export request of an OTLP/HTTP JSON `body`, with the headers' secrets read by `secret`.
    pub fn request(&self, body: String, secret: &dyn Fn(&str) -> Option<String>) -> Result<crate::http::HttpRequest> {
        let mut headers = crate::tools::mcp::resolve_headers(&self.headers, secret)
            .map_err(|m| config_err(format!("tracing.{m}")))?;
        headers.push(("content-type".into(), "application/json".into()));
        Ok(crate::http::HttpRequest {
            method: "POST".into(),
            url: self.endpoint.clone(),
            headers,
            body: Some(body),
            timeout_ms: self.timeout_ms,
            max_response_bytes: 64 * 1024,
        })
    }
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

fn default_team_name() -> String {
    "lead".into()
}

fn default_max_handoffs() -> u32 {
    AgentOptions::default().max_handoffs
}

/// A sub-agent in the configuration (see [`AgentConfig::subagents`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubagentConfig {
    /// The tool name its lead's model calls it by (letters, digits, `_`, `-`).
    pub name: String,
    /// What it does, for the lead's model.
    pub description: String,
    /// Its instructions.
    #[serde(default)]
    pub instructions: String,
    /// Its model (default: the lead's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelConfig>,
    /// Its limits (default: the lead's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Its webhook tools.
    #[serde(default)]
    pub tools: Vec<WebhookToolConfig>,
    /// Its built-in tools that wait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait_tools: Vec<crate::runtime::WaitTool>,
    /// The demo tools (default off).
    #[serde(default)]
    pub demo_tools: bool,
    /// Its own sub-agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentConfig>,
    /// A detached sub-agent: its call answers at once with the child's id, the cron tick runs the child, and its
    /// final text comes to the lead as a queued message (applied once; a finished lead continues with it).
    /// Not for a handoff agent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detached: bool,
    /// With `detached`: the child runs on when its lead is deleted (default: it is deleted with it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandon: bool,
}

fn default_steer_poll_ms() -> Option<u64> {
    AgentOptions::default().steer_poll_ms
}

fn default_settle_ms() -> u64 {
    crate::store::JournalOptions::default().settle_ms
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            store: StoreMode::default(),
            model: ModelConfig::default(),
            instructions: String::new(),
            limits: Limits::default(),
            on_agent_drift: DriftPolicy::default(),
            retry: RetryPolicy::default(),
            lease: LeaseOptions::default(),
            recovery: SweepOptions::default(),
            tools: Vec::new(),
            wait_tools: Vec::new(),
            mcp: Vec::new(),
            allowed_hosts: Vec::new(),
            demo_tools: None,
            history_limit: DEFAULT_HISTORY_LIMIT,
            settle_ms: default_settle_ms(),
            steer_poll_ms: default_steer_poll_ms(),
            schedules: Vec::new(),
            progress_guard: None,
            subagents: Vec::new(),
            handoffs: Vec::new(),
            name: default_team_name(),
            max_handoffs: default_max_handoffs(),
            session_budget: TokenLimits::default(),
            fallbacks: Vec::new(),
            breaker: None,
            prices: PriceTable::default(),
            storage_prices: Default::default(),
            tracing: None,
        }
    }
}

impl AgentConfig {
    /// Parses and validates a configuration. Errors are `STEADFAST_CONFIG_INVALID` with serde's message and
    /// the path of the offending field (`invalid agent configuration at `limits.maxSteps`: …`), or the
    /// messages of [`AgentConfig::validate`].
    pub fn parse(json: &str) -> Result<AgentConfig> {
        let first = json.trim_start_matches(|c: char| c.is_ascii_whitespace()).chars().next();
        if first.is_some() && first != Some('{') {
            return Err(config_err("invalid agent configuration: it must be a JSON object ({...})"));
        }
        let config: AgentConfig = serde_json::from_str(json).map_err(|e| {
            let path = json_path_at(json, e.line(), e.column());
            let at = if path.is_empty() { String::new() } else { format!(" at `{path}`") };
            config_err(format!("invalid agent configuration{at}: {e}"))
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The schedules, checked (`STEADFAST_SESSION_ID_INVALID` / `STEADFAST_CONFIG_INVALID` naming the schedule).
    pub fn compiled_schedules(&self) -> Result<Vec<CompiledSchedule>> {
        compile_all(self.schedules.clone())
    }

    /// The configuration sub-agent `sub` runs with: its own model (else the lead's), instructions, limits
    /// (else the lead's), tools and sub-agents; the lead's retry, lease, drift policy, steering and allowed hosts.
    /// No schedules, MCP servers or progress guard of its own.
    pub fn for_subagent(&self, sub: &SubagentConfig) -> AgentConfig {
        AgentConfig {
            model: sub.model.clone().unwrap_or_else(|| self.model.clone()),
            // The lead's fallbacks are its model's: a sub-agent with a model of its own has none.
            fallbacks: if sub.model.is_some() { Vec::new() } else { self.fallbacks.clone() },
            instructions: sub.instructions.clone(),
            limits: sub.limits.clone().unwrap_or_else(|| self.limits.clone()),
            tools: sub.tools.clone(),
            wait_tools: sub.wait_tools.clone(),
            demo_tools: Some(sub.demo_tools),
            subagents: sub.subagents.clone(),
            handoffs: Vec::new(),
            mcp: Vec::new(),
            schedules: Vec::new(),
            progress_guard: None,
            ..self.clone()
        }
    }

    /// An agent of this configuration (the lead, or a sub-agent's, from [`AgentConfig::for_subagent`]): its model
    /// from `platform`, options, instructions, the demo tools `demo` makes (when on), the webhook tools over `http`
    /// and its sub-agents, each built the same way. The caller adds the store, clock, timer and what only the lead
    /// has (MCP tools, the progress guard).
    pub fn agent_builder<P: ModelPlatform>(
        &self,
        platform: &P,
        http: Rc<dyn HttpClient>,
        demo: &dyn Fn() -> Vec<Rc<dyn Tool>>,
    ) -> Result<AgentBuilder> {
        let mut b = Agent::builder_rc(self.model(platform)?)
            .options(self.agent_options())
            .instructions(self.instructions.clone());
        for fallback in self.fallback_models(platform)? {
            b = b.fallback_rc(fallback);
        }
        if self.demo_tools_enabled() {
            for t in demo() {
                b = b.tool_rc(t);
            }
        }
        for t in self.webhook_tools(http.clone())? {
            b = b.tool_rc(t);
        }
        for sub in &self.subagents {
            let child = self.for_subagent(sub).agent_builder(platform, http.clone(), demo)?;
            let opts = SubagentOptions { detached: sub.detached, abandon: sub.abandon };
            b = b.subagent_with(sub.name.clone(), sub.description.clone(), child, opts);
        }
        for member in &self.handoffs {
            let agent = self.for_subagent(member).agent_builder(platform, http.clone(), demo)?;
            b = b.handoff(member.name.clone(), member.description.clone(), agent);
        }
        Ok(b.name(self.name.clone()))
    }

    /// Whether the demo tools are on (`demoTools`, else on for the mock provider only).
    pub fn demo_tools_enabled(&self) -> bool {
        self.demo_tools.unwrap_or(self.model.provider == Provider::Mock)
    }

    /// The allowlist of `allowedHosts`.
    pub fn allowlist(&self) -> Allowlist {
        Allowlist::new(&self.allowed_hosts)
    }

    /// The runtime options, every one as configured: the `limits` section, `onAgentDrift`, `retry`, `lease`
    /// (no `..Default::default()` here: an option added to [`AgentOptions`] does not compile until the
    /// configuration gives it a place).
    pub fn agent_options(&self) -> AgentOptions {
        let Limits {
            max_steps,
            tool_concurrency,
            loop_window,
            max_tool_result_bytes,
            max_input_tokens,
            max_output_tokens,
            max_total_tokens,
            max_duration_ms,
            max_cost_usd,
            on_exceeded,
        } = self.limits.clone();
        AgentOptions {
            max_steps,
            tool_concurrency,
            on_agent_drift: self.on_agent_drift,
            retry: self.retry,
            lease: self.lease,
            loop_window,
            max_tool_result_bytes,
            wait_tools: self.wait_tools.clone(),
            steer_poll_ms: self.steer_poll_ms,
            max_handoffs: self.max_handoffs,
            max_input_tokens,
            max_output_tokens,
            max_total_tokens,
            max_duration_ms,
            max_cost_usd,
            session_budget: self.session_budget,
            on_exceeded,
            prices: self.prices.clone(),
            storage_prices: self.storage_prices,
            breaker: self.breaker,
        }
    }

    /// The configured model, built from what `platform` supplies: `mock` is the scripted [`MockModel`]
    /// (answering by turn from [`AgentConfig::mock_script`]); `openai` and `anthropic` send through the
    /// platform's HTTP client with the key from the secret [`ModelConfig::api_key_secret_name`] names;
    /// `workers-ai` runs on the platform's AI binding. A missing key or binding is `STEADFAST_CONFIG_INVALID`
    /// saying how to provide it.
    pub fn model<P: ModelPlatform>(&self, platform: &P) -> Result<Rc<dyn Model>> {
        model_of(&self.model, platform)
    }

    /// The fallback models (`fallbacks`, each built as `model` is), in order.
    pub fn fallback_models<P: ModelPlatform>(&self, platform: &P) -> Result<Vec<Rc<dyn Model>>> {
        self.fallbacks.iter().map(|m| model_of(m, platform)).collect()
    }

    /// The mock model's script (for `MockModel::by_turn`): `model.script`, else [`demo_script`].
    pub fn mock_script(&self) -> Vec<MockTurn> {
        mock_script_of(&self.model)
    }
}

/// The model `m` configures (see [`AgentConfig::model`]).
fn model_of<P: ModelPlatform>(m: &ModelConfig, platform: &P) -> Result<Rc<dyn Model>> {
    let api_key = || {
        let name = m.api_key_secret_name().unwrap_or("API_KEY");
        platform.secret(name).filter(|k| !k.is_empty()).ok_or_else(|| {
            config_err(format!(
                "the provider key is missing: `npx wrangler secret put {name}` (locally: {name}=... in .dev.vars)"
            ))
        })
    };
    Ok(match m.provider {
        Provider::Mock => {
            let mock = MockModel::by_turn(mock_script_of(m)).with_id(m.model_id());
            Rc::new(if m.stream { mock.streaming() } else { mock })
        }
        Provider::OpenAi => Rc::new(OpenAiModel::new(platform.http(), api_key()?, m.openai_options())),
        Provider::Anthropic => Rc::new(AnthropicModel::new(platform.http(), api_key()?, m.anthropic_options())),
        Provider::WorkersAi => {
            let ai = platform
                .workers_ai()
                .map_err(|why| config_err(format!("the AI binding is missing (wrangler.toml [ai]): {why}")))?;
            Rc::new(WorkersAiModel::new(ai, m.workers_ai_options()))
        }
    })
}

/// A mock model's script: `script`, else [`demo_script`].
fn mock_script_of(m: &ModelConfig) -> Vec<MockTurn> {
    match &m.script {
        Some(turns) => turns.iter().map(ScriptTurn::to_mock_turn).collect(),
        None => demo_script(),
    }
}

impl AgentConfig {
    /// Builds the webhook tools on one shared HTTP client (validating each against `allowedHosts`).
    pub fn webhook_tools<H: HttpClient + ?Sized + 'static>(&self, http: Rc<H>) -> Result<Vec<Rc<dyn Tool>>> {
        let allowlist = self.allowlist();
        self.tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                WebhookTool::new(t.clone(), &allowlist, http.clone())
                    .map(|tool| Rc::new(tool) as Rc<dyn Tool>)
                    .map_err(|e| config_err(format!("tools[{i}]: {}", e.message)))
            })
            .collect()
    }

    /// The tools of the `mcp` servers (listed, or from `cache`; see [`McpCache::tools`]) over `http`, with the
    /// secrets `secret` reads, at `now_ms`; their names must differ from the webhook and demo tools'.
    pub async fn mcp_tools(
        &self,
        cache: &McpCache,
        http: Rc<dyn HttpClient>,
        secret: &dyn Fn(&str) -> Option<String>,
        now_ms: u64,
    ) -> Result<Vec<Rc<dyn Tool>>> {
        if self.mcp.is_empty() {
            return Ok(Vec::new());
        }
        let mut taken: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        if self.demo_tools_enabled() {
            taken.extend(DEMO_TOOL_NAMES.iter().copied());
        }
        cache.tools(&self.mcp, &self.allowlist(), secret, http, now_ms, &taken).await
    }

    /// Checks the sub-agents: at most [`DEFAULT_MAX_SUBAGENT_DEPTH`] levels, tool names that are valid and unique
    /// beside `taken` (this agent's other tools), and each one's own configuration as [`AgentConfig::validate`]
    /// checks it.
    fn validate_subagents<'a>(&'a self, mut taken: Vec<&'a str>, errs: &mut Vec<String>) {
        fn depth(subs: &[SubagentConfig]) -> usize {
            subs.iter().map(|s| 1 + depth(&s.subagents)).max().unwrap_or(0)
        }
        if depth(&self.subagents) > DEFAULT_MAX_SUBAGENT_DEPTH {
            errs.push(format!("subagents: sub-agents nest at most {DEFAULT_MAX_SUBAGENT_DEPTH} levels deep"));
            return;
        }
        if self.demo_tools_enabled() {
            taken.extend(DEMO_TOOL_NAMES.iter().copied());
        }
        taken.extend(self.wait_tools.iter().map(|w| w.name()));
        let mut team = vec![self.name.as_str()];
        for (i, member) in self.handoffs.iter().enumerate() {
            let n = &member.name;
            let tool = format!("{}{n}", crate::core::machine::HANDOFF_PREFIX);
            if !crate::core::ids::is_tool_name(&tool) {
                errs.push(format!("handoffs[{i}].name: {n:?} must be 1-52 characters of letters, digits, '_' or '-'"));
            } else if !insert_name(&mut team, n) || taken.contains(&tool.as_str()) {
                errs.push(format!("handoffs[{i}].name: '{n}' is also the name of the lead or another agent or tool"));
            }
            if let Err(e) = self.for_subagent(member).validate() {
                let why = e.message.strip_prefix("invalid agent configuration: ").unwrap_or(&e.message);
                errs.push(format!("handoffs[{i}]: {why}"));
            }
            if member.detached || member.abandon {
                errs.push(format!("handoffs[{i}]: a handoff agent is not detached"));
            }
        }
        if !self.handoffs.is_empty() && !crate::core::ids::is_tool_name(&format!("transfer_to_{}", self.name)) {
            errs.push(format!("name: {:?} must be 1-52 characters of letters, digits, '_' or '-'", self.name));
        }
        for (i, sub) in self.subagents.iter().enumerate() {
            let n = &sub.name;
            if !crate::core::ids::is_tool_name(n) {
                errs.push(format!("subagents[{i}].name: {n:?} must be 1-64 characters of letters, digits, '_' or '-'"));
            } else if !insert_name(&mut taken, n) {
                errs.push(format!("subagents[{i}].name: '{n}' is also the name of another tool or sub-agent"));
            }
            if let Err(e) = self.for_subagent(sub).validate() {
                let why = e.message.strip_prefix("invalid agent configuration: ").unwrap_or(&e.message);
                errs.push(format!("subagents[{i}]: {why}"));
            }
            if sub.abandon && !sub.detached {
                errs.push(format!("subagents[{i}].abandon: only a detached sub-agent's child may be abandoned"));
            }
            if sub.detached && self.steer_poll_ms.is_none() {
                errs.push(format!("subagents[{i}].detached: its result comes as a queued message: needs steerPollMs"));
            }
        }
    }

    /// Checks what the types cannot: a model id for real providers, a script only for `mock` and well
    /// formed, `limits.maxSteps` ≥ 1, sane lease and recovery timing, well-formed `allowedHosts`, unique tool
    /// names (demo tools included when on), webhook URLs and MCP servers on allow-listed hosts. Fails with
    /// `STEADFAST_CONFIG_INVALID` listing every problem (up to 10), each naming its field.
    pub fn validate(&self) -> Result<()> {
        let mut errs: Vec<String> = Vec::new();
        self.validate_model(&mut errs);
        if let Err(e) = self.compiled_schedules() {
            errs.push(format!("schedules: {}", e.message));
        }

        let l = &self.limits;
        if l.max_steps == 0 {
            errs.push("limits.maxSteps must be at least 1".into());
        }
        if l.tool_concurrency == 0 {
            errs.push("limits.toolConcurrency must be at least 1".into());
        }
        let lease_valid = self.lease.renew_every_ms > 0 && self.lease.renew_every_ms < self.lease.ttl_ms;
        if self.settle_ms == 0 || (lease_valid && self.settle_ms >= self.lease.ttl_ms / 2) {
            errs.push(format!(
                "settleMs ({}) must be at least 1 and below half of lease.ttlMs ({}): a lease is confirmed a settle \
                 window after it was written",
                self.settle_ms, self.lease.ttl_ms
            ));
        }
        if !(1_024..=crate::core::limits::MAX_TOOL_RESULT_BYTES).contains(&l.max_tool_result_bytes) {
            errs.push(format!(
                "limits.maxToolResultBytes must be between 1024 and {}",
                crate::core::limits::MAX_TOOL_RESULT_BYTES
            ));
        }

        let lease = &self.lease;
        if lease.ttl_ms == 0 {
            errs.push("lease.ttlMs must be at least 1".into());
        } else if lease.renew_every_ms == 0 || lease.renew_every_ms >= lease.ttl_ms {
            errs.push(format!(
                "lease.renewEveryMs ({}) must be at least 1 and below lease.ttlMs ({})",
                lease.renew_every_ms, lease.ttl_ms
            ));
        }

        let r = &self.recovery;
        for (field, value) in [
            ("maxAttempts", r.max_attempts as u64),
            ("maxRuns", r.max_runs as u64),
            ("opBudget", r.op_budget),
            ("outageThreshold", r.outage_threshold as u64),
            ("maxEnqueue", r.max_enqueue as u64),
        ] {
            if value == 0 {
                errs.push(format!("recovery.{field} must be at least 1"));
            }
        }
        match (r.ceiling, self.store) {
            (Some(0), _) => errs.push("recovery.ceiling must be at least 1".into()),
            (Some(_), StoreMode::Kv) => errs.push(
                "recovery.ceiling takes strict mode (\"store\": \"durable-object\"); in KV mode the recovery queue \
                 consumer's max_concurrency bounds the resumes"
                    .into(),
            ),
            _ => {}
        }

        for (i, h) in self.allowed_hosts.iter().enumerate() {
            if let Err(m) = Allowlist::check_entry(h) {
                errs.push(format!("allowedHosts[{i}]: {m}"));
            }
        }

        let allowlist = self.allowlist();
        let mut names: Vec<&str> = Vec::new();
        let demo = self.demo_tools_enabled();
        for (i, t) in self.tools.iter().enumerate() {
            if demo && DEMO_TOOL_NAMES.contains(&t.name.as_str()) {
                errs.push(format!(
                    "tools[{i}].name: '{}' is also a demo tool (rename it, or set \"demoTools\": false)",
                    t.name
                ));
            } else if !insert_name(&mut names, &t.name) {
                errs.push(format!("tools[{i}].name: two tools are named '{}'", t.name));
            }
            if let Err(e) = t.check(&allowlist) {
                errs.push(format!("tools[{i}]: {}", e.message));
            }
        }
        errs.extend(check_servers(&self.mcp, &allowlist));
        if let Some(t) = &self.tracing {
            errs.extend(t.check());
        }
        self.validate_subagents(names, &mut errs);

        if errs.is_empty() {
            return Ok(());
        }
        let more = errs.len().saturating_sub(MAX_REPORTED);
        errs.truncate(MAX_REPORTED);
        let mut message = format!("invalid agent configuration: {}", errs.join("; "));
        if more > 0 {
            message.push_str(&format!(" (and {more} more)"));
        }
        Err(config_err(message))
    }

    fn validate_model(&self, errs: &mut Vec<String>) {
        let m = &self.model;
        let provider = m.provider.as_str();
        match (&m.model, m.provider) {
            (Some(id), _) if id.trim().is_empty() => errs.push("model.model is empty".into()),
            (None, p) if p != Provider::Mock => errs.push(format!("model.model is required for provider '{provider}'")),
            _ => {}
        }
        if let Some(url) = &m.base_url {
            if let Err(e) = ParsedUrl::parse(url) {
                errs.push(format!("model.baseUrl: {}", e.message));
            }
        }
        if let Some(secret) = &m.api_key_secret {
            if secret.is_empty() || !secret.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                errs.push(format!(
                    "model.apiKeySecret {secret:?} must be the NAME of a secret (letters, digits, '_'), not the key"
                ));
            }
        }
        if m.max_tokens == Some(0) {
            errs.push("model.maxTokens must be at least 1".into());
        }
        if let Some(t) = m.temperature {
            if !(0.0..=2.0).contains(&t) {
                errs.push(format!("model.temperature {t} must be between 0 and 2"));
            }
        }
        match &m.script {
            Some(_) if m.provider != Provider::Mock => {
                errs.push(format!("model.script is only for provider 'mock' (provider is '{provider}')"));
            }
            Some(turns) if turns.is_empty() => {
                errs.push("model.script is empty (leave it out to use the demo script)".into());
            }
            Some(turns) => {
                for (i, t) in turns.iter().enumerate() {
                    if let Err(e) = t.check() {
                        errs.push(format!("model.script[{i}]: {e}"));
                    }
                }
            }
            None => {}
        }
    }
}

/// The JSON path (`tools[1].url`) of the value being read at a 1-based `line`/`column` (as serde_json
/// reports errors), from a tolerant scan of `text`. Empty at the top level or when the position is unknown.
fn json_path_at(text: &str, line: usize, column: usize) -> String {
    if line == 0 {
        return String::new();
    }
    let bytes = text.as_bytes();
    let mut start = 0usize;
    let mut seen = 1usize;
    while seen < line {
        match bytes.get(start..).and_then(|rest| rest.iter().position(|b| *b == b'\n')) {
            Some(p) => {
                start += p + 1;
                seen += 1;
            }
            None => return String::new(),
        }
    }
    let end = start.saturating_add(column).min(bytes.len());

    enum Frame {
        Object { key: Option<String>, want_key: bool },
        Array { index: usize },
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0usize;
    while i < end {
        let b = bytes.get(i).copied().unwrap_or(b' ');
        match b {
            b'"' => {
                let from = i + 1;
                let mut j = from;
                let mut escaped = false;
                while j < bytes.len() {
                    let c = bytes.get(j).copied().unwrap_or(b'"');
                    if escaped {
                        escaped = false;
                    } else if c == b'\\' {
                        escaped = true;
                    } else if c == b'"' {
                        break;
                    }
                    j += 1;
                }
                if let Some(Frame::Object { key, want_key }) = stack.last_mut() {
                    if *want_key {
                        // Ignored (below): a key that does not unescape is shown as written.
                        let raw = text.get(from..j.min(text.len())).unwrap_or("");
                        *key = Some(
                            serde_json::from_str::<String>(&format!("\"{raw}\"")).unwrap_or_else(|_| raw.to_string()),
                        );
                        *want_key = false;
                    }
                }
                i = j + 1;
                continue;
            }
            b'{' => stack.push(Frame::Object { key: None, want_key: true }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { want_key, .. }) => *want_key = true,
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            _ => {}
        }
        i += 1;
    }

    let mut path = String::new();
    for frame in &stack {
        match frame {
            Frame::Object { key: Some(k), .. } => {
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                } else {
                    path.push_str(&format!("[{}]", json_text(&Value::String(k.clone()))));
                }
            }
            Frame::Object { key: None, .. } => break,
            Frame::Array { index } => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// The parsed configuration, kept for the life of a process (a Worker isolate) so a warm request does not
/// parse and validate it again. Keyed by the configuration's source text ([`ConfigCache::get`]), or by a value
/// the text is read from whose equality implies the text's ([`ConfigCache::get_keyed`]: the Worker's
/// `STEADFAST_CONFIG` as a JS value, compared with `===`, so a warm request does not copy the text into wasm):
/// a request whose source differs in any byte from the cached one (a changed `STEADFAST_CONFIG`, a new bundle)
/// parses again and replaces the entry, so a changed configuration is never served stale. A source that fails
/// to parse is not cached: it fails on every request, with its own error, and leaves the last valid entry in
/// place.
///
/// Only the configuration is cached, not the agent built from it: the agent's store keeps per-execution state
/// (journal writers, operation counters) and is built per request, with the request's secrets and bindings.
pub struct ConfigCache<K = String> {
    entry: std::cell::RefCell<Option<(K, Rc<AgentConfig>)>>,
    parses: std::cell::Cell<u64>,
}

impl<K> Default for ConfigCache<K> {
    fn default() -> Self {
        ConfigCache { entry: std::cell::RefCell::new(None), parses: std::cell::Cell::new(0) }
    }
}

impl<K: PartialEq> ConfigCache<K> {
    /// The configuration `key` stands for: the cached one when `key` equals the cached key, else the text
    /// `source(&key)` [`AgentConfig::parse`]d (and, when valid, cached under `key` in place of the previous
    /// one). Equal keys must mean equal texts.
    pub fn get_keyed(&self, key: K, source: impl FnOnce(&K) -> String) -> Result<Rc<AgentConfig>> {
        if let Some(cfg) = self.hit(|cached| *cached == key) {
            return Ok(cfg);
        }
        let text = source(&key);
        self.parse(key, &text)
    }

    /// How many times the cache parsed a source (misses, failed parses included).
    pub fn parses(&self) -> u64 {
        self.parses.get()
    }

    fn hit(&self, same: impl FnOnce(&K) -> bool) -> Option<Rc<AgentConfig>> {
        self.entry.borrow().as_ref().filter(|(cached, _)| same(cached)).map(|(_, cfg)| cfg.clone())
    }

    fn parse(&self, key: K, source: &str) -> Result<Rc<AgentConfig>> {
        self.parses.set(self.parses.get() + 1);
        let cfg = Rc::new(AgentConfig::parse(source)?);
        *self.entry.borrow_mut() = Some((key, cfg.clone()));
        Ok(cfg)
    }
}

impl ConfigCache {
    /// The configuration of `source`: the cached one when `source` is the cached source, else
    /// [`AgentConfig::parse`]d (and, when valid, cached in place of the previous one).
    pub fn get(&self, source: &str) -> Result<Rc<AgentConfig>> {
        match self.hit(|cached| cached == source) {
            Some(cfg) => Ok(cfg),
            None => self.parse(source.to_string(), source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::machine::ModelResponse;
    use crate::core::transcript::Message;
    use crate::http::{HttpRequest, HttpResponse};
    use crate::runtime::traits::{Model, ModelRequest};
    use crate::runtime::MockModel;
    use async_trait::async_trait;
    use futures::executor::block_on;
    use serde_json::json;

    const FULL: &str = r#"{
        "model": {
            "provider": "openai",
            "model": "gpt-4o-mini",
            "baseUrl": "https://gateway.ai.cloudflare.com/v1/acct/gw/openai",
            "apiKeySecret": "MY_OPENAI_KEY",
            "maxTokens": 1024,
            "temperature": 0.2,
            "params": {"top_p": 0.9}
        },
        "instructions": "You process orders.",
        "limits": {"maxSteps": 12, "toolConcurrency": 4, "loopWindow": 3},
        "onAgentDrift": "error",
        "retry": {"maxAttempts": 2, "baseMs": 100},
        "lease": {"ttlMs": 120000, "renewEveryMs": 30000, "graceMs": 5000},
        "recovery": {"intervalMs": 60000, "maxAttempts": 5, "retryWithDiagnosis": true},
        "tools": [
            {"name": "create_ticket", "description": "Opens a ticket", "url": "https://api.example.com/tickets",
             "inputSchema": {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}},
             "sideEffecting": true, "needsApproval": true, "headers": {"X-Team": "ops"}},
            {"name": "lookup", "url": "https://search.hooks.example.org/q", "method": "GET", "timeoutMs": 3000,
             "maxResponseBytes": 2048}
        ],
        "allowedHosts": ["api.example.com", "*.hooks.example.org"],
        "demoTools": false,
        "historyLimit": 20
    }"#;

    fn err_of(json: &str) -> Error {
        let e = AgentConfig::parse(json).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid, "{e}");
        e
    }

    /// `mcp` servers: parsed with their headers (strings and secrets by name), checked against `allowedHosts`
    /// (the refusal names `mcp[i].url`), refused with the path of a wrong field; their tools are the agent's,
    /// listed through the platform's HTTP client with the secrets it reads, and may not take a demo or webhook
    /// tool's name.
    #[test]
    fn mcp_servers_are_configured_checked_against_the_allowlist_and_listed_as_tools() {
        let cfg = AgentConfig::parse(
            r#"{"mcp": [{"url": "https://mcp.example.com/mcp", "timeoutMs": 5000,
                         "headers": {"Authorization": {"secret": "MCP_TOKEN", "prefix": "Bearer "}, "X-Team": "ops"}}],
                "allowedHosts": ["mcp.example.com"]}"#,
        )
        .unwrap();
        assert_eq!(cfg.mcp.len(), 1);
        assert_eq!(cfg.mcp[0].timeout_ms, 5_000);
        let e = err_of(
            r#"{"mcp": [{"url": "https://mcp.example.com/mcp"}, {"url": "https://evil.example.net/m"}], "allowedHosts": ["mcp.example.com"]}"#,
        );
        assert!(e.message.contains("mcp[1].url: host 'evil.example.net' is not in allowedHosts"), "{}", e.message);
        assert!(!e.message.contains("mcp[0]"), "{}", e.message);
        let e = err_of(r#"{"mcp": [{"url": "https://mcp.example.com/mcp"}]}"#);
        assert!(
            e.message.contains("mcp[0].url: host 'mcp.example.com' is not allowed: allowedHosts is empty"),
            "{}",
            e.message
        );
        let e = err_of(
            r#"{"mcp": [{"url": "https://m.example/x", "headers": {"Accept": "x"}}], "allowedHosts": ["m.example"]}"#,
        );
        assert!(e.message.contains("mcp[0].headers.Accept: is set by the MCP client itself"), "{}", e.message);
        for (bad, path) in [
            (r#"{"mcp": [{"url": "https://m.example/x", "header": {}}]}"#, "mcp[0].header"),
            // A header value's error is found at the end of the headers, so it names them.
            (r#"{"mcp": [{"url": "https://m.example/x", "headers": {"A": 1}}]}"#, "mcp[0].headers"),
            (
                r#"{"mcp": [{"url": "https://m.example/x", "headers": {"A": {"secret": "S", "x": 1}}}]}"#,
                "mcp[0].headers",
            ),
            (r#"{"mcp": {"url": "https://m.example/x"}}"#, "mcp"),
        ] {
            let e = err_of(bad);
            assert!(e.message.contains(&format!("at `{path}`")), "{bad}: {}", e.message);
        }

        // Listed as the agent's tools, with the secret from the platform.
        let init = json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25", "capabilities": {}}});
        let list = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "lookup", "inputSchema": {"type": "object"}}]}});
        let reply = |status: u16, body: &Value| {
            Ok(HttpResponse {
                status,
                headers: vec![("content-type".into(), "application/json".into())],
                body: if body.is_null() { String::new() } else { body.to_string() },
                truncated: false,
            })
        };
        let http =
            crate::providers::fake::FakeHttp::new(vec![reply(200, &init), reply(202, &Value::Null), reply(200, &list)]);
        let cache = McpCache::default();
        let secret = |name: &str| (name == "MCP_TOKEN").then(|| "t-1".to_string());
        let tools = block_on(cfg.mcp_tools(&cache, Rc::new(http.clone()), &secret, 0)).unwrap();
        assert_eq!(tools.iter().map(|t| t.name()).collect::<Vec<_>>(), ["lookup"]);
        let sent = http.requests();
        assert_eq!(sent.len(), 3);
        assert!(sent[2].headers.contains(&("Authorization".into(), "Bearer t-1".into())), "{:?}", sent[2].headers);
        assert!(sent[2].headers.contains(&("X-Team".into(), "ops".into())));
        // A tool named like a demo tool (on for the mock model) is refused.
        let list = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "charge"}]}});
        let http =
            crate::providers::fake::FakeHttp::new(vec![reply(200, &init), reply(202, &Value::Null), reply(200, &list)]);
        let e = block_on(cfg.mcp_tools(&McpCache::default(), Rc::new(http), &secret, 0)).err().unwrap();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.contains("its tool 'charge' has the name of another tool of the agent"), "{}", e.message);
    }

    #[test]
    fn the_store_is_kv_by_default_durable_object_on_request_and_anything_else_a_coded_error() {
        assert_eq!(AgentConfig::parse("{}").unwrap().store, StoreMode::Kv);
        assert_eq!(AgentConfig::parse(r#"{"store": "kv"}"#).unwrap().store, StoreMode::Kv);
        assert_eq!(AgentConfig::parse(r#"{"store": "durable-object"}"#).unwrap().store, StoreMode::DurableObject);
        for bad in [
            r#""DO""#,
            r#""durable_object""#,
            r#""Kv""#,
            r#""""#,
            "1",
            "null",
            "true",
            r#"["kv"]"#,
            r#"{"kind": "kv"}"#,
        ] {
            let e = err_of(&format!(r#"{{"model": {{"provider": "mock"}}, "store": {bad}}}"#));
            assert!(e.message.contains("at `store"), "{bad}: {e}");
        }
    }

    #[test]
    fn full_example_parses() {
        let c = AgentConfig::parse(FULL).unwrap();
        assert_eq!(c.model.provider, Provider::OpenAi);
        assert_eq!(c.model.model_id(), "gpt-4o-mini");
        assert_eq!(c.model.api_key_secret_name(), Some("MY_OPENAI_KEY"));
        assert_eq!(c.model.max_tokens, Some(1024));
        assert_eq!(c.model.temperature, Some(0.2));
        assert_eq!(c.model.params.get("top_p"), Some(&json!(0.9)));
        assert_eq!(c.instructions, "You process orders.");
        assert_eq!(c.on_agent_drift, DriftPolicy::Error);
        assert_eq!(c.lease, LeaseOptions { ttl_ms: 120_000, renew_every_ms: 30_000, grace_ms: 5_000 });
        assert_eq!(c.recovery.interval_ms, 60_000);
        assert_eq!(c.recovery.max_attempts, 5);
        assert!(c.recovery.retry_with_diagnosis);
        assert_eq!(c.recovery.max_runs, SweepOptions::default().max_runs);
        assert_eq!(c.tools.len(), 2);
        assert!(c.tools[0].side_effecting && c.tools[0].needs_approval);
        assert_eq!(c.tools[1].method, "GET");
        assert_eq!(c.tools[1].max_response_bytes, 2048);
        assert!(!c.demo_tools_enabled());
        assert_eq!(c.history_limit, 20);
        let o = c.agent_options();
        assert_eq!((o.max_steps, o.tool_concurrency, o.loop_window), (12, 4, 3));
        assert_eq!(o.on_agent_drift, DriftPolicy::Error);
        assert_eq!(o.lease.ttl_ms, 120_000);
        assert_eq!(o.retry, RetryPolicy { max_attempts: 2, base_ms: 100, ..RetryPolicy::default() });
        // Round trip through serialization.
        let back = AgentConfig::parse(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn defaults_are_applied() {
        let c = AgentConfig::parse("{}").unwrap();
        assert_eq!(c, AgentConfig::default());
        assert_eq!(c.model.provider, Provider::Mock);
        assert_eq!(c.model.model_id(), "mock");
        assert_eq!(c.model.api_key_secret_name(), None);
        assert_eq!((c.limits.max_steps, c.limits.tool_concurrency, c.limits.loop_window), (10, 8, 4));
        assert_eq!(c.on_agent_drift, DriftPolicy::Warn);
        assert_eq!(c.lease, LeaseOptions::default());
        assert_eq!(c.recovery, SweepOptions::default());
        assert!(c.tools.is_empty() && c.allowed_hosts.is_empty());
        assert!(c.demo_tools_enabled());
        assert_eq!(c.history_limit, 50);
        assert_eq!(c.agent_options(), AgentOptions::default());

        let c = AgentConfig::parse(
            r#"{"model": {"provider": "anthropic", "model": "claude-x"}, "limits": {"maxSteps": 3}}"#,
        )
        .unwrap();
        assert_eq!(c.model.api_key_secret_name(), Some("ANTHROPIC_API_KEY"));
        assert_eq!((c.limits.max_steps, c.limits.tool_concurrency), (3, 8));
        assert!(!c.demo_tools_enabled());
        let c = AgentConfig::parse(r#"{"model": {"provider": "openai", "model": "m"}, "lease": {"ttlMs": 90000}}"#)
            .unwrap();
        assert_eq!(c.model.api_key_secret_name(), Some("OPENAI_API_KEY"));
        assert_eq!(c.lease, LeaseOptions { ttl_ms: 90_000, ..LeaseOptions::default() });
        let c = AgentConfig::parse(r#"{"model": {"provider": "workers-ai", "model": "@cf/meta/llama"}}"#).unwrap();
        assert_eq!(c.model.api_key_secret_name(), None);
        assert!(!c.model.workers_ai_options().stream);
        let c =
            AgentConfig::parse(r#"{"model": {"provider": "workers-ai", "model": "@cf/x", "stream": true}}"#).unwrap();
        assert!(c.model.workers_ai_options().stream);
    }

    #[test]
    fn unknown_fields_are_rejected_with_a_clear_message() {
        let e = err_of(r#"{"model": {"provider": "mock"}, "limits": {"maxStep": 3}}"#);
        assert!(e.message.contains("at `limits.maxStep`"), "{}", e.message);
        assert!(e.message.contains("unknown field `maxStep`"), "{}", e.message);
        assert!(e.message.contains("maxSteps"), "{}", e.message);

        let e = err_of(r#"{"instructionz": "x"}"#);
        assert!(e.message.contains("unknown field `instructionz`"), "{}", e.message);

        let e = err_of("{\n  \"tools\": [\n    {\"name\": \"a\", \"url\": \"https://x.com\"},\n    {\"name\": \"b\", \"url\": \"https://x.com\", \"verb\": \"GET\"}\n  ]\n}");
        assert!(e.message.contains("at `tools[1].verb`"), "{}", e.message);
        assert!(e.message.contains("line 4"), "{}", e.message);

        let e = err_of(r#"{"lease": {"ttlMS": 1000}}"#);
        assert!(e.message.contains("at `lease.ttlMS`: unknown field `ttlMS`"), "{}", e.message);
        assert!(e.message.contains("`ttlMs`"), "{}", e.message);

        let e = err_of(r#"{"retry": {"maxAttempt": 3}}"#);
        assert!(e.message.contains("at `retry.maxAttempt`: unknown field `maxAttempt`"), "{}", e.message);
        assert!(e.message.contains("`maxAttempts`") && e.message.contains("`deadlineMs`"), "{}", e.message);
        let e = err_of(r#"{"retry": {"baseMs": "fast"}}"#);
        assert!(e.message.contains("invalid type") && e.message.contains("at `retry.baseMs`"), "{}", e.message);

        let e = err_of(r#"{"recovery": {"maxAttempt": 3}}"#);
        assert!(e.message.contains("at `recovery.maxAttempt`: unknown field `maxAttempt`"), "{}", e.message);
        let e = err_of(r#"{"recovery": {"maxAttempts": -1}}"#);
        assert!(
            e.message.contains("invalid value") && e.message.contains("at `recovery.maxAttempts`"),
            "{}",
            e.message
        );

        let e = err_of(r#"{"tools": [{"url": "https://x.com"}]}"#);
        assert!(e.message.contains("at `tools[0]`") && e.message.contains("missing field `name`"), "{}", e.message);

        let e = err_of(r#"{"limits": {"maxSteps": "ten"}}"#);
        assert!(e.message.contains("at `limits.maxSteps`") && e.message.contains("invalid type"), "{}", e.message);

        let e = err_of(r#"{"model": {"script": [{"text": "a", "tool_calls": []}]}}"#);
        assert!(e.message.contains("at `model.script[0].tool_calls`"), "{}", e.message);

        for bad in ["", "not json", "{", "[]", "{\"model\": ", "\u{0}"] {
            err_of(bad);
        }

        let e = err_of(r#"{"progressGuard": {"hintAfterr": 2}}"#);
        assert!(e.message.contains("at `progressGuard.hintAfterr`"), "{}", e.message);
    }

    #[test]
    fn the_progress_guard_is_off_unless_configured() {
        assert_eq!(AgentConfig::parse("{}").unwrap().progress_guard, None);
        let on = AgentConfig::parse(r#"{"progressGuard": {}}"#).unwrap();
        assert_eq!(on.progress_guard, Some(crate::runtime::ProgressGuardOptions::default()));
        let set = AgentConfig::parse(r#"{"progressGuard": {"hintAfter": 1, "maxDenials": 5}}"#).unwrap();
        let g = set.progress_guard.unwrap();
        assert_eq!((g.hint_after, g.deny_after, g.max_denials), (1, 3, 5));
    }

    #[test]
    fn schedules_are_checked_with_the_configuration() {
        let ok = AgentConfig::parse(r#"{"schedules": [{"id": "daily", "cron": "0 9 * * 1-5", "input": "report"}]}"#)
            .unwrap();
        assert_eq!(ok.compiled_schedules().unwrap().len(), 1);
        let e = err_of(r#"{"schedules": [{"id": "daily", "cron": "0 25 * * *", "input": "report"}]}"#);
        assert!(e.message.contains("schedules: schedule 'daily': cron expression"), "{}", e.message);
        let e = err_of(r#"{"schedules": [{"id": "a.b", "cron": "@daily", "input": "x"}]}"#);
        assert!(e.message.contains("schedules: invalid session id"), "{}", e.message);
        let e = err_of(r#"{"schedules": [{"id": "d", "cron": "@daily", "input": "x", "every": 5}]}"#);
        assert!(e.message.contains("at `schedules"), "{}", e.message);
    }

    #[test]
    fn invalid_provider_is_rejected() {
        let e = err_of(r#"{"model": {"provider": "gpt"}}"#);
        assert!(e.message.contains("at `model.provider`"), "{}", e.message);
        assert!(e.message.contains("unknown variant `gpt`"), "{}", e.message);
        assert!(e.message.contains("workers-ai"), "{}", e.message);
        let e = err_of(r#"{"model": {"provider": "openai"}}"#);
        assert!(e.message.contains("model.model is required for provider 'openai'"), "{}", e.message);
    }

    #[test]
    fn tracing_is_checked_and_its_export_request_carries_the_secrets_and_the_json_body() {
        let cfg = AgentConfig::parse(
            r#"{"tracing": {"endpoint": "http://127.0.0.1:4318/v1/traces",
                "headers": {"Authorization": {"secret": "OTLP_TOKEN", "prefix": "Bearer "}, "X-Team": "ops"}}}"#,
        )
        .unwrap();
        let t = cfg.tracing.as_ref().unwrap();
        assert_eq!(
            (t.contents, t.service_name.as_str(), t.max_buffered_spans, t.timeout_ms),
            (false, "steadfast", 2_048, 10_000)
        );
        let req = t.request("{}".into(), &|n| (n == "OTLP_TOKEN").then(|| "s3cret".to_string())).unwrap();
        assert_eq!(
            (req.method.as_str(), req.url.as_str(), req.body.as_deref()),
            ("POST", t.endpoint.as_str(), Some("{}"))
        );
        assert!(req.headers.contains(&("Authorization".into(), "Bearer s3cret".into())));
        assert!(req.headers.contains(&("content-type".into(), "application/json".into())));
        let e = t.request("{}".into(), &|_| None).unwrap_err();
        assert!(e.message.contains("tracing.headers.Authorization: the secret OTLP_TOKEN is missing"), "{}", e.message);
        for (json, want) in [
            (r#"{"tracing": {"endpoint": "ftp://x/v1/traces"}}"#, "tracing.endpoint"),
            (
                r#"{"tracing": {"endpoint": "https://x/v1/traces", "headers": {"Content-Type": "text/plain"}}}"#,
                "tracing.headers.Content-Type: is set by the exporter",
            ),
            (
                r#"{"tracing": {"endpoint": "https://x/v1/traces", "headers": {"A": {"secret": "not a name"}}}}"#,
                "tracing.headers.A: secret",
            ),
            (r#"{"tracing": {"endpoint": "https://x/v1/traces", "maxBufferedSpans": 0}}"#, "tracing.maxBufferedSpans"),
            (r#"{"tracing": {"endpoint": "https://x/v1/traces", "timeoutMs": 0}}"#, "tracing.timeoutMs"),
        ] {
            let e = AgentConfig::parse(json).unwrap_err();
            assert_eq!(e.code, ErrorCode::ConfigInvalid);
            assert!(e.message.contains(want), "{json}: {}", e.message);
        }
        let e = AgentConfig::parse(r#"{"tracing": {"endpoint": "https://x/v1/traces", "sample": 1}}"#).unwrap_err();
        assert!(e.message.contains("sample"), "{}", e.message);
    }

    #[test]
    fn validate_names_each_field() {
        let e = err_of(
            r#"{
            "model": {"provider": "anthropic", "model": "c", "script": [{"text": "x"}], "apiKeySecret": "sk-123",
                      "temperature": 3},
            "limits": {"maxSteps": 0},
            "lease": {"ttlMs": 1000, "renewEveryMs": 1000},
            "recovery": {"maxAttempts": 0},
            "allowedHosts": ["https://api.example.com", "api.example.com"],
            "tools": [
                {"name": "a", "url": "https://api.example.com/a"},
                {"name": "a", "url": "https://evil.example.net/b"},
                {"name": "c", "url": "ftp://api.example.com/c"}
            ]
        }"#,
        );
        for needle in [
            "model.script is only for provider 'mock'",
            "model.apiKeySecret",
            "model.temperature",
            "limits.maxSteps must be at least 1",
            "lease.renewEveryMs",
            "recovery.maxAttempts",
            "allowedHosts[0]",
            "tools[1].name: two tools are named 'a'",
            "tools[1]: webhook tool 'a': host 'evil.example.net' is not in allowedHosts",
            "tools[2]: webhook tool 'c'",
        ] {
            assert!(e.message.contains(needle), "missing {needle:?} in {}", e.message);
        }

        let e = err_of(
            r#"{"tools": [{"name": "charge", "url": "https://api.example.com/"}], "allowedHosts": ["api.example.com"]}"#,
        );
        assert!(e.message.contains("tools[0].name: 'charge' is also a demo tool"), "{}", e.message);
        AgentConfig::parse(
            r#"{"demoTools": false, "tools": [{"name": "charge", "url": "https://api.example.com/"}], "allowedHosts": ["api.example.com"]}"#,
        )
        .unwrap();

        let e = err_of(r#"{"tools": [{"name": "t", "url": "https://api.example.com/"}]}"#);
        assert!(e.message.contains("allowedHosts is empty"), "{}", e.message);

        // The recovery gate's ceiling: strict mode's, at least 1.
        let e = err_of(r#"{"recovery": {"ceiling": 5}}"#);
        assert!(e.message.contains("recovery.ceiling takes strict mode"), "{}", e.message);
        let e = err_of(r#"{"store": "durable-object", "recovery": {"ceiling": 0}}"#);
        assert!(e.message.contains("recovery.ceiling must be at least 1"), "{}", e.message);
        let ok = AgentConfig::parse(r#"{"store": "durable-object", "recovery": {"ceiling": 5}}"#).unwrap();
        assert_eq!(ok.recovery.ceiling, Some(5));

        let e = err_of(
            r#"{"model": {"script": [{}, {"error": {"status": 200}}, {"text": "a", "error": {"status": 500}}, {"toolCalls": []}]}}"#,
        );
        for needle in ["model.script[0]", "model.script[1]", "model.script[2]", "model.script[3]"] {
            assert!(e.message.contains(needle), "missing {needle:?} in {}", e.message);
        }
    }

    #[test]
    fn wait_tools_are_opt_in_and_an_unknown_one_is_a_coded_config_error() {
        let cfg = AgentConfig::parse(r#"{"waitTools": ["ask_question", "sleep_for", "sleep_until"]}"#).unwrap();
        use crate::runtime::WaitTool;
        assert_eq!(cfg.agent_options().wait_tools, [WaitTool::AskQuestion, WaitTool::SleepFor, WaitTool::SleepUntil]);
        assert!(AgentConfig::parse("{}").unwrap().agent_options().wait_tools.is_empty(), "none unless asked");
        let e = err_of(r#"{"waitTools": ["ask_question", "wait_forever"]}"#);
        assert!(e.message.contains("at `waitTools[1]`") && e.message.contains("wait_forever"), "{}", e.message);
        let e = err_of(r#"{"waitTools": "ask_question"}"#);
        assert!(e.message.contains("waitTools"), "{}", e.message);
        // A wait tool named twice, or also a webhook tool's name, is refused when the agent is built (its tool
        // names are unique: `STEADFAST_CONFIG_INVALID`).
    }

    fn ask(model: &MockModel, messages: &[Message]) -> Result<ModelResponse> {
        block_on(model.generate(ModelRequest::new("r", messages, &[], 1, "e")))
    }

    #[test]
    fn a_scripted_retry_after_reaches_the_error_to_the_millisecond() {
        let rng = crate::rng::SplitMix64::new(7);
        let fixed = [0, 1, 9, 10, 100, 999, 1_000, 1_001, 1_010, 1_500, 2_000, 59_999, 86_400_000];
        let generated = (0..200).map(|_| crate::rng::Rng::next_u64(&rng) % 10_000_000);
        for ms in fixed.into_iter().chain(generated) {
            let model = MockModel::new(vec![MockTurn::error_retry_after(429, ms)]);
            let e = ask(&model, &[Message::user("hi")]).unwrap_err();
            assert_eq!(e.retry_after_ms, Some(ms), "{ms} ms");
        }
    }

    #[test]
    fn mock_script_is_parsed_into_mock_turns() {
        let c = AgentConfig::parse(
            r#"{"model": {"provider": "mock", "script": [
                {"toolCalls": [{"name": "lookup", "args": {"q": "x"}}, {"name": "ping"}], "text": "checking"},
                {"error": {"status": 429, "retryAfterMs": 1500}},
                {"text": "done"}
            ]}}"#,
        )
        .unwrap();
        let script = c.mock_script();
        assert_eq!(script.len(), 3);
        match &script[0] {
            MockTurn::Reply { text, tool_calls, .. } => {
                assert_eq!(text, "checking");
                assert_eq!(tool_calls.len(), 2);
                assert_eq!((tool_calls[0].name.as_str(), &tool_calls[0].args), ("lookup", &json!({"q": "x"})));
                assert_eq!((tool_calls[1].name.as_str(), &tool_calls[1].args), ("ping", &json!({})));
            }
            other => panic!("{other:?}"),
        }
        match &script[1] {
            MockTurn::Error(e) => assert_eq!((e.status, e.retry_after_ms), (429, Some(1500))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(&script[2], MockTurn::Text(t) if t == "done"));

        let model = MockModel::new(script);
        let user = [Message::user("hi")];
        assert_eq!(ask(&model, &user).unwrap().tool_calls.len(), 2);
        let e = ask(&model, &user).unwrap_err();
        assert_eq!((e.code, e.retry_after_ms), (ErrorCode::ProviderRateLimited, Some(1500)));
        assert_eq!(ask(&model, &user).unwrap().text, "done");

        // No script: the demo script.
        let demo = AgentConfig::default().mock_script();
        assert_eq!(demo.len(), 3);
        let r = ask(&MockModel::by_turn(demo), &user).unwrap();
        assert_eq!(r.tool_calls[0].name, "charge");
    }

    struct NoHttp;

    #[async_trait(?Send)]
    impl HttpClient for NoHttp {
        async fn send(&self, _request: HttpRequest) -> Result<HttpResponse> {
            Ok(HttpResponse { status: 200, headers: vec![], body: "{}".into(), truncated: false })
        }
    }

    #[test]
    fn webhook_tools_are_built_from_config() {
        let c = AgentConfig::parse(FULL).unwrap();
        let tools = c.webhook_tools(Rc::new(NoHttp)).unwrap();
        assert_eq!(tools.iter().map(|t| t.name()).collect::<Vec<_>>(), ["create_ticket", "lookup"]);
        assert!(tools[0].side_effecting() && tools[0].needs_approval(&json!({})));
        let shared: Rc<dyn HttpClient> = Rc::new(NoHttp);
        assert_eq!(c.webhook_tools(shared).unwrap().len(), 2);
    }

    /// The per-process configuration cache over generated request sequences: every request gets exactly what
    /// parsing its source gives (the same configuration, or the same error), a source equal to the cached one
    /// is not parsed again (the same `Rc` comes back), any other source is parsed (a changed configuration is
    /// never served stale), and a failing source is parsed on every request without evicting the valid entry.
    /// `STEADFAST_SEED=<n>` replays one case.
    #[test]
    fn the_config_cache_parses_a_source_once_and_never_serves_a_changed_one_stale_for_generated_sequences() {
        use crate::runtime::{Rng, SplitMix64};
        let sources = [
            "{}".to_string(),
            "{ }".to_string(),
            r#"{"instructions": "a", "limits": {"maxSteps": 3}}"#.to_string(),
            r#"{"instructions": "b", "limits": {"maxSteps": 3}}"#.to_string(),
            r#"{"instructions": "a", "limits": {"maxSteps": 4}}"#.to_string(),
            r#"{"model": {"provider": "mock", "script": [{"text": "x"}]}, "settleMs": 50}"#.to_string(),
            FULL.to_string(),
            r#"{"limits": {"maxSteps": 0}}"#.to_string(),
            r#"{"instructions": 7}"#.to_string(),
            "not json".to_string(),
        ];
        let seeds: Vec<u64> = crate::seeds::seeds(0..300);
        for seed in seeds {
            let rng = SplitMix64::new(seed);
            let repro = crate::seeds::repro(seed, "config::tests::the_config_cache");
            let cache = ConfigCache::default();
            // The same sequence through a cache keyed by the source's index (as the Worker keys by the JS value
            // the text is read from): it reads the text only on a miss and answers exactly as `get`.
            let keyed = ConfigCache::<usize>::default();
            let mut last_keyed: Option<Rc<AgentConfig>> = None;
            let (mut cached, mut last, mut parses): (Option<&str>, Option<Rc<AgentConfig>>, u64) = (None, None, 0);
            for _ in 0..1 + rng.next_u64() % 40 {
                // Repeats are likely (a warm isolate sees the same source again and again).
                let index = match (&last, rng.next_u64() % 2) {
                    (Some(_), 0) => sources.iter().position(|s| Some(s.as_str()) == cached).unwrap(),
                    _ => (rng.next_u64() % sources.len() as u64) as usize,
                };
                let source = sources[index].as_str();
                let fresh = AgentConfig::parse(source);
                let got = cache.get(source);
                let read = std::cell::Cell::new(false);
                let got_keyed = keyed.get_keyed(index, |i| {
                    read.set(true);
                    sources[*i].clone()
                });
                assert_eq!(read.get(), cached != Some(source), "{repro}: the text read only on a miss");
                match (&got, &got_keyed) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{repro}: {source}"),
                    (Err(a), Err(b)) => assert_eq!(a, b, "{repro}: {source}"),
                    _ => panic!("{repro}: {source}: get {got:?} vs get_keyed {got_keyed:?}"),
                }
                if let Ok(b) = &got_keyed {
                    if cached == Some(source) {
                        assert!(Rc::ptr_eq(b, last_keyed.as_ref().unwrap()), "{repro}: a cached key was parsed again");
                    }
                    last_keyed = Some(b.clone());
                }
                if cached != Some(source) {
                    parses += 1;
                }
                match (&got, &fresh) {
                    (Ok(g), Ok(f)) => {
                        assert_eq!(**g, *f, "{repro}: {source}");
                        if cached == Some(source) {
                            assert!(Rc::ptr_eq(g, last.as_ref().unwrap()), "{repro}: a cached source was parsed again");
                        }
                        cached = Some(source);
                        last = Some(g.clone());
                    }
                    (Err(g), Err(f)) => assert_eq!(g, f, "{repro}: {source}"),
                    _ => panic!("{repro}: {source}: cache {got:?} vs parse {fresh:?}"),
                }
                assert_eq!(cache.parses(), parses, "{repro}: parses after {source}");
                assert_eq!(keyed.parses(), parses, "{repro}: keyed parses after {source}");
            }
        }
    }

    /// The configuration's names of the agent options are the npm package's (the runtime's [`AgentOptions`]
    /// JSON): over generated options, a document with the four limits under `limits` and the rest at the top
    /// level gives back exactly those options. `STEADFAST_SEED=<n>` replays one case.
    #[test]
    fn every_agent_option_is_configured_under_its_npm_name_for_generated_options() {
        use crate::runtime::{Rng, SplitMix64};
        let seeds: Vec<u64> = crate::seeds::seeds(0..200);
        for seed in seeds {
            let rng = SplitMix64::new(seed);
            let n = |lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo + 1);
            let repro = crate::seeds::repro(seed, "config::tests::every_agent_option");
            let ttl = n(4, 600_000);
            let options = AgentOptions {
                max_steps: n(1, 500) as u32,
                tool_concurrency: n(1, 64) as usize,
                on_agent_drift: [DriftPolicy::Warn, DriftPolicy::Error, DriftPolicy::Ignore][n(0, 2) as usize],
                retry: RetryPolicy {
                    max_attempts: n(1, 20) as u32,
                    base_ms: n(0, 10_000),
                    cap_ms: n(0, 100_000),
                    deadline_ms: n(0, 1_000_000),
                },
                lease: LeaseOptions { ttl_ms: ttl, renew_every_ms: n(1, ttl - 1), grace_ms: n(0, 100_000) },
                loop_window: n(0, 10) as u32,
                max_tool_result_bytes: n(1_024, crate::core::limits::MAX_TOOL_RESULT_BYTES as u64) as usize,
                wait_tools: [WaitTool::AskQuestion, WaitTool::SleepFor, WaitTool::SleepUntil]
                    .into_iter()
                    .filter(|_| n(0, 1) == 1)
                    .collect(),
                steer_poll_ms: (n(0, 3) > 0).then(|| n(0, 60_000)),
                max_handoffs: n(0, 20) as u32,
                max_input_tokens: (n(0, 1) == 1).then(|| n(1, 1 << 40)),
                max_output_tokens: (n(0, 1) == 1).then(|| n(1, 1 << 40)),
                max_total_tokens: (n(0, 1) == 1).then(|| n(1, 1 << 40)),
                max_duration_ms: (n(0, 1) == 1).then(|| n(1, 1 << 40)),
                // Whole micro-dollars, up to $1,000,000.
                max_cost_usd: (n(0, 1) == 1).then(|| n(1, 1 << 40) * 1000),
                session_budget: crate::core::budget::TokenLimits {
                    max_input_tokens: (n(0, 1) == 1).then(|| n(1, 1 << 40)),
                    max_output_tokens: (n(0, 1) == 1).then(|| n(1, 1 << 40)),
                    max_total_tokens: (n(0, 1) == 1).then(|| n(1, 1 << 40)),
                    max_cost_usd: (n(0, 1) == 1).then(|| n(1, 1 << 40) * 1000),
                },
                on_exceeded: [OnExceeded::Finish, OnExceeded::Throw][n(0, 1) as usize],
                prices: crate::core::cost::PriceTable(
                    (0..n(0, 3))
                        .map(|i| {
                            let p = crate::core::cost::Price {
                                input: n(0, 1 << 39),
                                output: n(0, 1 << 39),
                                cached_input: (n(0, 1) == 1).then(|| n(0, 1 << 39)),
                                cache_write: (n(0, 1) == 1).then(|| n(0, 1 << 39)),
                                reasoning: (n(0, 1) == 1).then(|| n(0, 1 << 39)),
                            };
                            (format!("model-{i}"), p)
                        })
                        .collect(),
                ),
                breaker: (n(0, 1) == 1).then(|| crate::core::breaker::BreakerOptions {
                    window_ms: n(1, 1 << 40),
                    min_calls: n(1, 100) as u32,
                    failure_percent: n(1, 100) as u32,
                    cool_down_ms: n(1, 1 << 40),
                }),
                storage_prices: crate::core::cost::StoragePrices {
                    read: n(0, 10_000_000),
                    write: n(0, 10_000_000),
                    delete: n(0, 10_000_000),
                    list: n(0, 10_000_000),
                    request: n(0, 10_000_000),
                    row_written: n(0, 10_000_000),
                },
            };
            use crate::runtime::WaitTool;
            let Value::Object(mut doc) = serde_json::to_value(&options).unwrap() else { panic!("{repro}") };
            let mut limits = Map::new();
            for key in [
                "maxSteps",
                "toolConcurrency",
                "loopWindow",
                "maxToolResultBytes",
                "maxInputTokens",
                "maxOutputTokens",
                "maxTotalTokens",
                "maxDurationMs",
                "maxCostUsd",
                "onExceeded",
            ] {
                limits.insert(key.into(), doc.remove(key).unwrap_or_else(|| panic!("{key}; {repro}")));
            }
            doc.insert("limits".into(), Value::Object(limits));
            doc.insert("settleMs".into(), json!(1));
            let cfg = AgentConfig::parse(&Value::Object(doc).to_string()).unwrap_or_else(|e| panic!("{e}; {repro}"));
            assert_eq!(cfg.agent_options(), options, "{repro}");
        }
    }

    /// A configured `retry` reaches the agent (it was left at its default before, and `retry` was an unknown
    /// field): against a provider that always answers 503, the model is asked `maxAttempts` times before the
    /// run attempt fails, and 4 times (the default) without `retry`.
    #[test]
    fn a_configured_retry_policy_is_the_agents_for_a_failing_provider() {
        use crate::runtime::{Agent, ManualClock, ManualSleep};
        for (retry, asked) in
            [("", 4), (r#", "retry": {"maxAttempts": 1}"#, 1), (r#", "retry": {"maxAttempts": 3}"#, 3)]
        {
            let cfg =
                AgentConfig::parse(&format!(r#"{{"model": {{"provider": "openai", "model": "m"}}{retry}}}"#)).unwrap();
            let platform = TestPlatform {
                // More 503s than any policy here asks for: a surplus shows as extra requests.
                http: crate::providers::fake::FakeHttp::new(
                    (0..8)
                        .map(|_| {
                            Ok(HttpResponse {
                                status: 503,
                                headers: vec![],
                                body: r#"{"error": {"message": "down"}}"#.into(),
                                truncated: false,
                            })
                        })
                        .collect(),
                ),
                secrets: vec![("OPENAI_API_KEY".into(), "k".into())],
                ai: None,
            };
            let clock = ManualClock::new(1_000);
            let agent = Agent::builder_rc(cfg.model(&platform).unwrap())
                .store(crate::store::MemoryStore::new())
                .clock(Rc::new(clock.clone()))
                .sleep(Rc::new(ManualSleep::new(clock)))
                .options(cfg.agent_options())
                .build()
                .unwrap();
            let e = block_on(agent.send("r1", "hi", Default::default())).unwrap_err();
            assert_eq!(e.code, ErrorCode::ProviderUnavailable, "{retry}: {e}");
            assert_eq!(platform.http.requests().len(), asked, "{retry}");
        }
    }

    /// `fallbacks` from the configuration: an OpenAI model that answers 503 to every call falls back to a mock
    /// model after its share of the retry policy (2 of the default 4 attempts), and the turn records the mock; a
    /// sub-agent with a model of its own has no fallbacks, one without inherits the lead's.
    #[test]
    fn configured_fallbacks_take_a_call_the_agents_model_failed() {
        use crate::runtime::{ManualClock, ManualSleep};
        let cfg = AgentConfig::parse(
            r#"{"model": {"provider": "openai", "model": "m"},
                "fallbacks": [{"provider": "mock", "model": "backup", "script": [{"text": "from the backup"}]}],
                "subagents": [{"name": "own", "description": "d", "model": {"provider": "mock"}},
                              {"name": "same", "description": "d"}]}"#,
        )
        .unwrap();
        let down = Ok(HttpResponse {
            status: 503,
            headers: vec![],
            body: r#"{"error": {"message": "down"}}"#.into(),
            truncated: false,
        });
        let platform = TestPlatform {
            http: crate::providers::fake::FakeHttp::new((0..8).map(|_| down.clone()).collect()),
            secrets: vec![("OPENAI_API_KEY".into(), "k".into())],
            ai: None,
        };
        assert_eq!(
            cfg.fallback_models(&platform).unwrap().iter().map(|m| m.id().to_string()).collect::<Vec<_>>(),
            ["backup"]
        );
        assert!(cfg.for_subagent(&cfg.subagents[0]).fallbacks.is_empty());
        assert_eq!(cfg.for_subagent(&cfg.subagents[1]).fallbacks, cfg.fallbacks);
        let clock = ManualClock::new(1_000);
        let agent = cfg
            .agent_builder(&platform, Rc::new(NoHttp), &Vec::new)
            .unwrap()
            .store(crate::store::MemoryStore::new())
            .clock(Rc::new(clock.clone()))
            .sleep(Rc::new(ManualSleep::new(clock)))
            .build()
            .unwrap();
        let r = block_on(agent.send("r1", "hi", Default::default())).unwrap();
        assert_eq!(r.text, "from the backup");
        assert_eq!(platform.http.requests().len(), 2, "the agent's model: its share of 4 attempts");
        let Some(crate::core::transcript::Message::Assistant { model, .. }) = r.messages.last() else { panic!() };
        assert_eq!(model.as_deref(), Some("backup"));
        let e = AgentConfig::parse(r#"{"fallbacks": [{"provider": "nope"}]}"#).unwrap_err();
        assert!(e.message.contains("fallbacks[0]"), "{}", e.message);
    }

    /// Sub-agents from the configuration: each with its own mock script, instructions and limits (or the lead's),
    /// built into the lead as tools whose calls run child runs; names, nesting and each sub-agent's own
    /// settings are checked with the configuration.
    #[test]
    fn configured_sub_agents_run_as_child_runs_and_are_checked_with_the_configuration() {
        let cfg = AgentConfig::parse(
            r#"{"model": {"provider": "mock", "script": [
                    {"toolCalls": [{"name": "research", "args": {"task": "find the answer"}}]},
                    {"text": "done"}]},
                "limits": {"maxSteps": 7},
                "subagents": [{"name": "research", "description": "Finds things",
                    "instructions": "You research.",
                    "model": {"provider": "mock", "script": [{"text": "the answer is 42"}]}}]}"#,
        )
        .unwrap();
        let sub = cfg.for_subagent(&cfg.subagents[0]);
        assert_eq!(
            (sub.instructions.as_str(), sub.limits.max_steps, sub.demo_tools_enabled()),
            ("You research.", 7, false)
        );
        let agent = offline_agent(&cfg);
        let r = block_on(agent.send("r1", "go", Default::default())).unwrap();
        let results: Vec<&str> = r
            .messages
            .iter()
            .filter_map(|m| match m {
                crate::core::transcript::Message::Tool(t) => Some(t.content.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(results, ["the answer is 42"]);
        let children = block_on(agent.children(&block_on(agent.load("r1")).unwrap().unwrap())).unwrap();
        assert_eq!(children.len(), 1);
        assert_eq!(children[0].status, Some(crate::core::checkpoint::RunStatus::Finished));
        assert!(children[0].run_id.starts_with("r1.sub-research-"), "{:?}", children[0]);

        let sub = |fields: &str| format!(r#"{{"subagents": [{{"name": "a", "description": "x"{fields}}}]}}"#);
        let e = err_of(r#"{"subagents": [{"name": "a b", "description": "x"}]}"#);
        assert!(e.message.contains("subagents[0].name: \"a b\" must be"), "{}", e.message);
        let e = err_of(r#"{"demoTools": true, "subagents": [{"name": "charge", "description": "x"}]}"#);
        assert!(e.message.contains("subagents[0].name: 'charge' is also the name"), "{}", e.message);
        let e = err_of(&sub(r#", "limits": {"maxSteps": 0}"#));
        assert!(e.message.contains("subagents[0]: limits.maxSteps must be at least 1"), "{}", e.message);
        let e = err_of(&sub(r#", "schedules": []"#));
        assert!(e.message.contains("unknown field `schedules`"), "{}", e.message);
        let deep = r#"{"subagents": [{"name": "a", "description": "x", "subagents": [{"name": "b", "description": "x",
            "subagents": [{"name": "c", "description": "x", "subagents": [{"name": "d", "description": "x"}]}]}]}]}"#;
        let e = err_of(deep);
        assert!(e.message.contains("sub-agents nest at most 3 levels deep"), "{}", e.message);
        assert!(AgentConfig::parse(&sub(r#", "subagents": [{"name": "b", "description": "y"}]"#)).is_ok());

        // Detached sub-agents: the call answers with the child's id; abandon only with detached, not on a handoff,
        // and only while the lead reads queued messages.
        let detached = AgentConfig::parse(&sub(r#", "detached": true, "abandon": true"#)).unwrap();
        assert!(detached.subagents[0].detached && detached.subagents[0].abandon);
        let e = err_of(&sub(r#", "abandon": true"#));
        assert!(e.message.contains("subagents[0].abandon: only a detached"), "{}", e.message);
        let e = err_of(r#"{"steerPollMs": null, "subagents": [{"name": "a", "description": "x", "detached": true}]}"#);
        assert!(e.message.contains("subagents[0].detached: its result comes as a queued message"), "{}", e.message);
        let e = err_of(r#"{"handoffs": [{"name": "a", "description": "x", "detached": true}]}"#);
        assert!(e.message.contains("handoffs[0]: a handoff agent is not detached"), "{}", e.message);
        let e = err_of(&sub(r#", "detached": "yes""#));
        assert!(e.message.contains("detached"), "{}", e.message);
    }

    /// The configured agent over a memory store, a manual clock and no network (mock models only).
    fn offline_agent(cfg: &AgentConfig) -> crate::runtime::Agent {
        use crate::runtime::{ManualClock, ManualSleep};
        let platform = TestPlatform { http: crate::providers::fake::FakeHttp::new(vec![]), secrets: vec![], ai: None };
        let clock = ManualClock::new(1_000);
        cfg.agent_builder(&platform, Rc::new(NoHttp), &Vec::new)
            .unwrap()
            .store(crate::store::MemoryStore::new())
            .clock(Rc::new(clock.clone()))
            .sleep(Rc::new(ManualSleep::new(clock)))
            .build()
            .unwrap()
    }

    /// Handoffs from the configuration: the lead (named by `name`) hands the conversation to a configured agent
    /// with its own mock script and instructions; names are checked with the configuration.
    #[test]
    fn configured_handoffs_move_the_conversation_and_are_checked_with_the_configuration() {
        let cfg = AgentConfig::parse(
            r#"{"model": {"provider": "mock", "script": [{"toolCalls": [{"name": "transfer_to_billing", "args": {}}]}]},
                "name": "triage", "instructions": "You triage.", "maxHandoffs": 3,
                "handoffs": [{"name": "billing", "description": "Handles invoices", "instructions": "You bill.",
                    "model": {"provider": "mock", "script": [{"text": "(the lead's turn)"}, {"text": "billing here"}]}}]}"#,
        )
        .unwrap();
        assert_eq!(cfg.agent_options().max_handoffs, 3);
        let agent = offline_agent(&cfg);
        let r = block_on(agent.send("r1", "my invoice", Default::default())).unwrap();
        assert_eq!(r.text, "billing here");
        let cp = block_on(agent.load("r1")).unwrap().unwrap();
        assert_eq!((cp.agent.as_deref(), cp.handoffs), (Some("billing"), 1));
        assert!(matches!(cp.messages.last(), Some(crate::core::transcript::Message::Assistant { .. })));
        assert!(cp
            .messages
            .iter()
            .any(|m| matches!(m, crate::core::transcript::Message::System { content } if content == "You bill.")));

        let e = err_of(r#"{"handoffs": [{"name": "lead", "description": "x"}]}"#);
        assert!(e.message.contains("handoffs[0].name: 'lead' is also the name of the lead"), "{}", e.message);
        let e = err_of(r#"{"handoffs": [{"name": "a b", "description": "x"}]}"#);
        assert!(e.message.contains("handoffs[0].name: \"a b\" must be"), "{}", e.message);
        let e = err_of(r#"{"handoffs": [{"name": "a", "description": "x", "limits": {"maxSteps": 0}}]}"#);
        assert!(e.message.contains("handoffs[0]: limits.maxSteps must be at least 1"), "{}", e.message);
    }

    /// Budgets from the configuration (`limits.maxTotalTokens` ..., `limits.onExceeded`, `sessionBudget`): a
    /// configured run stops on its budget; a limit of 0, an unknown `onExceeded` and an unknown session limit are
    /// refused.
    #[test]
    fn configured_budgets_stop_a_run_and_bad_ones_are_refused() {
        let cfg = AgentConfig::parse(
            r#"{"model": {"provider": "mock", "script": [
                    {"toolCalls": [{"name": "transfer_to_nobody", "args": {}}]}, {"text": "never"}]},
                "limits": {"maxSteps": 9, "maxTotalTokens": 15, "onExceeded": "throw"},
                "sessionBudget": {"maxTotalTokens": 1000}}"#,
        )
        .unwrap();
        let o = cfg.agent_options();
        assert_eq!((o.max_total_tokens, o.session_budget.max_total_tokens), (Some(15), Some(1000)));
        assert_eq!(o.on_exceeded, crate::core::budget::OnExceeded::Throw);
        let agent = offline_agent(&cfg);
        let e = block_on(agent.send("r1", "go", Default::default())).unwrap_err();
        assert_eq!(e.code, ErrorCode::BudgetExceeded, "{e}");
        let cp = block_on(agent.load("r1")).unwrap().unwrap();
        assert_eq!(cp.finish_reason, Some(crate::core::checkpoint::FinishReason::BudgetExceeded));

        let e = err_of(r#"{"limits": {"onExceeded": "explode"}}"#);
        assert!(e.message.contains("limits.onExceeded"), "{}", e.message);
        let e = err_of(r#"{"sessionBudget": {"maxTokens": 3}}"#);
        assert!(e.message.contains("sessionBudget"), "{}", e.message);
        let e = err_of(r#"{"limits": {"maxDurationMs": -1}}"#);
        assert!(e.message.contains("limits.maxDurationMs"), "{}", e.message);
        let zero = AgentConfig::parse(r#"{"limits": {"maxOutputTokens": 0}}"#).unwrap();
        let platform = TestPlatform { http: crate::providers::fake::FakeHttp::new(vec![]), secrets: vec![], ai: None };
        let built = zero
            .agent_builder(&platform, Rc::new(NoHttp), &Vec::new)
            .unwrap()
            .store(crate::store::MemoryStore::new())
            .build();
        let e = built.err().expect("a limit of 0 is refused");
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.contains("must be at least 1"), "{}", e.message);
    }

    #[test]
    fn json_path_scanner_handles_odd_input() {
        assert_eq!(json_path_at(r#"{"a": [1, {"b\"c": 2}]}"#, 1, 16), "a[1][\"b\\\"c\"]");
        assert_eq!(json_path_at(r#"{"a": 1}"#, 0, 0), "");
        assert_eq!(json_path_at(r#"{"a": 1}"#, 9, 9), "");
        assert_eq!(json_path_at("{\"é\": {\"x", 1, 100), "[\"é\"].x");
        assert_eq!(json_path_at("\"unterminated", 1, 5), "");
    }

    #[test]
    fn a_parse_error_names_the_path_of_the_value_with_odd_keys_quoted() {
        let cases = [
            (
                r#"{"tools": [{"name": "a", "url": "https://a.example/x"}, {"name": "b", "url": "https://a.example/y", "headers": {"X-Team \"ops\"": 7}}]}"#,
                r#"tools[1].headers["X-Team \"ops\""]"#,
            ),
            (
                r#"{"tools": [{"name": "a", "url": "https://a.example/x", "headers": {"é": []}}]}"#,
                r#"tools[0].headers["é"]"#,
            ),
            (r#"{"limits": {"maxSteps": "ten"}}"#, "limits.maxSteps"),
            (r#"{"allowedHosts": ["a.example", 3]}"#, "allowedHosts[1]"),
        ];
        for (bad, path) in cases {
            let e = AgentConfig::parse(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::ConfigInvalid, "{bad}: {e}");
            assert!(e.message.contains(&format!("at `{path}`:")), "{bad}: {}", e.message);
        }
        // At the top level no path is named; trailing characters after the object are refused.
        let e = AgentConfig::parse(r#"{"instructions": "x"} {"#).unwrap_err();
        assert!(e.message.starts_with("invalid agent configuration: trailing characters"), "{}", e.message);
        let e = AgentConfig::parse("{").unwrap_err();
        assert!(e.message.starts_with("invalid agent configuration: EOF"), "{}", e.message);
    }

    /// The platform of the provider-selection tests: a recording HTTP client that answers every request with
    /// `reply`, a table of secrets, and an AI binding when `ai` is set.
    struct TestPlatform {
        http: crate::providers::fake::FakeHttp,
        secrets: Vec<(String, String)>,
        ai: Option<FakeAi>,
    }

    #[derive(Clone, Default)]
    struct FakeAi(Rc<std::cell::RefCell<Vec<(String, Value)>>>);

    #[async_trait(?Send)]
    impl crate::providers::AiBinding for FakeAi {
        async fn run(&self, model: &str, input: Value, _timeout_ms: u64) -> Result<Value> {
            self.0.borrow_mut().push((model.to_string(), input));
            Ok(json!({"response": "ok"}))
        }

        /// The same answer, streamed in two events.
        async fn run_streaming(
            &self,
            model: &str,
            input: Value,
            _timeout_ms: u64,
            on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
        ) -> Result<()> {
            self.0.borrow_mut().push((model.to_string(), input));
            on_chunk(b"data: {\"response\":\"o\"}\n\ndata: {\"response\":\"k\"}\n\ndata: [DONE]\n\n");
            Ok(())
        }
    }

    impl ModelPlatform for TestPlatform {
        type Http = crate::providers::fake::FakeHttp;
        type Ai = FakeAi;
        fn http(&self) -> Self::Http {
            self.http.clone()
        }
        fn secret(&self, name: &str) -> Option<String> {
            self.secrets.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).filter(|v| !v.is_empty())
        }
        fn workers_ai(&self) -> std::result::Result<FakeAi, String> {
            self.ai.clone().ok_or_else(|| "Binding `AI` is undefined.".to_string())
        }
    }

    /// Which provider a configuration builds, with which options and key, over generated model sections and
    /// platforms: the model id, the request the provider sends (URL, key header, body fields: model,
    /// temperature, token cap, extra params that cannot replace the model), the binding call, and the
    /// configuration error (naming the secret or the binding) when the platform lacks what the provider needs,
    /// in which case nothing is sent. `STEADFAST_SEED=<n>` replays one case.
    #[test]
    fn the_configured_provider_is_built_with_its_options_for_generated_configs() {
        use crate::runtime::{Rng, SplitMix64};
        let seeds: Vec<u64> = crate::seeds::seeds(0..600);
        for seed in seeds {
            let rng = SplitMix64::new(seed);
            let pick = |n: u64| (rng.next_u64() % n) as usize;
            let repro = crate::seeds::repro(seed, "config::tests::the_configured_provider");
            let provider = [Provider::Mock, Provider::OpenAi, Provider::Anthropic, Provider::WorkersAi][pick(4)];
            let model = (provider != Provider::Mock || pick(2) == 0).then(|| format!("model-{}", pick(100)));
            let mut params = Map::new();
            if pick(2) == 0 {
                params.insert("top_p".into(), json!(0.5));
            }
            if pick(3) == 0 {
                params.insert("model".into(), json!("not-the-model"));
            }
            let cfg = AgentConfig {
                model: ModelConfig {
                    provider,
                    model: model.clone(),
                    base_url: [None, Some("https://gw.example.com/v1"), Some("http://127.0.0.1:8080/")][pick(3)]
                        .map(String::from),
                    api_key_secret: (pick(2) == 0).then(|| "MY_KEY".to_string()),
                    max_tokens: (pick(2) == 0).then(|| 1 + pick(4000) as u32),
                    temperature: (pick(2) == 0).then(|| pick(20) as f64 / 10.0),
                    params: params.clone(),
                    script: None,
                    legacy_max_tokens: pick(3) == 0,
                    // Streaming only where the fakes answer in streams (the fake HTTP client answers JSON).
                    stream: provider == Provider::WorkersAi && pick(2) == 0,
                    timeout_ms: (pick(2) == 0).then(|| 1 + pick(90_000) as u64),
                },
                ..AgentConfig::default()
            };
            let key_name = cfg.model.api_key_secret_name().unwrap_or("API_KEY").to_string();
            let mut secrets = Vec::new();
            for name in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MY_KEY"] {
                match pick(3) {
                    0 => {}
                    1 => secrets.push((name.to_string(), String::new())),
                    _ => secrets.push((name.to_string(), format!("key-of-{name}"))),
                }
            }
            let has_key = secrets.iter().any(|(k, v)| *k == key_name && !v.is_empty());
            let reply = match provider {
                Provider::Anthropic => r#"{"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}"#,
                _ => r#"{"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}"#,
            };
            let platform = TestPlatform {
                http: crate::providers::fake::FakeHttp::reply(200, &[], reply),
                secrets,
                ai: (pick(2) == 0).then(FakeAi::default),
            };
            let ai_calls = platform.ai.clone().map(|a| a.0).unwrap_or_default();
            let built = cfg.model(&platform);
            let needs_key = matches!(provider, Provider::OpenAi | Provider::Anthropic);
            if (needs_key && !has_key) || (provider == Provider::WorkersAi && platform.ai.is_none()) {
                let e = built.err().unwrap_or_else(|| panic!("a model without what it needs; {repro}"));
                assert_eq!(e.code, ErrorCode::ConfigInvalid, "{repro}");
                let names = if needs_key { format!("secret put {key_name}") } else { "AI binding is missing".into() };
                assert!(e.message.contains(&names), "{:?} should say {names:?}; {repro}", e.message);
                assert!(platform.http.requests().is_empty(), "{repro}");
                continue;
            }
            let built = built.unwrap_or_else(|e| panic!("{e}; {repro}"));
            let id = model.clone().unwrap_or_else(|| "mock".into());
            assert_eq!(built.id(), id, "{repro}");
            let messages = [Message::user("hi")];
            let answer = block_on(built.generate(ModelRequest::new("r", &messages, &[], 1, "e")))
                .unwrap_or_else(|e| panic!("{e}; {repro}"));
            let requests = platform.http.requests();
            match provider {
                Provider::Mock => {
                    assert_eq!(answer.tool_calls[0].name, "charge", "the demo script; {repro}");
                    assert!(requests.is_empty() && ai_calls.borrow().is_empty(), "{repro}");
                }
                Provider::WorkersAi => {
                    assert!(requests.is_empty(), "{repro}");
                    let calls = ai_calls.borrow();
                    assert_eq!((calls.len(), calls[0].0.as_str()), (1, id.as_str()), "{repro}");
                    let input = &calls[0].1;
                    assert_eq!(
                        input.get("max_tokens").and_then(Value::as_u64),
                        cfg.model.max_tokens.map(u64::from),
                        "{repro}"
                    );
                    assert_eq!(input.get("temperature").and_then(Value::as_f64), cfg.model.temperature, "{repro}");
                    assert_eq!(input.get("top_p"), params.get("top_p"), "{repro}");
                    let stream = cfg.model.stream.then_some(&json!(true));
                    assert_eq!(input.get("stream"), stream, "{repro}");
                    assert_eq!(answer.text, "ok", "{repro}");
                }
                Provider::OpenAi | Provider::Anthropic => {
                    assert_eq!((answer.text.as_str(), requests.len()), ("ok", 1), "{repro}");
                    let r = &requests[0];
                    let key = format!("key-of-{key_name}");
                    let (default_base, path, header, value) = if provider == Provider::OpenAi {
                        ("https://api.openai.com/v1", "chat/completions", "authorization", format!("Bearer {key}"))
                    } else {
                        ("https://api.anthropic.com", "v1/messages", "x-api-key", key)
                    };
                    let base = cfg.model.base_url.as_deref().unwrap_or(default_base).trim_end_matches('/');
                    assert_eq!(r.url, format!("{base}/{path}"), "{repro}");
                    assert_eq!(r.timeout_ms, cfg.model.timeout_ms.unwrap_or(0), "{repro}");
                    assert!(r.headers.iter().any(|(k, v)| k == header && *v == value), "{:?}; {repro}", r.headers);
                    let body: Value = serde_json::from_str(r.body.as_deref().unwrap_or("")).unwrap();
                    assert_eq!(body["model"], json!(id), "params never replace the model; {repro}");
                    assert_eq!(body.get("temperature").and_then(Value::as_f64), cfg.model.temperature, "{repro}");
                    let (cap, field, not) = match provider {
                        Provider::Anthropic => (
                            Some(u64::from(cfg.model.max_tokens.unwrap_or(1024))),
                            "max_tokens",
                            "max_completion_tokens",
                        ),
                        _ if cfg.model.legacy_max_tokens => {
                            (cfg.model.max_tokens.map(u64::from), "max_tokens", "max_completion_tokens")
                        }
                        _ => (cfg.model.max_tokens.map(u64::from), "max_completion_tokens", "max_tokens"),
                    };
                    assert_eq!(body.get(field).and_then(Value::as_u64), cap, "{repro}");
                    assert_eq!(body.get(not), None, "one token cap field only; {repro}");
                    assert_eq!(body.get("top_p"), params.get("top_p"), "{repro}");
                }
            }
        }
    }
}
