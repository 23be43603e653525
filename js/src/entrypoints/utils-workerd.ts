// `steadfast/utils` under workerd: loads the wasm core as the main entry does, then the subpath's exports.
import "./workerd.js";

export * from "../utils.js";
