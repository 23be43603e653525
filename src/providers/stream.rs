//! Streamed model answers: sans-IO, incremental parsers of each provider's server-sent events.
//!
//! A provider asked to stream answers with `text/event-stream`. [`SseDecoder`] splits the bytes into events the
//! way a browser's `EventSource` does (lines ending in `\n`, `\r\n` or `\r`; `:` comments such as keep-alives
//! ignored; `data:` lines of one event joined with `\n`; a blank line ends an event; an event cut off by the end
//! of the stream is dropped), whatever the chunking: a chunk may end inside a line, inside a `\r\n` or inside a
//! UTF-8 sequence. Each provider's parser
//! ([`OpenAiStream`], [`AnthropicStream`], [`WorkersAiStream`]) reads those events, hands out the increments as
//! [`StreamDelta`]s while they arrive, and assembles the completed model turn, the same [`ModelResponse`] the
//! provider's non-streaming answer parses to (the tests assert it for every split point of recorded streams).
//!
//! Failures are retryable provider failures: an error event mid-stream (`STEADFAST_PROVIDER_RATE_LIMITED` for a
//! rate limit, else `STEADFAST_PROVIDER_UNAVAILABLE`), a stream that ends before the turn is complete
//! (`STEADFAST_PROVIDER_NETWORK`: the connection dropped), an event that cannot be read
//! (`STEADFAST_PROVIDER_INVALID_RESPONSE`). Nothing here does I/O.

use super::{generated_call_id, new_call, openai_usage, tool_call, with_refusal, TurnBuilder};
use crate::core::error::{cap_chars, Error, ErrorCode, Result};
pub use crate::core::events::StreamDelta;
use crate::core::machine::ModelResponse;
use crate::core::transcript::Usage;
use serde_json::Value;

/// One server-sent event: its `event:` name (empty when none was given) and its `data:` lines joined by `\n`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The event name.
    pub event: String,
    /// The data.
    pub data: String,
}

/// Splits a byte stream into [`SseEvent`]s, fed in chunks of any size.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the line being read.
    line: Vec<u8>,
    /// The last byte fed was a `\r` (a `\n` right after it ends nothing more).
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds the next bytes; appends the events they complete to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        for &b in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, b == b'\r');
            match b {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => self.end_line(out),
                _ => self.line.push(b),
            }
        }
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let line = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        if line.is_empty() {
            return self.dispatch(out);
        }
        if line.starts_with(':') {
            return; // A comment: keep-alive.
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_str(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = value.to_string(),
            _ => {} // `id`, `retry` and unknown fields.
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        if std::mem::take(&mut self.has_data) {
            out.push(SseEvent { event, data: std::mem::take(&mut self.data) });
        }
    }
}

/// A provider's streamed answer, parsed as it arrives.
pub trait StreamParser {
    /// Feeds the next bytes of the body; appends the increments they carry to `deltas`. An error event is
    /// `Err` (retryable); the parser is done with once it failed.
    fn feed(&mut self, bytes: &[u8], deltas: &mut Vec<StreamDelta>) -> Result<()>;
    /// The body ended: the completed turn, or `STEADFAST_PROVIDER_NETWORK` when the stream stopped before its
    /// end event (`data: [DONE]`, `message_stop`) was complete. The parser is spent afterwards.
    fn finish(&mut self) -> Result<ModelResponse>;
}

/// A streamed answer's bytes on their way to a parser as they arrive: each increment goes to `on_delta` at
/// once; the parser's first error is kept and ends the reading ([`Feed::chunk`] answers `false`).
pub(crate) struct Feed<'a> {
    parser: &'a mut dyn StreamParser,
    on_delta: &'a dyn Fn(StreamDelta),
    deltas: Vec<StreamDelta>,
    failed: Option<Error>,
}

impl<'a> Feed<'a> {
    pub(crate) fn new(parser: &'a mut dyn StreamParser, on_delta: &'a dyn Fn(StreamDelta)) -> Feed<'a> {
        Feed { parser, on_delta, deltas: Vec::new(), failed: None }
    }

    /// The next chunk; `false` once the parser failed (read no more).
    pub(crate) fn chunk(&mut self, chunk: &[u8]) -> bool {
        match self.parser.feed(chunk, &mut self.deltas) {
            Ok(()) => {
                self.deltas.drain(..).for_each(self.on_delta);
                true
            }
            Err(e) => {
                self.failed = Some(e);
                false
            }
        }
    }

    /// The stream ended: the parser's error if it failed, else the turn it assembled.
    pub(crate) fn finish(self) -> Result<ModelResponse> {
        match self.failed {
            Some(e) => Err(e),
            None => self.parser.finish(),
        }
    }
}

