// The seed's example at durable-execution.txt:296-308 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { getCheckpointHistory, memoryStore } from 'steadfast';
// ---- example ----

const { checkpoints } = memoryStore({ historyLimit: 20 }); // default 50, 0 keeps none
// new SqliteStore(path, { historyLimit }), new LocalStorageCheckpointStore(storage, { historyLimit })

// ---- supplied for the elided line: // ... after a run with sessionId 'chat-42' ...
import { createAgent } from 'steadfast';
import { mockModel } from 'steadfast/testing';

const provider = mockModel([{ toolCalls: [{ name: 'lookup', args: { q: 'tables' } }] }, 'Booked.']);
const lookup = { name: 'lookup', description: 'Look something up', execute: () => 'two tables free' };
await createAgent({ provider, tools: [lookup], store: checkpoints }).send('Book a table', { sessionId: 'chat-42' });
// ---- end of supplied ----
const history = await getCheckpointHistory(checkpoints, 'chat-42', { limit: 10 });
for (const { step, savedAt, status, checkpoint } of history ?? []) {
  console.log(step, status, savedAt, checkpoint.messages.length);
}

// Clear the checkpoint but keep its history (by default delete() clears both).
await checkpoints.delete('chat-42', { keepHistory: true });
// ---- end of example ----
