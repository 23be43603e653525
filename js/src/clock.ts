// Time: the clock an agent or a KV store reads instead of the platform's, and `testClock()`, a virtual clock
// that makes backoff, quarantine, outage and lease timing testable without waiting in real time.

import { knownKeys } from "./options.js";

/**
 * What the runtime reads time from (`createAgent({clock})`, `kvStore(ns, {clock})`): `now()` in milliseconds
 * since the epoch, and a timer. `cancel(sleep)`, when present, is called with a promise `sleep` returned that
 * the runtime no longer waits for (a timer that lost a race).
 */
export interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
  cancel?(sleep: Promise<void>): void;
}

/** A virtual clock (see `testClock`). */
export interface TestClock extends Clock {
  cancel(sleep: Promise<void>): void;
  /**
   * Moves time forward by `ms`: first lets work already started run up to its next sleep (one macrotask), then
   * every sleep due on the way wakes, in order of its due time, and what it wakes up runs (one macrotask per
   * wake-up) before time moves on. Resolves once time is `now() + ms` (measured from after that first step).
   */
  advance(ms: number): Promise<void>;
  /** Every sleep asked for, in milliseconds, in order (the runtime's lease timers included). */
  readonly sleeps: readonly number[];
  /** Sleeps waiting now. */
  readonly waiting: number;
}

/** Options of `testClock`. */
export interface TestClockOptions {
  /** The time it starts at, ms since the epoch (default 2026-01-01T00:00:00Z). */
  start?: number;
  /**
   * `true` (default): whenever sleeps wait and nothing else is left to run (checked one macrotask after a
   * sleep starts), time jumps to the earliest one and wakes it, so code that waits finishes at once while the
   * clock reads as if the time had passed. `false`: time moves only with `advance(ms)`.
   */
  auto?: boolean;
}

interface Waiter {
  due: number;
  seq: number;
  promise: Promise<void>;
  resolve: () => void;
}

/** A macrotask: lets every promise continuation and I/O callback queued before it run. */
const macrotask = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

/**
 * A virtual clock for tests: pass it as `createAgent({clock})` (and `kvStore(ns, {clock})`), then model
 * backoff (`Retry-After`), the recovery sweep's backoff and quarantine, the outage breaker and run leases happen
 * in virtual time: `clock.now()` reads it, nothing waits in real time.
 */
export function testClock(options: TestClockOptions = {}): TestClock {
  knownKeys(options, "testClock options");
  let now = options.start ?? Date.UTC(2026, 0, 1);
  const auto = options.auto ?? true;
  const sleeps: number[] = [];
  let waiting: Waiter[] = [];
  let seq = 0;
  let stepping = false;

  /** Wakes every sleep due by `now`. */
  const wakeDue = () => {
    const due = waiting.filter((w) => w.due <= now);
    waiting = waiting.filter((w) => w.due > now);
    due.sort((a, b) => a.due - b.due || a.seq - b.seq).forEach((w) => w.resolve());
    return due.length;
  };
  /** Auto mode: once the current work settled, jump to the earliest sleep and wake it; repeat while any wait. */
  const autoStep = async () => {
    if (stepping) return;
    stepping = true;
    try {
      await macrotask();
      while (waiting.length > 0) {
        now = Math.max(now, Math.min(...waiting.map((w) => w.due)));
        wakeDue();
        await macrotask();
      }
    } finally {
      stepping = false;
    }
  };

  return {
    now: () => now,
    sleeps,
    get waiting() {
      return waiting.length;
    },
    sleep(ms: number): Promise<void> {
      const d = Number.isFinite(ms) && ms > 0 ? ms : 0;
      sleeps.push(d);
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      waiting.push({ due: now + d, seq: seq++, promise, resolve });
      if (auto) void autoStep();
      return promise;
    },
    cancel(sleep: Promise<void>): void {
      waiting = waiting.filter((w) => w.promise !== sleep);
    },
    async advance(ms: number): Promise<void> {
      // What already started runs first (up to its next sleep), so its sleeps count from the current time.
      await macrotask();
      const target = now + (Number.isFinite(ms) && ms > 0 ? ms : 0);
      for (;;) {
        const next = waiting.filter((w) => w.due <= target).sort((a, b) => a.due - b.due)[0];
        if (next === undefined) break;
        now = Math.max(now, next.due);
        wakeDue();
        await macrotask();
      }
      now = target;
      await macrotask();
    },
  };
}
