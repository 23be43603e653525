//! Executing a run for a request, the same for every route that runs one (a send, a resume, an approval's
//! resolution, a delivery): here in the request (KV mode), or as a task of its own through the [`Spawner`]
//! (strict mode, inside the run's object), answered when it ends, as SSE from its first event
//! (`Accept: text/event-stream`), or `202 Accepted` once it started (`Prefer: respond-async`, with a spawner).
//!
//! [`Spawner`]: super::Spawner

use super::sse::{frame_queue, sse_frame, sse_id, FrameReader, FrameSender, LiveBody, LiveParts};
use super::{parse_body, Api, ApiRequest, ApiResponse};
use crate::core::checkpoint::RunStatus;
use crate::core::error::Result;
use crate::core::events::EventEnvelope;
use crate::core::replay::Cursor;
use crate::front::contract::{Accepted, SendRequest};
use crate::runtime::traits::{EventSink, LocalFuture};
use crate::runtime::{Input, SendOptions};
use std::cell::RefCell;
use std::rc::Rc;

/// One execution as its request sees it: the run's events (sent on as SSE frames for an SSE answer, until the
/// run ends), whether it started (its first event: the run it executes), and its answer once it ended; the
/// request waiting for either is woken.
#[derive(Default)]
pub(super) struct StartSink {
    pub(super) frames: Option<FrameSender>,
    /// The journal position the run's events are durable through (the last `id:` sent).
    position: std::cell::Cell<u64>,
    started: RefCell<Option<String>>,
    answer: RefCell<Option<ApiResponse>>,
    waiting: RefCell<Option<std::task::Waker>>,
}

impl StartSink {
    /// Whether `run_id` is the run this execution started with (or none started yet): the others are the runs
    /// of its sub-agents (or the lead a child's result resumed), whose events pass on without moving the cursor.
    fn is_own(&self, run_id: &str) -> bool {
        self.started.borrow().as_deref().is_none_or(|started| started == run_id)
    }

    fn wake(&self) {
        if let Some(w) = self.waiting.borrow_mut().take() {
            w.wake();
        }
    }
}

impl EventSink for StartSink {
    fn emit(&self, event: &EventEnvelope) {
        if self.started.borrow().is_none() {
            *self.started.borrow_mut() = Some(event.run_id.clone());
            self.wake();
        }
        if let Some(frames) = &self.frames {
            // A reader gone (the client left) takes nothing more; the run goes on without it.
            frames.send(sse_frame(event));
            if let crate::core::events::Event::RunDone { status, .. } = event.event {
                // Another run's end (a child's, or the lead a child's result resumed) is not this run's.
                if status != RunStatus::InProgress && self.is_own(&event.run_id) {
                    frames.send(sse_id(Cursor { position: self.position.get(), ended: true }));
                }
            }
        }
    }

    fn durable(&self, run_id: &str, position: u64) {
        // The stream's cursor is the run's own journal position, not another run's (a child's, or its lead's).
        if !self.is_own(run_id) {
            return;
        }
        if let Some(frames) = &self.frames {
            if position != self.position.get() {
                frames.send(sse_id(Cursor { position, ended: false }));
            }
        }
        self.position.set(position);
    }

    fn relay(&self, _run_id: &str, json: &str) {
        // A child's (never this run's own): passed on, the cursor unmoved.
        if let Some(frames) = &self.frames {
            frames.send(super::sse::sse_json_frame(json));
        }
    }
}

