//! Watching a run (M22): its recorded events from the journal from a [`Cursor`] on, then the new ones as they
//! are committed, until the run finishes or pauses.
//!
//! Recorded events (`step`, `tool.done`, `approval.requested`, `error`, `run.done`) come from the journal
//! ([`recorded_events`]), so a watcher that joins late, or comes back with the last position it saw, gets each
//! of them once and in journal order, whoever executes the run. After each entry the watcher is told its
//! position ([`Watched::Through`]), which is what it resumes from.
//!
//! How new entries are noticed depends on where the run executes:
//! * with a [`Watchers`] hub that sees the executions (a run object in strict mode, where every execution of its
//!   run happens in the object): at once, and the events the journal does not record (`tool.start`, deltas,
//!   `run.start`, `heal.action`, …) are passed on live as well;
//! * without one (KV mode: the run may execute in another isolate or location): by reading the run again every
//!   [`WatchOptions::poll_ms`] — recorded events only, as KV makes them visible. Its sub-agents' child runs (any
//!   depth) are read with it, and their recorded events sent tagged ([`Watched::Child`]), each child's before
//!   the entry that records its call's result: from the child's start when the watch saw the call made (or
//!   cannot tell: a gap), else (a watcher that came back after the call) from where the child is when first
//!   read. A child that cannot be read is reported as its `error` event; the watch of the run goes on.

use super::agent::Agent;
use super::traits::{EventSink, LocalFuture};
use crate::core::checkpoint::{Checkpoint, RunStatus};
use crate::core::error::Result;
use crate::core::events::{Event, EventEnvelope, SubagentTag};
use crate::core::ids::{subagent_path, validate_run_id};
use crate::core::replay::{end_of, is_recorded, recorded_events, Cursor};
use futures::channel::mpsc;
use futures::StreamExt;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// The recorded events of a run after a journal position ([`Agent::replay`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// `(after, until)`: the journal no longer holds the entries after `after` up to `until` (their events are
    /// lost to this replay; see [`Event::ReplayGap`]).
    pub gap: Option<(u64, u64)>,
    /// Each entry after the position: its journal position, when it was saved (ms since the epoch) and its
    /// events.
    pub entries: Vec<(u64, u64, Vec<Event>)>,
    /// The run's newest state read.
    pub latest: Checkpoint,
}

/// What a watcher is sent, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Watched {
    /// An event: recorded, replayed from the journal (with the time its entry was saved), or live from the hub
    /// (`None`: now).
    Event(Event, Option<u64>),
    /// An event of one of the run's sub-agents' child runs (any depth), with its own `runId`, `seq` and
    /// `subagent` tag: with a hub that sees the executions (strict mode's run object), live as it happens and
    /// only while the watch waits there; without one (KV mode), its recorded events read from the child's
    /// journal as the run is read (`seq` counts the child's events in this watch).
    Child(EventEnvelope),
    /// The same, as its JSON: an event of a child run that executed elsewhere (strict mode: in its own object),
    /// relayed to the hub as it came ([`EventSink::relay`]).
    ChildJson(String),
    /// The watcher has now seen everything through this cursor (the SSE `id:`).
    Through(Cursor),
    /// Nothing new: the watch is about to wait (answer `false` if the watcher is gone, and it stops reading the
    /// run).
    Waiting,
}

/// Where a watch sends what it sees ([`Agent::watch`]). A closure `Fn(Watched) -> bool` is one that takes each
/// entry at once.
pub trait WatchSink {
    /// Takes one item; `false`: the watcher is gone (the watch stops).
    fn push(&self, item: Watched) -> bool;

    /// Resolves once the watcher has taken what it was sent, so a replay of the journal goes on at the watcher's
    /// pace, one entry at a time; `false`: the watcher is gone. Default: at once.
    fn drained(&self) -> LocalFuture<'_, bool> {
        Box::pin(std::future::ready(true))
    }
}

