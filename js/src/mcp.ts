// MCP servers as tools (the `steadfast/mcp` entry point): `mcpTools({ url, headers })` lists a server's tools
// over the Streamable HTTP transport and returns them as steadfast `Tool`s, each call a `tools/call` with our
// idempotency key in `_meta`. It uses the official `@modelcontextprotocol/sdk` client, an optional peer
// dependency loaded when `mcpTools` is first called: the main entry point never needs it.
//
// What the core sees is ordinary JS tools: the server's JSON Schema is the tool's `inputSchema` (validated by
// the core before a call, and part of the agent's fingerprint: a changed server is agent drift), a result is
// text or JSON, an `isError` result or a JSON-RPC error is an error result the model reads, and a failure to
// reach the server is a `PropagatedToolError` (the run rejects with STEADFAST_TOOL_PROPAGATED and stays
// resumable). The rules of which failure is which are `failure` below.
import { PropagatedToolError, SteadfastError } from "./errors.js";
import type { Tool } from "./tools.js";
import type { Json, ToolContext } from "./types.js";

/** Options of `mcpTools`. */
export interface McpToolsOptions {
  /** The server's Streamable HTTP endpoint (`http:` or `https:`), e.g. `"https://mcp.example.com/mcp"`. */
  url: string;
  /** HTTP headers sent with every request (e.g. `{ Authorization: "Bearer …" }`): names to string values. */
  headers?: Record<string, string>;
  /** Put before each tool's name (`"github_"` makes `create_issue` the agent's `github_create_issue`). */
  prefix?: string;
  /**
   * Which of the server's tools to offer (by the server's names, before `prefix`): a list (a name the server
   * does not have is refused) or a predicate. Default: all of them.
   */
  tools?: string[] | ((name: string) => boolean);
  /** How long one request may take before it fails (retryable), in ms (default 60,000). */
  timeoutMs?: number;
}

/**
 * The tools of an MCP server (an array: spread it into `createAgent({ tools })`), with the connection they share.
 */
export type McpTools = Tool[] & {
  /**
   * Ends the connection: the server's session is ended (an HTTP DELETE) and the client closed. Idempotent; a
   * later call of one of the tools opens a new connection.
   */
  close(): Promise<void>;
};

const OPTION_KEYS = ["url", "headers", "prefix", "tools", "timeoutMs"];
const DEFAULT_TIMEOUT_MS = 60_000;
/** More pages than this in `tools/list` is a server that never stops answering with a cursor. */
const MAX_PAGES = 1000;

