// An in-memory stand-in for a Workers KVNamespace: get (single and bulk, resolving to a Map), put with
// metadata, delete, list by prefix with a cursor.
export class FakeKv {
  #map = new Map();
  bulkGets = 0;

  keys() {
    return [...this.#map.keys()].sort();
  }

  async get(key) {
    if (Array.isArray(key)) {
      this.bulkGets += 1;
      return new Map(key.map((k) => [k, this.#map.get(k)?.value ?? null]));
    }
    return this.#map.get(key)?.value ?? null;
  }

  async put(key, value, options = {}) {
    this.#map.set(key, { value, metadata: options.metadata ?? null });
  }

  async delete(key) {
    this.#map.delete(key);
  }

  async list({ prefix = "", cursor, limit = 1000 } = {}) {
    const all = this.keys().filter((k) => k.startsWith(prefix));
    const start = cursor ? Number(cursor) : 0;
    const page = all.slice(start, start + limit);
    const done = start + limit >= all.length;
    return {
      keys: page.map((name) => ({ name, metadata: this.#map.get(name).metadata ?? undefined })),
      list_complete: done,
      ...(done ? {} : { cursor: String(start + limit) }),
    };
  }
}