impl<F: Fn(Watched) -> bool> WatchSink for F {
    fn push(&self, item: Watched) -> bool {
        self(item)
    }
}

/// How a watch waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchOptions {
    /// How often the run is read again when nothing tells the watcher of a new entry (no hub; with one, as a
    /// fallback).
    pub poll_ms: u64,
    /// How long one watch lasts at most; the watcher then comes back with its last cursor.
    pub max_ms: u64,
}

impl WatchOptions {
    /// How often a watch told by a hub of watchers reads the run anyway (a fallback; the hub tells it at once).
    pub const HUB_POLL_MS: u64 = 10_000;
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions { poll_ms: 2_000, max_ms: 300_000 }
    }
}

/// How a watch answers before it streams ([`Agent::watch_start`]).
#[derive(Clone, Debug, PartialEq)]
pub enum WatchStart {
    /// No such run.
    NotFound,
    /// The watcher has seen the run end at its newest position: nothing to send.
    UpToDate,
    /// There is something to send, or to wait for.
    Stream,
}

impl Agent {
    /// The recorded events of run `run_id` after journal position `after` (0: from its start), and its newest
    /// state; `None` when there is no such run. The journal keeps a run's newest states only (the store's
    /// history limit): events older than those are reported as a gap. Reads the run and its history.
    pub async fn replay(&self, run_id: &str, after: u64) -> Result<Option<Replay>> {
        validate_run_id(run_id)?;
        let store = self.store();
        let Some(cp) = store.load(run_id).await? else { return Ok(None) };
        // The first entry records the input (and, for a fork or a session's turn, the conversation it starts
        // from): no event of its own.
        let after = after.max(1);
        if cp.seq <= after {
            return Ok(Some(Replay { gap: None, entries: Vec::new(), latest: cp }));
        }
        let want = usize::try_from(cp.seq - after + 1).unwrap_or(usize::MAX);
        let mut states = store.history(run_id, want).await?;
        states.reverse();
        // The base: the newest state at or before `after`, else the oldest kept (with a gap before it).
        let start = states.iter().rposition(|s| s.seq <= after).unwrap_or(0);
        let Some(base) = states.get(start) else {
            return Ok(Some(Replay { gap: None, entries: Vec::new(), latest: cp }));
        };
        let gap = (base.seq > after).then_some((after, base.seq));
        let mut entries = Vec::new();
        for pair in states[start..].windows(2) {
            entries.push((pair[1].seq, pair[1].saved_at, recorded_events(&pair[0].checkpoint, &pair[1].checkpoint)));
        }
        let latest = match states.last() {
            Some(s) if s.seq > cp.seq => s.checkpoint.clone(),
            _ => cp,
        };
        Ok(Some(Replay { gap, entries, latest }))
    }

    /// Whether a watch of `run_id` from `from` has anything to send: [`WatchStart::UpToDate`] when the watcher
    /// saw the run end at its newest position (an SSE client told so stops coming back: HTTP 204).
    pub async fn watch_start(&self, run_id: &str, from: Cursor) -> Result<WatchStart> {
        validate_run_id(run_id)?;
        Ok(match self.store().load(run_id).await? {
            None => WatchStart::NotFound,
            Some(cp) if from.ended && cp.seq <= from.position && cp.status != RunStatus::InProgress => {
                WatchStart::UpToDate
            }
            Some(_) => WatchStart::Stream,
        })
    }

