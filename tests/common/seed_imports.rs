// Imports of the shared seed cases.
use serde_json::json;
use std::cell::Cell;
use std::rc::Rc;
use steadfast::core::checkpoint::{FinishReason, RunStatus};
use steadfast::core::events::Event;
use steadfast::core::machine::DriftPolicy;
use steadfast::core::transcript::{validate_transcript, Message, ResultKind};
use steadfast::runtime::{
    AbortSignal, AgentOptions, CrashPoint, FnTool, MockModel, MockTurn, Resolve, SendOptions, Tool, ToolError,
    ToolOutput, VecSink,
};
use steadfast::ErrorCode;