/// Reads a whole streamed body with `parser` (a transport that does not hand out chunks).
pub fn parse_stream(parser: &mut dyn StreamParser, body: &str) -> Result<ModelResponse> {
    let mut deltas = Vec::new();
    parser.feed(body.as_bytes(), &mut deltas)?;
    parser.finish()
}

fn unreadable(provider: &str, data: &str) -> Error {
    super::invalid_response(provider, "a streamed event that is not JSON", data, "")
}

/// The error an error event mid-stream stands for: retryable, a rate limit when it says so.
fn stream_error(provider: &str, error: &Value) -> Error {
    let kind = error.get("type").or_else(|| error.get("code")).and_then(Value::as_str).unwrap_or("");
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    let code = if kind.contains("rate_limit") || message.to_ascii_lowercase().contains("rate limit") {
        ErrorCode::ProviderRateLimited
    } else {
        ErrorCode::ProviderUnavailable
    };
    Error::new(code, cap_chars(&format!("{provider} failed mid-stream ({kind}): {message}"), 300))
}

fn cut_short(provider: &str) -> Error {
    Error::new(ErrorCode::ProviderNetwork, format!("{provider}'s stream ended before the answer was complete"))
}

/// The events `bytes` complete.
fn events(sse: &mut SseDecoder, bytes: &[u8]) -> Vec<SseEvent> {
    let mut out = Vec::new();
    sse.feed(bytes, &mut out);
    out
}

/// A tool call being streamed in OpenAI's shape: fragments by `index`.
#[derive(Debug, Default)]
struct CallParts {
    index: u64,
    id: String,
    name: String,
    arguments: String,
}

/// The OpenAI-compatible chat-completions stream (`stream: true`, `stream_options: {include_usage: true}`):
/// `chat.completion.chunk` events with `choices[0].delta` (`content`, `refusal`, `tool_calls` fragments by
/// `index`, `reasoning_content` / `reasoning` of compatible servers), `finish_reason`, a last chunk with
/// `usage` and empty `choices`, then `data: [DONE]`. A chunk with an `error` object is a failure.
#[derive(Debug)]
pub struct OpenAiStream {
    sse: SseDecoder,
    step: u32,
    text: String,
    refusal: String,
    calls: Vec<CallParts>,
    usage: Usage,
    stop_reason: Option<String>,
    done: bool,
    provider: &'static str,
}

impl OpenAiStream {
    /// A parser for the answer that will be step `step` (ids of calls without one: `call_<step>_<i>`).
    pub fn new(step: u32) -> OpenAiStream {
        OpenAiStream::named("OpenAI", step)
    }

    fn named(provider: &'static str, step: u32) -> OpenAiStream {
        OpenAiStream {
            sse: SseDecoder::new(),
            step,
            text: String::new(),
            refusal: String::new(),
            calls: Vec::new(),
            usage: Usage::tokens(0, 0),
            stop_reason: None,
            done: false,
            provider,
        }
    }

