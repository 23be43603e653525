// The seed's example at durable-execution.txt:381-390 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { AgentExecutor } from 'steadfast/executor';
import { LocalStorageCheckpointStore } from 'steadfast/utils';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';
import type { StorageLike } from 'steadfast/utils';

/** A Web Storage in memory (Node has no localStorage). */
class MemoryStorage implements StorageLike {
  readonly #items = new Map<string, string>();
  get length() { return this.#items.size; }
  key(i: number) { return [...this.#items.keys()][i] ?? null; }
  getItem(k: string) { return this.#items.get(k) ?? null; }
  setItem(k: string, v: string) { this.#items.set(k, String(v)); }
  removeItem(k: string) { this.#items.delete(k); }
}

const storage = new MemoryStorage();
const agent = { instructions: 'You book restaurant tables.' };
const provider = mockModel(['Booked a table for 2 at 19:00.', 'Changed it to 3 people.']);
// ---- example ----

const checkpoints = new LocalStorageCheckpointStore(storage);

// First message of a conversation.
await AgentExecutor.execute({ agent, input: 'Book a table for 2 tonight', provider, sessionId: 'chat-42', checkpointStore: checkpoints });

// Later - same process or another one - the next message of the same conversation.
await AgentExecutor.execute({ agent, input: 'Make it 3 people', provider, sessionId: 'chat-42', checkpointStore: checkpoints });
// ---- end of example ----
const saved = await checkpoints.load('chat-42');
console.log(saved?.status, saved?.messages.length, storage.length > 0);