    /// Watches run `run_id` from `from`: sends `sink` the recorded events after it and each position reached
    /// (the next entry once the sink has taken the last one: [`WatchSink::drained`]), then waits for more (told
    /// by `hub`, or reading the run every [`WatchOptions::poll_ms`]), until the run is finished or paused (a last
    /// `run.done` and the cursor `<position>.done`), the sink answers `false` (the watcher left), or
    /// [`WatchOptions::max_ms`] passed (also while waiting for the sink). A run deleted meanwhile ends the watch
    /// with an `error` event.
    pub async fn watch(
        &self,
        run_id: &str,
        from: Cursor,
        hub: Option<&Watchers>,
        opts: WatchOptions,
        sink: &dyn WatchSink,
    ) -> Result<()> {
        let push = |item| sink.push(item);
        validate_run_id(run_id)?;
        // Subscribed before the first read: an entry committed meanwhile is noticed, not missed.
        let mut sub = hub.map(|h| h.subscribe(run_id));
        // Without a hub, the run's child runs are read with it.
        let mut kids = hub.is_none().then(ChildReads::default);
        let deadline = self.deps.now().saturating_add(opts.max_ms);
        let mut pos = from.position;
        loop {
            let Some(r) = self.replay(run_id, pos).await? else {
                let gone = crate::core::error::Error::new(
                    crate::core::error::ErrorCode::CheckpointNotFound,
                    format!("run '{run_id}' was deleted"),
                );
                push(Watched::Event(Event::Error { error: gone.info() }, None));
                return Ok(());
            };
            if let Some((after, until)) = r.gap {
                if !push(Watched::Event(Event::ReplayGap { after, until }, None)) {
                    return Ok(());
                }
            }
            if let Some(kids) = kids.as_mut() {
                self.read_children(kids, &r).await;
            }
            let mut ended_at = None;
            for (position, saved_at, events) in r.entries {
                if let Some(kids) = kids.as_mut() {
                    // A child's events before the entry that records its call's result.
                    for e in &events {
                        if let Event::ToolDone { tool_call_id, .. } = e {
                            if !kids.send_call(run_id, tool_call_id, &push) {
                                return Ok(());
                            }
                        }
                    }
                }
                for e in events {
                    if matches!(e, Event::RunDone { .. }) {
                        ended_at = Some(position);
                    }
                    if !push(Watched::Event(e, Some(saved_at))) {
                        return Ok(());
                    }
                }
                pos = position;
                if !push(Watched::Through(Cursor { position, ended: false })) {
                    return Ok(());
                }
                if !self.drained(sink, deadline).await {
                    return Ok(());
                }
            }
            if let Some(kids) = kids.as_mut() {
                if !kids.send_all(&push) {
                    return Ok(());
                }
            }
            let cp = &r.latest;
            pos = pos.max(cp.seq);
            if cp.status != RunStatus::InProgress {
                // Sent unless the entry that ended the run said so already (here, or before the cursor).
                let said = ended_at == Some(pos) || (ended_at.is_none() && self.entry_ends(run_id, pos).await?);
                if !said {
                    push(Watched::Event(end_of(cp), Some(cp.saved_at)));
                }
                push(Watched::Through(Cursor { position: pos, ended: true }));
                return Ok(());
            }
            let now = self.deps.now();
            if now >= deadline {
                return Ok(());
            }
            if !push(Watched::Waiting) {
                return Ok(());
            }
            let wait = opts.poll_ms.max(1).min(deadline - now);
            if !self.wait_for_news(sub.as_mut(), wait, &push).await {
                return Ok(());
            }
        }
    }

