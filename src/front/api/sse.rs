//! Server-sent events: an event as a frame ([`sse_frame`], [`sse_id`]), the frames of one execution or watch on
//! their way to a live body (`frame_queue`: a `futures::channel::mpsc` channel bounded by the bytes waiting,
//! [`SSE_BACKLOG_BYTES`]), and the live body the shell sends as it is produced ([`LiveBody`], with heartbeats).

use crate::core::events::EventEnvelope;
use crate::core::replay::Cursor;
use crate::runtime::traits::LocalFuture;
use crate::runtime::{WatchSink, Watched};
use futures::channel::mpsc;
use futures::StreamExt;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// How long a live SSE answer stays silent before a heartbeat comment (`: heartbeat`) is sent, so proxies and
/// clients do not close an idle connection (a model thinking, a slow tool). A constant: 15 s, under the common
/// 30–60 s idle timeouts of proxies.
pub const SSE_HEARTBEAT_MS: u64 = 15_000;

/// How many bytes of SSE frames may wait for a client that reads slower than its run produces them. A frame
/// that would pass it (while others wait) cuts the client off: the frames already waiting are still sent, then
/// [`SSE_CUT_OFF`], and the stream ends; the run goes on without it (a watch stops). The client comes back with
/// `GET /runs/{id}/events` and the last `id:` it read as `Last-Event-ID` (an `EventSource` does so by itself) and
/// gets the rest of what the journal recorded. A frame that finds none waiting is always queued, whatever its size.
/// (A watch sends the journal's entries at the client's pace, one entry once the previous one was read, so only
/// the live events of a run executing meanwhile can pile up.)
pub const SSE_BACKLOG_BYTES: usize = 1024 * 1024;

/// The comment that ends a stream whose client fell [`SSE_BACKLOG_BYTES`] behind.
pub const SSE_CUT_OFF: &str = ": cut off: this client fell 1 MiB of events behind; resume with GET /runs/{id}/events \
                               and the last id as Last-Event-ID\n\n";

/// What a live body is made of: its SSE frames, the timer for heartbeats, and the task producing the frames
/// when it is not already running elsewhere (a run executing in this request, KV mode).
pub struct LiveParts {
    pub(super) frames: FrameReader,
    pub(super) timer: Rc<dyn crate::time::Sleep>,
    pub(super) task: Option<LocalFuture<'static, ()>>,
}

impl LiveParts {
    /// The body's chunks as the shell sends them (each frame as it comes, a `: heartbeat` comment after
    /// [`SSE_HEARTBEAT_MS`] without one; the body ends with the frames), and the task to run to its end on its
    /// own (the Worker: `waitUntil`), so the run does not depend on the client reading.
    pub fn into_stream(self) -> (futures::stream::LocalBoxStream<'static, String>, Option<LocalFuture<'static, ()>>) {
        let (frames, timer) = (self.frames, self.timer);
        let chunks = futures::stream::unfold((frames, timer), |(mut frames, timer)| async move {
            let next = {
                let tick = timer.sleep(SSE_HEARTBEAT_MS);
                futures::pin_mut!(tick);
                match futures::future::select(frames.next(), tick).await {
                    futures::future::Either::Left((frame, _)) => Some(frame),
                    futures::future::Either::Right(_) => None,
                }
            };
            match next {
                Some(Some(frame)) => Some((frame, (frames, timer))),
                Some(None) => None,
                None => Some((": heartbeat\n\n".to_string(), (frames, timer))),
            }
        });
        (Box::pin(chunks), self.task)
    }
}

/// A streamed body, taken once by the shell ([`LiveBody::take`]). Clones share it.
#[derive(Clone)]
pub struct LiveBody(Rc<RefCell<Option<LiveParts>>>);

impl LiveBody {
    pub(super) fn new(parts: LiveParts) -> LiveBody {
        LiveBody(Rc::new(RefCell::new(Some(parts))))
    }

    /// The chunks and the task; `None` once taken.
    pub fn take(&self) -> Option<LiveParts> {
        self.0.borrow_mut().take()
    }
}

impl std::fmt::Debug for LiveBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveBody")
    }
}

