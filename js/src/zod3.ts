// zod v3 schemas (`import { z } from "zod/v3"`, or the zod@3 package) as the JSON Schema (draft 2020-12) of
// what they accept: zod v3 has no conversion of its own, and zod-to-json-schema would put zod in every user's
// bundle (it imports "zod/v3" statically). This reads the schema's `_def` tree (the input side: a transform's
// or a pipeline's input, a default's field optional) and refuses what it cannot express exactly rather than
// guess: a `Zod3Unsupported` naming the zod type (or check) and where, which tools.ts turns into
// `STEADFAST_CONFIG_INVALID` asking for an explicit `inputSchema`.

/** A zod v3 schema as this file reads it: a `_def` with a `typeName`. */
interface Zod3 {
  _def: Zod3Def;
  isOptional?: () => boolean;
}

/** A zod v3 `_def` (the fields read here; each type has its own). */
type Zod3Def = { typeName: string; description?: string } & Record<string, any>;

/** What the converter cannot express: the zod type (or `ZodString check 'cuid'`) and its JSON pointer. */
export class Zod3Unsupported extends Error {
  constructor(
    readonly what: string,
    readonly at: string,
  ) {
    super(`${what} at ${at || "(root)"}`);
  }
}

/** Whether `v` is a zod v3 schema (a `_def.typeName` of zod's; zod 4's schemas have `_zod` instead). */
export function isZod3(v: unknown): v is Zod3 {
  const def = (v as { _def?: { typeName?: unknown } } | null | undefined)?._def;
  return (
    v !== null &&
    typeof v === "object" &&
    typeof def?.typeName === "string" &&
    def.typeName.startsWith("Zod") &&
    !("_zod" in (v as object))
  );
}

type Schema = Record<string, unknown>;

/** The JSON Schema (draft 2020-12) of what zod v3 schema `s` accepts; throws `Zod3Unsupported`. */
export function zod3ToJsonSchema(s: Zod3): Schema {
  return convert(s, "");
}

/** Whether a property may be left out: what zod says (`isOptional()`: optional, default, any, …). */
function optional(s: Zod3): boolean {
  try {
    return typeof s.isOptional === "function" ? s.isOptional() : false;
  } catch {
    // Ignored: a schema whose check of `undefined` throws is taken as required (the safe side for the model).
    return false;
  }
}

function described(out: Schema, def: Zod3Def): Schema {
  return typeof def.description === "string" ? { ...out, description: def.description } : out;
}

