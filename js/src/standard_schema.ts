// Standard Schema (https://standardschema.dev): the interface zod (3.24+ and 4), valibot, arktype and others
// implement, and its JSON Schema extension (zod 4). Vendored as the spec recommends (its types, copied: the
// package depends on no validator and its published types import nothing), beside the few functions the
// package reads them with.

/** A Standard Schema validator (`schema["~standard"].validate`), typed by what it accepts and produces. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  /** The Standard Schema properties. */
  readonly "~standard": StandardSchemaV1.Props<Input, Output>;
}

export declare namespace StandardSchemaV1 {
  /** The Standard Schema properties. */
  export interface Props<Input = unknown, Output = Input> {
    /** The version of the standard. */
    readonly version: 1;
    /** The schema library. */
    readonly vendor: string;
    /** Validates a value: its output (parsed, transformed) or its issues. */
    readonly validate: (
      value: unknown,
      options?: { readonly libraryOptions?: Record<string, unknown> | undefined } | undefined,
    ) => Result<Output> | Promise<Result<Output>>;
    /** The types the schema accepts and produces (types only). */
    readonly types?: Types<Input, Output> | undefined;
  }
  /** What `validate` answers. */
  export type Result<Output> = SuccessResult<Output> | FailureResult;
  /** A valid value: the schema's output. */
  export interface SuccessResult<Output> {
    readonly value: Output;
    readonly issues?: undefined;
  }
  /** An invalid value: why. */
  export interface FailureResult {
    readonly issues: ReadonlyArray<Issue>;
  }
  /** One reason a value is invalid. */
  export interface Issue {
    readonly message: string;
    readonly path?: ReadonlyArray<PropertyKey | PathSegment> | undefined;
  }
  /** A step of an issue's path. */
  export interface PathSegment {
    readonly key: PropertyKey;
  }
  /** The input and output types. */
  export interface Types<Input = unknown, Output = Input> {
    readonly input: Input;
    readonly output: Output;
  }
  /** The type a schema accepts. */
  export type InferInput<Schema extends StandardSchemaV1> = NonNullable<Schema["~standard"]["types"]>["input"];
  /** The type a schema produces (what a tool's `execute` gets). */
  export type InferOutput<Schema extends StandardSchemaV1> = NonNullable<Schema["~standard"]["types"]>["output"];
}

/** A Standard JSON Schema converter (`schema["~standard"].jsonSchema`, zod 4): the JSON Schema of what it takes. */
export interface StandardJSONSchemaConverter {
  readonly input: (options: { readonly target: "draft-2020-12" | "draft-07" | (string & {}) }) => Record<string, unknown>;
  readonly output?: (options: { readonly target: string }) => Record<string, unknown>;
}

/** Whether `v` is a Standard Schema validator (it has `["~standard"].validate`). */
export function isStandardSchema(v: unknown): v is StandardSchemaV1 {
  const std = (v as { "~standard"?: { validate?: unknown } } | null | undefined)?.["~standard"];
  return (typeof v === "object" || typeof v === "function") && v !== null && typeof std?.validate === "function";
}

/** The schema's Standard JSON Schema converter, when it offers one. */
export function jsonSchemaConverter(v: StandardSchemaV1): StandardJSONSchemaConverter | undefined {
  const c = (v["~standard"] as { jsonSchema?: StandardJSONSchemaConverter }).jsonSchema;
  return c !== null && typeof c === "object" && typeof c.input === "function" ? c : undefined;
}

/** Issues as one line the model reads: `"/path: message; …"` (as the core words its JSON Schema failures). */
export function issuesText(issues: ReadonlyArray<StandardSchemaV1.Issue>): string {
  const shown = issues.slice(0, 10).map((i) => {
    const path = (i.path ?? []).map((p) => {
      const key = p !== null && typeof p === "object" ? (p as StandardSchemaV1.PathSegment).key : p;
      return String(key).replace(/~/g, "~0").replace(/\//g, "~1");
    });
    return `${path.length > 0 ? "/" + path.join("/") : "(root)"}: ${String(i?.message ?? "invalid")}`;
  });
  return shown.length > 0 ? shown.join("; ") : "(root): invalid";
}