impl PartialEq for LiveBody {
    fn eq(&self, other: &LiveBody) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LiveBody {}

/// What both ends of a frame queue count: the frames and bytes sent but not yet read, and whether the reader
/// was cut off.
#[derive(Default)]
struct Backlog {
    frames: Cell<usize>,
    bytes: Cell<usize>,
    /// The reader fell too far behind: nothing more is sent, and the stream ends after [`SSE_CUT_OFF`].
    cut: Cell<bool>,
}

/// The frames of one execution (or watch) on their way from its events to a live body: sent by the run, read by
/// the body; closed when the run ends, no longer filled once the reader is gone (the client left) or has fallen
/// [`SSE_BACKLOG_BYTES`] behind (cut off).
pub(super) fn frame_queue() -> (FrameSender, FrameReader) {
    let (frames, rx) = mpsc::unbounded();
    let (read_tx, read) = mpsc::unbounded();
    let backlog = Rc::new(Backlog::default());
    let sender = FrameSender { frames, backlog: backlog.clone(), closed: Cell::new(false), read: RefCell::new(read) };
    (sender, FrameReader { rx, backlog, read_tx })
}

/// The run's end of a `frame_queue`.
pub(super) struct FrameSender {
    frames: mpsc::UnboundedSender<String>,
    backlog: Rc<Backlog>,
    /// Closed by this end ([`FrameSender::close`] or a cut-off), not by the reader going away.
    closed: Cell<bool>,
    /// A signal from the reader each time it has read every frame sent ([`FrameSender::drained`]); ends when the
    /// reader is gone.
    read: RefCell<mpsc::UnboundedReceiver<()>>,
}

/// The body's end of a `frame_queue`: the frames in order, ending when the run has ended and all are read.
pub struct FrameReader {
    rx: mpsc::UnboundedReceiver<String>,
    backlog: Rc<Backlog>,
    read_tx: mpsc::UnboundedSender<()>,
}

impl FrameSender {
    /// Queues `frame`, unless the reader is gone or cut off; a frame that would pass [`SSE_BACKLOG_BYTES`] while
    /// others wait cuts the reader off instead: it reads what waits, then [`SSE_CUT_OFF`] (its last `id:` is
    /// where the client resumes).
    pub(super) fn send(&self, frame: String) {
        if self.gone() {
            return;
        }
        let b = &self.backlog;
        if b.frames.get() > 0 && b.bytes.get().saturating_add(frame.len()) > SSE_BACKLOG_BYTES {
            b.cut.set(true);
            // Ignored: a reader gone meanwhile needs no notice.
            let _ = self.frames.unbounded_send(SSE_CUT_OFF.to_string());
            self.close();
            return;
        }
        b.frames.set(b.frames.get() + 1);
        b.bytes.set(b.bytes.get() + frame.len());
        // Ignored: the reader went away (the client left); the run goes on without it.
        let _ = self.frames.unbounded_send(frame);
    }

    /// Ends the frames: the reader reads what waits, then the stream ends.
    pub(super) fn close(&self) {
        self.closed.set(true);
        self.frames.close_channel();
    }

    /// Whether the reader takes no more frames: gone (the client left) or cut off (too far behind).
    pub(super) fn gone(&self) -> bool {
        self.backlog.cut.get() || (self.frames.is_closed() && !self.closed.get())
    }

    /// Resolves once the reader has read every frame (`true`), or will read none (`false`: gone or cut off).
    pub(super) async fn drained(&self) -> bool {
        loop {
            if self.gone() {
                return false;
            }
            if self.backlog.frames.get() == 0 {
                return true;
            }
            // Borrowed only while polled: the sender is used by one task.
            if futures::future::poll_fn(|cx| self.read.borrow_mut().poll_next_unpin(cx)).await.is_none() {
                return false;
            }
        }
    }
}

impl futures::Stream for FrameReader {
    type Item = String;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<String>> {
        let polled = self.rx.poll_next_unpin(cx);
        if let std::task::Poll::Ready(Some(frame)) = &polled {
            // The cut-off notice was never counted (and nothing is counted once it is sent).
            let b = &self.backlog;
            b.frames.set(b.frames.get().saturating_sub(1));
            b.bytes.set(b.bytes.get().saturating_sub(frame.len()));
            if b.frames.get() == 0 {
                // Ignored: a sender gone needs no signal.
                let _ = self.read_tx.unbounded_send(());
            }
        }
        polled
    }
}

/// A watch's frames as its [`WatchSink`]: each item pushed as it comes, the next journal entry once the client has
/// read what it was sent.
pub(super) struct PacedFrames<'a, F: Fn(Watched) -> bool> {
    pub(super) push: &'a F,
    pub(super) frames: &'a FrameSender,
}

impl<F: Fn(Watched) -> bool> WatchSink for PacedFrames<'_, F> {
    fn push(&self, item: Watched) -> bool {
        (self.push)(item)
    }

    fn drained(&self) -> LocalFuture<'_, bool> {
        Box::pin(self.frames.drained())
    }
}

/// One event as a server-sent event block: `event:` (its type) and `data:` (the envelope as JSON). Events
/// carry no `id:`; the journal positions do ([`sse_id`]).
pub fn sse_frame(e: &EventEnvelope) -> String {
    // Ignored: an EventEnvelope (strings, numbers, JSON values) always serialises.
    sse_json_frame(&serde_json::to_string(e).unwrap_or_default())
}

/// [`sse_frame`] of an event's JSON (an event relayed from where its child run executed).
pub fn sse_json_frame(data: &str) -> String {
    format!("event: {}\ndata: {data}\n\n", event_type(data))
}

