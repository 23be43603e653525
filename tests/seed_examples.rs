//! The worked examples of durable-execution.txt, in Rust, plus the runtime behaviours of M1–M4, M10, M15,
//! M16 and M22 that they rely on.

mod common;

/// The cases on the in-memory store (strictly consistent, atomic leases).
mod on_memory_store {
    use super::common::*;
    fn new_env() -> Env {
        Env::new()
    }
    include!("common/seed_imports.rs");
    include!("common/seed_cases.rs");

    /// Deleting a run's checkpoint starts it over; a corrupt checkpoint is listed as CHECKPOINT_CORRUPT and can
    /// be discarded.
    #[test]
    fn delete_starts_over_and_corrupt_checkpoints_are_listed() {
        let env = new_env();
        let model = MockModel::new(vec![MockTurn::error(400), MockTurn::text("fresh")]);
        let agent = env.agent(model, vec![]);
        block_on(agent.send("r", "first", opts())).unwrap_err();
        env.memory.as_ref().unwrap().corrupt_last_entry("r");
        let pending = block_on(agent.pending()).unwrap();
        assert_eq!(pending.len(), 1);
        let last = pending[0].last_error.clone().unwrap();
        assert_eq!(last.code, ErrorCode::CheckpointCorrupt);
        assert!(!last.retryable);
        let err = block_on(agent.send("r", "again", opts())).unwrap_err();
        assert_eq!(err.code, ErrorCode::CheckpointCorrupt);
        block_on(agent.delete("r")).unwrap();
        let done = block_on(agent.send("r", "again", opts())).unwrap();
        assert_eq!(done.messages, vec![Message::user("again"), answered("fresh")]);
    }
}

/// The same cases on the journal store over the Workers-KV simulator.
mod on_journal_store {
    use super::common::*;
    fn new_env() -> Env {
        Env::journal_sim()
    }
    include!("common/seed_imports.rs");
    include!("common/seed_cases.rs");
}
