//! The one error type of the crate, with stable `STEADFAST_*` codes.
//!
//! Every failure that leaves the crate carries a [`ErrorCode`] (stable string, survives the JS boundary), a
//! `retryable` flag (will the same call succeed later?), an optional `retry_after` hint and, where it applies,
//! the run id and approval id it concerns. The failure *class* (transient / recoverable / terminal) is derived
//! from the code in [`crate::core::classify`], never from string matching.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, retryable = $retry:literal, status = $status:literal,
        outage = $outage:literal; )*) => {
        /// Stable error codes. The string form (`as_str`) is part of the public API.
        // Serialize and Deserialize are written by hand below (the string form, through `as_str` and `parse`):
        // serde's derive matched the 37 strings a second time, in each deserializer's visitor (~5 KB gzip of
        // the Worker). The `ts` attributes name the strings for ts-rs.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
        pub enum ErrorCode {
            $( $(#[$doc])* #[cfg_attr(feature = "ts", ts(rename = $text))] $variant, )*
        }

        impl ErrorCode {
            /// Every code, for documentation and exhaustive tests.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The string of every code, in the order of [`ErrorCode::ALL`].
            const NAMES: &'static [&'static str] = &[$($text),*];

            /// The stable `STEADFAST_*` string.
            pub fn as_str(self) -> &'static str {
                Self::NAMES[self as usize]
            }

            /// Whether an error with this code is retryable unless the error says otherwise.
            pub fn default_retryable(self) -> bool {
                match self { $(ErrorCode::$variant => $retry,)* }
            }

            /// The HTTP status the API answers an error with this code with.
            pub fn http_status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status,)* }
            }

            /// Whether a failure with this code counts toward a provider outage (M13): transient provider
            /// failures do; a bad API key, a refused request or a store problem do not.
            pub fn is_outage(self) -> bool {
                match self { $(ErrorCode::$variant => $outage,)* }
            }

            /// Parses a stable string back into a code.
            pub fn parse(s: &str) -> Option<ErrorCode> {
                Self::NAMES.iter().position(|n| *n == s).map(|i| Self::ALL[i])
            }
        }
    };
}

