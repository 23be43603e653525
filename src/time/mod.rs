//! Time, injected: the [`Clock`] and [`Sleep`] traits, the native defaults ([`SystemClock`], [`ThreadSleep`])
//! and, with the cargo feature `testing`, their test versions (`ManualClock`, `ManualSleep`) and simulated time
//! (`SimTime`, `SimExecutor`).
//!
//! A leaf module: it imports nothing of the crate but [`crate::rng`]. The store (lease expiry, retry spacing,
//! the KV simulator) and the runtime (leases, model-call backoff, the sweep) both take a clock and a timer as
//! values, so tests control time and neither layer depends on the other for it.
//!
//! Platform defaults that touch the OS ([`SystemClock`], [`ThreadSleep`]) exist on native targets only; on
//! wasm the shells (Worker, JS bindings) pass their own.

#[cfg(feature = "testing")]
mod manual;
#[cfg(feature = "testing")]
mod sim;

#[cfg(feature = "testing")]
pub use manual::{ManualClock, ManualSleep};
#[cfg(feature = "testing")]
pub use sim::{SimExecutor, SimSleep, SimSpawner, SimTask, SimTime};

/// Gives way once: the task wakes itself and returns to its executor, so the executor's other tasks run before
/// it goes on (tests' tools and timers that must let others interleave).
#[cfg(feature = "testing")]
pub async fn yield_now() {
    let mut yielded = false;
    futures::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

use async_trait::async_trait;

/// Wall clock.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// Timer.
#[async_trait(?Send)]
pub trait Sleep {
    /// Resolves after `ms` milliseconds.
    async fn sleep(&self, ms: u64);
}

/// The system clock (native only).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

#[cfg(not(target_arch = "wasm32"))]
impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // Ignored: only a system clock set before 1970 fails here.
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }
}

/// A timer on a helper thread (native only; works with any executor).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadSleep;

#[cfg(not(target_arch = "wasm32"))]
#[async_trait(?Send)]
impl Sleep for ThreadSleep {
    async fn sleep(&self, ms: u64) {
        if ms == 0 {
            return;
        }
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            // Deliberately ignored: the receiver is gone when the sleep was dropped, and then nobody waits.
            let _ = tx.send(());
        });
        // Deliberately ignored: `Canceled` means the timer thread ended without sending (it panicked); the
        // sleep ends either way rather than hang.
        let _ = rx.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_sleep_advances_clock() {
        let clock = ManualClock::new(100);
        let sleep = ManualSleep::new(clock.clone());
        futures::executor::block_on(sleep.sleep(50));
        assert_eq!(clock.now_ms(), 150);
        assert_eq!(sleep.slept(), vec![50]);
    }
}
