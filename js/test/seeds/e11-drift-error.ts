// The seed's example at durable-execution.txt:359-366 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { createAgent, memoryStore } from 'steadfast';
import type { LLMProvider } from 'steadfast';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';

(globalThis as { provider?: unknown }).provider = mockModel(['unused']);
// ---- example ----

declare const provider: LLMProvider;

// After a deploy that renamed a tool or changed the model, refuse to continue old runs.
const agent = createAgent({ provider, store: memoryStore(), onAgentDrift: 'error' });
const result = await agent.resume('job-1');
// ---- end of example ----
console.log(JSON.stringify(result));
