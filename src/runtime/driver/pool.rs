//! [`ToolPool`]: the tool calls of one execution that the driver holds between the machine's `RunTool` effect
//! and the batch it hands back — queued for a slot, in flight, settled and not yet handed back — with the
//! arguments `before_tool` hooks rewrote. Whether a call is still waited for is the machine's truth
//! ([`crate::core::machine::RunMachine::is_running`], its `CallState`); the pool only holds the futures and the
//! outcomes.

use crate::core::machine::ToolOutcome;
use crate::core::transcript::ToolCall;
use crate::runtime::traits::LocalFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

/// A started tool call: resolves to its call id and outcome.
pub(crate) type ToolFuture = LocalFuture<'static, (String, ToolOutcome)>;

/// A tool call cleared to run, waiting for a slot: its approval id (an approved call) and its call key.
pub(crate) struct Launch {
    pub(crate) call: ToolCall,
    pub(crate) approval_id: Option<String>,
    pub(crate) key: String,
    pub(crate) wait_token: String,
}

/// The calls the driver holds (see the module docs).
#[derive(Default)]
pub(crate) struct ToolPool {
    /// Cleared to run, in the order the machine started them, waiting for a slot.
    queue: VecDeque<Launch>,
    /// Running.
    in_flight: FuturesUnordered<ToolFuture>,
    /// Settled (or denied before they ran), in the order they settled, not yet handed to the machine.
    settled: VecDeque<(String, ToolOutcome)>,
    /// Arguments rewritten by `before_tool` hooks at the gate, by call id, until the call starts.
    args: HashMap<String, Value>,
}

impl ToolPool {
    /// Keeps the arguments a hook rewrote for call `id`, to run it with them.
    pub(crate) fn rewrite_args(&mut self, id: String, args: Value) {
        self.args.insert(id, args);
    }

    /// The arguments a hook rewrote for call `id` (once).
    pub(crate) fn take_args(&mut self, id: &str) -> Option<Value> {
        self.args.remove(id)
    }

    /// Queues a call for a slot.
    pub(crate) fn enqueue(&mut self, launch: Launch) {
        self.queue.push_back(launch);
    }

    /// Records an outcome reached without running the call (a hook denied it).
    pub(crate) fn settle(&mut self, id: String, outcome: ToolOutcome) {
        self.settled.push_back((id, outcome));
    }

    /// Whether a slot is free (fewer than `limit` calls in flight) and a queued call the machine still waits
    /// for (`running`) could take it.
    pub(crate) fn can_start(&self, limit: usize, running: impl Fn(&str) -> bool) -> bool {
        self.in_flight.len() < limit.max(1) && self.queue.iter().any(|l| running(&l.call.id))
    }

    /// Starts queued calls, in order, until `limit` are in flight, each by `launch`. A call the machine no longer
    /// waits for (`running` says no: its attempt failed or was aborted meanwhile) is dropped, never started.
    /// Returns how many were started.
    pub(crate) fn start(
        &mut self,
        limit: usize,
        running: impl Fn(&str) -> bool,
        mut launch: impl FnMut(Launch) -> ToolFuture,
    ) -> usize {
        let mut started = 0;
        while self.in_flight.len() < limit.max(1) {
            let Some(l) = self.queue.pop_front() else { break };
            if !running(&l.call.id) {
                continue;
            }
            started += 1;
            self.in_flight.push(launch(l));
        }
        started
    }

    /// How many calls are running.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether no call is queued.
    pub(crate) fn queue_is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether outcomes wait to be handed to the machine.
    pub(crate) fn has_settled(&self) -> bool {
        !self.settled.is_empty()
    }

