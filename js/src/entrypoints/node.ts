// Entry point for node (and any runtime with `node:fs`): reads the wasm bytes next to the package.
import { readFileSync } from "node:fs";
import { loadWasm } from "../low_level.js";

loadWasm(readFileSync(new URL("../../wasm/steadfast_bg.wasm", import.meta.url)));

export * from "../index.js";