codes! {
    /// Another process holds the run's lease, or this process lost it (fencing).
    SessionBusy = "STEADFAST_SESSION_BUSY", retryable = true, status = 409, outage = false;
    /// The run waits on an approval; resolve it first.
    SessionAwaitingApproval = "STEADFAST_SESSION_AWAITING_APPROVAL", retryable = false, status = 409, outage = false;
    /// The run id breaks the id rules.
    SessionIdInvalid = "STEADFAST_SESSION_ID_INVALID", retryable = false, status = 400, outage = false;
    /// The approval's run was deleted or replaced; the approval was withdrawn.
    ApprovalOrphaned = "STEADFAST_APPROVAL_ORPHANED", retryable = false, status = 410, outage = false;
    /// No approval with that id.
    ApprovalNotFound = "STEADFAST_APPROVAL_NOT_FOUND", retryable = false, status = 404, outage = false;
    /// The approval was already decided the other way.
    ApprovalAlreadyDecided = "STEADFAST_APPROVAL_ALREADY_DECIDED", retryable = false, status = 409, outage = false;
    /// The agent changed since the checkpoint was written and `onAgentDrift` is `error`.
    AgentDrift = "STEADFAST_AGENT_DRIFT", retryable = false, status = 409, outage = false;
    /// A pending tool call names a tool the agent no longer has.
    ResumeToolMissing = "STEADFAST_RESUME_TOOL_MISSING", retryable = false, status = 409, outage = false;
    /// No checkpoint (or history entry) for that run / step.
    CheckpointNotFound = "STEADFAST_CHECKPOINT_NOT_FOUND", retryable = false, status = 404, outage = false;
    /// A stored checkpoint, journal entry or lease cannot be decoded.
    CheckpointCorrupt = "STEADFAST_CHECKPOINT_CORRUPT", retryable = false, status = 409, outage = false;
    /// A run already exists under the requested id (fork target).
    SessionExists = "STEADFAST_SESSION_EXISTS", retryable = false, status = 409, outage = false;
    /// The progress guard stopped a run that kept failing the same way.
    RunNoProgress = "STEADFAST_RUN_NO_PROGRESS", retryable = false, status = 422, outage = false;
    /// The run was aborted through its cancellation handle.
    Aborted = "STEADFAST_ABORTED", retryable = false, status = 409, outage = false;
    /// Bad input from the caller (empty input, wrong shape, …).
    InvalidInput = "STEADFAST_INVALID_INPUT", retryable = false, status = 400, outage = false;
    /// Bad configuration (agent options, tool definitions, schemas).
    ConfigInvalid = "STEADFAST_CONFIG_INVALID", retryable = false, status = 500, outage = false;
    /// The provider rate-limited the call (HTTP 429).
    ProviderRateLimited = "STEADFAST_PROVIDER_RATE_LIMITED", retryable = true, status = 502, outage = true;
    /// The provider is overloaded or failing (HTTP 5xx, 529).
    ProviderUnavailable = "STEADFAST_PROVIDER_UNAVAILABLE", retryable = true, status = 502, outage = true;
    /// The provider call timed out.
    ProviderTimeout = "STEADFAST_PROVIDER_TIMEOUT", retryable = true, status = 502, outage = true;
    /// The connection to the provider failed or dropped.
    ProviderNetwork = "STEADFAST_PROVIDER_NETWORK", retryable = true, status = 502, outage = true;
    /// The model's circuit breaker is open (its recent calls failed): the call was not made (retry after the
    /// cool-down, or a fallback model took it).
    ProviderCircuitOpen = "STEADFAST_PROVIDER_CIRCUIT_OPEN", retryable = true, status = 503, outage = true;
    /// The provider refused the credentials (HTTP 401/403). Not an outage.
    ProviderAuth = "STEADFAST_PROVIDER_AUTH", retryable = false, status = 502, outage = false;
    /// The provider refused the request (HTTP 400/404/422, context too long, …).
    ProviderBadRequest = "STEADFAST_PROVIDER_BAD_REQUEST", retryable = false, status = 502, outage = false;
    /// The provider answered something we cannot read.
    ProviderInvalidResponse = "STEADFAST_PROVIDER_INVALID_RESPONSE", retryable = true, status = 502, outage = false;
    /// A spending / quota budget is exhausted (HTTP 402, insufficient quota).
    BudgetExhausted = "STEADFAST_BUDGET_EXHAUSTED", retryable = false, status = 502, outage = false;
    /// A tool raised a propagating error: the run is rejected (the checkpoint stays resumable).
    ToolPropagated = "STEADFAST_TOOL_PROPAGATED", retryable = true, status = 502, outage = false;
    /// A hook threw.
    HookFailed = "STEADFAST_HOOK_FAILED", retryable = true, status = 500, outage = false;
    /// The store rate-limited a write (Workers KV 429).
    StoreRateLimited = "STEADFAST_STORE_RATE_LIMITED", retryable = true, status = 503, outage = false;
    /// The store is unreachable or timed out.
    StoreUnavailable = "STEADFAST_STORE_UNAVAILABLE", retryable = true, status = 503, outage = false;
    /// The store refused an operation permanently (value too large, bad key, …).
    StoreFailed = "STEADFAST_STORE_FAILED", retryable = false, status = 500, outage = false;
    /// The scripted mock model has no turn left for this call.
    ModelScriptExhausted = "STEADFAST_MODEL_SCRIPT_EXHAUSTED", retryable = false, status = 502, outage = false;
    /// A process died in the middle of a run (used by crash injection in tests).
    Crashed = "STEADFAST_CRASHED", retryable = true, status = 500, outage = false;
    /// The request has no valid bearer token (HTTP API).
    Unauthorized = "STEADFAST_UNAUTHORIZED", retryable = false, status = 401, outage = false;
    /// No API token is configured: the API refuses every request but `/health` (fail closed).
    AuthNotConfigured = "STEADFAST_AUTH_NOT_CONFIGURED", retryable = false, status = 503, outage = false;
    /// No such route (HTTP API).
    RouteNotFound = "STEADFAST_ROUTE_NOT_FOUND", retryable = false, status = 404, outage = false;
    /// The route exists but not with this method (HTTP API).
    MethodNotAllowed = "STEADFAST_METHOD_NOT_ALLOWED", retryable = false, status = 405, outage = false;
    /// The request body is larger than the API accepts (1 MiB).
    PayloadTooLarge = "STEADFAST_PAYLOAD_TOO_LARGE", retryable = false, status = 413, outage = false;
    /// No wait has this token (it never existed, was guessed, or its run was deleted): the answer is the same in
    /// every case, so it reveals nothing about runs.
    WaitNotFound = "STEADFAST_WAIT_NOT_FOUND", retryable = false, status = 404, outage = false;
    /// The wait was resolved already, differently (another payload, another answer, its deadline).
    WaitAlreadyResolved = "STEADFAST_WAIT_ALREADY_RESOLVED", retryable = false, status = 409, outage = false;
    /// A sub-agent's call would start a child deeper than the lead's `maxSubagentDepth` (default 3).
    SubagentDepth = "STEADFAST_SUBAGENT_DEPTH", retryable = false, status = 409, outage = false;
    /// A `transfer_to_<name>` call would exceed the run's `maxHandoffs` (default 5): the model reads it as the
    /// call's error result and the conversation stays with the agent it is with.
    HandoffLimit = "STEADFAST_HANDOFF_LIMIT", retryable = false, status = 409, outage = false;
    /// The run used a budget of its agent (`maxTotalTokens`, `maxDurationMs`, a `sessionBudget` limit, ...): with
    /// `onExceeded: "throw"` the execution that stopped it fails with this (the run is finished with finish
    /// reason `budget-exceeded`, its transcript kept); a resume of such a run under the same budget too.
    BudgetExceeded = "STEADFAST_BUDGET_EXCEEDED", retryable = false, status = 409, outage = false;
    /// A bug: an invariant of the run state machine did not hold.
    Internal = "STEADFAST_INTERNAL", retryable = false, status = 500, outage = false;
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct CodeVisitor;
        impl serde::de::Visitor<'_> for CodeVisitor {
            type Value = ErrorCode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("variant identifier")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<ErrorCode, E> {
                ErrorCode::parse(v).ok_or_else(|| E::unknown_variant(v, ErrorCode::NAMES))
            }
        }
        deserializer.deserialize_str(CodeVisitor)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The crate's error (in JSON: the `error` of an HTTP error answer; TypeScript: `CodedError`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export, rename = "CodedError"))]