    fn event(&mut self, e: &SseEvent, deltas: &mut Vec<StreamDelta>) -> Result<()> {
        let data = e.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|_| unreadable(self.provider, data))?;
        self.chunk(&v, deltas)
    }

    /// One chunk (a parsed `data:` object).
    fn chunk(&mut self, v: &Value, deltas: &mut Vec<StreamDelta>) -> Result<()> {
        if let Some(error) = v.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(self.provider, error));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = openai_usage(u);
        }
        let Some(choice) = v.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else { return Ok(()) };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.stop_reason = Some(reason.to_string());
        }
        let Some(delta) = choice.get("delta").filter(|d| d.is_object()) else { return Ok(()) };
        if let Some(t) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.text.push_str(t);
            deltas.push(StreamDelta::Text(t.to_string()));
        }
        for key in ["reasoning_content", "reasoning"] {
            if let Some(r) = delta.get(key).and_then(Value::as_str).filter(|r| !r.is_empty()) {
                deltas.push(StreamDelta::Reasoning(r.to_string()));
            }
        }
        if let Some(r) = delta.get("refusal").and_then(Value::as_str).filter(|r| !r.is_empty()) {
            if self.refusal.is_empty() && !self.text.is_empty() {
                deltas.push(StreamDelta::Text("\n".into()));
            }
            self.refusal.push_str(r);
            deltas.push(StreamDelta::Text(r.to_string()));
        }
        for part in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let index = part.get("index").and_then(Value::as_u64).unwrap_or(self.calls.len() as u64);
            let pos = match self.calls.iter().position(|c| c.index == index) {
                Some(p) => p,
                None => {
                    self.calls.push(CallParts { index, ..CallParts::default() });
                    self.calls.len() - 1
                }
            };
            let call = &mut self.calls[pos];
            if let Some(id) = part.get("id").and_then(Value::as_str) {
                call.id.push_str(id);
            }
            let f = part.get("function").unwrap_or(&Value::Null);
            if let Some(name) = f.get("name").and_then(Value::as_str) {
                call.name.push_str(name);
            }
            if let Some(args) = f.get("arguments").and_then(Value::as_str) {
                call.arguments.push_str(args);
            }
        }
        Ok(())
    }

    fn turn(&mut self) -> Result<ModelResponse> {
        crate::core::wire::sort_by(&mut self.calls, |a, b| a.index.cmp(&b.index));
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (i, c) in std::mem::take(&mut self.calls).into_iter().enumerate() {
            if c.name.is_empty() {
                return Err(super::invalid_response(self.provider, &format!("tool call #{i} has no name"), "", ""));
            }
            let id = if c.id.is_empty() { generated_call_id(self.step, i) } else { c.id };
            tool_calls.push(new_call(id, &c.name, Some(&Value::String(c.arguments))));
        }
        let mut text = std::mem::take(&mut self.text);
        let mut stop_reason = self.stop_reason.take();
        if !self.refusal.is_empty() {
            with_refusal(&mut text, &self.refusal);
            stop_reason = Some("refusal".into());
        }
        Ok(ModelResponse { text, tool_calls, usage: self.usage, stop_reason, reasoning: Vec::new() })
    }
}

impl StreamParser for OpenAiStream {
    fn feed(&mut self, bytes: &[u8], deltas: &mut Vec<StreamDelta>) -> Result<()> {
        for e in events(&mut self.sse, bytes) {
            self.event(&e, deltas)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ModelResponse> {
        if !self.done {
            return Err(cut_short(self.provider));
        }
        self.turn()
    }
}

/// One content block being streamed: the block as it started, and the `input_json_delta` fragments of a
/// `tool_use` block.
#[derive(Debug)]
struct BlockParts {
    index: u64,
    block: Value,
    json: String,
}

/// The Anthropic Messages stream (`stream: true`): `message_start` (input usage), per content block
/// `content_block_start` / `content_block_delta` (`text_delta`, `thinking_delta`, `signature_delta`,
/// `input_json_delta`) / `content_block_stop`, `message_delta` (`stop_reason`, output usage), `message_stop`;
/// `ping` events ignored; an `error` event is a failure.
#[derive(Debug)]
pub struct AnthropicStream {
    sse: SseDecoder,
    step: u32,
    blocks: Vec<BlockParts>,
    turn: TurnBuilder,
    done: bool,
}

impl AnthropicStream {
    /// A parser for the answer that will be step `step`.
    pub fn new(step: u32) -> AnthropicStream {
        AnthropicStream { sse: SseDecoder::new(), step, blocks: Vec::new(), turn: TurnBuilder::default(), done: false }
    }

    fn event(&mut self, e: &SseEvent, deltas: &mut Vec<StreamDelta>) -> Result<()> {
        let v: Value = serde_json::from_str(&e.data).map_err(|_| unreadable("Anthropic", &e.data))?;
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match v.get("type").and_then(Value::as_str).unwrap_or(e.event.as_str()) {
            "error" => return Err(stream_error("Anthropic", v.get("error").unwrap_or(&Value::Null))),
            "message_start" => self.turn.usage(v.get("message").and_then(|m| m.get("usage"))),
            "content_block_start" => {
                let block = v.get("content_block").cloned().unwrap_or(Value::Null);
                self.blocks.push(BlockParts { index, block, json: String::new() });
            }
            "content_block_delta" => {
                let Some(b) = self.blocks.iter_mut().rev().find(|b| b.index == index) else {
                    return Err(super::invalid_response("Anthropic", "a delta for a block never started", "", ""));
                };
                let delta = v.get("delta").unwrap_or(&Value::Null);
                let piece = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or("");
                match delta.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text_delta" => {
                        append(&mut b.block, "text", piece("text"));
                        deltas.push(StreamDelta::Text(piece("text").to_string()));
                    }
                    "thinking_delta" => {
                        append(&mut b.block, "thinking", piece("thinking"));
                        deltas.push(StreamDelta::Reasoning(piece("thinking").to_string()));
                    }
                    "signature_delta" => append(&mut b.block, "signature", piece("signature")),
                    "input_json_delta" => b.json.push_str(piece("partial_json")),
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                    self.turn.stop_reason = Some(r.to_string());
                }
                self.turn.usage(v.get("usage"));
            }
            "message_stop" => self.done = true,
            _ => {} // ping, content_block_stop, and event types added later.
        }
        Ok(())
    }
}

