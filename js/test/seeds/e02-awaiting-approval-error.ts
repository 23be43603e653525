// The seed's example at durable-execution.txt:70-80 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { createAgent, memoryStore, SessionAwaitingApprovalError } from 'steadfast';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';

const provider = mockModel(['Yes, all done.']);
// ---- example ----

const agent = createAgent({ provider, store: memoryStore() });

try {
  await agent.send('Are you done?', { sessionId: 'chat-42' });
} catch (error) {
  if (error instanceof SessionAwaitingApprovalError) {
    console.log(`Waiting on approval ${error.approvalId} - resolve it with agent.approvals.resolve() first.`);
  }
}
// ---- end of example ----
// A new store has no paused run, so the send finished.
console.log((await agent.load('chat-42'))?.status);
