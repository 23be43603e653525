// Entry point for node (and any runtime with `node:fs`): reads the wasm bytes next to the package, and hands
// `fileStore` the file system.
import * as fs from "node:fs";
import { loadWasm } from "../low_level.js";
import { useFileSystem } from "../local_stores.js";

loadWasm(fs.readFileSync(new URL("../../wasm/steadfast_bg.wasm", import.meta.url)));
useFileSystem(fs);

export * from "../index.js";