    /// Polls the calls in flight once: `Ready(true)` when one settled (it joins the settled ones), `Ready(false)`
    /// when none is in flight.
    pub(crate) fn poll_next_settled(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        match self.in_flight.poll_next_unpin(cx) {
            Poll::Ready(Some(s)) => {
                self.settled.push_back(s);
                Poll::Ready(true)
            }
            Poll::Ready(None) => Poll::Ready(false),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Waits for the next call in flight to settle (it joins the settled ones); `false` when none is in flight.
    pub(crate) async fn next_settled(&mut self) -> bool {
        std::future::poll_fn(|cx| self.poll_next_settled(cx)).await
    }

    /// Takes in every call that has settled by now, without waiting.
    pub(crate) fn collect_ready(&mut self) {
        while let Some(Some(s)) = self.in_flight.next().now_or_never() {
            self.settled.push_back(s);
        }
    }

    /// Awaits `fut` while the calls in flight go on running: the ones that settle meanwhile join the settled ones.
    pub(crate) async fn alongside<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            while let Poll::Ready(true) = self.poll_next_settled(cx) {}
            Poll::Pending
        })
        .await
    }

    /// Takes the settled outcomes, in the order they settled.
    pub(crate) fn take_settled(&mut self) -> VecDeque<(String, ToolOutcome)> {
        std::mem::take(&mut self.settled)
    }

    /// Drops every call not handed to the machine: queued, in flight (cancelled) and settled (the run was
    /// aborted: none of them is recorded as executed).
    pub(crate) fn cancel_all(&mut self) {
        self.in_flight.clear();
        self.queue.clear();
        self.settled.clear();
    }

    /// Drops the calls in flight (a simulated crash: the process is gone).
    #[cfg(feature = "testing")]
    pub(crate) fn drop_in_flight(&mut self) {
        self.in_flight.clear();
    }

    /// Lets the calls in flight finish, discarding their outcomes (a simulated crash after the tools' effects).
    #[cfg(feature = "testing")]
    pub(crate) async fn finish_in_flight(&mut self) {
        while self.in_flight.next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::oneshot;
    use futures::executor::block_on;
    use serde_json::json;
    use std::cell::RefCell;
    use std::collections::HashSet;
    use std::rc::Rc;

    fn launch(id: &str) -> Launch {
        Launch {
            call: ToolCall { id: id.into(), name: "t".into(), args: json!({}), invalid: None },
            approval_id: None,
            key: format!("key-{id}"),
            wait_token: String::new(),
        }
    }

    fn ok(text: &str) -> ToolOutcome {
        ToolOutcome::Ok { content: text.into(), business_state: None, usage: None }
    }

    /// Tools that settle when the test says so: `start` launches by them, `finish(id)` settles one.
    #[derive(Default)]
    struct Tools {
        senders: RefCell<HashMap<String, oneshot::Sender<ToolOutcome>>>,
        started: RefCell<Vec<String>>,
    }

    impl Tools {
        fn launch(&self, l: Launch) -> ToolFuture {
            let (tx, rx) = oneshot::channel();
            self.senders.borrow_mut().insert(l.call.id.clone(), tx);
            self.started.borrow_mut().push(l.call.id.clone());
            let id = l.call.id;
            Box::pin(async move {
                let outcome = rx.await.unwrap_or(ToolOutcome::Failed { message: "dropped".into() });
                (id, outcome)
            })
        }

        fn finish(&self, id: &str, outcome: ToolOutcome) {
            let tx = self.senders.borrow_mut().remove(id).expect("the call was started");
            tx.send(outcome).expect("the call is still awaited");
        }

        fn cancelled(&self, id: &str) -> bool {
            self.senders.borrow().get(id).is_some_and(|tx| tx.is_canceled())
        }
    }

    fn ids(settled: VecDeque<(String, ToolOutcome)>) -> Vec<String> {
        settled.into_iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn start_runs_queued_calls_in_order_up_to_the_limit_and_drops_calls_no_longer_running() {
        let tools = Tools::default();
        let mut pool = ToolPool::default();
        for id in ["a", "b", "c", "d", "e"] {
            pool.enqueue(launch(id));
        }
        let gone: HashSet<&str> = ["b"].into();
        let running = |id: &str| !gone.contains(id);
        assert!(pool.can_start(2, running));
        assert_eq!(pool.start(2, running, |l| tools.launch(l)), 2);
        assert_eq!(*tools.started.borrow(), ["a", "c"], "b is dropped, never started");
        assert_eq!(pool.in_flight(), 2);
        assert!(!pool.can_start(2, running), "no slot free");
        assert_eq!(pool.start(2, running, |l| tools.launch(l)), 0);

        tools.finish("c", ok("c"));
        assert!(block_on(pool.next_settled()));
        assert!(pool.can_start(2, running));
        assert_eq!(pool.start(2, running, |l| tools.launch(l)), 1);
        assert_eq!(*tools.started.borrow(), ["a", "c", "d"]);
        assert!(!pool.queue_is_empty(), "e waits for a slot");
        // A limit of 0 is 1.
        tools.finish("a", ok("a"));
        tools.finish("d", ok("d"));
        pool.collect_ready();
        assert_eq!(pool.start(0, running, |l| tools.launch(l)), 1);
        assert_eq!(pool.in_flight(), 1);
        assert!(pool.queue_is_empty());
    }

    #[test]
    fn can_start_is_false_when_no_queued_call_is_still_running() {
        let mut pool = ToolPool::default();
        assert!(!pool.can_start(4, |_| true), "nothing queued");
        pool.enqueue(launch("a"));
        assert!(!pool.can_start(4, |_| false));
        assert!(pool.can_start(4, |_| true));
    }

    #[test]
    fn settled_outcomes_are_taken_in_the_order_they_settled_with_denials_among_them() {
        let tools = Tools::default();
        let mut pool = ToolPool::default();
        for id in ["a", "b", "c"] {
            pool.enqueue(launch(id));
        }
        pool.start(3, |_| true, |l| tools.launch(l));
        assert!(!pool.has_settled());
        pool.collect_ready();
        assert!(!pool.has_settled(), "nothing settled yet");
        tools.finish("c", ok("c"));
        assert!(block_on(pool.next_settled()));
        pool.settle("x".into(), ToolOutcome::Denied { reason: "no".into() });
        tools.finish("a", ok("a"));
        pool.collect_ready();
        assert!(pool.has_settled());
        let settled = pool.take_settled();
        assert_eq!(settled[1].1, ToolOutcome::Denied { reason: "no".into() });
        assert_eq!(ids(settled), ["c", "x", "a"]);
        assert!(!pool.has_settled());
        assert_eq!(pool.in_flight(), 1, "b still runs");
        tools.finish("b", ok("b"));
        assert!(block_on(pool.next_settled()));
        assert!(!block_on(pool.next_settled()), "nothing in flight");
        assert_eq!(ids(pool.take_settled()), ["b"]);
    }

    #[test]
    fn alongside_keeps_the_calls_running_and_buffers_what_settles_meanwhile() {
        let tools = Rc::new(Tools::default());
        let mut pool = ToolPool::default();
        pool.enqueue(launch("a"));
        pool.enqueue(launch("b"));
        pool.start(2, |_| true, |l| tools.launch(l));
        // The awaited future (a commit) settles both calls before it completes: it yields once in between, so
        // the pool is polled while it waits.
        let t = tools.clone();
        let commit = async move {
            t.finish("b", ok("b"));
            futures::pending!();
            t.finish("a", ok("a"));
            futures::pending!();
            7
        };
        let woken = async {
            let r = pool.alongside(commit).await;
            (r, ids(pool.take_settled()))
        };
        let (r, settled) = block_on(always_woken(woken));
        assert_eq!(r, 7);
        assert_eq!(settled, ["b", "a"]);
    }

    /// Drives `fut` to completion, waking it whenever it is pending (a future that yields with `pending!` wakes
    /// no one itself).
    async fn always_woken<F: Future>(fut: F) -> F::Output {
        let mut fut = pin!(fut);
        std::future::poll_fn(|cx| {
            let r = fut.as_mut().poll(cx);
            if r.is_pending() {
                cx.waker().wake_by_ref();
            }
            r
        })
        .await
    }

    #[test]
    fn cancel_all_drops_queued_running_and_settled_calls_but_keeps_rewritten_arguments() {
        let tools = Tools::default();
        let mut pool = ToolPool::default();
        for id in ["a", "b", "c"] {
            pool.enqueue(launch(id));
        }
        pool.rewrite_args("c".into(), json!({"n": 2}));
        pool.start(2, |_| true, |l| tools.launch(l));
        pool.settle("x".into(), ToolOutcome::Denied { reason: "no".into() });
        assert!(!tools.cancelled("a") && !tools.cancelled("b"));
        pool.cancel_all();
        assert!(tools.cancelled("a") && tools.cancelled("b"), "the running calls' futures are dropped");
        assert_eq!(pool.in_flight(), 0);
        assert!(pool.queue_is_empty());
        assert!(!pool.has_settled());
        assert_eq!(pool.start(2, |_| true, |l| tools.launch(l)), 0, "c is not started after the abort");
        assert_eq!(pool.take_args("c"), Some(json!({"n": 2})));
        assert_eq!(pool.take_args("c"), None, "rewritten arguments are taken once");
    }
}
