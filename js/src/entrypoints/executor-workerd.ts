// `steadfast/executor` under workerd: loads the wasm core as the main entry does, then the subpath's exports.
import "./workerd.js";

export * from "../executor.js";
