//! Strict mode's store: each run owned by its own object (a SQLite-backed Cloudflare Durable Object in
//! production), with **strict fencing**.
//!
//! # Layers
//! * [`ObjectStorage`]: one object's storage, row level (a journal table and a small key/value table),
//!   synchronous and transactional. The Worker implements it over the Durable Object's SQL storage
//!   (`src/front/worker/object.rs`, translation only); [`MemoryObjectStorage`] keeps the same rows in memory.
//! * [`RunObjectCore`]: what one run's object does with a request ([`ObjectRequest`]): fold the journal,
//!   take, renew and release the lease, commit an entry (fenced), keep the run's approval records. Every
//!   request is handled synchronously, with no `await` inside, so the object (single-threaded) handles one at
//!   a time: the lease check and the write it guards are atomic, and a request that writes several rows runs
//!   them in one storage transaction ([`ObjectStorage::write`]).
//! * [`ObjectStore`]: the [`RunStore`] a process uses. It sends each per-run operation to the run's object
//!   through an [`ObjectClient`] (the Worker: a fetch to the Durable Object stub addressed by `idFromName(run
//!   id)`; [`LocalObjects`]: objects in this process) and keeps the **cross-run index** in a [`KvBackend`]
//!   (Workers KV in the Worker).
//!
//! # Contract on Durable Objects
//! * **Strict fencing.** A commit is refused with `STEADFAST_SESSION_BUSY` unless the object's lease names
//!   the committer (owner and epoch), checked in the same synchronous step as the write: a stale owner's
//!   commit is refused, not ignored. Acquisition is atomic too, so [`RunStore::confirm_lease`] is the default
//!   no-op (no settle window).
//! * **One row per boundary.** A commit writes one journal row (`journal(seq, part, snap, body)`, `WITHOUT
//!   ROWID`, keyed by `(seq, part)`: no secondary index). An entry over [`MAX_ROW_BYTES`] (the object's row
//!   limit is 2 MB) is split over several rows of one transaction, whatever its size (eight 4 MiB tool results
//!   of one turn, a fork's first snapshot of a large run). A load folds from the newest snapshot entry (the
//!   machine writes one every so often), so its cost stays bounded. The object keeps its whole journal
//!   (history of any depth).
//! * **Approvals** live in their run's object (`meta` rows `approval/<id>`). A deleted run keeps them (the
//!   contract's orphans). So do the run's **queued messages** (`meta` rows `queue/<order key>`): a send queues
//!   a message in the object while the run executes there, and the execution reads it at its next boundary.
//! * **The index** (in the [`KvBackend`]): `<prefix>idx/run/<run id>` while a run is unfinished, its list
//!   metadata the run's listing summary (`IndexMeta`: status, step, attempts, last error,
//!   approvals, quarantine, diagnosis marker, save time), and `<prefix>idx/approval/<approval id>` (list
//!   metadata `{"run": <run id>}`) for every approval record, plus the runtime's state documents
//!   `<prefix>state/<name>`. The objects are the truth; the index says which objects exist and what they
//!   held when their entry was written.
//!   * **Writes.** An execution writes its run's entry *before* its first commit (so a crash leaves the run
//!     listed; one KV write per execution), again when a boundary changes the summary (at most once a second:
//!     KV's limit per key), and removes it after the commit that finishes the run. The index is secondary: a
//!     write KV refuses (a 429) or loses never fails a commit; it is repaired at a later boundary or at release
//!     (an unfinished run's entry then waits out the second; a finished run's entry written less than a second
//!     ago is left for the listings to drop). A delete removes the entry before the run, so a run created
//!     under the id afterwards keeps the entry it writes.
//!   * **Listings.** A sweep's page ([`RunStore::pending_page`]) is one `list` at any backlog: no run's object
//!     is asked. The sweep checks ([`RunStore::check_pending`], one request per run) only the runs it acts on,
//!     and verifies a few of those its listing says to leave alone (a listing can be stale). A full listing
//!     ([`RunStore::pending`]) also asks the objects of the entries written in the last minute (at most 100),
//!     which may describe runs that finished within a second of their entry. A check drops an entry whose
//!     object holds a later state, or says finished or gone a minute after the entry was written (a younger
//!     entry may be an execution's, written just before its first commit). A run whose read fails as corrupt is
//!     listed as corrupt from then on. The approvals listing asks one object per run that holds approval
//!     records, at most [`MAX_LISTED_OBJECTS`] (a Worker's subrequests are limited).
//!
//! # Where it lives
//! This file holds the wire protocol between the halves ([`ObjectRequest`], [`ObjectCall`], [`ObjectReply`]) and
//! the row limits; `core` is the object's half ([`ObjectStorage`], [`MemoryObjectStorage`], [`RunObjectCore`]);
//! `client` is the process's half ([`ObjectClient`], [`LocalObjects`], [`OwnObject`], [`ObjectStore`] and its
//! index in the [`KvBackend`]).
//!
//! [`RunStore`]: super::RunStore
//! [`RunStore::confirm_lease`]: super::RunStore::confirm_lease
//! [`RunStore::pending_page`]: super::RunStore::pending_page
//! [`RunStore::check_pending`]: super::RunStore::check_pending
//! [`RunStore::pending`]: super::RunStore::pending
//! [`KvBackend`]: super::kv::KvBackend

