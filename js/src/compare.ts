// `compareTrajectories(a, b)` without an agent: two runs as values (checkpoints or transcripts), compared by the
// core (src/core/trajectory.rs).
import { compareRuns } from "./low_level.js";
import { sync } from "./errors.js";
import type { Checkpoint, Comparison, Message } from "./types.js";

/**
 * Compares two runs step by step, each a checkpoint (`agent.load(id)`, a history entry's `checkpoint`; its
 * recorded finish reason is used) or a transcript (an array of messages; its finish reason is derived):
 * `{a, b, divergedAt, drift}`, the same answer as `agent.compareTrajectories(idA, idB)` for two stored runs.
 * Anything else throws `STEADFAST_INVALID_INPUT`.
 */
export function compareTrajectories(a: Checkpoint | Message[], b: Checkpoint | Message[]): Comparison {
  return JSON.parse(sync(() => compareRuns(JSON.stringify(a ?? null), JSON.stringify(b ?? null)))) as Comparison;
}
