//! The hub: the live subscriptions of one worker, by table, and the fan-out of captured changes
//! to them. Changes are dispatched in log order under one lock, which is also taken to
//! register a subscription, so a subscription is live exactly after the last dispatched id
//! (no gap, no duplicate). Each change is matched in memory (`rowgate-query`'s evaluator, no
//! query per subscriber) against the subscriptions of its table only, and serialised once per
//! distinct (column view, event kind): subscribers with the same view get the same bytes.
//!
//! A subscriber whose outbound queue is full is not waited for: its connection is told to
//! close (1013) and the others go on.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rowgate_query::ast::Condition;
use serde_json::{Map, Value as Json};
use tokio::sync::Notify;

use super::capture::{Change, Op};
use super::index::{Indexed, Ref, TableSubs};
pub use super::protocol::Event;
use super::protocol::{self, close, Kind};
use super::supabase::Binding;
use super::visibility::{Audience, Side, Verdicts};
use crate::auth::{Principal, Standing};
use crate::engine::document_write::DocumentRead;
use crate::observe::Metrics;

/// The columns a role may read of a table (`None`: all); interned, so equal views are one
/// allocation and frames are cached per view.
#[derive(Debug, PartialEq, Eq)]
pub struct View {
    columns: Option<HashSet<String>>,
}

impl View {
    /// A view of the given readable columns (`None`: all).
    pub fn new(columns: Option<HashSet<String>>) -> View {
        View { columns }
    }

    /// Whether the view shows `column`.
    pub fn shows(&self, column: &str) -> bool {
        self.columns
            .as_ref()
            .is_none_or(|cols| cols.contains(column))
    }