/// Appends `piece` to the string field `key` of a block.
fn append(block: &mut Value, key: &str, piece: &str) {
    if let Some(o) = block.as_object_mut() {
        let mut s = o.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        s.push_str(piece);
        o.insert(key.to_string(), Value::String(s));
    }
}

impl StreamParser for AnthropicStream {
    fn feed(&mut self, bytes: &[u8], deltas: &mut Vec<StreamDelta>) -> Result<()> {
        for e in events(&mut self.sse, bytes) {
            self.event(&e, deltas)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ModelResponse> {
        if !self.done {
            return Err(cut_short("Anthropic"));
        }
        crate::core::wire::sort_by(&mut self.blocks, |a, b| a.index.cmp(&b.index));
        for mut b in std::mem::take(&mut self.blocks) {
            // Streamed tool input is JSON text: parsed (or found unusable) like a non-streamed string input.
            if !b.json.is_empty() {
                if let Some(o) = b.block.as_object_mut() {
                    o.insert("input".into(), Value::String(b.json));
                }
            }
            self.turn.block(&b.block, self.step).map_err(|why| super::invalid_response("Anthropic", &why, "", ""))?;
        }
        Ok(std::mem::take(&mut self.turn).finish())
    }
}

/// The Workers AI stream (`stream: true`): events `{"response": "<text>"}` (with `tool_calls` and `usage` in
/// the events that carry them), or OpenAI-style chunks from the models that answer in that shape, then
/// `data: [DONE]`.
#[derive(Debug)]
pub struct WorkersAiStream {
    inner: OpenAiStream,
    calls: Vec<crate::core::transcript::ToolCall>,
}

impl WorkersAiStream {
    /// A parser for the answer that will be step `step`.
    pub fn new(step: u32) -> WorkersAiStream {
        WorkersAiStream { inner: OpenAiStream::named("Workers AI", step), calls: Vec::new() }
    }

    fn event(&mut self, e: &SseEvent, deltas: &mut Vec<StreamDelta>) -> Result<()> {
        let data = e.data.trim();
        if data == "[DONE]" || data.is_empty() {
            return self.inner.event(e, deltas);
        }
        let v: Value = serde_json::from_str(data).map_err(|_| unreadable("Workers AI", data))?;
        if v.get("choices").is_some() || v.get("error").is_some_and(|e| !e.is_null()) {
            return self.inner.chunk(&v, deltas);
        }
        if let Some(t) = v.get("response").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.inner.text.push_str(t);
            deltas.push(StreamDelta::Text(t.to_string()));
        }
        for c in v.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let i = self.calls.len();
            let call =
                tool_call(c, self.inner.step, i).map_err(|why| super::invalid_response("Workers AI", &why, "", ""))?;
            self.calls.push(call);
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.inner.usage = openai_usage(u);
        }
        if let Some(r) = v.get("finish_reason").and_then(Value::as_str) {
            self.inner.stop_reason = Some(r.to_string());
        }
        Ok(())
    }
}

