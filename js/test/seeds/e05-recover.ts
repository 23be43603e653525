// The seed's example at durable-execution.txt:140-175 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { createAgent, defineTool, memoryStore, PropagatingToolError } from 'steadfast';
import { mockModel } from 'steadfast/testing';
import { z } from 'zod';
// ---- example ----

let charges = 0;
let attempts = 0;
const tools = [
  defineTool({ name: 'charge', description: 'Charge the card', input: z.object({}), execute: async () => `charged ${++charges}` }),
  // Stands in for the process dying mid-step: it fails the first time only.
  defineTool({
    name: 'ship',
    description: 'Ship the order',
    input: z.object({}),
    execute: async () => {
      if (++attempts === 1) throw new PropagatingToolError('process died');
      return 'shipped';
    },
  }),
];
const agent = createAgent({
  provider: mockModel([{ toolCalls: [{ name: 'charge' }] }, { toolCalls: [{ name: 'ship' }] }, 'Order charged and shipped.']),
  tools,
  store: memoryStore(),
});
await agent.send('Charge and ship order 7', { sessionId: 'order-7' }).catch(() => undefined); // interrupted after the charge

const recovery = agent.recover({
  intervalMs: 1_000,
  onRecovered: (run, result) => {
    console.log(`${run.sessionId}: ${result.text}`); // order-7: Order charged and shipped.
    void recovery.stop(); // a server keeps it running and stops it on shutdown (or passes `signal`)
  },
  onError: (error, run) => console.error('recovery failed', run?.sessionId, error),
});
await recovery.done; // resolves once the loop stopped
console.log(charges); // 1: the completed charge step did not run again
// ---- end of example ----