    /// Reads the child runs below the run (any depth) for a watch without a hub, after reading the run (`r`):
    /// each child's new entries are held in `kids` to be sent. A child whose call the watch has not seen made
    /// (it was made before the watcher's cursor: a watcher that comes back) is read from where it is now; the
    /// others, and every child when the run's kept history no longer reaches the cursor, from their start.
    ///
    /// A child that cannot be read is no reason to stop watching the run: a read that may succeed later
    /// (retryable) is tried again at the next read; any other failure (a corrupt journal) is sent as the
    /// child's `error` event and the child is not read again. A child whose kept history no longer reaches
    /// back to where the watch reads it from gets a `replay.gap` event first, as a run does.
    async fn read_children(&self, kids: &mut ChildReads, r: &Replay) {
        let seen_made = |call: &str| {
            r.entries.iter().flat_map(|(_, _, es)| es).any(|e| match e {
                Event::Step { tool_calls, .. } => tool_calls.iter().any(|c| c.id == call),
                _ => false,
            })
        };
        let first = !kids.started;
        kids.started = true;
        // The run's kept history does not reach back to the watcher's cursor: whether a call was made before it
        // cannot be told, so its child is read from its start (at least once rather than never).
        let cannot_tell = first && r.gap.is_some();
        let mut below = VecDeque::from([(r.latest.run_id.clone(), self.deps.child_calls(&r.latest), !first)]);
        while let Some((parent, calls, parent_new)) = below.pop_front() {
            for (name, call_id, child_id) in calls {
                let i = match kids.runs.iter().position(|c| c.run_id == child_id) {
                    Some(i) => i,
                    None => {
                        let depth = u32::try_from(subagent_path(&child_id).len()).unwrap_or(u32::MAX);
                        let new = parent_new || cannot_tell || seen_made(&call_id);
                        let tag = SubagentTag { name, depth, parent: parent.clone(), tool_call_id: Some(call_id) };
                        kids.runs.push(ChildRead::new(child_id, tag, new));
                        kids.runs.len() - 1
                    }
                };
                let c = &mut kids.runs[i];
                if c.over {
                    continue;
                }
                if !c.new {
                    // Read from where it is now.
                    let Some(cp) = c.unless_failed(self.store().load(&c.run_id).await, self.deps.now()) else {
                        continue;
                    };
                    (c.new, c.pos) = (true, cp.seq);
                    c.over = cp.status == RunStatus::Finished;
                    below.push_back((c.run_id.clone(), self.deps.child_calls(&cp), false));
                    continue;
                }
                // Not started yet, or deleted: read again next time.
                let Some(read) = c.unless_failed(self.replay(&c.run_id, c.pos).await, self.deps.now()) else {
                    continue;
                };
                if let Some((after, until)) = read.gap {
                    c.held.push_back((self.deps.now(), vec![Event::ReplayGap { after, until }]));
                }
                for (position, saved_at, events) in read.entries {
                    c.pos = position;
                    c.held.push_back((saved_at, events));
                }
                c.pos = c.pos.max(read.latest.seq);
                c.over = read.latest.status == RunStatus::Finished;
                below.push_back((c.run_id.clone(), self.deps.child_calls(&read.latest), true));
            }
        }
    }

    /// Waits until `sink` has taken what it was sent: `false` when it is gone, or when the watch's `deadline`
    /// passes first (the watcher comes back with its last cursor).
    async fn drained(&self, sink: &dyn WatchSink, deadline: u64) -> bool {
        let left = deadline.saturating_sub(self.deps.now());
        let sleep = self.deps.sleep.clone();
        let timer = sleep.sleep(left);
        let drained = sink.drained();
        futures::pin_mut!(timer);
        match futures::future::select(drained, timer).await {
            futures::future::Either::Left((taken, _)) => taken,
            futures::future::Either::Right(_) => false,
        }
    }

    /// Whether the entry at `position` recorded the run's end (its events hold a `run.done`).
    async fn entry_ends(&self, run_id: &str, position: u64) -> Result<bool> {
        let states = self.store().history(run_id, 2).await?;
        Ok(match states.as_slice() {
            [last, before, ..] if last.seq == position && before.seq + 1 == position => {
                recorded_events(&before.checkpoint, &last.checkpoint).iter().any(|e| matches!(e, Event::RunDone { .. }))
            }
            _ => false,
        })
    }