const escape = (k: string): string => k.replace(/~/g, "~0").replace(/\//g, "~1");

/** String checks as JSON Schema keywords (`pattern`s beyond the first go to `allOf`). */
function stringSchema(def: Zod3Def, at: string): Schema {
  const out: Schema = { type: "string" };
  const patterns: string[] = [];
  const format = (f: string) => {
    if (out.format !== undefined && out.format !== f) throw new Zod3Unsupported(`ZodString with two formats`, at);
    out.format = f;
  };
  const escapeRe = (t: string) => t.replace(/[-[\]{}()*+?.,\\^$|#\s]/g, "\\$&");
  for (const c of (def.checks ?? []) as Array<{ kind: string; value?: unknown; regex?: RegExp }>) {
    switch (c.kind) {
      case "min":
        out.minLength = Math.max(Number(c.value), (out.minLength as number | undefined) ?? 0);
        break;
      case "max":
        out.maxLength = Math.min(Number(c.value), (out.maxLength as number | undefined) ?? Infinity);
        break;
      case "length":
        out.minLength = out.maxLength = Number(c.value);
        break;
      case "email":
        format("email");
        break;
      case "url":
        format("uri");
        break;
      case "uuid":
        format("uuid");
        break;
      case "regex":
        if (!(c.regex instanceof RegExp) || c.regex.flags.replace(/[gy]/g, "") !== "") {
          throw new Zod3Unsupported(`ZodString check 'regex' with flags`, at);
        }
        patterns.push(c.regex.source);
        break;
      case "startsWith":
        patterns.push(`^${escapeRe(String(c.value))}`);
        break;
      case "endsWith":
        patterns.push(`${escapeRe(String(c.value))}$`);
        break;
      case "includes":
        if ((c as { position?: number }).position !== undefined) {
          throw new Zod3Unsupported(`ZodString check 'includes' with a position`, at);
        }
        patterns.push(escapeRe(String(c.value)));
        break;
      // Transforms of the value, not checks of it: the input is any string.
      case "trim":
      case "toLowerCase":
      case "toUpperCase":
        break;
      default:
        throw new Zod3Unsupported(`ZodString check '${c.kind}'`, at);
    }
  }
  if (patterns.length > 0) out.pattern = patterns[0];
  if (patterns.length > 1) out.allOf = patterns.slice(1).map((pattern) => ({ pattern }));
  return out;
}

function numberSchema(def: Zod3Def, at: string): Schema {
  const out: Schema = { type: "number" };
  for (const c of (def.checks ?? []) as Array<{ kind: string; value?: number; inclusive?: boolean }>) {
    switch (c.kind) {
      case "int":
        out.type = "integer";
        break;
      case "min":
        if (c.inclusive) out.minimum = c.value;
        else out.exclusiveMinimum = c.value;
        break;
      case "max":
        if (c.inclusive) out.maximum = c.value;
        else out.exclusiveMaximum = c.value;
        break;
      case "multipleOf":
        out.multipleOf = c.value;
        break;
      // JSON numbers are finite.
      case "finite":
        break;
      default:
        throw new Zod3Unsupported(`ZodNumber check '${c.kind}'`, at);
    }
  }
  return out;
}

/** The JSON type of a literal, or `undefined` for one JSON cannot hold (bigint, undefined, symbol). */
function jsonType(v: unknown): string | undefined {
  if (v === null) return "null";
  switch (typeof v) {
    case "string":
      return "string";
    case "number":
      return Number.isFinite(v) ? (Number.isInteger(v) ? "integer" : "number") : undefined;
    case "boolean":
      return "boolean";
    default:
      return undefined;
  }
}

/** The primitives zod-to-json-schema (and we) write as `type: [t, "null"]` when nullable and unchecked. */
const PRIMITIVES: Record<string, string> = { ZodString: "string", ZodNumber: "number", ZodBoolean: "boolean", ZodNull: "null" };

/** Whether `v` is plain JSON (nulls, booleans, finite numbers, strings, arrays and plain objects of them). */
function isPlainJson(v: unknown): boolean {
  if (v === null || typeof v === "string" || typeof v === "boolean") return true;
  if (typeof v === "number") return Number.isFinite(v);
  if (Array.isArray(v)) return v.every(isPlainJson);
  if (typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) return Object.values(v as object).every(isPlainJson);
  return false;
}

function convert(s: Zod3, at: string): Schema {
  const def = s?._def;
  if (def === undefined || typeof def.typeName !== "string") throw new Zod3Unsupported("a value that is not a zod schema", at);
  return described(convertDef(def, at), def);
}

function convertDef(def: Zod3Def, at: string): Schema {
  switch (def.typeName) {
    case "ZodString":
      return stringSchema(def, at);
    case "ZodNumber":
      return numberSchema(def, at);
    case "ZodBoolean":
      return { type: "boolean" };
    case "ZodNull":
      return { type: "null" };
    case "ZodAny":
    case "ZodUnknown":
      return {};
    case "ZodLiteral": {
      const type = jsonType(def.value);
      if (type === undefined) throw new Zod3Unsupported(`ZodLiteral of ${typeof def.value}`, at);
      return { type: type === "integer" ? "number" : type, const: def.value };
    }
    case "ZodEnum":
      return { type: "string", enum: [...(def.values as string[])] };
    case "ZodNativeEnum": {
      const obj = def.values as Record<string, string | number>;
      // A numeric TypeScript enum maps each name to its number and each number back to its name.
      const values = Object.keys(obj)
        .filter((k) => typeof obj[obj[k] as string] !== "number")
        .map((k) => obj[k] as string | number);
      const types = [...new Set(values.map((v) => (typeof v === "number" ? "number" : "string")))];
      return { type: types.length === 1 ? types[0] : types, enum: values };
    }
    case "ZodObject": {
      const shape = (typeof def.shape === "function" ? def.shape() : def.shape) as Record<string, Zod3>;
      const properties: Record<string, Schema> = {};
      const required: string[] = [];
      for (const [key, prop] of Object.entries(shape)) {
        properties[key] = convert(prop, `${at}/${escape(key)}`);
        if (!optional(prop)) required.push(key);
      }
      const out: Schema = { type: "object", properties };
      if (required.length > 0) out.required = required;
      const catchall = def.catchall as Zod3 | undefined;
      if (catchall?._def !== undefined && catchall._def.typeName !== "ZodNever") {
        out.additionalProperties = convert(catchall, `${at}/additionalProperties`);
      } else if (def.unknownKeys === "strict") {
        out.additionalProperties = false;
      }
      // "strip" (the default) and "passthrough" accept other keys (dropped or kept): nothing to say.
      return out;
    }
    case "ZodArray": {
      const out: Schema = { type: "array", items: convert(def.type as Zod3, `${at}/items`) };
      if (def.minLength) out.minItems = def.minLength.value;
      if (def.maxLength) out.maxItems = def.maxLength.value;
      if (def.exactLength) out.minItems = out.maxItems = def.exactLength.value;
      return out;
    }
    case "ZodTuple": {
      const items = (def.items as Zod3[]).map((item, i) => convert(item, `${at}/${i}`));
      const out: Schema = { type: "array", prefixItems: items, minItems: items.length };
      if (def.rest) out.items = convert(def.rest as Zod3, `${at}/items`);
      else {
        out.items = false;
        out.maxItems = items.length;
      }
      return out;
    }
    case "ZodUnion":
    case "ZodDiscriminatedUnion": {
      const options = (Array.isArray(def.options) ? def.options : [...(def.options as Map<unknown, Zod3>).values()]) as Zod3[];
      return { anyOf: options.map((o, i) => convert(o, `${at}/anyOf/${i}`)) };
    }
    case "ZodIntersection":
      return { allOf: [convert(def.left as Zod3, `${at}/allOf/0`), convert(def.right as Zod3, `${at}/allOf/1`)] };
    case "ZodRecord": {
      const key = def.keyType as Zod3;
      const out: Schema = { type: "object", additionalProperties: convert(def.valueType as Zod3, `${at}/additionalProperties`) };
      const kt = key?._def?.typeName;
      if (kt === "ZodEnum") out.propertyNames = { enum: [...(key._def.values as string[])] };
      else if (kt === "ZodString") {
        const names = stringSchema(key._def, `${at}/propertyNames`);
        delete names.type;
        if (Object.keys(names).length > 0) out.propertyNames = names;
      } else throw new Zod3Unsupported(`ZodRecord with ${kt ?? "unknown"} keys`, at);
      return out;
    }
    case "ZodOptional":
      // Optional in an object (its `required` says so); at the top or in an array, JSON has no `undefined`.
      return convert(def.innerType as Zod3, at);
    case "ZodNullable": {
      const inner = def.innerType as Zod3;
      const prim = PRIMITIVES[inner._def?.typeName];
      if (prim !== undefined && !(inner._def.checks?.length > 0) && inner._def.description === undefined) {
        return { type: prim === "null" ? "null" : [prim, "null"] };
      }
      return { anyOf: [convert(inner, `${at}/anyOf/0`), { type: "null" }] };
    }
    case "ZodDefault": {
      let value: unknown;
      try {
        value = (def.defaultValue as () => unknown)();
      } catch {
        throw new Zod3Unsupported("ZodDefault whose default throws", at);
      }
      const inner = convert(def.innerType as Zod3, at);
      // A default JSON cannot hold as it is (a Date, a function) is not shown; the field is optional all the same.
      return isPlainJson(value) ? { ...inner, default: value } : inner;
    }
    case "ZodEffects":
      // refine, superRefine, transform and preprocess: the input is the inner schema's.
      return convert(def.schema as Zod3, at);
    case "ZodPipeline":
      return convert(def.in as Zod3, at);
    case "ZodBranded":
      return convert(def.type as Zod3, at);
    case "ZodReadonly":
      return convert(def.innerType as Zod3, at);
    default:
      throw new Zod3Unsupported(def.typeName, at);
  }
}