impl StreamParser for WorkersAiStream {
    fn feed(&mut self, bytes: &[u8], deltas: &mut Vec<StreamDelta>) -> Result<()> {
        for e in events(&mut self.inner.sse, bytes) {
            self.event(&e, deltas)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ModelResponse> {
        if !self.inner.done {
            return Err(cut_short("Workers AI"));
        }
        let calls = std::mem::take(&mut self.calls);
        let mut turn = self.inner.turn()?;
        turn.tool_calls.extend(calls);
        Ok(turn)
    }
}

#[cfg(test)]
mod tests {
    //! Recorded streams (`fixtures/*.sse`, shaped as the providers' streaming references show them, with
    //! keep-alive comments and multi-byte text) against the same answers not streamed (`fixtures/*.json`).

    use super::*;
    use crate::rng::{Rng, SplitMix64};

    const OPENAI_TOOLS: (&str, &str) =
        (include_str!("fixtures/openai_tools.sse"), include_str!("fixtures/openai_tools.json"));
    const OPENAI_REFUSAL: (&str, &str) =
        (include_str!("fixtures/openai_refusal.sse"), include_str!("fixtures/openai_refusal.json"));
    const OPENAI_CUT: (&str, &str) =
        (include_str!("fixtures/openai_cut.sse"), include_str!("fixtures/openai_cut.json"));
    const ANTHROPIC_THINKING: (&str, &str) =
        (include_str!("fixtures/anthropic_thinking_tools.sse"), include_str!("fixtures/anthropic_thinking_tools.json"));
    const ANTHROPIC_MAX_TOKENS: (&str, &str) =
        (include_str!("fixtures/anthropic_max_tokens.sse"), include_str!("fixtures/anthropic_max_tokens.json"));
    const WORKERS_AI: (&str, &str) =
        (include_str!("fixtures/workers_ai.sse"), include_str!("fixtures/workers_ai.json"));

    const STEP: u32 = 3;

    /// Feeds `chunks` in order: the turn (or the first error) and the deltas handed out.
    fn run<P: StreamParser>(mut parser: P, chunks: &[&[u8]]) -> (Result<ModelResponse>, Vec<StreamDelta>) {
        let mut deltas = Vec::new();
        for c in chunks {
            if let Err(e) = parser.feed(c, &mut deltas) {
                return (Err(e), deltas);
            }
        }
        (parser.finish(), deltas)
    }

    fn joined(deltas: &[StreamDelta], text: bool) -> String {
        deltas
            .iter()
            .filter_map(|d| match (d, text) {
                (StreamDelta::Text(t), true) | (StreamDelta::Reasoning(t), false) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Splits `bytes` at random points (seeded): 1 to 40 pieces, some empty.
    fn random_chunks(bytes: &[u8], seed: u64) -> Vec<&[u8]> {
        let rng = SplitMix64::new(seed);
        let n = 1 + (rng.next_u64() % 40) as usize;
        let mut cuts: Vec<usize> = (0..n).map(|_| (rng.next_u64() % (bytes.len() as u64 + 1)) as usize).collect();
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut at = 0;
        for c in cuts {
            out.push(&bytes[at..c]);
            at = c;
        }
        out.push(&bytes[at..]);
        out
    }

    /// The stream gives `expected` (and deltas that add up to its text and reasoning) at every split point,
    /// byte by byte, in seeded random chunkings, and with `\r\n` and `\r` line ends.
    fn same_turn_however_chunked<P: StreamParser>(make: impl Fn() -> P, stream: &str, expected: &ModelResponse) {
        let thinking: String =
            expected.reasoning.iter().filter_map(|r| r.get("thinking").and_then(Value::as_str)).collect();
        for (ends, stream) in
            [("\\n", stream.to_string()), ("\\r\\n", stream.replace('\n', "\r\n")), ("\\r", stream.replace('\n', "\r"))]
        {
            let bytes = stream.as_bytes();
            let check = |chunks: &[&[u8]], how: &str| {
                let (turn, deltas) = run(make(), chunks);
                let turn = turn.unwrap_or_else(|e| panic!("{how} (line ends {ends}): {e}"));
                assert_eq!(&turn, expected, "{how} (line ends {ends})");
                assert_eq!(joined(&deltas, true), expected.text, "text deltas, {how} (line ends {ends})");
                assert_eq!(joined(&deltas, false), thinking, "reasoning deltas, {how} (line ends {ends})");
            };
            for k in 0..=bytes.len() {
                check(&[&bytes[..k], &bytes[k..]], &format!("split at byte {k}"));
            }
            let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
            check(&bytewise, "byte by byte");
            for seed in 0..300 {
                check(&random_chunks(bytes, seed), &format!("random chunking seed {seed}"));
            }
        }
    }

    fn openai_turn(body: &str) -> ModelResponse {
        super::super::openai::parse_response(body, STEP).unwrap()
    }

    #[test]
    fn openai_stream_assembles_the_non_streamed_turn_at_every_split() {
        for (stream, body) in [OPENAI_TOOLS, OPENAI_REFUSAL, OPENAI_CUT] {
            same_turn_however_chunked(|| OpenAiStream::new(STEP), stream, &openai_turn(body));
        }
        let tools = openai_turn(OPENAI_TOOLS.1);
        assert_eq!(tools.tool_calls.len(), 2);
        assert_eq!(tools.tool_calls[0].args, serde_json::json!({"city": "Zürich"}));
        assert_eq!(tools.usage, Usage::tokens(82, 41));
        let refusal = openai_turn(OPENAI_REFUSAL.1);
        assert_eq!(
            (refusal.text.as_str(), refusal.stop_reason.as_deref()),
            ("I'm sorry, I can't help with that.", Some("refusal"))
        );
        let cut = openai_turn(OPENAI_CUT.1);
        assert!(cut.tool_calls[0].invalid.as_deref().unwrap_or("").contains("not valid JSON"));
    }

    #[test]
    fn anthropic_stream_assembles_the_non_streamed_turn_at_every_split() {
        for (stream, body) in [ANTHROPIC_THINKING, ANTHROPIC_MAX_TOKENS] {
            let expected = super::super::anthropic::parse_response(body, STEP).unwrap();
            same_turn_however_chunked(|| AnthropicStream::new(STEP), stream, &expected);
        }
        let thinking = super::super::anthropic::parse_response(ANTHROPIC_THINKING.1, STEP).unwrap();
        assert_eq!(thinking.reasoning.len(), 2, "thinking and redacted thinking kept");
        assert_eq!(thinking.tool_calls[0].args, serde_json::json!({"city": "Paris", "units": "°C"}));
        assert_eq!(thinking.usage, Usage::tokens(472, 159));
    }

    #[test]
    fn workers_ai_stream_assembles_the_non_streamed_turn_at_every_split() {
        let parse =
            |body: &str| super::super::workers_ai::parse_response(&serde_json::from_str(body).unwrap(), STEP).unwrap();
        let expected = parse(WORKERS_AI.1);
        assert_eq!((expected.text.as_str(), expected.tool_calls.len()), ("Sunny in Zürich.", 1));
        same_turn_however_chunked(|| WorkersAiStream::new(STEP), WORKERS_AI.0, &expected);
        // Models that stream OpenAI-shaped chunks through the binding.
        same_turn_however_chunked(|| WorkersAiStream::new(STEP), OPENAI_TOOLS.0, &parse(OPENAI_TOOLS.1));
    }

    /// The end of `stream`'s last event (its closing blank line included).
    fn complete_at(stream: &str) -> usize {
        stream.trim_end_matches('\n').len() + 2
    }

    /// A stream cut anywhere before its end event is complete is a retryable `STEADFAST_PROVIDER_NETWORK`
    /// failure (a dropped connection), never a partial turn.
    #[test]
    fn streams_cut_short_anywhere_are_retryable_network_failures() {
        fn check<P: StreamParser>(make: impl Fn() -> P, stream: &str) {
            let bytes = stream.as_bytes();
            let end = complete_at(stream);
            assert_eq!(end, bytes.len());
            for k in 0..bytes.len() {
                let (turn, _) = run(make(), &[&bytes[..k]]);
                let e = turn.expect_err(&format!("cut at byte {k} of {end}"));
                assert_eq!(e.code, ErrorCode::ProviderNetwork, "cut at byte {k}: {e}");
                assert!(e.retryable);
            }
        }
        check(|| OpenAiStream::new(STEP), OPENAI_TOOLS.0);
        check(|| AnthropicStream::new(STEP), ANTHROPIC_THINKING.0);
        check(|| WorkersAiStream::new(STEP), WORKERS_AI.0);
    }

    /// An error event in the middle of a stream is a retryable provider failure, found whatever the chunking:
    /// `overloaded_error` / `server_error` → `STEADFAST_PROVIDER_UNAVAILABLE`, a rate limit →
    /// `STEADFAST_PROVIDER_RATE_LIMITED`.
    #[test]
    fn error_events_mid_stream_are_retryable_provider_failures() {
        fn check<P: StreamParser>(make: impl Fn() -> P, stream: &str, code: ErrorCode) {
            let bytes = stream.as_bytes();
            for k in 0..=bytes.len() {
                let (turn, _) = run(make(), &[&bytes[..k], &bytes[k..]]);
                let e = turn.expect_err(&format!("split at {k}"));
                assert_eq!(e.code, code, "split at {k}: {e}");
                assert!(e.retryable, "split at {k}");
            }
        }
        let anthropic = ANTHROPIC_THINKING.0;
        let mid =
            anthropic.find("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2").unwrap();
        let overloaded = "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
        let rate = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"}}\n\n";
        for (err, code) in [(overloaded, ErrorCode::ProviderUnavailable), (rate, ErrorCode::ProviderRateLimited)] {
            let stream = format!("{}{err}{}", &anthropic[..mid], &anthropic[mid..]);
            check(|| AnthropicStream::new(STEP), &stream, code);
        }
        let openai = OPENAI_TOOLS.0;
        let mid = openai.find("data: {").unwrap() + 1;
        let mid = mid + openai[mid..].find("data: {").unwrap();
        let server = "data: {\"error\": {\"message\": \"The server had an error while processing your request.\", \"type\": \"server_error\", \"param\": null, \"code\": null}}\n\n";
        let stream = format!("{}{server}{}", &openai[..mid], &openai[mid..]);
        check(|| OpenAiStream::new(STEP), &stream, ErrorCode::ProviderUnavailable);
        check(|| WorkersAiStream::new(STEP), &stream, ErrorCode::ProviderUnavailable);
    }

    #[test]
    fn unreadable_events_are_invalid_responses() {
        let (turn, _) = run(OpenAiStream::new(1), &[b"data: {not json\n\ndata: [DONE]\n\n"]);
        assert_eq!(turn.unwrap_err().code, ErrorCode::ProviderInvalidResponse);
        let (turn, _) = run(AnthropicStream::new(1), &[b"event: message_start\ndata: <html>\n\n"]);
        assert_eq!(turn.unwrap_err().code, ErrorCode::ProviderInvalidResponse);
        let delta_without_start =
            b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
        let (turn, _) = run(AnthropicStream::new(1), &[delta_without_start]);
        assert_eq!(turn.unwrap_err().code, ErrorCode::ProviderInvalidResponse);
    }

    #[test]
    fn sse_decoder_follows_the_event_stream_rules() {
        let mut sse = SseDecoder::new();
        let mut out = Vec::new();
        sse.feed(
            b": comment\nevent: a\ndata: one\ndata:two\nid: 7\nretry: 10\n\ndata\n\nevent: ignored-without-data\n\n",
            &mut out,
        );
        sse.feed(b"data: tail-without-blank-line", &mut out);
        assert_eq!(
            out,
            vec![
                SseEvent { event: "a".into(), data: "one\ntwo".into() },
                SseEvent { event: String::new(), data: String::new() },
            ]
        );
    }

    /// `\r\n` is one line end even when a chunk ends between the two bytes: a two-line event stays one event.
    #[test]
    fn crlf_split_between_its_bytes_is_one_line_end() {
        let bytes: &[u8] = b"data: a\r\ndata: b\r\n\r\nevent: x\rdata: c\r\r";
        for k in 0..=bytes.len() {
            let mut sse = SseDecoder::new();
            let mut out = Vec::new();
            sse.feed(&bytes[..k], &mut out);
            sse.feed(&bytes[k..], &mut out);
            let want = vec![
                SseEvent { event: String::new(), data: "a\nb".into() },
                SseEvent { event: "x".into(), data: "c".into() },
            ];
            assert_eq!(out, want, "split at {k}");
        }
    }

    #[test]
    fn parse_stream_reads_a_whole_body() {
        assert_eq!(parse_stream(&mut OpenAiStream::new(STEP), OPENAI_TOOLS.0).unwrap(), openai_turn(OPENAI_TOOLS.1));
    }
}
