//! Default and test implementations of [`Clock`], [`Sleep`] and [`Rng`].
//!
//! Platform defaults that touch the OS ([`SystemClock`], [`ThreadSleep`]) exist on native targets only; on
//! wasm the shells (Worker, JS bindings) pass their own.

use super::traits::{Clock, Rng, Sleep};
use async_trait::async_trait;
use std::cell::Cell;
use std::rc::Rc;

/// SplitMix64: small, fast, good enough for ids and jitter (not for secrets).
#[derive(Debug)]
pub struct SplitMix64(Cell<u64>);

impl SplitMix64 {
    /// Seeded generator.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(Cell::new(seed))
    }
}

impl Rng for SplitMix64 {
    fn next_u64(&self) -> u64 {
        let mut z = self.0.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.0.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A clock tests move by hand. Clones share the time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Rc<Cell<u64>>);

impl ManualClock {
    /// A clock at `ms`.
    pub fn new(ms: u64) -> ManualClock {
        ManualClock(Rc::new(Cell::new(ms)))
    }

    /// Moves time forward.
    pub fn advance(&self, ms: u64) {
        self.0.set(self.0.get().saturating_add(ms));
    }

    /// Sets the time.
    pub fn set(&self, ms: u64) {
        self.0.set(ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
}

/// A [`Sleep`] in simulated time: it yields once to the executor (so other tasks run, as they would while a
/// real timer waits), then advances its [`ManualClock`] by the delay and completes. A sleep dropped before it
/// completes (it lost a race) does not move the clock. Records the delays slept.
#[derive(Clone, Debug, Default)]
pub struct ManualSleep {
    clock: ManualClock,
    slept: Rc<std::cell::RefCell<Vec<u64>>>,
}

impl ManualSleep {
    /// A sleep that advances `clock`.
    pub fn new(clock: ManualClock) -> ManualSleep {
        ManualSleep { clock, slept: Default::default() }
    }

    /// Every delay slept so far.
    pub fn slept(&self) -> Vec<u64> {
        self.slept.borrow().clone()
    }
}

#[async_trait(?Send)]
impl Sleep for ManualSleep {
    async fn sleep(&self, ms: u64) {
        let mut yielded = false;
        futures::future::poll_fn(|cx| {
            if yielded {
                return std::task::Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await;
        self.slept.borrow_mut().push(ms);
        self.clock.advance(ms);
    }
}

/// The system clock (native only).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

#[cfg(not(target_arch = "wasm32"))]
impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
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
            let _ = tx.send(());
        });
        let _ = rx.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic_and_unit_in_range() {
        let a = SplitMix64::new(7);
        let b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            let u = a.unit();
            assert!((0.0..1.0).contains(&u));
            b.next_u64();
        }
    }

    #[test]
    fn manual_sleep_advances_clock() {
        let clock = ManualClock::new(100);
        let sleep = ManualSleep::new(clock.clone());
        futures::executor::block_on(sleep.sleep(50));
        assert_eq!(clock.now_ms(), 150);
        assert_eq!(sleep.slept(), vec![50]);
    }
}
