// The seed's example at durable-execution.txt:107-120 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { createAgent, fileStore } from 'steadfast';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';

// e04-pending-file-store-before.ts ran first in another process over the same directory: it crashed mid-model-call in run
// 'crashed-run' (process.exit) and left run 'email-run' waiting on an approval.
const provider = mockModel(['Booked.']);
// ---- example ----

const agent = createAgent({ provider, store: fileStore('./.lousho') });

// At startup, before taking traffic:
for (const run of await agent.pending()) {
  if (run.status === 'in-progress') {
    // Finishes the turn without re-running recorded steps (tools that were mid-call run again: make them idempotent).
    await agent.resume(run.sessionId);
  } else {
    // 'awaiting-approval': hand run.approvalId to a human, or decide it here.
    console.log(`session ${run.sessionId} waits on approval ${run.approvalId}`);
  }
}
// ---- end of example ----
console.log((await agent.load('crashed-run'))?.status);
