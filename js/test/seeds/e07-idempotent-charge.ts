// The seed's example at durable-execution.txt:247-258 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { defineTool } from 'steadfast';
import { z } from 'zod';
// ---- supplied ----
import { createAgent, memoryStore, PropagatingToolError } from 'steadfast';
import { mockModel } from 'steadfast/testing';

// The payment service: one charge per idempotency key. The first charge dies after taking effect (the process
// died before the result was recorded).
const charged = new Map<string, number>();
let calls = 0;
(globalThis as { payments?: unknown }).payments = {
  async charge(amount: number, opts: { idempotencyKey: string }) {
    calls++;
    if (!charged.has(opts.idempotencyKey)) charged.set(opts.idempotencyKey, amount);
    if (calls === 1) throw new PropagatingToolError('process died after the charge');
    return { id: `ch_${opts.idempotencyKey}` };
  },
};
// ---- example ----

declare const payments: { charge(amount: number, opts: { idempotencyKey: string }): Promise<{ id: string }> };

const chargeCard = defineTool({
  name: 'charge_card',
  description: 'Charge the customer',
  input: z.object({ amount: z.number() }),
  execute: async ({ amount }, { toolCallId }) =>
    payments.charge(amount, { idempotencyKey: toolCallId }), // a re-run cannot charge twice
});
// ---- end of example ----
const store = memoryStore();
const provider = mockModel([{ toolCalls: [{ name: 'charge_card', args: { amount: 42 } }] }, 'Charged 42.']);
const agent = createAgent({ provider, tools: [chargeCard], store });
await agent.send('Charge 42', { sessionId: 'order-9' }).catch(() => undefined);
const result = await agent.resume('order-9');
console.log('text' in result ? result.text : result.reason, calls, charged.size);