/** The SDK's modules, loaded once on first use. */
type Sdk = {
  Client: typeof import("@modelcontextprotocol/sdk/client/index.js").Client;
  StreamableHTTPClientTransport: typeof import("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPClientTransport;
  StreamableHTTPError: typeof import("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPError;
  McpError: typeof import("@modelcontextprotocol/sdk/types.js").McpError;
};
type Client = InstanceType<Sdk["Client"]>;
type ListedTool = Awaited<ReturnType<Client["listTools"]>>["tools"][number];
type CallResult = { content?: unknown; structuredContent?: unknown; isError?: unknown };

let sdk: Promise<Sdk> | undefined;

function loadSdk(): Promise<Sdk> {
  sdk ??= Promise.all([
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/client/streamableHttp.js"),
    import("@modelcontextprotocol/sdk/types.js"),
  ]).then(
    ([client, http, types]) => ({
      Client: client.Client,
      StreamableHTTPClientTransport: http.StreamableHTTPClientTransport,
      StreamableHTTPError: http.StreamableHTTPError,
      McpError: types.McpError,
    }),
    (e: unknown) => {
      sdk = undefined;
      throw new SteadfastError(
        "STEADFAST_CONFIG_INVALID",
        `mcpTools needs the MCP SDK, an optional peer dependency: npm install @modelcontextprotocol/sdk (${errorText(e)})`,
        { cause: e },
      );
    },
  );
  return sdk;
}

let codeGen: boolean | undefined;

/**
 * Whether this runtime compiles code from strings. The SDK checks a tool's structured output against its
 * outputSchema with ajv, which compiles each schema to a function: where that is disallowed (Cloudflare Workers)
 * listing a server with an output schema would fail, so there the output is taken unchecked.
 */
function codeGeneration(): boolean {
  if (codeGen === undefined) {
    try {
      new Function("");
      codeGen = true;
    } catch {
      codeGen = false;
    }
  }
  return codeGen;
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function refuse(message: string): never {
  throw new SteadfastError("STEADFAST_CONFIG_INVALID", `mcpTools: ${message}`);
}

/** The checked options: a wrong one is refused with STEADFAST_CONFIG_INVALID naming it. */
function checked(options: McpToolsOptions) {
  if (options === null || typeof options !== "object" || Array.isArray(options)) {
    refuse("needs an options object: mcpTools({ url, headers? })");
  }
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.includes(key)) refuse(`unknown option '${key}' (the options are ${OPTION_KEYS.join(", ")})`);
  }
  const given: unknown = options.url;
  let url: URL;
  try {
    if (typeof given !== "string" && !(given instanceof URL)) throw new TypeError("not a string");
    url = new URL(String(given));
  } catch {
    refuse(`url must be an http: or https: URL string, not ${describe(given)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    refuse(`url must be an http: or https: URL, not ${url.protocol} (${where(url)})`);
  }
  const headers: Record<string, string> = {};
  if (options.headers !== undefined) {
    const h: unknown = options.headers;
    if (h === null || typeof h !== "object" || Array.isArray(h) || Object.getPrototypeOf(h) !== Object.prototype) {
      refuse(`headers must be a plain object of header names to string values, not ${describe(h)}`);
    }
    for (const [name, value] of Object.entries(h as Record<string, unknown>)) {
      if (typeof value !== "string") refuse(`header '${name}' must be a string, not ${describe(value)}`);
      try {
        new Headers([[name, value]]);
      } catch {
        refuse(`header '${name}' is not a valid HTTP header (name or value)`);
      }
      headers[name] = value;
    }
  }
  const prefix: unknown = options.prefix ?? "";
  if (typeof prefix !== "string") refuse(`prefix must be a string, not ${describe(prefix)}`);
  const filter: unknown = options.tools;
  if (filter !== undefined && typeof filter !== "function") {
    if (!Array.isArray(filter) || !filter.every((n) => typeof n === "string")) {
      refuse(`tools must be an array of tool names or a function (name) => boolean, not ${describe(filter)}`);
    }
  }
  const timeoutMs: unknown = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (typeof timeoutMs !== "number" || !Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    refuse(`timeoutMs must be a positive number of milliseconds, not ${describe(timeoutMs)}`);
  }
  return { url, headers, prefix, filter: filter as McpToolsOptions["tools"], timeoutMs };
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (typeof v === "object") return "an object";
  if (typeof v === "function") return "a function";
  return `${typeof v} ${String(v)}`;
}

/** The URL as messages show it: no credentials, no query (either may hold a secret). */
function where(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname}`;
}

/**
 * What a failed request is:
 * - `"unreachable"`: the server could not be reached, or failed, or lost the connection, or did not answer in
 *   time (a network error, HTTP 5xx, 408, 429, a closed connection, a timeout). The same request may work
 *   later; the request may or may not have run (hence the idempotency key).
 * - `"session"`: HTTP 404 on the connection `conn` (its session: the server forgot it, e.g. it restarted): the
 *   request did not run; a new connection can send it again.
 * - `"refused"`: the server's HTTP layer refused us (401, 403, another 4xx, an answer that is not MCP): a person
 *   must look (credentials, url) before it can work.
 * - `"answered"`: the server answered with a JSON-RPC error, or the answer is not a tool result: the model
 *   reads it.
 */
function failure(
  e: unknown,
  s: Sdk,
  timeoutMs: number,
  conn?: Connection,
): "unreachable" | "session" | "refused" | "answered" {
  if (e instanceof Unreachable) return "unreachable";
  if (e instanceof s.StreamableHTTPError) {
    const status = e.code ?? -1;
    if (status >= 500 || status === 408 || status === 429) return "unreachable";
    if (status === 404 && conn !== undefined) return "session";
    return "refused";
  }
  if (e instanceof s.McpError) {
    // The SDK's own errors for a lost or silent server: ConnectionClosed (-32000) when the connection closed
    // under the request, RequestTimeout (-32001) with the timeout as its data. A server may answer those codes
    // too (the JSON-RPC range for server errors): then the model reads it.
    const closed = e.code === -32000 && conn?.closed === true;
    const timedOut = e.code === -32001 && (e.data as { timeout?: unknown } | undefined)?.timeout === timeoutMs;
    return closed || timedOut ? "unreachable" : "answered";
  }
  // The SDK's check of an answer's shape (zod) failed: the server answered something that is not a tool result.
  if ((e as { name?: unknown } | null)?.name === "ZodError") return "answered";
  // fetch's TypeError ("fetch failed": refused, reset, DNS), an aborted stream, anything else we cannot tell.
  return "unreachable";
}

/**
 * The HTTP status of a failure the server answered with one (`{status}`: the core decides from it whether the run
 * may be retried: 5xx, 408, 429 yes, another 4xx no); `{}` for the rest (unreachable, timed out, cut off:
 * retryable).
 */
function statusOf(e: unknown, s: Sdk): { status?: number } {
  const status = e instanceof s.StreamableHTTPError ? e.code : undefined;
  return typeof status === "number" && status >= 100 ? { status } : {};
}

/** A failure to open a connection, classified as unreachable where the connection was known (see `open`). */
class Unreachable extends Error {
  constructor(message: string, cause: unknown) {
    super(message, { cause });
    this.name = "Unreachable";
  }
}

/** A connection: the client, its transport (for ending the server's session), the tools it listed, closed yet. */
interface Connection {
  client: Client;
  transport: InstanceType<Sdk["StreamableHTTPClientTransport"]>;
  tools: ListedTool[];
  closed: boolean;
}

/**
 * Connects to the MCP server at `url` (the Streamable HTTP transport), lists its tools (following
 * `nextCursor`) and returns them as steadfast tools: `name` (`prefix` + the server's name), `description`,
 * `inputSchema` (the server's JSON Schema, as it is; it enters the agent's fingerprint, so a server whose tools
 * changed is agent drift on resume). Each call is a `tools/call` with
 * `_meta: { idempotencyKey, "steadfast/runId", "steadfast/toolCallId" }` (`ctx.idempotencyKey`: unchanged when
 * the same call runs again on resume, so the server can do its effect once) and its result becomes:
 * - `structuredContent` when the server gives one (JSON), else the text of `content` (text parts joined by
 *   newlines; an embedded resource's text; other parts as a bracketed note such as `[image image/png, 16 bytes]`);
 * - `isError: true`: an error result the model reads, `"McpToolError: <the text>"`;
 * - a JSON-RPC error (or an answer that is not a tool result): an error result the model reads,
 *   `"McpError: MCP error <code>: <message>"`;
 * - a server that cannot be reached (refused, reset, HTTP 5xx/408/429, a timeout, a stream cut mid-answer):
 *   a `PropagatedToolError` with `retryable: true` — the run rejects with STEADFAST_TOOL_PROPAGATED and stays
 *   resumable, and the recovery sweep retries it (the call runs again with the same idempotency key);
 * - an HTTP refusal (401, 403, other 4xx): a `PropagatedToolError` with `retryable: false` (the sweep leaves the
 *   run; fix the credentials and `resume` it).
 *
 * The connection is opened here and shared by the tools; after a failure it is dropped and the next call opens
 * a new one (a server that restarted and forgot the session is reconnected to at once, and the call sent
 * again: it had not run). `close()` ends it. Rejects with STEADFAST_CONFIG_INVALID for a wrong option (naming
 * it), a `tools` name the server does not have, a tool that can only run as an MCP task, or a server whose
 * tools cannot be listed (`retryable: true` when it could not be reached). Two tools with one name (from two
 * servers, or a server and your own) are refused by `createAgent` (STEADFAST_CONFIG_INVALID): use `prefix`.
 *
 * The tools are plain objects: `tools.map((t) => ({ ...t, needsApproval: true }))` asks a person before each
 * call. On Cloudflare Workers, call `mcpTools` in the request (or Durable Object) that uses the tools and
 * `close()` them at its end (a Worker cannot use one request's connection in another); there, a tool's
 * structured output is not checked against its `outputSchema` (the SDK's checker generates code, which Workers
 * disallow).
 */
export async function mcpTools(options: McpToolsOptions): Promise<McpTools> {
  const { url, headers, prefix, filter, timeoutMs } = checked(options);
  const s = await loadSdk();
  const site = where(url);

  const open = async (): Promise<Connection> => {
    const client = new s.Client(
      { name: "steadfast", version: "0.1.0" },
      codeGeneration() ? {} : { jsonSchemaValidator: { getValidator: () => (data: unknown) => ({ valid: true, data, errorMessage: undefined }) as never } },
    );
    const transport = new s.StreamableHTTPClientTransport(url, { requestInit: { headers } });
    const conn: Connection = { client, transport, tools: [], closed: false };
    client.onclose = () => {
      conn.closed = true;
    };
    // A response stream cut mid-answer is only reported here (the request would wait for its timeout): drop the
    // connection, which fails the requests in flight with ConnectionClosed (unreachable, retryable).
    client.onerror = (e) => {
      if (/SSE stream disconnected|Failed to reconnect SSE stream|Maximum reconnection attempts/.test(errorText(e))) {
        drop(conn);
      }
    };
    try {
      await client.connect(transport, { timeout: timeoutMs });
      // Listed on every connection: the SDK checks a tool's structured output against the outputSchema it listed.
      let cursor: string | undefined;
      for (let page = 0; ; page++) {
        if (page === MAX_PAGES) throw new Error(`tools/list gave more than ${MAX_PAGES} pages`);
        const listed = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: timeoutMs });
        conn.tools.push(...listed.tools);
        if (listed.nextCursor === undefined) break;
        if (listed.nextCursor === cursor) throw new Error(`tools/list repeated the cursor ${JSON.stringify(cursor)}`);
        cursor = listed.nextCursor;
      }
    } catch (e) {
      // Ignored: the connection failed already; closing it is only tidying up.
      client.close().catch(() => undefined);
      // Classified while the connection is known (a closed connection, our timeout); a 404 here is no session
      // to forget but a wrong url (left to `failure` without a connection: refused).
      throw failure(e, s, timeoutMs, conn) === "unreachable" ? new Unreachable(errorText(e), e) : e;
    }
    return conn;
  };

  // The connection the tools share: `live` while opening or open, `current` once open.
  let live: Promise<Connection> | undefined;
  let current: Connection | undefined;
  const drop = (conn: Connection) => {
    if (current === conn) {
      live = undefined;
      current = undefined;
    }
    // Ignored: a connection being dropped may be broken already; closing it only releases it.
    conn.client.close().catch(() => undefined);
  };
  const connection = (): Promise<Connection> => {
    if (live === undefined) {
      const opening = open();
      live = opening;
      opening.then(
        (c) => {
          if (live === opening) current = c;
        },
        () => {
          if (live === opening) live = undefined;
        },
      );
    }
    return live;
  };

  let first: Connection;
  try {
    first = await connection();
  } catch (e) {
    const kind = failure(e, s, timeoutMs);
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", `mcpTools: cannot list the tools of the MCP server at ${site}: ${errorText(e)}`, {
      retryable: kind === "unreachable",
      cause: e,
    });
  }

  let offered = first.tools;
  if (Array.isArray(filter)) {
    const missing = filter.filter((n) => !offered.some((t) => t.name === n));
    if (missing.length > 0) {
      drop(first);
      refuse(`the MCP server at ${site} has no tool ${missing.map((n) => `'${n}'`).join(", ")} (it has ${offered.map((t) => `'${t.name}'`).join(", ") || "none"})`);
    }
    offered = offered.filter((t) => filter.includes(t.name));
  } else if (typeof filter === "function") {
    offered = offered.filter((t) => filter(t.name));
  }
  const taskOnly = offered.find((t) => (t as { execution?: { taskSupport?: unknown } }).execution?.taskSupport === "required");
  if (taskOnly !== undefined) {
    drop(first);
    refuse(`the MCP server at ${site}'s tool '${taskOnly.name}' runs only as an MCP task, which steadfast does not call: leave it out with the \`tools\` option`);
  }

  /** One `tools/call`: a new connection first after a failure, and once more if the server forgot the session. */
  const callTool = async (name: string, args: Json, ctx: ToolContext): Promise<unknown> => {
    const params = {
      name,
      arguments: args as Record<string, unknown>,
      _meta: { idempotencyKey: ctx.idempotencyKey, "steadfast/runId": ctx.runId, "steadfast/toolCallId": ctx.toolCallId },
    };
    for (let attempt = 0; ; attempt++) {
      let conn: Connection;
      try {
        conn = await connection();
      } catch (e) {
        throw new PropagatedToolError(`the MCP server at ${site} cannot be reached: ${errorText(e)}`, {
          ...statusOf(e, s),
          cause: e,
        });
      }
      let result: CallResult;
      try {
        result = (await conn.client.callTool(params, undefined, { timeout: timeoutMs })) as CallResult;
      } catch (e) {
        const kind = failure(e, s, timeoutMs, conn);
        if (kind === "answered") throw e;
        drop(conn);
        if (kind === "session" && attempt === 0) continue;
        throw new PropagatedToolError(
          kind === "refused"
            ? `the MCP server at ${site} refused the call of '${name}': ${errorText(e)}`
            : `the MCP server at ${site} failed during the call of '${name}': ${errorText(e)}`,
          // A forgotten session a second time: the server restarted again; a later attempt may get through.
          { ...(kind === "session" ? {} : statusOf(e, s)), cause: e },
        );
      }
      return toolValue(result);
    }
  };

  const tools = offered.map(
    (t): Tool => ({
      name: prefix + t.name,
      description: t.description ?? t.title ?? "",
      inputSchema: t.inputSchema as Json,
      execute: (args: Json, ctx: ToolContext) => callTool(t.name, args, ctx),
    }),
  ) as McpTools;
  Object.defineProperty(tools, "close", {
    enumerable: false,
    value: async (): Promise<void> => {
      const closing = live;
      live = undefined;
      current = undefined;
      const conn = await closing?.catch(() => undefined);
      // Ignored: ending a session (HTTP DELETE; a server may refuse it, or have dropped it already) and closing
      // the client only release what is no longer needed.
      await conn?.transport.terminateSession().catch(() => undefined);
      await conn?.client.close().catch(() => undefined);
    },
  });
  return tools;
}