mod client;
mod core;

pub use self::client::{LocalObjects, ObjectClient, ObjectStore, OwnObject};
pub use self::core::{JournalRow, MemoryObjectStorage, ObjectStorage, RunObjectCore, Write};

use super::{Lease, LeaseOptions};
use crate::core::error::{Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};

/// Most bytes of an entry kept in one journal row (a Durable Object's SQLite row holds at most 2 MB).
pub const MAX_ROW_BYTES: usize = 1_000_000;

/// Most bytes of a `meta` value (a lease, an approval record): one row.
pub const MAX_META_BYTES: usize = 2_000_000;

/// Most run objects one approvals listing asks (one request each; a Worker's subrequests per invocation are
/// limited: 1,000 on older plans).
pub const MAX_LISTED_OBJECTS: usize = 500;

/// A request to one run's object (the wire format between [`ObjectStore`] and the object: JSON). Written by
/// serde's derive (externally tagged, camelCase names), read by a hand-written reader of the same forms (see
/// `request_de`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ObjectRequest {
    /// The journal from its newest snapshot on, checked (whole entries, in order, each at its seq): an array
    /// of entries, for the caller to fold.
    Load,
    /// Take the lease: `Lease`.
    Acquire {
        /// The acquirer.
        owner: String,
        /// The acquirer's clock.
        now_ms: u64,
        /// Lease timing.
        opts: LeaseOptions,
    },
    /// Extend the lease: `Lease`.
    Renew {
        /// The held lease.
        lease: Lease,
        /// The holder's clock.
        now_ms: u64,
        /// Lease timing.
        opts: LeaseOptions,
    },
    /// End the lease: `()`.
    Release {
        /// The held lease.
        lease: Lease,
    },
    /// Append one entry (its JSON) as the lease holder: `()`.
    Commit {
        /// The committer's lease (the fencing token).
        lease: Lease,
        /// The entry's seq.
        seq: u64,
        /// Whether the entry is a snapshot.
        snapshot: bool,
        /// The entry's JSON.
        entry: String,
    },
    /// Delete the journal and the lease (approval records stay): `()`.
    Delete,
    /// The whole journal, checked as for `Load`: an array of entries (the caller folds the past states).
    History,
    /// Write an approval record (its JSON): `()`.
    PutApproval {
        /// Approval id.
        id: String,
        /// The record's JSON.
        record: String,
    },
    /// Read an approval record: `Option<ApprovalRecord>`.
    GetApproval {
        /// Approval id.
        id: String,
    },
    /// Every readable approval record of the run: `Vec<ApprovalRecord>`.
    ListApprovals,
    /// Delete an approval record: `()`.
    DeleteApproval {
        /// Approval id.
        id: String,
    },
    /// Add a message to the run's queue (its JSON) under its queue order key: `()`.
    PutQueued {
        /// The message's order key ([`crate::core::steer::QueuedMessage::order_key`]).
        key: String,
        /// The message's JSON.
        message: String,
    },
    /// The run's queued messages, in queue order: `Vec<QueuedMessage>` (unreadable ones left out).
    ListQueued,
    /// Remove a message from the run's queue: `()`.
    DeleteQueued {
        /// The message's order key.
        key: String,
    },
}

