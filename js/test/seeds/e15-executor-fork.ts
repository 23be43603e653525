// The seed's example at durable-execution.txt:430-450 as written (only the import path renamed), with what the
// seed elides supplied beside it. js/test/seeds.test.mjs checks it against the seed, type-checks it (strict, no
// skipLibCheck) and runs it to the seed's stated outcome.
import { AgentExecutor } from 'steadfast/executor';
import { compareTrajectories, memoryStore } from 'steadfast';
// ---- supplied ----
import type { LLMProvider, ModelRequest } from 'steadfast';
import { ToolRegistry } from 'steadfast/executor';

const agent = { instructions: 'You plan trips.' };
// The model asks for the weather (call id 'call_weather'), then plans by what the weather tool said.
const provider: LLMProvider = {
  id: 'planner',
  async generate(request: ModelRequest) {
    const last = request.messages[request.messages.length - 1];
    if (last?.role !== 'tool') return { toolCalls: [{ id: 'call_weather', name: 'weather', args: { city: 'Lisbon' } }] };
    return { text: String(last.content).includes('rain') ? 'Museums and cafes.' : 'Beaches and a boat trip.' };
  },
};
const toolRegistry = new ToolRegistry([
  { name: 'weather', description: 'The forecast', execute: () => ({ forecast: 'sun' }) },
]);
// ---- example ----

const { checkpoints } = memoryStore();
await AgentExecutor.execute({ agent, provider, toolRegistry, input: 'Plan my trip', sessionId: 'trip', checkpointStore: checkpoints });

const fork = await AgentExecutor.fork({
  sessionId: 'trip',
  fromStep: 1,
  checkpointStore: checkpoints,
  patch: { toolResult: { toolCallId: 'call_weather', result: { forecast: 'rain' } } },
});
// fork.sessionId is 'trip.fork-1'; the 'trip' checkpoint and history are unchanged.
await AgentExecutor.execute({ agent, provider, toolRegistry, input: [], sessionId: fork.sessionId, checkpointStore: checkpoints });

const original = await checkpoints.load('trip');
const replayed = await checkpoints.load(fork.sessionId);
if (original && replayed) {
  const { divergedAt, a, b, drift } = compareTrajectories(original, replayed);
  console.log(divergedAt, a.length, b.length, drift); // 1, then each run's steps and the tool-call diff
}
// ---- end of example ----
console.log(fork.sessionId, (await checkpoints.load(fork.sessionId))?.messages.at(-1)?.content);
