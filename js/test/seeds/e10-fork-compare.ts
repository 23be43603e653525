// The seed's example at durable-execution.txt:319-334 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { createAgent, compareTrajectories, memoryStore } from 'steadfast';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';

const provider = mockModel(['Day 1: the old town. Day 2: the coast.', 'Day 1: the museums. Day 2: the aquarium.']);
// ---- example ----

const store = memoryStore();
const assistant = createAgent({ provider, store });
await assistant.send('Plan my trip', { sessionId: 'trip' });

const fork = await assistant.fork('trip', { fromStep: 1, patch: { appendInput: 'It will rain, plan for that.' } });
// fork.sessionId is 'trip.fork-1'; the 'trip' checkpoint and history are unchanged.
const result = await assistant.resume(fork.sessionId);

const original = await store.checkpoints?.load('trip');
const replayed = await store.checkpoints?.load(fork.sessionId);
if (original && replayed) {
  const { divergedAt, a, b, drift } = compareTrajectories(original, replayed);
  console.log(divergedAt, a.length, b.length, drift); // 2, then each run's steps and the tool-call diff
}
// ---- end of example ----
console.log(fork.sessionId, 'text' in result ? result.text : result.reason);
