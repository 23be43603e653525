// The seed's example at durable-execution.txt:409-426 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { AgentExecutor, resumeAfterApproval } from 'steadfast/executor';
// ---- supplied ----
import { defineTool, memoryStore } from 'steadfast';
import { ToolRegistry } from 'steadfast/executor';
import { mockModel } from 'steadfast/testing';

const sent: string[] = [];
const agent = { instructions: 'You help the team.' };
const input = 'Email the whole team';
const provider = mockModel([{ toolCalls: [{ name: 'send_email', args: { to: 'team@example.com' } }] }, 'Emailed the team.']);
const toolRegistry = new ToolRegistry([
  defineTool({
    name: 'send_email',
    description: 'Send an email',
    inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
    needsApproval: true,
    execute: ({ to }: { to: string }) => { sent.push(to); return 'sent'; },
  }),
]);
const store = memoryStore();
const approvalStore = store;
const checkpointStore = store.checkpoints;
// ---- example ----

const paused = await AgentExecutor.execute({
  agent, input, provider, toolRegistry, approvalStore, sessionId: 'chat-42', checkpointStore,
});

if (paused.finishReason === 'awaiting-approval') {
  // ...a human decides, possibly days later, in another process...
  const result = await resumeAfterApproval(
    { id: paused.approvalId!, approved: true },
    approvalStore,
    toolRegistry,
    provider,
    {},
    checkpointStore, // clears the 'awaiting-approval' mark and keeps checkpointing
  );
  console.log(result.finishReason); // 'stop', or 'awaiting-approval' again for the next gated call
}
// ---- end of example ----
console.log(sent.join(','));
