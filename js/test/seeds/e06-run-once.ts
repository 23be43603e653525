// The seed's example at durable-execution.txt:223-239 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { createAgent, memoryStore } from 'steadfast';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';

const provider = mockModel(['Order summarised.']);
// ---- example ----

const store = memoryStore();
const agent = createAgent({ provider, store });

export async function handleDelivery(deliveryId: string, payload: string) {
  const sessionId = `job-${deliveryId}`;
  const checkpoint = await store.checkpoints?.load(sessionId);

  if (checkpoint?.status === 'finished') return; // already done: acknowledge the redelivery
  if (checkpoint?.status === 'awaiting-approval') return; // paused: resolve it with agent.approvals.resolve()
  if (checkpoint) {
    await agent.resume(sessionId); // 'in-progress': a crash left it half done; finish it
    return;
  }
  await agent.send(payload, { sessionId });
}
// ---- end of example ----
await handleDelivery('d-1', 'Summarise order 7');
await handleDelivery('d-1', 'Summarise order 7'); // the redelivery: acknowledged, no model call
console.log(provider.calls.length);