    /// Waits up to `ms` for news of the run, passing on the hub's live events meanwhile. `false`: the watcher
    /// left.
    async fn wait_for_news(&self, sub: Option<&mut Subscription>, ms: u64, push: &dyn Fn(Watched) -> bool) -> bool {
        let sleep = self.deps.sleep.clone();
        let timer = sleep.sleep(ms);
        futures::pin_mut!(timer);
        let Some(sub) = sub else {
            timer.await;
            return true;
        };
        loop {
            let next = sub.next();
            futures::pin_mut!(next);
            match futures::future::select(next, timer.as_mut()).await {
                futures::future::Either::Left((HubItem::Event(e), _)) => {
                    if !push(Watched::Event(e, None)) {
                        return false;
                    }
                }
                futures::future::Either::Left((HubItem::Child(e), _)) => {
                    if !push(Watched::Child(e)) {
                        return false;
                    }
                }
                futures::future::Either::Left((HubItem::ChildJson(e), _)) => {
                    if !push(Watched::ChildJson(e)) {
                        return false;
                    }
                }
                futures::future::Either::Left((HubItem::Changed, _)) | futures::future::Either::Right(_) => {
                    return true
                }
            }
        }
    }
}

/// What a watch without a hub knows of the run's child runs ([`Agent::read_children`]): KV mode, where a child
/// may execute anywhere, so the watch reads each child as it reads the run. A child's recorded events are sent
/// as [`Watched::Child`] (its own run id, a `seq` of its own in the watch, the sub-agent tag), before the entry of
/// its parent that records the call's result, so they come between the call and its result as they happened.
#[derive(Default)]
struct ChildReads {
    /// Every child run seen, in the order first seen.
    runs: Vec<ChildRead>,
    /// Whether the children were read once.
    started: bool,
}

/// One child run in a watch.
struct ChildRead {
    run_id: String,
    tag: SubagentTag,
    /// Read from its start (or from where it was when first seen, then set).
    new: bool,
    /// The journal position read through.
    pos: u64,
    /// The `seq` of its next event in this watch.
    seq: u64,
    /// Entries read and not sent yet: when each was saved, its events.
    held: VecDeque<(u64, Vec<Event>)>,
    /// Finished and read through its end: not read again.
    over: bool,
}

impl ChildRead {
    fn new(run_id: String, tag: SubagentTag, new: bool) -> ChildRead {
        ChildRead { run_id, tag, new, pos: 0, seq: 0, held: VecDeque::new(), over: false }
    }

    /// What a read of this child found (`None`: nothing, or it failed). A failure that is not retryable is
    /// held as the child's `error` event at `now`, and the child is over.
    fn unless_failed<T>(&mut self, read: Result<Option<T>>, now: u64) -> Option<T> {
        match read {
            Ok(found) => found,
            Err(e) if e.retryable => None,
            Err(e) => {
                self.held.push_back((now, vec![Event::Error { error: e.info() }]));
                self.over = true;
                None
            }
        }
    }
}

impl ChildReads {
    /// Sends what is held of the child that `parent`'s call `call_id` runs (its own children's first, each
    /// before the entry that records its call's result). `false`: the watcher left.
    fn send_call(&mut self, parent: &str, call_id: &str, push: &dyn Fn(Watched) -> bool) -> bool {
        match self.runs.iter().position(|c| c.tag.parent == parent && c.tag.tool_call_id.as_deref() == Some(call_id)) {
            Some(i) => self.send(i, push),
            None => true,
        }
    }

    /// Sends what is held of every child, in the order first seen. `false`: the watcher left.
    fn send_all(&mut self, push: &dyn Fn(Watched) -> bool) -> bool {
        (0..self.runs.len()).all(|i| self.send(i, push))
    }

    fn send(&mut self, i: usize, push: &dyn Fn(Watched) -> bool) -> bool {
        while let Some((saved_at, events)) = self.runs[i].held.pop_front() {
            for e in &events {
                if let Event::ToolDone { tool_call_id, .. } = e {
                    let parent = self.runs[i].run_id.clone();
                    if !self.send_call(&parent, tool_call_id, push) {
                        return false;
                    }
                }
            }
            let c = &mut self.runs[i];
            for event in events {
                let seq = c.seq;
                c.seq += 1;
                let e = EventEnvelope {
                    v: crate::core::events::EVENT_SCHEMA_VERSION,
                    seq,
                    run_id: c.run_id.clone(),
                    at: saved_at,
                    subagent: Some(c.tag.clone()),
                    event,
                };
                if !push(Watched::Child(e)) {
                    return false;
                }
            }
        }
        true
    }
}