    /// `row` with only the view's columns.
    pub fn project(&self, row: Option<&Map<String, Json>>) -> Option<Map<String, Json>> {
        let row = row?;
        Some(match &self.columns {
            None => row.clone(),
            Some(cols) => row
                .iter()
                .filter(|(k, _)| cols.contains(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }
}

/// One connection's side that the hub holds: its bounded queue and a way to close it. The
/// queue is a plain deque that allocates only while events wait (an idle connection holds no
/// queue memory: it counts at 100k connections).
pub struct Outbox {
    queue: Mutex<VecDeque<Event>>,
    capacity: usize,
    /// Set once the connection must close (checked before every send, without the lock).
    closed: std::sync::atomic::AtomicBool,
    closing: Mutex<Option<(u16, &'static str)>>,
    /// Set by the sweeper: time to ping the client (and to check that it answered).
    ping: std::sync::atomic::AtomicBool,
    /// When the client was last heard from ([`uptime_ms`]): the sweeper does not ping a
    /// client that spoke within the round (realtime-js's heartbeats say it is there).
    heard_ms: AtomicU64,
    /// Woken when events wait, or the connection must close or ping.
    pub wake: Notify,
}

impl Outbox {
    /// An outbox with room for `capacity` events.
    pub fn new(capacity: usize) -> Arc<Outbox> {
        Arc::new(Outbox {
            queue: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            closed: std::sync::atomic::AtomicBool::new(false),
            closing: Mutex::new(None),
            ping: std::sync::atomic::AtomicBool::new(false),
            heard_ms: AtomicU64::new(uptime_ms()),
            wake: Notify::new(),
        })
    }

    /// Takes every waiting event (oldest first).
    pub fn take(&self) -> VecDeque<Event> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Asks the connection to close with `code` (the first reason wins).
    pub fn close(&self, code: u16, reason: &'static str) {
        let mut closing = self.closing.lock().unwrap_or_else(|e| e.into_inner());
        if closing.is_none() {
            *closing = Some((code, reason));
            self.closed.store(true, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    /// Why the connection must close, if it must.
    pub fn closing(&self) -> Option<(u16, &'static str)> {
        *self.closing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the connection to ping its client.
    pub fn ping(&self) {
        self.ping.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// The client was heard from now.
    pub fn heard(&self) {
        self.heard_ms.store(uptime_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since the client was last heard from.
    pub fn silent_ms(&self) -> u64 {
        uptime_ms().saturating_sub(self.heard_ms.load(Ordering::Relaxed))
    }

    /// Whether a ping was asked for (and clears the request).
    pub fn take_ping(&self) -> bool {
        self.ping.swap(false, Ordering::Relaxed)
    }

    /// Whether a ping was asked for and not yet taken.
    pub fn ping_pending(&self) -> bool {
        self.ping.load(Ordering::Relaxed)
    }

    /// Events waiting in the queue.
    pub fn queued(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the connection was told to close.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Queues `frame`; `false` (and the connection told to close, 1013) when it is full.
    pub fn send(&self, frame: &Event) -> bool {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.len() >= self.capacity {
            drop(queue);
            self.close(close::TRY_AGAIN, "too far behind: reconnect with since");
            return false;
        }
        let was_empty = queue.is_empty();
        queue.push_back(frame.clone());
        drop(queue);
        if was_empty {
            self.wake.notify_one();
        }
        true
    }
}

/// Milliseconds since the first call in this process: a clock cheap to store in an atomic.
pub fn uptime_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// What a subscription to a duality view's documents reads (see `realtime::documents`).
pub struct DocumentFeed {
    /// The view's name.
    pub view: String,
    /// Its documents' read for the subscriber, as planned when it subscribed (what tells
    /// feeds apart: subscribers whose reads are the same share one feed).
    pub read: DocumentRead,
    /// The subscription's filter of the documents' top-level fields.
    pub filter: Vec<Condition>,
    /// Who reads the documents: the subscriber (the first, of those who share the feed). The
    /// engine reads them as this principal, planned again on the schema of the moment.
    pub principal: Principal,
    /// Whether the database is told who reads (a `db.pre_request` hook sees the claims): then
    /// only subscribers with the same claims share the feed.
    pub personal: bool,
}

impl PartialEq for DocumentFeed {
    fn eq(&self, other: &Self) -> bool {
        self.view == other.view
            && self.read.select == other.read.select
            && self.principal.role == other.principal.role
            && (!(self.personal || other.personal)
                || self.principal.claims == other.principal.claims)
    }
}

/// A subscription as the hub keeps it.
pub struct Subscription {
    /// The connection's id.
    pub connection: u64,
    /// Its queue.
    pub outbox: Arc<Outbox>,
    /// The client's filter and the role's row filter, ANDed.
    pub filter: Vec<Condition>,
    /// The columns the role may read.
    pub view: Arc<View>,
    /// For a duality view's documents: what they are read with (the subscription is kept
    /// under the view's name, which no change names, and fed by `documents::dispatch`).
    pub documents: Option<Arc<DocumentFeed>>,
    /// For a Supabase client: the `postgres_changes` binding its events are framed for (a
    /// connection may then hold several subscriptions to one table, one per binding).
    pub binding: Option<Arc<Binding>>,
    /// With database roles: the role and claims whose verdicts decide what it is sent
    /// ([`super::visibility`]).
    pub audience: Option<Arc<Audience>>,
}

impl Indexed for Subscription {
    /// Its connection, and which of the connection's subscriptions to the table it is.
    fn place(&self) -> Ref {
        (self.connection, self.binding.as_ref().map_or(0, |b| b.id))
    }

    fn filter(&self) -> &[Condition] {
        &self.filter
    }
}

/// An open connection as the hub keeps it: its queue, and the standing of the token it acts
/// with (re-checked when the clients change and when the token runs out).
struct Connection {
    outbox: std::sync::Weak<Outbox>,
    standing: Option<Arc<Standing>>,
}

#[derive(Default)]
struct Registry {
    /// The last change id dispatched.
    last: i64,
    /// Each table's subscriptions (a Supabase connection may hold one per binding), found by
    /// connection in O(1), so closing 100k connections is not quadratic, and by the value
    /// their filter requires.
    tables: HashMap<String, TableSubs<Subscription>>,
    views: HashMap<(String, String), Arc<View>>,
}

/// Every subscription of this worker.
pub struct Hub {
    registry: Mutex<Registry>,
    /// Every open connection (the sweeper pings them; `/metrics` sums their queues; the
    /// standing checker closes those whose token is no longer honoured).
    connections: Mutex<HashMap<u64, Connection>>,
    /// The earliest Unix second at which an open connection's token runs out (`u64::MAX`:
    /// none), and the wake-up of the standing checker when a connection lowers it.
    earliest_expiry: AtomicU64,
    /// Woken when a connection's token runs out before [`Hub::earliest_expiry`] said.
    pub expiry_moved: Notify,
    next_connection: AtomicU64,
    metrics: Arc<Metrics>,
}

impl Hub {
    /// An empty hub, live after change `last`.
    pub fn new(last: i64, metrics: Arc<Metrics>) -> Hub {
        Hub {
            registry: Mutex::new(Registry {
                last,
                ..Registry::default()
            }),
            connections: Mutex::new(HashMap::new()),
            earliest_expiry: AtomicU64::new(u64::MAX),
            expiry_moved: Notify::new(),
            next_connection: AtomicU64::new(1),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection's outbox and the standing of its token; returns its id.
    pub fn connect(&self, outbox: &Arc<Outbox>, standing: Option<Arc<Standing>>) -> u64 {
        let id = self.next_connection.fetch_add(1, Ordering::Relaxed);
        // entered before its expiry is announced: a check woken by it sees the connection
        let after = standing.as_deref().and_then(Standing::expires_after);
        self.open_connections().insert(
            id,
            Connection {
                outbox: Arc::downgrade(outbox),
                standing,
            },
        );
        self.watch_expiry(after);
        id
    }

    /// The connection now acts with another token (a WebSocket `auth` message).
    pub fn set_standing(&self, connection: u64, standing: Option<Arc<Standing>>) {
        let after = standing.as_deref().and_then(Standing::expires_after);
        if let Some(entry) = self.open_connections().get_mut(&connection) {
            entry.standing = standing;
        }
        self.watch_expiry(after);
    }

    /// Wakes the standing check when a token running out at `after` is the first to.
    fn watch_expiry(&self, after: Option<u64>) {
        if let Some(after) = after {
            if self.earliest_expiry.fetch_min(after, Ordering::Relaxed) > after {
                self.expiry_moved.notify_one();
            }
        }
    }

    /// Forgets a closed connection (and its subscriptions on `tables`).
    pub fn disconnect<'a>(&self, connection: u64, tables: impl IntoIterator<Item = &'a String>) {
        for table in tables {
            self.unsubscribe(table, connection);
        }
        self.open_connections().remove(&connection);
    }

    fn open_connections(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Connection>> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the connections of one slice (`slice` of `slices`, by id) that were silent for
    /// `silent_ms` to ping their clients. The one sweeper (no timer per connection) goes
    /// round the slices, so a round's pings are spread over its length rather than sent at
    /// once.
    pub fn sweep(&self, slice: u64, slices: u64, silent_ms: u64) {
        let due: Vec<Arc<Outbox>> = self
            .open_connections()
            .iter()
            .filter(|(id, _)| *id % slices == slice)
            .filter_map(|(_, c)| c.outbox.upgrade())
            .filter(|outbox| outbox.silent_ms() >= silent_ms)
            .collect();
        for outbox in due {
            outbox.ping();
        }
    }

    /// Closes (1008) every connection whose token `verdict` no longer honours, with its
    /// reason; returns when the next remaining token runs out (Unix seconds), if any does.
    pub fn recheck(&self, verdict: impl Fn(&Standing) -> Result<(), &'static str>) -> Option<u64> {
        let mut earliest = u64::MAX;
        let mut refused = Vec::new();
        {
            let connections = self.open_connections();
            for c in connections.values() {
                let Some(standing) = &c.standing else {
                    continue;
                };
                match verdict(standing) {
                    Ok(()) => {
                        if let Some(after) = standing.expires_after() {
                            earliest = earliest.min(after);
                        }
                    }
                    Err(why) => refused.push((c.outbox.clone(), why)),
                }
            }
            self.earliest_expiry.store(earliest, Ordering::Relaxed);
        }
        for (outbox, why) in refused {
            if let Some(outbox) = outbox.upgrade() {
                outbox.close(close::POLICY, why);
            }
        }
        (earliest != u64::MAX).then_some(earliest)
    }

    /// Events waiting in all connections' queues.
    pub fn queued(&self) -> usize {
        self.open_connections()
            .values()
            .filter_map(|c| c.outbox.upgrade())
            .map(|o| o.queued())
            .sum()
    }

    /// Subscriptions held now (a connection's binding to a table counts once).
    pub fn subscriptions(&self) -> usize {
        self.lock().tables.values().map(TableSubs::len).sum()
    }

    /// The last change id dispatched.
    pub fn last(&self) -> i64 {
        self.lock().last
    }

    /// The interned view of `columns` for `role` on `table`.
    pub fn view(&self, role: &str, table: &str, columns: Option<HashSet<String>>) -> Arc<View> {
        let mut registry = self.lock();
        let key = (role.to_string(), table.to_string());
        let fresh = View::new(columns);
        match registry.views.get(&key) {
            Some(v) if **v == fresh => v.clone(),
            _ => {
                let v = Arc::new(fresh);
                registry.views.insert(key, v.clone());
                v
            }
        }
    }

    /// Registers `sub` on `table` (replacing the connection's earlier one there); returns the
    /// id it is live after.
    pub fn subscribe(&self, table: &str, sub: Subscription) -> i64 {
        let mut registry = self.lock();
        registry
            .tables
            .entry(table.to_string())
            .or_default()
            .insert(sub);
        registry.last
    }

    /// Removes the connection's subscription of `binding` on `table`.
    pub fn unsubscribe_binding(&self, table: &str, connection: u64, binding: u64) {
        let mut registry = self.lock();
        let Some(subs) = registry.tables.get_mut(table) else {
            return;
        };
        subs.remove_tag(connection, binding);
        if subs.is_empty() {
            registry.tables.remove(table);
        }
    }

    /// Removes the connection's subscription on `table`; whether there was one.
    pub fn unsubscribe(&self, table: &str, connection: u64) -> bool {
        let mut registry = self.lock();
        let Some(subs) = registry.tables.get_mut(table) else {
            return false;
        };
        let removed = subs.remove_connection(connection);
        if subs.is_empty() {
            registry.tables.remove(table);
        }
        removed
    }

    /// The document feeds subscribed to, per view of `views` (one per distinct read:
    /// subscribers who read the same documents share one).
    pub fn document_feeds<'v>(
        &self,
        views: impl Iterator<Item = &'v str>,
    ) -> Vec<(String, Vec<Arc<DocumentFeed>>)> {
        let registry = self.lock();
        let mut out = Vec::new();
        for (table, subs) in views.filter_map(|v| registry.tables.get_key_value(v)) {
            let mut feeds: Vec<Arc<DocumentFeed>> = Vec::new();
            for feed in subs.all().filter_map(|s| s.documents.as_ref()) {
                if !feeds.iter().any(|f| Arc::ptr_eq(f, feed)) {
                    feeds.push(feed.clone());
                }
            }
            if !feeds.is_empty() {
                out.push((table.clone(), feeds));
            }
        }
        out
    }

    /// The interned feed equal to `feed` among those subscribed to its view.
    pub fn document_feed(&self, feed: DocumentFeed) -> Arc<DocumentFeed> {
        let registry = self.lock();
        registry
            .tables
            .get(&feed.view)
            .and_then(|subs| {
                subs.all()
                    .filter_map(|s| s.documents.as_ref())
                    .find(|f| ***f == feed)
                    .cloned()
            })
            .unwrap_or_else(|| Arc::new(feed))
    }

    /// Sends `events` to the subscriptions of `view` that read with `feed`.
    pub fn deliver(&self, view: &str, feed: &Arc<DocumentFeed>, events: &[Event]) {
        let registry = self.lock();
        let Some(subs) = registry.tables.get(view) else {
            return;
        };
        let mut frames_out = 0u64;
        for sub in subs.all().filter(|s| {
            s.documents.as_ref().is_some_and(|f| Arc::ptr_eq(f, feed)) && !s.outbox.is_closed()
        }) {
            for event in events {
                if sub.outbox.send(event) {
                    frames_out += 1;
                } else {
                    self.metrics.realtime_dropped();
                }
            }
        }
        drop(registry);
        self.metrics.realtime_changes(0, frames_out);
    }

    /// The audiences whose verdicts [`Hub::dispatch`] needs for `changes` (with database
    /// roles): of the subscriptions a change would concern by their filters alone, each once.
    pub fn audiences(&self, changes: &[Change]) -> Vec<Audience> {
        let registry = self.lock();
        let mut taken: HashSet<&Audience> = HashSet::new();
        concerned(&registry, changes)
            .into_iter()
            .filter(|audience| taken.insert(audience))
            .map(|audience| (**audience).clone())
            .collect()
    }

    /// Fans `changes` (in log order, after [`Hub::last`]) out to the matching subscriptions;
    /// a subscription with an audience gets only the images `verdicts` let it see (none
    /// without verdicts). When a subscription made since `verdicts` were asked for has an
    /// audience they lack, nothing is sent: those audiences are answered, to be checked and
    /// merged in before dispatching again (a new subscriber misses nothing after the id it
    /// subscribed at).
    pub fn dispatch(
        &self,
        changes: &[Change],
        verdicts: Option<&Verdicts>,
    ) -> Result<(), Vec<Audience>> {
        let started = std::time::Instant::now();
        let mut registry = self.lock();
        // where each subscription's audience is in the verdicts (by address)
        let mut positions: HashMap<*const Audience, Option<u32>> = HashMap::new();
        if let Some(verdicts) = verdicts {
            let mut missing: HashSet<&Audience> = HashSet::new();
            for audience in concerned(&registry, changes) {
                let at = verdicts.position(audience);
                positions.insert(Arc::as_ptr(audience), at);
                if at.is_none() {
                    missing.insert(audience);
                }
            }
            if !missing.is_empty() {
                return Err(missing.into_iter().cloned().collect());
            }
        }
        let mut frames_out = 0u64;
        for change in changes {
            if change.id <= registry.last {
                continue;
            }
            registry.last = change.id;
            let Some(subs) = registry.tables.get(&change.table) else {
                continue;
            };
            // frames of this change, per (view, kind)
            let mut frames: Vec<(*const View, Kind, Event)> = Vec::new();
            for sub in subs.candidates(change) {
                if sub.outbox.is_closed() || sub.documents.is_some() {
                    continue;
                }
                let seen = |side| match (&sub.audience, verdicts) {
                    (None, _) => true,
                    (Some(audience), Some(v)) => positions
                        .get(&Arc::as_ptr(audience))
                        .copied()
                        .flatten()
                        .is_some_and(|at| v.sees_at(at, change.id, side)),
                    (Some(_), None) => false,
                };
                let Some(kind) = classify(change, &sub.filter, seen) else {
                    continue;
                };
                if let Some(binding) = &sub.binding {
                    // a Supabase binding's frame names its channel and id: its own
                    if let Some(frame) = binding.frame(change, kind, |row| sub.view.project(row)) {
                        if sub.outbox.send(&frame) {
                            frames_out += 1;
                        } else {
                            self.metrics.realtime_dropped();
                        }
                    }
                    continue;
                }
                let view = Arc::as_ptr(&sub.view);
                let frame = match frames.iter().find(|(v, k, _)| *v == view && *k == kind) {
                    Some((_, _, frame)) => frame.clone(),
                    None => {
                        let frame = frame(change, kind, &sub.view);
                        frames.push((view, kind, frame.clone()));
                        frame
                    }
                };
                if sub.outbox.send(&frame) {
                    frames_out += 1;
                } else {
                    self.metrics.realtime_dropped();
                }
            }
        }
        drop(registry);
        self.metrics.realtime_matched(started.elapsed());
        self.metrics
            .realtime_changes(changes.len() as u64, frames_out);
        Ok(())
    }
}

/// The audiences of the subscriptions that `changes` concern by their filters alone, each
/// allocation once (subscriptions that subscribed alike share one: most are told apart by
/// address, before any filter is evaluated or claims are compared).
fn concerned<'r>(registry: &'r Registry, changes: &[Change]) -> Vec<&'r Arc<Audience>> {
    let mut looked_at: HashSet<*const Audience> = HashSet::new();
    let mut out = Vec::new();
    for change in changes {
        let Some(subs) = registry.tables.get(&change.table) else {
            continue;
        };
        for sub in subs.candidates(change) {
            let Some(audience) = &sub.audience else {
                continue;
            };
            if looked_at.contains(&Arc::as_ptr(audience))
                || classify(change, &sub.filter, |_| true).is_none()
            {
                continue;
            }
            looked_at.insert(Arc::as_ptr(audience));
            out.push(audience);
        }
    }
    out
}

/// What `change` means for a subscription with `filter` that may see the images `seen` lets
/// it (all of them, but with database roles: the verdicts of its role's policies): `None` when
/// it does not concern it. An image it may not see counts as one the filter does not match, so
/// an update that takes a row out of what it may see is a `leave` (key only).
pub fn classify(
    change: &Change,
    filter: &[Condition],
    seen: impl Fn(Side) -> bool,
) -> Option<Kind> {
    let matches = |row: Option<&Map<String, Json>>, side: Side| {
        row.is_some_and(|row| crate::job::row_passes(filter, row).unwrap_or(false)) && seen(side)
    };
    match change.op {
        Op::Insert => matches(change.new.as_ref(), Side::New).then_some(Kind::Insert),
        Op::Delete => matches(change.old.as_ref(), Side::Old).then_some(Kind::Delete),
        Op::Update => match (
            matches(change.old.as_ref(), Side::Old),
            matches(change.new.as_ref(), Side::New),
        ) {
            (true, true) => Some(Kind::Update),
            (false, true) => Some(Kind::Enter),
            (true, false) => Some(Kind::Leave),
            (false, false) => None,
        },
    }
}

/// The event of `change` as `kind`, with the columns of `view`.
pub fn frame(change: &Change, kind: Kind, view: &View) -> Event {
    let row = match kind {
        Kind::Insert | Kind::Update | Kind::Enter => view.project(change.new.as_ref()),
        Kind::Delete => view.project(change.old.as_ref()),
        Kind::Leave => None,
    };
    let key = view.project(change.key.as_ref());
    Event {
        id: change.id,
        json: protocol::event(change.id, &change.table, kind, key, row).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audience(sub: &str) -> Audience {
        Audience {
            role: "authenticated".into(),
            claims: format!("{{\"sub\":\"{sub}\"}}"),
        }
    }

    /// Subscribes a connection with database roles as `audience`; its outbox.
    fn subscribe(hub: &Hub, audience: Audience) -> Arc<Outbox> {
        let outbox = Outbox::new(8);
        let connection = hub.connect(&outbox, None);
        hub.subscribe(
            "notes",
            Subscription {
                connection,
                outbox: outbox.clone(),
                filter: Vec::new(),
                view: Arc::new(View::new(None)),
                documents: None,
                binding: None,
                audience: Some(Arc::new(audience)),
            },
        );
        outbox
    }

    /// With database roles, a subscriber whose audience the verdicts lack (it came while they
    /// were checked) holds the whole dispatch back until its verdicts are merged in: then each
    /// subscriber gets exactly what its own verdicts allow, and nothing is skipped.
    #[test]
    fn dispatch_waits_for_the_verdicts_of_late_subscribers() {
        let hub = Hub::new(0, Arc::new(Metrics::new()));
        let early = subscribe(&hub, audience("a"));
        let changes: Vec<Change> = (1..=2)
            .map(|id| Change {
                id,
                table: "notes".into(),
                op: Op::Insert,
                key: Some(Map::from_iter([("id".into(), Json::from(id))])),
                new: Some(Map::from_iter([("id".into(), Json::from(id))])),
                old: None,
                at: 0,
            })
            .collect();
        assert_eq!(hub.audiences(&changes), vec![audience("a")]);
        let mut verdicts = Verdicts::new(&hub.audiences(&changes));
        verdicts.allow(0, 1, Side::New);
        // a subscriber arrives while the verdicts are checked
        let late = subscribe(&hub, audience("b"));
        let missing = hub
            .dispatch(&changes, Some(&verdicts))
            .expect_err("b was not checked");
        assert_eq!(missing, vec![audience("b")]);
        assert_eq!((early.queued(), late.queued(), hub.last()), (0, 0, 0));
        let mut more = Verdicts::new(&missing);
        more.allow(0, 2, Side::New);
        verdicts.merge(more);
        hub.dispatch(&changes, Some(&verdicts))
            .expect("every audience checked");
        let ids = |o: &Outbox| o.take().iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!((ids(&early), ids(&late), hub.last()), (vec![1], vec![2], 2));
        // without verdicts, a subscriber with an audience is sent nothing
        let none = subscribe(&hub, audience("c"));
        let mut third = changes[1].clone();
        third.id = 3;
        hub.dispatch(&[third], None)
            .expect("no verdicts to wait for");
        assert_eq!(none.queued(), 0);
    }

    fn standing(exp: Option<u64>) -> Option<Arc<Standing>> {
        Some(Arc::new(Standing {
            role: "reader".into(),
            exp,
            client: None,
        }))
    }

    /// The standing check closes (1008) the connections its verdict refuses, keeps the others
    /// and answers when the next remaining token runs out; anonymous connections are never
    /// checked.
    #[test]
    fn recheck_closes_refused_connections_and_finds_the_next_expiry() {
        let hub = Hub::new(0, Arc::new(Metrics::new()));
        let now = jsonwebtoken::get_current_timestamp();
        let expired = Outbox::new(4);
        let later = Outbox::new(4);
        let anonymous = Outbox::new(4);
        hub.connect(&expired, standing(Some(now - 3600)));
        let id = hub.connect(&later, standing(Some(now + 3600)));
        hub.connect(&anonymous, None);
        let next = hub.recheck(|s| match s.expires_after() {
            Some(after) if jsonwebtoken::get_current_timestamp() > after => {
                Err("the token has expired")
            }
            _ => Ok(()),
        });
        assert_eq!(
            expired.closing(),
            Some((close::POLICY, "the token has expired"))
        );
        assert_eq!(later.closing(), None);
        assert_eq!(anonymous.closing(), None);
        assert_eq!(next, Some(now + 3600 + crate::auth::token::LEEWAY_S));
        // A connection re-authenticated with a token that runs out sooner moves the expiry
        // and wakes the checker.
        hub.set_standing(id, standing(Some(now + 10)));
        assert_eq!(
            hub.earliest_expiry.load(Ordering::Relaxed),
            now + 10 + crate::auth::token::LEEWAY_S
        );
        let woken = hub.expiry_moved.notified();
        tokio::pin!(woken);
        assert!(woken.enable(), "a permit was stored for the checker");
    }
}
