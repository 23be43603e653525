// Recovery: the sweep's options, and the `recover` loop of sweep ticks for long-lived hosts.
import type { SweepOptions as GeneratedSweepOptions } from "./generated/SweepOptions.js";
import type { SweepReport } from "./types.js";

/** One recovery sweep tick's settings (every field optional: the generated `SweepOptions` has defaults). */
export type SweepOptions = Partial<GeneratedSweepOptions>;

/** `recover` options: the sweep's settings, the loop's period and its callbacks. */
export interface RecoverOptions extends SweepOptions {
  /** Time between ticks in ms (default: `intervalMs`, else 30 s). */
  everyMs?: number;
  /** A run the sweep finished (for a diagnosis fork: the original's id). */
  onRecovered?: (runId: string) => void;
  /** A run reached the attempt cap (reported once). */
  onQuarantined?: (runId: string) => void;
  /** The provider-outage breaker opened (`true`) or closed (`false`). */
  onOutage?: (active: boolean) => void;
  /** A tick failed, or a callback threw (the loop goes on). */
  onError?: (error: unknown) => void;
  /** Aborting it stops the loop. */
  signal?: AbortSignal;
}

/** A running recovery loop. */
export interface Recovery {
  /** Stops the loop; resolves once the tick in flight (if any) settled. */
  stop(): Promise<void>;
  /** Resolves once the loop stopped. */
  done: Promise<void>;
}

/** The `recover` loop: sweep ticks until stopped, reporting what each tick did through the callbacks. */
export function recoveryLoop(sweep: (o: SweepOptions) => Promise<SweepReport>, opts: RecoverOptions): Recovery {
  const { everyMs, onRecovered, onQuarantined, onOutage, onError, signal, ...sweepOptions } = opts;
  const every = everyMs ?? sweepOptions.intervalMs ?? 30_000;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let wake: (() => void) | undefined;
  let outage = false;
  const report = (e: unknown) => {
    try {
      onError?.(e);
    } catch {
      // An error handler that throws is ignored: the loop goes on.
    }
  };
  const safely = <A extends unknown[]>(f: ((...a: A) => void) | undefined, ...args: A) => {
    try {
      f?.(...args);
    } catch (e) {
      report(e);
    }
  };
  const halt = () => {
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    wake?.();
  };
  signal?.addEventListener("abort", halt, { once: true });
  const done = (async () => {
    while (!stopped && !signal?.aborted) {
      try {
        const r = await sweep(sweepOptions);
        for (const id of r.recovered) safely(onRecovered, id);
        for (const id of r.quarantined) safely(onQuarantined, id);
        if (r.outage !== outage) {
          outage = r.outage;
          safely(onOutage, outage);
        }
      } catch (e) {
        report(e);
      }
      if (stopped || signal?.aborted) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, every);
      });
    }
  })();
  return {
    stop: async () => {
      halt();
      await done;
    },
    done,
  };
}
