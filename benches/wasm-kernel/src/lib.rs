//! The step kernel for wasm: `prepare(messages)` builds a run that `timed` more steps bring to `messages`
//! messages and returns `timed`; `run_steps(n)` runs `n` steps of it and returns the transcript's length.
//! run.mjs times `run_steps` with `performance.now()`.

#[path = "../../kernel/step_kernel.rs"]
mod step_kernel;

use std::cell::RefCell;
use step_kernel::StepKernel;
use wasm_bindgen::prelude::*;

thread_local! {
    static KERNEL: RefCell<Option<StepKernel>> = const { RefCell::new(None) };
}

/// Prepares a run that `timed` more steps bring to (at least) `messages` messages; returns `timed`.
#[wasm_bindgen]
pub fn prepare(messages: u32) -> u32 {
    let (k, timed) = step_kernel::prepare(messages as usize);
    KERNEL.with(|c| *c.borrow_mut() = Some(k));
    timed as u32
}

/// Runs `n` steps of the prepared run; returns the number of messages after them.
#[wasm_bindgen]
pub fn run_steps(n: u32) -> u32 {
    KERNEL.with(|c| {
        let mut c = c.borrow_mut();
        let k = c.as_mut().expect("prepare() first");
        step_kernel::run_steps(k, n as usize) as u32
    })
}
