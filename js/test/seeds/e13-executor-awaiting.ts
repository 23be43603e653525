// The seed's example at durable-execution.txt:394-405 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { AgentExecutor } from 'steadfast/executor';
import { SessionAwaitingApprovalError, memoryStore } from 'steadfast';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';

const agent = { instructions: 'You answer questions.' };
const provider = mockModel(['Yes.']);
// ---- example ----

const { checkpoints } = memoryStore();

try {
  await AgentExecutor.execute({ agent, input: 'Are you done?', provider, sessionId: 'chat-42', checkpointStore: checkpoints });
} catch (error) {
  if (error instanceof SessionAwaitingApprovalError) {
    console.log(`Waiting on approval ${error.approvalId} - resolve it with resumeAfterApproval() first.`);
  }
}
// ---- end of example ----
console.log((await checkpoints.load('chat-42'))?.status);
