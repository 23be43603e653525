// The seed's example at durable-execution.txt:89-99 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { createAgent, memoryStore } from 'steadfast';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';

// The seed's agent has no tools, so the model can only answer: the run finishes without a pause.
const provider = mockModel(['I have no email tool, so I cannot email the team.']);
// ---- example ----

const agent = createAgent({ provider, store: memoryStore() });

const paused = await agent.send('Email the whole team', { sessionId: 'chat-42' });

if (paused.finishReason === 'awaiting-approval') {
  // ...a human decides, possibly days later, in another process (same store)...
  const result = await agent.approvals.resolve({ id: paused.approvalId!, approved: true });
  console.log(result.finishReason); // 'stop', or 'awaiting-approval' again for the next gated call
}
// ---- end of example ----
console.log(paused.finishReason);