/// The event's `type` in an envelope's JSON: the first `"type"` key, which is the event's tag (the envelope's own
/// fields and its `subagent` have no such key; the tag is written first of the event's fields). Read from the
/// text instead of through a `Value` of the envelope, whose serializer for every event is kilobytes of wasm. A
/// `,"type":"` cannot occur inside a JSON string (its quotes are escaped there).
fn event_type(data: &str) -> &str {
    const KEY: &str = ",\"type\":\"";
    let Some(at) = data.find(KEY) else { return "" };
    let rest = &data[at + KEY.len()..];
    &rest[..rest.find('"').unwrap_or(0)]
}

/// A block with only an `id:`: the stream has now sent every recorded event through this journal position
/// (`12`), and with `.done` the run's end there (`12.done`). An SSE client keeps it as its last event id without
/// dispatching an event, and sends it back as `Last-Event-ID` to `GET /runs/{id}/events` to go on from there.
pub fn sse_id(cursor: Cursor) -> String {
    format!("id: {cursor}\n\n")
}

/// Server-sent events: one [`sse_frame`] per event.
pub fn sse_body(events: &[EventEnvelope]) -> String {
    events.iter().map(sse_frame).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frame's `event:` line is the envelope's `type`, read from its JSON as a `Value` would read it, also
    /// when a string or an argument before or inside the event holds a `type` key or quotes.
    #[test]
    fn the_event_line_is_the_envelopes_type() {
        use crate::core::events::{Event, SubagentTag};
        use crate::core::transcript::ToolCall;
        let call = ToolCall {
            id: "c\",\"type\":\"x".into(),
            name: "t".into(),
            args: serde_json::json!({"type": "inner", "q": "a\",\"type\":\"b"}),
            invalid: None,
        };
        let events = [
            Event::RunStart { resumed: true, step: 2 },
            Event::ApprovalRequested { approval_id: "\",\"type\":\"no".into(), tool_call: call },
        ];
        for (i, event) in events.into_iter().enumerate() {
            let subagent = (i == 1).then(|| SubagentTag {
                name: "type".into(),
                depth: 1,
                parent: ",\"type\":\"p".into(),
                tool_call_id: None,
            });
            let env = EventEnvelope { v: 1, seq: 0, run_id: "r\",\"type\":\"z".into(), at: 1, subagent, event };
            let want = serde_json::to_value(&env).unwrap()["type"].as_str().unwrap().to_string();
            let frame = sse_frame(&env);
            assert!(frame.starts_with(&format!("event: {want}\ndata: ")), "{frame}");
        }
    }
    use futures::executor::block_on;
    use futures::FutureExt;

    /// The frame queue over mpsc keeps the hand-written queue's rules: frames in order, the stream ends once
    /// closed and read; `drained` waits until the reader has read every frame (`true`), and is `false` once
    /// the reader is gone (the client left) or cut off; a frame that would pass the backlog bound while others
    /// wait cuts the reader off (it reads what waits, then the notice), and one that finds none waiting is
    /// queued whatever its size.
    #[test]
    fn the_frame_queue_paces_bounds_and_ends_as_the_sse_answers_need() {
        // Order, pacing and end.
        let (tx, mut rx) = frame_queue();
        assert!(block_on(tx.drained()), "nothing waits");
        tx.send("a".into());
        tx.send("b".into());
        assert_eq!(tx.drained().now_or_never(), None, "two frames wait");
        assert_eq!(block_on(rx.next()).as_deref(), Some("a"));
        assert_eq!(tx.drained().now_or_never(), None, "one frame waits");
        assert_eq!(block_on(rx.next()).as_deref(), Some("b"));
        assert_eq!(tx.drained().now_or_never(), Some(true), "all read");
        tx.close();
        assert!(!tx.gone(), "closed by the run, not left by the client");
        assert_eq!(block_on(rx.next()), None, "closed and read: the end");

        // The reader goes away: nothing more is taken, a waiting writer is told.
        let (tx, rx) = frame_queue();
        tx.send("a".into());
        let mut waiting = Box::pin(tx.drained());
        assert_eq!(waiting.as_mut().now_or_never(), None);
        drop(rx);
        assert!(!block_on(waiting), "the reader left");
        assert!(tx.gone());

        // The bound: one big frame alone is queued; the next that would pass the bound cuts the reader off.
        let (tx, rx) = frame_queue();
        let big = "x".repeat(SSE_BACKLOG_BYTES + 10);
        tx.send(big.clone());
        assert!(!tx.gone(), "a frame that finds none waiting is queued whatever its size");
        tx.send("y".into());
        assert!(tx.gone(), "cut off");
        assert!(!block_on(tx.drained()), "cut off: never drained");
        tx.send("z".into());
        let read: Vec<String> = block_on(rx.collect());
        assert_eq!(read, vec![big, SSE_CUT_OFF.to_string()], "what waited, then the notice, then the end");

        // Within the bound nothing is cut.
        let (tx, rx) = frame_queue();
        let half = "h".repeat(SSE_BACKLOG_BYTES / 2);
        tx.send(half.clone());
        tx.send(half.clone());
        assert!(!tx.gone());
        tx.close();
        assert_eq!(block_on(rx.collect::<Vec<_>>()), vec![half.clone(), half]);
    }
}
