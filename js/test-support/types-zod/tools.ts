// Compiled (noEmit) by test/schemas.test.mjs: tools typed from their input schema, as a user with zod (v4 and
// v3) and valibot installed writes them, under `strict` and `skipLibCheck: false`. A wrongly typed use is an
// error (each `@ts-expect-error` must find one, or the compile fails).
import { createAgent, defineTool, mockModel, type Tool } from "steadfast";
import { z } from "zod";
import { z as z3 } from "zod/v3";
import * as v from "valibot";

// zod 4: `execute` gets the schema's output (a default filled, a transform applied).
export const pay = defineTool({
  name: "pay",
  description: "Pay an amount",
  input: z.object({ amount: z.number().int(), note: z.string().default("none"), cents: z.string().transform(Number) }),
  needsApproval: (args) => args.amount > 100,
  execute: async (args, ctx) => {
    const amount: number = args.amount;
    const note: string = args.note;
    const cents: number = args.cents;
    return { amount, note, cents, key: ctx.idempotencyKey };
  },
});
const typed: Tool<{ amount: number; note: string; cents: number }> = pay;

// zod v3 (`zod/v3`, or zod@3 from 3.24 on): the same.
export const lookup = defineTool({
  name: "lookup",
  description: "Find an order",
  input: z3.object({ id: z3.string(), limit: z3.number().optional() }),
  execute: ({ id, limit }) => `${id.toUpperCase()} ${limit?.toFixed(0) ?? "all"}`,
});

// valibot (no JSON Schema of its own: `inputSchema` beside it).
export const tag = defineTool({
  name: "tag",
  description: "Tag an order",
  input: v.object({ tags: v.array(v.string()) }),
  inputSchema: { type: "object", properties: { tags: { type: "array", items: { type: "string" } } } },
  execute: ({ tags }) => tags.join(","),
});

// A plain JSON Schema `input`, typed by hand as before.
export const plain = defineTool<{ n: number }>({
  name: "plain",
  description: "",
  input: { type: "object", properties: { n: { type: "number" } } },
  execute: ({ n }) => n + 1,
});

export const wrong = defineTool({
  name: "wrong",
  description: "",
  input: z.object({ amount: z.number() }),
  // @ts-expect-error amount is a number: it has no toUpperCase
  execute: (args) => args.amount.toUpperCase(),
});

export const wrongV3 = defineTool({
  name: "wrongV3",
  description: "",
  input: z3.object({ id: z3.string() }),
  // @ts-expect-error the schema has no `missing` field
  execute: (args) => args.missing,
});

export const agent = createAgent({ model: mockModel([]), store: "memory", tools: [pay, lookup, tag, plain, typed] });
