// `steadfast/utils`: the stores for one machine under the subpath the documents import them from.
export { fileStore, LocalStorageCheckpointStore, type LocalStoreOptions, type StorageLike } from "./local_stores.js";
