//! What the database layer keeps for the request being served, in a task-local the server sets
//! once per connection ([`scoped`]; HTTP/1 serves one request of a connection at a time) and
//! resets at each request's start:
//!
//! - its database time (its jobs' queueing and statements), for the statistics at `/metrics`:
//!   counted by [`super::Database::run`], taken at each request's start and end;
//! - with read replicas, read-your-writes: the WAL position its reads must see (the
//!   `Rowgate-Position` it sent, [`begin`]) and the position its writes committed at (answered
//!   in the same header, [`take_committed`]).
//!
//! Set once per connection, not per request, so that no request's future is moved into a
//! wrapper of its own (they are large: a move per request costs microseconds).

use std::cell::Cell;
use std::time::Duration;

use super::replicas::Position;

/// The request being served, as the database layer sees it.
struct Served {
    time: Cell<Duration>,
    required: Cell<Option<Position>>,
    committed: Cell<Option<Position>>,
}

tokio::task_local! {
    static SERVED: Served;
}

/// Runs a connection's future with the state its requests use in turn.
pub fn scoped<F: std::future::Future>(
    connection: F,
) -> impl std::future::Future<Output = F::Output> {
    SERVED.scope(
        Served {
            time: Cell::new(Duration::ZERO),
            required: Cell::new(None),
            committed: Cell::new(None),
        },
        connection,
    )
}

/// The database time counted on this connection since the last call (zero outside
/// [`scoped`]).
pub fn take_time() -> Duration {
    SERVED
        .try_with(|s| s.time.replace(Duration::ZERO))
        .unwrap_or_default()
}

/// Adds `took` to the database time of the request being served, if any.
pub fn add_time(took: Duration) {
    let _ = SERVED.try_with(|s| s.time.set(s.time.get() + took));
}

/// A request starts (with replicas or PostgreSQL's response cache): its reads must see
/// `required`; it has committed nothing.
pub fn begin(required: Option<Position>) {
    let _ = SERVED.try_with(|s| {
        s.required.set(required);
        s.committed.set(None);
    });
}

/// The position the request's reads must see, if it sent one.
pub fn required() -> Option<Position> {
    SERVED.try_with(|s| s.required.get()).ok().flatten()
}

/// The request's write committed at `position` (the request keeps the latest of its
/// writes').
pub fn committed(position: Position) {
    let _ = SERVED.try_with(|s| s.committed.set(Some(position).max(s.committed.get())));
}

/// The position the request's writes committed at, if it wrote.
pub fn take_committed() -> Option<Position> {
    SERVED.try_with(|s| s.committed.take()).ok().flatten()
}
