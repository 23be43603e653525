// The seed's example at durable-execution.txt:25-37 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { createAgent } from 'steadfast';
import { SqliteStore } from 'steadfast/sqlite';
// ---- supplied ----
import { mockModel } from 'steadfast/testing';

const provider = mockModel(['Booked a table for 2 at 19:00.', 'Changed the booking to 3 people.']);
// ---- example ----

const agent = createAgent({ provider, store: new SqliteStore('./.lousho/jobs.db') });

// First message of a conversation.
await agent.send('Book a table for 2 tonight', { sessionId: 'chat-42' });

// Later - same process or another one - the next message of the same conversation.
await agent.send('Make it 3 people', { sessionId: 'chat-42' });

// After a crash: finish the interrupted run, if there is one (`null` when nothing is pending).
const finished = await agent.resume('chat-42');
// ---- end of example ----
const saved = await agent.load('chat-42');
console.log(saved?.status, saved?.messages.length, 'resumed' in finished ? finished.resumed : finished.status);
