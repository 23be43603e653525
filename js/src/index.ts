// steadfast: durable, self-healing LLM agent runs. The typed facade over the wasm core, one module per concern;
// this file is the package's public surface and only re-exports (the packaging test checks the list).
//
//   types.ts       the data types: generated from the Rust definitions by ts-rs (src/generated/), completed
//   model.ts       the model interface a JS provider implements
//   tools.ts       tools (`defineTool`)
//   waits.ts       a tool's waits (`ctx.waitForEvent`, `askQuestion`, `sleepUntil`, `sleepFor`) and `agent.events`
//   hooks.ts       hooks (`progressGuard`, `outputCheck`, custom `defineHook`)
//   stores.ts      `memoryStore`, `kvStore`, `durableObjectStore`
//   mock_model.ts  the scripted `mockModel`
//   ai_sdk.ts      `aiSdkModel`: any AI SDK language model (V2, V3) as the model
//   recovery.ts    sweep options and the `recover` loop
//   session.ts     `agent.session({ id })`
//   schedules.ts   `agent.fireSchedule` and the `startSchedules` loop
//   clock.ts       the injectable clock and `testClock`
//   compare.ts     the standalone `compareTrajectories`
//   errors.ts      `SteadfastError` and friends
//   agent.ts       `createAgent`
//   low_level.ts   the only importer of the wasm-bindgen output
export type {
  AbortSignalLike,
  ApprovalRecord,
  ApprovalStatus,
  BreakerOptions,
  BudgetCap,
  Checkpoint,
  ChildRun,
  Comparison,
  Delivery,
  AgentDrift,
  ErrorCode,
  ErrorInfo,
  Event,
  EventEnvelope,
  Fingerprint,
  FinishReason,
  ForkOptions,
  ForkResult,
  HistoryEntry,
  Input,
  Json,
  Message,
  MetricSample,
  ModelChange,
  ModelRequest,
  NothingToResume,
  OnExceeded,
  PendingRun,
  PendingWait,
  Price,
  StoragePrices,
  StorageUsage,
  ResolvedBy,
  ResultKind,
  RunEvent,
  RunKind,
  RunResult,
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
} from "./types.js";
export type { Model, ModelResponse, ModelStream } from "./model.js";
export { defineTool, type Tool } from "./tools.js";
export type {
  DeliverOptions,
  EventDelivery,
  Events,
  ToolWait,
  WaitForEventOptions,
  WaitHelpers,
  WaitTime,
} from "./waits.js";
export {
  defineHook,
  outputCheck,
  progressGuard,
  type AfterToolAnswer,
  type BeforeToolAnswer,
  type CustomHook,
  type Hook,
  type HookContext,
  type OutputCheckFn,
  type OutputCheckHook,
  type ProgressGuardHook,
  type ProgressGuardOptions,
} from "./hooks.js";
export {
  durableObjectStore,
  getCheckpointHistory,
  kvStore,
  memoryStore,
  type Checkpoints,
  type DurableObjectStorageLike,
  type DurableObjectStoreOptions,
  type KVNamespaceLike,
  type KvStoreOptions,
  type MemoryStoreOptions,
  type Store,
} from "./stores.js";
export { fileStore, LocalStorageCheckpointStore, type LocalStoreOptions, type StorageLike } from "./local_stores.js";
export {
  aiSdkModel,
  type AiSdkCallOptions,
  type AiSdkCallSettings,
  type AiSdkLanguageModel,
  type AiSdkModelOptions,
} from "./ai_sdk.js";
export { mockModel, ProviderHttpError, type MockModel, type MockModelOptions, type MockTurn } from "./mock_model.js";
export type { RecoverOptions, Recovery, RecoveryRun, SweepOptions } from "./recovery.js";
export type {
  Session,
  SessionFork,
  SessionForkOptions,
  SessionResumeOptions,
  SessionSendOptions,
  SessionTurn,
} from "./session.js";
export type {
  FireScheduleOptions,
  MissedFires,
  Schedule,
  ScheduleInput,
  ScheduleOutcome,
  Schedules,
  StartSchedulesOptions,
} from "./schedules.js";
export { testClock, type Clock, type TestClock, type TestClockOptions } from "./clock.js";
export { compareTrajectories } from "./compare.js";
export type { OtlpEndpoint, ReadableSpanLike, SpanExporterLike, TracingOptions } from "./tracing.js";
export { PropagatedToolError, PropagatingToolError, SessionAwaitingApprovalError, SteadfastError } from "./errors.js";
export {
  createAgent,
  type Agent,
  type AgentOptions,
  type SubagentOptions,
  type HandoffOptions,
  type Decision,
  type LLMProvider,
  type ResumeOptions,
  type RunOnceOptions,
  type SendOptions,
} from "./agent.js";