/// `run`, closing the SSE frames (if any) when it ends: a live body ends with its run.
fn closing_frames(start: &Rc<StartSink>, run: LocalFuture<'static, ApiResponse>) -> LocalFuture<'static, ApiResponse> {
    let ender = start.clone();
    Box::pin(async move {
        let answer = run.await;
        if let Some(frames) = &ender.frames {
            frames.close();
        }
        answer
    })
}

/// Whether the request's `Prefer` header (RFC 7240) names `token`: `respond-async` (answer before the run ends),
/// `queue` (steering: queue the input for the execution that holds the run).
fn prefers(req: &ApiRequest, token: &str) -> bool {
    req.header("prefer").is_some_and(|p| p.to_ascii_lowercase().split(',').any(|t| t.trim() == token))
}

impl Api {
    /// The execution's [`StartSink`] (no SSE frames) and `opts` with it as the events' sink when a spawner
    /// executes the run (its first event is its start); without one, no sink is needed.
    pub(super) fn start_sink(&self, opts: SendOptions) -> (Rc<StartSink>, SendOptions) {
        let sink = Rc::new(StartSink::default());
        let events: Option<Rc<dyn EventSink>> = self.spawner.is_some().then(|| sink.clone() as _);
        (sink, SendOptions { events, ..opts })
    }

    /// What a send (of a run or a session) needs from its request: the input, the execution's [`StartSink`]
    /// (with SSE frames for `Accept: text/event-stream`), the options (business state; the sink as the events'
    /// sink for an SSE answer or a spawned execution) and the frames' reader.
    #[allow(clippy::type_complexity)]
    pub(super) fn send_parts(
        &self,
        req: &ApiRequest,
    ) -> Result<(Input, Rc<StartSink>, SendOptions, Option<FrameReader>)> {
        // An empty body is an empty request (one that does not parse was refused by `?`).
        let body: SendRequest = parse_body(&req.body, true)?.unwrap_or_default();
        let mut opts = req.send_options();
        let input = body.into_options(&mut opts)?;
        opts.queue |= prefers(req, "queue");
        let sse = req.header("accept").is_some_and(|a| a.contains("text/event-stream"));
        let (sender, frames) = sse.then(frame_queue).unzip();
        let start = Rc::new(StartSink { frames: sender, ..StartSink::default() });
        opts.events = (sse || self.spawner.is_some()).then(|| start.clone() as _);
        Ok((input, start, opts, frames))
    }

    /// Executes a run (`run` answers when it ends): here, in this request, without a spawner; with one, as a
    /// task of its own that this request waits for, or (`Prefer: respond-async`) only until the run has
    /// started: then `202 Accepted` with the run id. With `frames` (an SSE answer) the answer is the run's
    /// events as they happen, from its first one: a live body whose task (without a spawner) is the rest of the
    /// run, for the shell to run to its end whether the client stays or not. A refusal before the start is
    /// the run's answer either way.
    pub(super) async fn execute(
        &self,
        req: &ApiRequest,
        start: Rc<StartSink>,
        run: LocalFuture<'static, ApiResponse>,
        frames: Option<FrameReader>,
    ) -> ApiResponse {
        let Some(spawn) = &self.spawner else {
            return self.execute_here(start, run, frames).await;
        };
        let run = closing_frames(&start, run);
        let task = start.clone();
        spawn(Box::pin(async move {
            let answer = run.await;
            // The request that waited for it may have gone; the run has ended either way.
            *task.answer.borrow_mut() = Some(answer);
            task.wake();
        }));
        let respond_async = prefers(req, "respond-async");
        let answer_from_start = respond_async || frames.is_some();
        let started = futures::future::poll_fn(|cx| {
            if answer_from_start && start.started.borrow().is_some() {
                return std::task::Poll::Ready(None);
            }
            match start.answer.borrow_mut().take() {
                Some(answer) => std::task::Poll::Ready(Some(answer)),
                None => {
                    *start.waiting.borrow_mut() = Some(cx.waker().clone());
                    std::task::Poll::Pending
                }
            }
        });
        match (started.await, frames) {
            (Some(answer), _) => answer,
            (None, Some(frames)) if !respond_async => self.live(frames, None),
            (None, _) => {
                // Started: its first event named the run it executes (a send's, or an approval's or a
                // delivery's run).
                let id = start.started.borrow().clone().unwrap_or_default();
                let mut r = ApiResponse::with(202, &Accepted::new(id.clone()));
                r.headers.push(("location".into(), format!("/runs/{id}")));
                r.headers.push(("preference-applied".into(), "respond-async".into()));
                r
            }
        }
    }

    /// Executes a run in this request (no spawner): `run` answers when it ends. With `frames` (an SSE answer)
    /// the answer is the run's events as they happen, from its first one: a live body whose task is the rest
    /// of the run, for the shell to run to its end whether the client stays or not. A refusal before the start
    /// is the run's answer either way.
    async fn execute_here(
        &self,
        start: Rc<StartSink>,
        run: LocalFuture<'static, ApiResponse>,
        frames: Option<FrameReader>,
    ) -> ApiResponse {
        let mut run = closing_frames(&start, run);
        let Some(frames) = frames else {
            return run.await;
        };
        // Executed here until its first event (or its end, a refusal: the plain answer), then handed over.
        let ended = futures::future::poll_fn(|cx| match run.as_mut().poll(cx) {
            std::task::Poll::Ready(answer) => std::task::Poll::Ready(Some(answer)),
            std::task::Poll::Pending if start.started.borrow().is_some() => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        })
        .await;
        match ended {
            Some(answer) if !start.started.borrow().is_some() => answer,
            // Ended with events: they are all in the frames already.
            Some(_) => self.live(frames, None),
            None => self.live(frames, Some(Box::pin(async move { drop(run.await) }))),
        }
    }

    /// A live SSE answer: `frames` as they come; `task` (if any) is the rest of the run.
    pub(super) fn live(&self, frames: FrameReader, task: Option<LocalFuture<'static, ()>>) -> ApiResponse {
        ApiResponse {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            body: String::new(),
            live: Some(LiveBody::new(LiveParts { frames, timer: self.agent.deps.sleep.clone(), task })),
        }
    }
}
