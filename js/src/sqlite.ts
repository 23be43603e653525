// `steadfast/sqlite` (Node): `new SqliteStore(path)`, a durable store in one SQLite database file through the
// `better-sqlite3` package (an optional peer dependency: install it to use this store). It is the journal store
// (the one KV mode uses, checked by the model-based checker) over one table `steadfast_kv(k, v)`: each write is
// one atomic statement, the file is in WAL mode, and other processes on the same file share its runs; their
// leases are confirmed by a read-back after a 200 ms settle window, so two processes resuming one run at once are
// told `STEADFAST_SESSION_BUSY`.
import { createRequire } from "node:module";
import { SteadfastError } from "./errors.js";
import { localStore, type LocalStoreOptions, type SyncBackend } from "./local_stores.js";
import { HANDLE, type Checkpoints, type Store, type StoreHandle } from "./stores.js";

/** The part of a better-sqlite3 statement the store uses. */
interface Statement {
  run(...params: unknown[]): unknown;
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  pluck(): Statement;
}

/** The part of a better-sqlite3 database the store uses. */
interface Database {
  prepare(sql: string): Statement;
  exec(sql: string): unknown;
  pragma(sql: string): unknown;
  close(): unknown;
}

type DatabaseClass = new (path: string) => Database;

function loadDriver(): DatabaseClass {
  try {
    const require = createRequire(import.meta.url);
    return require("better-sqlite3") as DatabaseClass;
  } catch (e) {
    throw new SteadfastError(
      "STEADFAST_CONFIG_INVALID",
      `SqliteStore needs the better-sqlite3 package (npm install better-sqlite3): ${(e as Error)?.message ?? String(e)}`,
    );
  }
}

/** A durable store in a SQLite database file (see the module's comment). Use it as `createAgent`'s `store`. */
export class SqliteStore implements Store {
  readonly kind = "sqlite" as const;
  readonly [HANDLE]: StoreHandle;
  readonly checkpoints: Checkpoints;
  readonly #db: Database;

  constructor(path: string, options: LocalStoreOptions = {}) {
    if (typeof path !== "string" || path === "") {
      throw new SteadfastError("STEADFAST_CONFIG_INVALID", "new SqliteStore(path) needs a database file path (a non-empty string)");
    }
    const Driver = loadDriver();
    const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
    if (dir !== "" && path !== ":memory:") createRequire(import.meta.url)("node:fs").mkdirSync(dir, { recursive: true });
    let db: Database;
    try {
      db = new Driver(path);
      db.pragma("journal_mode = WAL");
      db.pragma("busy_timeout = 5000");
      db.exec("CREATE TABLE IF NOT EXISTS steadfast_kv (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID");
    } catch (e) {
      throw new SteadfastError("STEADFAST_STORE_FAILED", `SqliteStore could not open ${JSON.stringify(path)}: ${(e as Error)?.message ?? String(e)}`);
    }
    this.#db = db;
    const get = db.prepare("SELECT v FROM steadfast_kv WHERE k = ?").pluck();
    const put = db.prepare("INSERT INTO steadfast_kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v");
    const del = db.prepare("DELETE FROM steadfast_kv WHERE k = ?");
    const all = db.prepare("SELECT k FROM steadfast_kv").pluck();
    // Keys with the prefix after the cursor, in SQLite's order (the cursor comparison is SQLite's too).
    const range = db.prepare("SELECT k FROM steadfast_kv WHERE k > ? AND k >= ? AND substr(k, 1, length(?)) = ? ORDER BY k LIMIT ?").pluck();
    const backend: SyncBackend = {
      get: (k) => (get.get(k) as string | undefined) ?? null,
      set: (k, v) => void put.run(k, v),
      delete: (k) => void del.run(k),
      keys: () => all.all() as string[],
      range: (prefix, after, limit) => {
        const keys = range.all(after, prefix, prefix, prefix, limit + 1) as string[];
        return { keys: keys.slice(0, limit), more: keys.length > limit };
      },
    };
    const store = localStore(backend, options, "SqliteStore", "sqlite");
    this[HANDLE] = store[HANDLE];
    this.checkpoints = store.checkpoints;
  }

  /** Closes the database file (the store cannot be used after). */
  close(): void {
    this.#db.close();
  }
}