/** A tool error result the model reads as `"McpToolError: <message>"`. */
class McpToolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "McpToolError";
  }
}

/** What the model reads of a `tools/call` result (see `mcpTools`). */
function toolValue(result: CallResult): unknown {
  const text = contentText(result.content);
  if (result.isError === true) {
    throw new McpToolError(text || (result.structuredContent !== undefined ? JSON.stringify(result.structuredContent) : "the tool failed"));
  }
  return result.structuredContent !== undefined ? result.structuredContent : text;
}

/** The content parts as text: text as it is, an embedded resource's text, a bracketed note for the rest. */
function contentText(content: unknown): string {
  if (!Array.isArray(content)) return "";
  return content
    .map((part: Record<string, any>) => {
      switch (part?.type) {
        case "text":
          return String(part.text);
        case "image":
        case "audio":
          return `[${part.type} ${part.mimeType}, ${base64Bytes(String(part.data ?? ""))} bytes]`;
        case "resource_link":
          return `[resource ${part.uri}${part.name ? ` (${part.name})` : ""}]`;
        case "resource":
          return typeof part.resource?.text === "string"
            ? part.resource.text
            : `[resource ${part.resource?.uri}${part.resource?.mimeType ? `, ${part.resource.mimeType}` : ""}]`;
        default:
          return `[${String(part?.type)} content]`;
      }
    })
    .join("\n");
}

function base64Bytes(data: string): number {
  const padding = data.endsWith("==") ? 2 : data.endsWith("=") ? 1 : 0;
  return Math.floor((data.length * 3) / 4) - padding;
}