/// The reader of [`ObjectRequest`]: what serde's derive for the externally tagged enum accepts (a unit variant as
/// its name or `{"name": null}`; a struct variant as `{"name": {fields}}` or `{"name": [fields in order]}`; unknown
/// fields ignored; duplicate, missing and mistyped fields refused), with one field reader for every variant
/// instead of a visitor per variant.
mod request_de {
    use super::ObjectRequest;
    use crate::store::{Lease, LeaseOptions};
    use serde::de::{
        self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess, SeqAccess, VariantAccess, Visitor,
    };
    use serde::Deserialize;
    use std::fmt;

    const VARIANTS: &[&str] = &[
        "load",
        "acquire",
        "renew",
        "release",
        "commit",
        "delete",
        "history",
        "putApproval",
        "getApproval",
        "listApprovals",
        "deleteApproval",
        "putQueued",
        "listQueued",
        "deleteQueued",
    ];

    /// Field names, by field number.
    const FIELDS: [&str; 11] =
        ["owner", "nowMs", "opts", "lease", "seq", "snapshot", "entry", "id", "record", "key", "message"];

    /// Each variant's fields (field numbers, in declaration order; empty for a unit variant) and field names.
    fn fields(variant: usize) -> (&'static [u8], &'static [&'static str]) {
        match variant {
            1 => (&[0, 1, 2], &["owner", "nowMs", "opts"]),
            2 => (&[3, 1, 2], &["lease", "nowMs", "opts"]),
            3 => (&[3], &["lease"]),
            4 => (&[3, 4, 5, 6], &["lease", "seq", "snapshot", "entry"]),
            7 => (&[7, 8], &["id", "record"]),
            8 | 10 => (&[7], &["id"]),
            11 => (&[9, 10], &["key", "message"]),
            13 => (&[9], &["key"]),
            _ => (&[], &[]),
        }
    }

    /// The fields read so far (strings by field number).
    #[derive(Default)]
    struct Args {
        text: [Option<String>; 11],
        now_ms: Option<u64>,
        seq: Option<u64>,
        snapshot: Option<bool>,
        opts: Option<LeaseOptions>,
        lease: Option<Lease>,
    }

    impl Args {
        fn is_set(&self, field: u8) -> bool {
            match field {
                1 => self.now_ms.is_some(),
                2 => self.opts.is_some(),
                3 => self.lease.is_some(),
                4 => self.seq.is_some(),
                5 => self.snapshot.is_some(),
                f => self.text[f as usize].is_some(),
            }
        }

        fn text<E: de::Error>(&mut self, field: usize) -> Result<String, E> {
            self.text[field].take().ok_or_else(|| E::missing_field(FIELDS[field]))
        }

        fn request<E: de::Error>(mut self, variant: usize) -> Result<ObjectRequest, E> {
            fn need<T, E: de::Error>(v: Option<T>, field: usize) -> Result<T, E> {
                v.ok_or_else(|| E::missing_field(FIELDS[field]))
            }
            // Missing fields are named in declaration order, as the derive does.
            Ok(match variant {
                1 => ObjectRequest::Acquire {
                    owner: self.text(0)?,
                    now_ms: need(self.now_ms, 1)?,
                    opts: need(self.opts, 2)?,
                },
                2 => ObjectRequest::Renew {
                    lease: need(self.lease, 3)?,
                    now_ms: need(self.now_ms, 1)?,
                    opts: need(self.opts, 2)?,
                },
                3 => ObjectRequest::Release { lease: need(self.lease, 3)? },
                4 => ObjectRequest::Commit {
                    lease: need(self.lease.take(), 3)?,
                    seq: need(self.seq, 4)?,
                    snapshot: need(self.snapshot, 5)?,
                    entry: self.text(6)?,
                },
                7 => ObjectRequest::PutApproval { id: self.text(7)?, record: self.text(8)? },
                8 => ObjectRequest::GetApproval { id: self.text(7)? },
                10 => ObjectRequest::DeleteApproval { id: self.text(7)? },
                11 => ObjectRequest::PutQueued { key: self.text(9)?, message: self.text(10)? },
                _ => ObjectRequest::DeleteQueued { key: self.text(9)? },
            })
        }
    }

    /// Reads one field's value (`None`: an unknown field, ignored).
    struct Field<'a>(&'a mut Args, Option<u8>);

