//! The storage meter: which run a store operation was for, so that a run's storage usage
//! ([`StorageUsage`], `usage.storage`) counts its own operations only, however many runs share the store.
//!
//! A store counts every operation in its own counters ([`super::StoreCounters`], what the process did). To
//! attribute them, an execution runs inside [`scope`]: while its future is polled, it is the current meter of
//! the thread, and every operation a backend makes during that poll ([`record`]) is added to it. Futures are
//! polled one at a time on a thread, and a store operation is counted while its caller's future is polled, so
//! two executions interleaving on one store (the npm package's agent, a Worker isolate's requests) each get
//! exactly their own operations; a child run polled inside its lead's execution has its own scope, the
//! innermost one. An operation made outside any scope (listing runs, the sweep's planning) is no run's.
//!
//! The driver takes what was metered since its last look ([`take`]) before each step of the run state machine,
//! which records it on the next journal entry.

use crate::core::cost::StorageUsage;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// One execution's meter: the run it is for, and what was counted and not yet taken.
struct Meter {
    run_id: String,
    pending: Cell<StorageUsage>,
}

thread_local! {
    /// The meters of the futures being polled, innermost last.
    static CURRENT: RefCell<Vec<Rc<Meter>>> = const { RefCell::new(Vec::new()) };
}

/// Adds an operation to the current meter (nothing when no execution is being polled).
pub fn record(f: impl FnOnce(&mut StorageUsage)) {
    CURRENT.with(|c| {
        if let Some(m) = c.borrow().last() {
            let mut u = m.pending.get();
            f(&mut u);
            m.pending.set(u);
        }
    });
}

/// What the current meter counted since the last `take` (zero outside a scope).
pub fn take() -> StorageUsage {
    CURRENT.with(|c| c.borrow().last().map(|m| m.pending.take()).unwrap_or_default())
}

/// `fut`, metered for `run_id`: its operations are `run_id`'s. Made inside a scope of the same run (an
/// execution's lease within its request), the outer meter goes on counting. The future is boxed once here (not
/// moved again: executions' futures are large).
pub fn scope<F: Future>(run_id: &str, fut: F) -> Scoped<F> {
    let outer = CURRENT.with(|c| c.borrow().last().filter(|m| m.run_id == run_id).cloned());
    let meter = outer.unwrap_or_else(|| Rc::new(Meter { run_id: run_id.to_string(), pending: Cell::default() }));
    Scoped { meter, fut: Box::pin(fut) }
}

/// A future polled with its meter current ([`scope`]).
pub struct Scoped<F> {
    meter: Rc<Meter>,
    fut: Pin<Box<F>>,
}

/// Pops the meter when the poll ends, panics included.
struct Pop;

impl Drop for Pop {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().pop());
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        CURRENT.with(|c| c.borrow_mut().push(this.meter.clone()));
        let _pop = Pop;
        this.fut.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::join;

    /// Yields to the executor once (waking itself), so the other future is polled between.
    async fn yield_once() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                return Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    fn read() {
        record(|u| u.reads += 1);
    }

    /// Two executions interleaved on one thread each get their own operations; one outside a scope is no one's.
    #[test]
    fn interleaved_scopes_count_their_own_operations() {
        let (a, b) = futures::executor::block_on(join(
            scope("a", async {
                read();
                yield_once().await;
                read();
                yield_once().await;
                read();
                take()
            }),
            scope("b", async {
                read();
                yield_once().await;
                take()
            }),
        ));
        read();
        assert_eq!((a.reads, b.reads, take().reads), (3, 1, 0));
    }

    /// A child run's scope inside its lead's counts for the child; the same run's nested scope for the outer one.
    #[test]
    fn an_inner_scope_counts_for_its_own_run() {
        let (lead, child) = futures::executor::block_on(scope("lead", async {
            read();
            let child = scope("lead.sub-c1", async {
                read();
                read();
                take()
            })
            .await;
            scope("lead", async { read() }).await;
            (take(), child)
        }));
        assert_eq!((lead.reads, child.reads), (2, 2));
    }
}
