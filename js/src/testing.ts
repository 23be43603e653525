// `steadfast/testing`: what tests and demos use, under the subpath the documents import it from (it needs no
// wasm: the same modules the main entry re-exports, so `instanceof SteadfastError` holds across both).
export { mockModel, ProviderHttpError, type MockModel, type MockModelOptions, type MockTurn } from "./mock_model.js";
export { testClock, type Clock, type TestClock, type TestClockOptions } from "./clock.js";
