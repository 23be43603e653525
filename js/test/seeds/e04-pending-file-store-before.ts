// Supplied for e04-pending-file-store.ts (not a seed example): the process that ran before it over the same
// directory. It leaves run 'email-run' waiting on an approval, then dies in the middle of run 'crashed-run's
// model call (process.exit: no clean-up runs). Its leases last 1 s, so the next process may take them over.
import { createAgent, defineTool, fileStore } from 'steadfast';
import { mockModel } from 'steadfast/testing';

const store = fileStore('./.lousho');
const lease = { ttlMs: 1_000 };
const emailer = createAgent({
  provider: mockModel([{ toolCalls: [{ name: 'send_email', args: {} }] }], { id: 'mail-model' }),
  tools: [defineTool({ name: 'send_email', description: 'Send an email', needsApproval: true, execute: () => 'sent' })],
  store,
  lease,
});
await emailer.send('Email the team', { sessionId: 'email-run' });
const crasher = createAgent({ provider: { id: 'mock', generate: () => process.exit(137) }, store, lease });
await crasher.send('Book a table for 2', { sessionId: 'crashed-run' });
