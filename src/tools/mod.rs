//! Configured tools: [`webhook::WebhookTool`] (an HTTP call to an allow-listed host, M18/M19), the tools of
//! MCP servers ([`mcp::McpTool`], issue 28) and the offline [`demo`] tools of the README tour.

pub mod demo;
pub mod mcp;
pub mod webhook;

pub use demo::{demo_counts, demo_script, demo_tools};
pub use webhook::{Allowlist, ParsedUrl, WebhookTool, WebhookToolConfig};
