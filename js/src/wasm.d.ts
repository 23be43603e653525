// `.wasm` imports as workerd/wrangler provide them.
declare module "*.wasm" {
  const module: WebAssembly.Module;
  export default module;
}
