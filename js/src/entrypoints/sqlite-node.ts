// `steadfast/sqlite` under node: loads the wasm core as the main entry does, then the subpath's exports.
import "./node.js";

export * from "../sqlite.js";