    impl<'de> DeserializeSeed<'de> for Field<'_> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            let a = self.0;
            match self.1 {
                Some(1) => a.now_ms = Some(u64::deserialize(d)?),
                Some(2) => a.opts = Some(LeaseOptions::deserialize(d)?),
                Some(3) => a.lease = Some(Lease::deserialize(d)?),
                Some(4) => a.seq = Some(u64::deserialize(d)?),
                Some(5) => a.snapshot = Some(bool::deserialize(d)?),
                Some(f) => a.text[f as usize] = Some(String::deserialize(d)?),
                None => drop(IgnoredAny::deserialize(d)?),
            }
            Ok(())
        }
    }

    /// A struct variant's fields.
    struct Fields(usize);

    impl<'de> Visitor<'de> for Fields {
        type Value = ObjectRequest;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "struct variant ObjectRequest::{}", VARIANTS[self.0])
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ObjectRequest, A::Error> {
            let mut args = Args::default();
            for (i, &field) in fields(self.0).0.iter().enumerate() {
                if seq.next_element_seed(Field(&mut args, Some(field)))?.is_none() {
                    return Err(de::Error::invalid_length(i, &self));
                }
            }
            args.request(self.0)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ObjectRequest, A::Error> {
            let mut args = Args::default();
            let (numbers, names) = fields(self.0);
            while let Some(key) = map.next_key::<String>()? {
                let field = names.iter().position(|n| *n == key).map(|i| numbers[i]);
                if let Some(f) = field.filter(|&f| args.is_set(f)) {
                    return Err(de::Error::duplicate_field(FIELDS[f as usize]));
                }
                map.next_value_seed(Field(&mut args, field))?;
            }
            args.request(self.0)
        }
    }

    struct RequestVisitor;

    impl<'de> Visitor<'de> for RequestVisitor {
        type Value = ObjectRequest;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("enum ObjectRequest")
        }

        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<ObjectRequest, A::Error> {
            let (name, access) = data.variant::<String>()?;
            let variant =
                VARIANTS.iter().position(|v| *v == name).ok_or_else(|| de::Error::unknown_variant(&name, VARIANTS))?;
            let (_, names) = fields(variant);
            if !names.is_empty() {
                return access.struct_variant(names, Fields(variant));
            }
            access.unit_variant()?;
            Ok(match variant {
                0 => ObjectRequest::Load,
                5 => ObjectRequest::Delete,
                6 => ObjectRequest::History,
                9 => ObjectRequest::ListApprovals,
                _ => ObjectRequest::ListQueued,
            })
        }
    }

    impl<'de> Deserialize<'de> for ObjectRequest {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ObjectRequest, D::Error> {
            d.deserialize_enum("ObjectRequest", VARIANTS, RequestVisitor)
        }
    }
}

