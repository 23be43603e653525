// The data types: every one the core sends or reads is generated from its Rust definition by ts-rs
// (src/generated/, scripts/gen-types.sh; cargo feature `ts`) and re-exported here, completed where the package
// adds to it (`events` on results, the wait helpers on a tool's `ToolContext`) or reads more leniently (`Input`).
import type { ApprovalRecord } from "./generated/ApprovalRecord.js";
import type { ApprovalStatus } from "./generated/ApprovalStatus.js";
import type { Checkpoint } from "./generated/Checkpoint.js";
import type { ChildRun } from "./generated/ChildRun.js";
import type { Comparison } from "./generated/Comparison.js";
import type { Delivery as GeneratedDelivery } from "./generated/Delivery.js";
import type { AgentDrift } from "./generated/AgentDrift.js";
import type { ErrorCode } from "./generated/ErrorCode.js";
import type { ErrorInfo } from "./generated/ErrorInfo.js";
import type { Event } from "./generated/Event.js";
import type { EventEnvelope } from "./generated/EventEnvelope.js";
import type { Fingerprint } from "./generated/Fingerprint.js";
import type { FinishReason } from "./generated/FinishReason.js";
import type { ForkOptions } from "./generated/ForkOptions.js";
import type { ForkResult as GeneratedForkResult } from "./generated/ForkResult.js";
import type { HistoryEntry } from "./generated/HistoryEntry.js";
import type { Message } from "./generated/Message.js";
import type { ModelChange } from "./generated/ModelChange.js";
import type { ModelRequest } from "./generated/ModelRequest.js";
import type { NothingToResume } from "./generated/NothingToResume.js";
import type { PendingRun as GeneratedPendingRun } from "./generated/PendingRun.js";
import type { PendingWait } from "./generated/PendingWait.js";
import type { ResolvedBy } from "./generated/ResolvedBy.js";
import type { WaitKind } from "./generated/WaitKind.js";
import type { WaitOutcome } from "./generated/WaitOutcome.js";
import type { WaitRequest } from "./generated/WaitRequest.js";
import type { WaitTool } from "./generated/WaitTool.js";
import type { ResultKind } from "./generated/ResultKind.js";
import type { RunResult as GeneratedRunResult } from "./generated/RunResult.js";
import type { RunKind } from "./generated/RunKind.js";
import type { RunStats } from "./generated/RunStats.js";
import type { RunStatus } from "./generated/RunStatus.js";
import type { SubagentTag } from "./generated/SubagentTag.js";
import type { SweepReport } from "./generated/SweepReport.js";
import type { ToolCall } from "./generated/ToolCall.js";
import type { ToolContext } from "./waits.js";
import type { ToolResult } from "./generated/ToolResult.js";
import type { ToolSpec } from "./generated/ToolSpec.js";
import type { TrajectoryStep } from "./generated/TrajectoryStep.js";
import type { Usage } from "./generated/Usage.js";
import type { BudgetCap } from "./generated/BudgetCap.js";
import type { OnExceeded } from "./generated/OnExceeded.js";
import type { Price } from "./generated/Price.js";
import type { StoragePrices } from "./generated/StoragePrices.js";
import type { StorageUsage } from "./generated/StorageUsage.js";
import type { MetricSample } from "./generated/MetricSample.js";
import type { BreakerOptions } from "./generated/BreakerOptions.js";
import type { TokenLimits } from "./generated/TokenLimits.js";
import type { JsonValue } from "./generated/serde_json/JsonValue.js";


/** Generated from the Rust types (src/generated/). */
export type {
  ApprovalRecord,
  ApprovalStatus,
  BreakerOptions,
  BudgetCap,
  Checkpoint,
  ChildRun,
  Comparison,
  AgentDrift,
  ErrorCode,
  ErrorInfo,
  Event,
  EventEnvelope,
  Fingerprint,
  FinishReason,
  ForkOptions,
  HistoryEntry,
  Message,
  MetricSample,
  ModelChange,
  ModelRequest,
  NothingToResume,
  OnExceeded,
  PendingWait,
  Price,
  StoragePrices,
  StorageUsage,
  ResolvedBy,
  ResultKind,
  RunKind,
  RunStats,
  RunStatus,
  SubagentTag,
  SweepReport,
  TokenLimits,
  ToolCall,
  ToolContext,
  ToolResult,
  ToolSpec,
  TrajectoryStep,
  Usage,
  WaitKind,
  WaitOutcome,
  WaitRequest,
  WaitTool,
};

/**
 * An unfinished run as `pending()` lists it (the generated `PendingRun`), plus the names the documents use:
 * `sessionId`, the id `agent.resume()` takes (a session turn's session id, else the run id), and
 * `checkpointId`, the run's own id (`<session>.turn-<n>` for a session's turn).
 */
export type PendingRun = GeneratedPendingRun & { sessionId: string; checkpointId: string };

/** Adds `sessionId` and `checkpointId` to a listed run. */
export function withSessionId(run: GeneratedPendingRun & { sessionId?: string }): PendingRun {
  const sessionId = run.sessionId ?? (run.kind === "session" && run.ownerId ? run.ownerId : run.runId);
  return { ...run, sessionId, checkpointId: run.runId };
}

/**
 * A created fork (the generated `ForkResult`), plus `sessionId`: the new run's id under the name `send`,
 * `resume` and the documents use (the same as `runId`).
 */
export type ForkResult = GeneratedForkResult & { sessionId: string };

/** Adds `sessionId` to a created fork. */
export function forkWithSessionId(fork: GeneratedForkResult): ForkResult {
  return { ...fork, sessionId: fork.runId };
}

/**
 * The part of an `AbortSignal` the package uses (a structural type, so the published types need no DOM or
 * Node library: a real `AbortSignal` fits).
 */
export interface AbortSignalLike {
  readonly aborted: boolean;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener?(type: "abort", listener: () => void): void;
}

/** Any JSON value (the generated `serde_json::Value`). */
export type Json = JsonValue;

/**
 * What `send` accepts: text (one user message) or system/user messages (the `input` of the send document,
 * read by the core's `parse_input`: stored history without tool calls may be re-sent too).
 */
export type Input = string | Array<{ role: "system" | "user"; content: string }>;

/** How an execution ended (the generated `RunResult`, plus `events` when `events: true` was asked for). */
export type RunResult = GeneratedRunResult & {
  /** The run's events, when `events: true` was asked for. */
  events?: RunEvent[];
};

/** A run event (`{v, seq, runId, at, type, …}`): the generated `EventEnvelope`. */
export type RunEvent = EventEnvelope;

/**
 * What `runOnce` did with a delivery (the generated `Delivery`, the shape `POST /deliveries/{id}` answers with,
 * plus `events` when `events: true` was asked for). `runId` is the run derived from the delivery id (`dlv-<id>`,
 * or `dlv-` and a hash when the id is not a valid run id). `acknowledged`: the run was already finished,
 * nothing ran (acknowledge the delivery); `awaiting-approval`: the run waits on a person, nothing ran (leave the
 * delivery); `ran`: the run was started (a new delivery) or resumed (an unfinished one).
 */
export type Delivery = GeneratedDelivery & {
  /** The run's events, when `events: true` was asked for. */
  events?: RunEvent[];
};