/// What a hub tells one subscriber.
enum HubItem {
    /// An event the journal does not record.
    Event(Event),
    /// An event of a child run below the run (every one: the run's journal has none of them).
    Child(EventEnvelope),
    /// The same, relayed as its JSON from where the child executed.
    ChildJson(String),
    /// The run has a new entry, or an execution of it ended: read it again.
    Changed,
}

/// One subscriber: the run it watches and the sending half of its queue (closed once the [`Subscription`] is
/// dropped).
struct Sub {
    run_id: String,
    tx: mpsc::UnboundedSender<HubItem>,
}

/// A hub of watchers, as an [`EventSink`] an agent's executions report to ([`super::AgentBuilder::observer`]):
/// each subscriber of a run gets that run's unrecorded events as they happen and a nudge at every commit and
/// at the end of every execution. Clones share the hub; a dropped subscription leaves it.
#[derive(Clone, Default)]
pub struct Watchers(Rc<RefCell<Vec<Sub>>>);

/// One watcher's place in a [`Watchers`] hub: the receiving half of its queue (unbounded: the hub never waits
/// for a watcher, and a watcher takes its items whenever it waits for news).
pub struct Subscription(mpsc::UnboundedReceiver<HubItem>);

impl Watchers {
    /// A new empty hub.
    pub fn new() -> Watchers {
        Watchers::default()
    }

    fn subscribe(&self, run_id: &str) -> Subscription {
        let (tx, rx) = mpsc::unbounded();
        let mut subs = self.0.borrow_mut();
        subs.retain(|s| !s.tx.is_closed());
        subs.push(Sub { run_id: run_id.to_string(), tx });
        Subscription(rx)
    }

    /// How many watchers are subscribed.
    pub fn len(&self) -> usize {
        self.0.borrow().iter().filter(|s| !s.tx.is_closed()).count()
    }

    /// Whether no watcher is subscribed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tell(&self, run_id: &str, item: impl Fn() -> HubItem) {
        // Sent outside the borrow: a send wakes the subscriber's task, which may subscribe or leave.
        let txs: Vec<_> = self.0.borrow().iter().filter(|s| s.run_id == run_id).map(|s| s.tx.clone()).collect();
        for tx in txs {
            // Ignored: a send fails only when the subscriber left (its subscription dropped); it is pruned at the
            // next subscribe.
            let _ = tx.unbounded_send(item());
        }
    }
}

impl EventSink for Watchers {
    fn emit(&self, e: &EventEnvelope) {
        // A child run's events go to the watchers of each run above it as well.
        let mut above = e.subagent.as_ref().map(|_| e.run_id.as_str());
        while let Some((parent, _)) = above.and_then(crate::core::ids::subagent_parent) {
            self.tell(parent, || HubItem::Child(e.clone()));
            above = Some(parent);
        }
        if matches!(e.event, Event::RunDone { .. }) {
            // The execution ended: whatever it recorded last is read from the journal.
            self.tell(&e.run_id, || HubItem::Changed);
        } else if !is_recorded(&e.event) {
            self.tell(&e.run_id, || HubItem::Event(e.event.clone()));
        }
    }

    fn durable(&self, run_id: &str, _position: u64) {
        self.tell(run_id, || HubItem::Changed);
    }

    fn relay(&self, run_id: &str, json: &str) {
        // Its run's own watchers are its own object's; the runs above it are told here.
        let mut above = Some(run_id);
        while let Some((parent, _)) = above.and_then(crate::core::ids::subagent_parent) {
            self.tell(parent, || HubItem::ChildJson(json.to_string()));
            above = Some(parent);
        }
    }
}

