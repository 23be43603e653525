// Entry point for workerd (Cloudflare Workers): wrangler's bundler turns the `.wasm` import into a compiled
// `WebAssembly.Module` (a CompiledWasm module), which instantiates synchronously.
import wasmModule from "../../wasm/steadfast_bg.wasm";
import { loadWasm } from "../low_level.js";

loadWasm(wasmModule);

export * from "../index.js";
