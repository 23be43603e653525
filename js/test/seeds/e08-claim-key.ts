// The seed's example at durable-execution.txt:266-277 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { defineTool } from 'steadfast';
import { z } from 'zod';
// ---- supplied ----
import { createAgent, memoryStore } from 'steadfast';
import { mockModel } from 'steadfast/testing';

// The claims system: one claim per idempotency key.
const filed = new Map<string, string>();
(globalThis as { claims?: unknown }).claims = {
  async file(claim: { claimId: string }, opts: { idempotencyKey: string }) {
    if (!filed.has(opts.idempotencyKey)) filed.set(opts.idempotencyKey, claim.claimId);
    return { id: opts.idempotencyKey };
  },
};
// ---- example ----

declare const claims: { file(claim: { claimId: string }, opts: { idempotencyKey: string }): Promise<{ id: string }> };

const fileClaim = defineTool({
  name: 'file_claim',
  description: 'File an insurance claim',
  input: z.object({ claimId: z.string() }),
  needsApproval: true,
  execute: async ({ claimId }) => claims.file({ claimId }, { idempotencyKey: `claim:${claimId}` }), // a new call for the same claim cannot file twice
});
// ---- end of example ----
// The model files claim C-7 twice, as two calls (a new call id and a new approval each).
const provider = mockModel([
  { toolCalls: [{ name: 'file_claim', args: { claimId: 'C-7' } }] },
  { toolCalls: [{ name: 'file_claim', args: { claimId: 'C-7' } }] },
  'Claim C-7 filed.',
]);
const agent = createAgent({ provider, tools: [fileClaim], store: memoryStore() });
let run = await agent.send('File claim C-7', { sessionId: 'claim-7' });
while (run.finishReason === 'awaiting-approval') {
  run = await agent.approvals.resolve({ id: run.approvalId!, approved: true });
}
console.log(run.text, filed.size, [...filed.keys()].join(','));