#[serde(rename_all = "camelCase")]
pub struct Error {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable message.
    pub message: String,
    /// Whether the same call may succeed later.
    pub retryable: bool,
    /// Server hint: wait at least this long before retrying (milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub retry_after_ms: Option<u64>,
    /// HTTP status behind the error, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub status: Option<u16>,
    /// The run this error concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub run_id: Option<String>,
    /// The approval this error concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub approval_id: Option<String>,
    /// Structured details (a drift report, the kept steps, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub details: Option<serde_json::Value>,
}

impl Error {
    /// A new error with the code's default retryability.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            retryable: code.default_retryable(),
            retry_after_ms: None,
            status: None,
            run_id: None,
            approval_id: None,
            details: None,
        }
    }

    /// Stable code string.
    pub fn code(&self) -> &'static str {
        self.code.as_str()
    }

    /// Whether a retry may succeed.
    pub fn retryable(&self) -> bool {
        self.retryable
    }

    /// Sets the run id.
    pub fn with_run(mut self, run_id: impl Into<String>) -> Error {
        self.run_id = Some(run_id.into());
        self
    }

    /// Sets the approval id.
    pub fn with_approval(mut self, approval_id: impl Into<String>) -> Error {
        self.approval_id = Some(approval_id.into());
        self
    }

    /// Sets the retry-after hint.
    pub fn with_retry_after_ms(mut self, ms: Option<u64>) -> Error {
        self.retry_after_ms = ms;
        self
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Error {
        self.status = Some(status);
        self
    }

    /// Overrides retryability.
    pub fn with_retryable(mut self, retryable: bool) -> Error {
        self.retryable = retryable;
        self
    }

    /// Attaches structured details.
    pub fn with_details(mut self, details: serde_json::Value) -> Error {
        self.details = Some(details);
        self
    }

    /// Shorthand for a busy lease.
    pub fn busy(run_id: &str, why: &str) -> Error {
        Error::new(ErrorCode::SessionBusy, format!("run '{run_id}' is busy: {why}")).with_run(run_id)
    }

    /// Shorthand for an internal invariant failure.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Internal, message)
    }

    /// Shorthand for bad caller input.
    pub fn invalid_input(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::InvalidInput, message)
    }

    /// The compact form stored in a checkpoint's `lastError`.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo { code: self.code, message: cap_chars(&self.message, 2_000), retryable: self.retryable }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a checkpoint keeps of the last failed attempt (`lastError`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct ErrorInfo {
    /// Stable code.
    pub code: ErrorCode,
    /// Message, capped at 2,000 characters.
    pub message: String,
    /// Whether a retry may succeed.
    pub retryable: bool,
}

/// Caps a string at `max` characters, marking the cut.
pub fn cap_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((idx, _)) => format!("{}… [truncated]", &s[..idx]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_prefixed() {
        for code in ErrorCode::ALL {
            assert!(code.as_str().starts_with("STEADFAST_"));
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!(ErrorCode::parse("LOUSHO_SESSION_BUSY"), None);
        let back: ErrorCode = serde_json::from_str("\"STEADFAST_INTERNAL\"").unwrap();
        assert_eq!(back, ErrorCode::Internal);
        let err = serde_json::from_str::<ErrorCode>("\"LOUSHO_SESSION_BUSY\"").unwrap_err().to_string();
        assert!(
            err.starts_with("unknown variant `LOUSHO_SESSION_BUSY`, expected one of `STEADFAST_SESSION_BUSY`"),
            "{err}"
        );
    }

    #[test]
    fn error_serializes_with_code_and_flags() {
        let e = Error::new(ErrorCode::SessionAwaitingApproval, "waiting").with_run("r1").with_approval("apr_1");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["code"], "STEADFAST_SESSION_AWAITING_APPROVAL");
        assert_eq!(v["retryable"], false);
        assert_eq!(v["runId"], "r1");
        assert_eq!(v["approvalId"], "apr_1");
        let back: Error = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn cap_chars_cuts_on_char_boundary() {
        assert_eq!(cap_chars("héllo", 10), "héllo");
        assert_eq!(cap_chars("héllo", 2), "hé… [truncated]");
    }
}
