// The scripted workload every contender runs: a user message, then N model turns of two tool calls each
// (`lookup` and `quote`, each answering the same ~450-byte text), then a final text answer. Messages are
// ~500 bytes like benches/bench.rs' store-layout runs. Shared by run.mjs, node.mjs and the Agents SDK Worker.

export const PROMPT = "Reconcile the open orders: look each one up, quote it, and report when all are done.";
export const FINAL_TEXT = "All orders reconciled.";
export const INSTRUCTIONS = "You reconcile orders with the lookup and quote tools.";

/** The text each tool answers (~450 bytes). */
export const TOOL_RESULT =
  "order status: open; warehouse: north-2; items: 3 (widget-a x1, widget-b x2); customer tier: gold; " +
  "last event: payment authorised; carrier: pending; notes: customer asked for a single shipment, no partial " +
  "deliveries; hold reason: none; fraud score: 0.02 (low); currency: EUR; subtotal: 184.20; tax: 34.99; " +
  "shipping: 0.00 (free over 150); total: 219.19; sla: ship within 48 hours of authorisation; priority: standard";

/** The two tool calls of step `i` (0-based). */
export function stepCalls(i) {
  return [
    { name: "lookup", args: { order: 1000 + i } },
    { name: "quote", args: { order: 1000 + i, currency: "EUR" } },
  ];
}

export const TOOLS = [
  {
    name: "lookup",
    description: "Looks an order up",
    inputSchema: { type: "object", properties: { order: { type: "integer" } }, required: ["order"] },
  },
  {
    name: "quote",
    description: "Quotes an order",
    inputSchema: {
      type: "object",
      properties: { order: { type: "integer" }, currency: { type: "string" } },
      required: ["order"],
    },
  },
];

/** The scripted model (the npm package's JS model shape): call k answers step k's two tool calls (ids
 * `call_<k>_<j>`), then the final text after `steps` calls. */
export function scriptedModel(steps) {
  let k = 0;
  return {
    id: "scripted",
    async generate() {
      const i = k++;
      const usage = { inputTokens: 10, outputTokens: 5 };
      return i < steps
        ? { toolCalls: stepCalls(i).map((c, j) => ({ id: `call_${i}_${j}`, ...c })), usage, stopReason: "tool_calls" }
        : { text: FINAL_TEXT, usage, stopReason: "stop" };
    },
  };
}