/// One call: the run (the object's name) and the request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectCall {
    /// Run id.
    pub run_id: String,
    /// What to do.
    pub request: ObjectRequest,
}

/// The object's answer, as text: `<rows written> ok <value JSON>` or `<rows written> err <error JSON>` (the
/// request's value as [`ObjectRequest`] names it, or its error, and the storage rows the request wrote). Plain
/// text around the JSON, so a caller decodes only the value it expects (no wrapper type per value).
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectReply<'a> {
    /// The value's JSON, or the error.
    pub value: std::result::Result<&'a str, Error>,
    /// Storage rows the request wrote.
    pub rows_written: u64,
}

impl ObjectReply<'_> {
    /// Reads an answer; one that is not an answer is `STEADFAST_STORE_UNAVAILABLE` (what came back was not the
    /// object speaking).
    pub fn parse(raw: &str) -> Result<ObjectReply<'_>> {
        let bad = |why: &str| Error::new(ErrorCode::StoreUnavailable, format!("the run object's answer {why}"));
        let (rows, rest) = raw.split_once(' ').ok_or_else(|| bad("is not one"))?;
        let rows_written = rows.parse().map_err(|_| bad("has no row count"))?;
        let value = match rest.split_once(' ') {
            Some(("ok", json)) => Ok(json),
            Some(("err", json)) => Err(serde_json::from_str(json).map_err(|e| bad(&format!("has no error: {e}")))?),
            _ => return Err(bad("is neither a value nor an error")),
        };
        Ok(ObjectReply { value, rows_written })
    }
}

fn corrupt(run_id: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::CheckpointCorrupt, format!("run '{run_id}': {what} cannot be read: {e}")).with_run(run_id)
}

fn encode<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(format!("cannot encode: {e}")))
}

