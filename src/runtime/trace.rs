//! Tracing: where an agent's spans go ([`SpanExporter`], set with [`super::AgentBuilder::tracing`]), and
//! [`OtlpBuffer`], the bounded buffer the Worker and the npm package send from as OTLP/HTTP JSON. The spans
//! themselves are made by [`crate::core::trace::Recorder`], which the driver tells what happens.

use crate::core::trace::{otlp_json, Resource, Span, TraceOptions};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Receives the spans of an agent's executions as they end (the execution's own last). Must not block and
/// must not fail: a run never waits for, or fails because of, its traces. An exporter that cannot keep up drops
/// spans (and counts them).
pub trait SpanExporter {
    /// Spans that ended.
    fn export(&self, spans: Vec<Span>);
}

/// An agent's tracing: its exporter and what the spans carry.
#[derive(Clone)]
pub(crate) struct Tracing {
    pub(crate) exporter: Rc<dyn SpanExporter>,
    pub(crate) opts: TraceOptions,
}

/// Spans kept until a shell sends them (`take_body`), at most `max_spans`: past it, new spans are dropped and
/// counted. Cloning shares the buffer.
#[derive(Clone)]
pub struct OtlpBuffer(Rc<BufferState>);

struct BufferState {
    spans: RefCell<Vec<Span>>,
    max_spans: usize,
    dropped: Cell<u64>,
    resource: Resource,
    /// Where drops are counted too ([`super::Counter::TraceSpansDropped`]), under this agent name.
    metrics: RefCell<Option<(Rc<super::Metrics>, String)>>,
}

/// How many spans an [`OtlpBuffer`] keeps by default.
pub const DEFAULT_MAX_BUFFERED_SPANS: usize = 2_048;

impl OtlpBuffer {
    /// A buffer of at most `max_spans` spans from service `service`.
    pub fn new(service: &str, max_spans: usize) -> OtlpBuffer {
        OtlpBuffer(Rc::new(BufferState {
            spans: RefCell::new(Vec::new()),
            max_spans,
            dropped: Cell::new(0),
            resource: Resource::service(service),
            metrics: RefCell::new(None),
        }))
    }

    /// Counts drops in `metrics` too, as `agent`'s.
    pub fn count_in(&self, metrics: Rc<super::Metrics>, agent: &str) {
        *self.0.metrics.borrow_mut() = Some((metrics, agent.to_string()));
    }

    /// The OTLP/HTTP JSON body of every buffered span, and how many there were; `None` when there are none.
    /// The buffer is emptied.
    pub fn take_body(&self) -> Option<(String, usize)> {
        let spans = std::mem::take(&mut *self.0.spans.borrow_mut());
        (!spans.is_empty()).then(|| (otlp_json(&self.0.resource, &spans), spans.len()))
    }

    /// Spans dropped so far: the buffer was full (the shell did not send in time), or an execution made more
    /// than [`crate::core::trace::MAX_OPEN_SPANS`] before handing them on.
    pub fn dropped(&self) -> u64 {
        self.0.dropped.get()
    }

    /// Counts `n` spans dropped elsewhere (a send that failed).
    pub fn count_dropped(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.0.dropped.set(self.0.dropped.get().saturating_add(n));
        if let Some((metrics, agent)) = &*self.0.metrics.borrow() {
            metrics.add(agent, super::Counter::TraceSpansDropped, n);
        }
    }

    /// How many spans wait to be sent.
    pub fn len(&self) -> usize {
        self.0.spans.borrow().len()
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SpanExporter for OtlpBuffer {
    fn export(&self, spans: Vec<Span>) {
        let mut kept = self.0.spans.borrow_mut();
        let room = self.0.max_spans.saturating_sub(kept.len());
        let over = spans.len().saturating_sub(room);
        kept.extend(spans.into_iter().take(room));
        self.count_dropped(over as u64);
    }
}

/// An exporter that keeps every span (tests).
#[derive(Clone, Default)]
pub struct VecExporter(Rc<RefCell<Vec<Span>>>);

impl VecExporter {
    /// A new empty one.
    pub fn new() -> VecExporter {
        VecExporter::default()
    }

    /// Every span exported so far.
    pub fn spans(&self) -> Vec<Span> {
        self.0.borrow().clone()
    }
}

impl SpanExporter for VecExporter {
    fn export(&self, spans: Vec<Span>) {
        self.0.borrow_mut().extend(spans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::trace::{ExecutionInfo, Recorder};

    fn spans(n: usize) -> Vec<Span> {
        let info = ExecutionInfo { run_id: "r".into(), agent: "a".into(), ..Default::default() };
        let mut r = Recorder::start(&info, TraceOptions::default(), 0);
        for i in 0..n.saturating_sub(1) {
            r.model_call(i as u32, "m", None, 0);
            r.model_failed(None, 1);
        }
        r.finish(None, 2).0
    }

    #[test]
    fn the_buffer_keeps_at_most_its_size_and_counts_what_it_dropped() {
        let buf = OtlpBuffer::new("svc", 5);
        buf.export(spans(3));
        buf.export(spans(4));
        assert_eq!((buf.len(), buf.dropped()), (5, 2));
        let (body, n) = buf.take_body().unwrap();
        assert_eq!(n, 5);
        assert!(body.starts_with("{\"resourceSpans\""));
        assert!(buf.is_empty() && buf.take_body().is_none());
        let metrics = Rc::new(super::super::Metrics::new());
        buf.count_in(metrics.clone(), "lead");
        buf.export(spans(2));
        buf.export(spans(4));
        assert_eq!((buf.len(), buf.dropped()), (5, 3));
        assert_eq!(metrics.get("lead", super::super::Counter::TraceSpansDropped), 1);
    }
}