impl Subscription {
    /// The next item. The queue never ends while the hub lives; if the hub is dropped, this waits forever (the
    /// watch's timer ends the wait, and the run is read again).
    async fn next(&mut self) -> HubItem {
        match self.0.next().await {
            Some(item) => item,
            None => futures::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::events::EVENT_SCHEMA_VERSION;
    use futures::FutureExt;

    fn start(run_id: &str, step: u32) -> EventEnvelope {
        let event = Event::RunStart { resumed: false, step };
        EventEnvelope { v: EVENT_SCHEMA_VERSION, seq: 0, run_id: run_id.into(), at: 0, subagent: None, event }
    }

    fn taken(sub: &mut Subscription) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(item) = sub.next().now_or_never() {
            out.push(match item {
                HubItem::Event(Event::RunStart { step, .. }) => format!("start {step}"),
                HubItem::Event(e) => format!("{e:?}"),
                HubItem::Child(e) => format!("child {} {}", e.run_id, e.seq),
                HubItem::ChildJson(e) => format!("relayed {e}"),
                HubItem::Changed => "changed".into(),
            });
        }
        out
    }

    #[test]
    fn a_hub_queues_each_subscriber_its_runs_items_in_order_and_a_dropped_subscription_leaves_it() {
        let hub = Watchers::new();
        let (mut a, mut a2, b) = (hub.subscribe("run-a"), hub.subscribe("run-a"), hub.subscribe("run-b"));
        assert_eq!(hub.len(), 3);
        hub.emit(&start("run-a", 1));
        hub.durable("run-a", 4);
        hub.emit(&start("run-c", 9));
        hub.emit(&start("run-a", 2));
        assert_eq!(taken(&mut a), ["start 1", "changed", "start 2"]);
        assert_eq!(taken(&mut a), Vec::<String>::new(), "nothing more: the next item is waited for");
        drop(b);
        assert_eq!(hub.len(), 2, "a dropped subscription leaves the hub");
        hub.durable("run-b", 1);
        hub.durable("run-a", 5);
        assert_eq!(taken(&mut a2), ["start 1", "changed", "start 2", "changed"]);
        drop(hub);
        assert_eq!(taken(&mut a), ["changed"]);
        assert!(a.next().now_or_never().is_none(), "without its hub a subscription waits (for the watch's timer)");
    }

    #[test]
    fn a_child_runs_events_reach_the_subscribers_of_every_run_above_it_as_they_came() {
        let hub = Watchers::new();
        let child = crate::core::ids::subagent_run_id("lead", "plan", "0123456789abcdef").unwrap();
        let grandchild = crate::core::ids::subagent_run_id(&child, "look", "fedcba9876543210").unwrap();
        let (mut lead, mut mid, mut low, mut other) =
            (hub.subscribe("lead"), hub.subscribe(&child), hub.subscribe(&grandchild), hub.subscribe("other"));
        let tagged = |run_id: &str, seq: u64, name: &str, depth: u32, parent: &str| {
            let tag = crate::core::events::SubagentTag {
                name: name.into(),
                depth,
                parent: parent.into(),
                tool_call_id: None,
            };
            EventEnvelope { seq, subagent: Some(tag), ..start(run_id, 1) }
        };
        hub.emit(&tagged(&grandchild, 0, "look", 2, &child));
        hub.emit(&tagged(&child, 3, "plan", 1, "lead"));
        hub.emit(&start("lead", 2));
        assert_eq!(taken(&mut lead), [format!("child {grandchild} 0"), format!("child {child} 3"), "start 2".into()]);
        assert_eq!(taken(&mut mid), [format!("child {grandchild} 0"), "start 1".into()]);
        assert_eq!(taken(&mut low), ["start 1"], "its own run's events, as for any run");
        assert_eq!(taken(&mut other), Vec::<String>::new());
        // Untagged, an event reaches its own run's subscribers only.
        hub.emit(&start(&grandchild, 5));
        assert_eq!(taken(&mut lead), Vec::<String>::new());
        assert_eq!(taken(&mut low), ["start 5"]);
    }
}