/// Splits `s` into parts of at most `max` bytes, at character boundaries.
pub(crate) fn split_parts(s: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while rest.len() > max {
        let mut cut = max;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    out.push(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance;
    use crate::store::{MemoryKv, RunStore};
    use crate::time::{Clock, ManualClock};
    use std::rc::Rc;

    fn store(objects: &LocalObjects, kv: &MemoryKv, clock: &ManualClock) -> ObjectStore<LocalObjects, MemoryKv> {
        ObjectStore::new(
            objects.clone(),
            kv.clone(),
            "",
            Rc::new(clock.clone()),
            Rc::new(crate::time::ManualSleep::new(clock.clone())),
        )
    }

    #[test]
    fn object_store_conforms_with_strict_fencing() {
        futures::executor::block_on(async {
            let caps = conformance::Capabilities { strict_fencing: true };
            conformance::run_all(
                &|clock| {
                    let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
                    (store(&objects, &kv, clock), store(&objects, &kv, clock))
                },
                &caps,
            )
            .await;
        });
    }

    /// Entries and journals of any size are recorded and read (split over rows); approval records and state
    /// documents over KV's value limit are refused.
    #[test]
    fn object_store_records_entries_of_any_size_and_refuses_oversized_records() {
        futures::executor::block_on(async {
            let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
            let clock = ManualClock::new(1_700_000_000_000);
            let (a, b) = (store(&objects, &kv, &clock), store(&objects, &kv, &clock));
            conformance::large_entry_commits_and_loads_back(&a, &b, &clock).await;
            conformance::journal_over_a_bulk_read_loads_and_continues(&a, &b, &clock).await;
            conformance::records_over_the_value_limit_are_refused_and_write_nothing(&a).await;
        });
    }

    #[test]
    fn a_call_that_cannot_be_decoded_is_refused_as_invalid_input_and_writes_nothing() {
        let core = RunObjectCore::new(MemoryObjectStorage::default());
        for bad in ["", "{", "{\"runId\":\"r\"}", "{\"runId\":\"r\",\"request\":{\"explode\":{}}}"] {
            let raw = core.handle_json(bad);
            let reply = ObjectReply::parse(&raw).unwrap();
            assert_eq!(reply.value.map_err(|e| e.code), Err(ErrorCode::InvalidInput), "{bad}");
            assert_eq!(reply.rows_written, 0);
        }
    }

    #[test]
    fn an_unreadable_journal_row_loads_as_corrupt_and_stays_listed() {
        futures::executor::block_on(async {
            let clock = ManualClock::new(1_000);
            let objects = LocalObjects::default();
            let s = store(&objects, &MemoryKv::new(), &clock);
            let lease = conformance::acquired(&s, "c", "o", clock.now_ms(), &LeaseOptions::default(), "lease").await;
            let (e1, cp1) = conformance::snapshot_entry("c", "x", clock.now_ms());
            s.commit(&lease, &e1, &cp1).await.unwrap();
            objects.object("c").storage().corrupt_last_row();
            assert_eq!(s.load("c").await.unwrap_err().code, ErrorCode::CheckpointCorrupt);
            let pending = s.pending().await.unwrap();
            assert_eq!(pending.len(), 1);
            assert_eq!(pending[0].last_error.as_ref().map(|e| e.code), Some(ErrorCode::CheckpointCorrupt));
        });
    }

    /// The derive the hand-written reader of [`ObjectRequest`] replaced, kept to compare with (written as the
    /// same JSON).
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
    enum DerivedRequest {
        Load,
        Acquire { owner: String, now_ms: u64, opts: LeaseOptions },
        Renew { lease: Lease, now_ms: u64, opts: LeaseOptions },
        Release { lease: Lease },
        Commit { lease: Lease, seq: u64, snapshot: bool, entry: String },
        Delete,
        History,
        PutApproval { id: String, record: String },
        GetApproval { id: String },
        ListApprovals,
        DeleteApproval { id: String },
        PutQueued { key: String, message: String },
        ListQueued,
        DeleteQueued { key: String },
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct DerivedCall {
        #[allow(dead_code)]
        run_id: String,
        request: DerivedRequest,
    }

    /// The hand-written reader accepts what the derive accepted, as the same request, and refuses what it
    /// refused.
    #[test]
    fn the_request_reader_reads_what_the_derive_read() {
        let lease = r#"{"runId":"r","owner":"o","epoch":3,"expiresAt":9}"#;
        let mut requests = vec![
            r#""load""#.to_string(),
            r#"{"load":null}"#.to_string(),
            r#"{"load":{}}"#.to_string(),
            r#""acquire""#.to_string(),
            r#"{"acquire":{"owner":"o","nowMs":5,"opts":{"ttlMs":1}}}"#.to_string(),
            r#"{"acquire":{"opts":{},"nowMs":5,"owner":"o","extra":[1,{"a":2}]}}"#.to_string(),
            r#"{"acquire":{"owner":"o","nowMs":5}}"#.to_string(),
            r#"{"acquire":{"owner":"o","owner":"p","nowMs":5,"opts":{}}}"#.to_string(),
            r#"{"acquire":{"owner":5,"nowMs":5,"opts":{}}}"#.to_string(),
            r#"{"acquire":{"owner":"o","nowMs":-5,"opts":{}}}"#.to_string(),
            r#"{"acquire":["o",5,{"graceMs":2}]}"#.to_string(),
            r#"{"acquire":["o",5]}"#.to_string(),
            r#"{"acquire":["o",5,{},1]}"#.to_string(),
            r#"{"acquire":null}"#.to_string(),
            r#"{"acquire":{"owner":"o","nowMs":5,"opts":{}},"load":null}"#.to_string(),
            r#"{"Acquire":{"owner":"o","nowMs":5,"opts":{}}}"#.to_string(),
            r#"{"now_ms":1}"#.to_string(),
            r#"{}"#.to_string(),
            r#"[]"#.to_string(),
            r#"null"#.to_string(),
            r#""explode""#.to_string(),
            format!(r#"{{"renew":{{"lease":{lease},"nowMs":1,"opts":{{}}}}}}"#),
            format!(r#"{{"renew":{{"lease":{lease},"opts":{{}}}}}}"#),
            format!(r#"{{"release":{{"lease":{lease}}}}}"#),
            format!(r#"{{"release":{{"lease":{lease},"owner":7}}}}"#),
            format!(r#"{{"release":[{lease}]}}"#),
            r#"{"release":{"lease":{"runId":"r"}}}"#.to_string(),
            format!(r#"{{"commit":{{"lease":{lease},"seq":2,"snapshot":true,"entry":"{{}}"}}}}"#),
            format!(r#"{{"commit":{{"lease":{lease},"seq":2,"snapshot":1,"entry":"e"}}}}"#),
            format!(r#"{{"commit":{{"lease":{lease},"seq":2,"entry":"e"}}}}"#),
            format!(r#"{{"commit":[{lease},2,false,"e"]}}"#),
            format!(r#"{{"commit":{{"lease":{lease},"lease":{lease},"seq":2,"snapshot":true,"entry":"e"}}}}"#),
        ];
        for (name, fields) in [
            ("putApproval", r#"{"id":"a","record":"{}"}"#),
            ("putApproval", r#"{"id":"a"}"#),
            ("putApproval", r#"{"record":"r","id":"a","id":"b"}"#),
            ("getApproval", r#"{"id":"a"}"#),
            ("getApproval", r#"["a"]"#),
            ("getApproval", r#"{"key":"a"}"#),
            ("deleteApproval", r#"{"id":"a","record":3}"#),
            ("deleteApproval", r#"{}"#),
            ("putQueued", r#"{"key":"k","message":"m"}"#),
            ("putQueued", r#"["k","m"]"#),
            ("putQueued", r#"{"key":"k","message":null}"#),
            ("deleteQueued", r#"{"key":"k"}"#),
            ("deleteQueued", r#"{"id":"k"}"#),
            ("listQueued", "null"),
            ("listQueued", "[]"),
            ("listApprovals", "null"),
            ("delete", "null"),
            ("history", "null"),
            ("history", "1"),
        ] {
            requests.push(format!(r#"{{"{name}":{fields}}}"#));
            requests.push(format!(r#""{name}""#));
        }
        let mut accepted = 0;
        for request in &requests {
            let call = format!(r#"{{"runId":"r","request":{request}}}"#);
            for text in [request, &call] {
                let new = serde_json::from_str::<ObjectRequest>(text)
                    .or_else(|_| serde_json::from_str::<ObjectCall>(text).map(|c| c.request))
                    .map(|r| serde_json::to_string(&r).unwrap());
                let old = serde_json::from_str::<DerivedRequest>(text)
                    .or_else(|_| serde_json::from_str::<DerivedCall>(text).map(|c| c.request))
                    .map(|r| serde_json::to_string(&r).unwrap());
                assert_eq!(new.as_ref().ok(), old.as_ref().ok(), "{text}: {new:?} / {old:?}");
                accepted += usize::from(new.is_ok());
            }
        }
        assert!(accepted > 30, "{accepted}");
    }

    #[test]
    fn parts_split_at_character_boundaries_and_join_back() {
        for (s, max) in [("", 3), ("abc", 3), ("abcd", 3), ("ééé", 3), ("a€b€c", 4), ("€€€€", 3)] {
            let parts = split_parts(s, max);
            assert!(parts.iter().all(|p| p.len() <= max), "{s} {max}: {parts:?}");
            assert_eq!(parts.concat(), s);
        }
    }
}
