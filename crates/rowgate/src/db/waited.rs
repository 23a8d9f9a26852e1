//! The time the request being served has waited for the database (its jobs' queueing and
//! statements), for the statistics at `/metrics`: counted by [`super::Database::run`] into a
//! task-local the server sets around each connection and takes at each request's start and
//! end.

use std::cell::Cell;
use std::time::Duration;

tokio::task_local! {
    /// The database time of the request being served.
    static DATABASE_TIME: Cell<Duration>;
}

/// Runs a connection's future with a database-time counter that its requests use in turn
/// (HTTP/1 serves one request of a connection at a time): set once per connection, so that no
/// request's future is moved into a wrapper of its own (they are large: a move per request
/// costs microseconds).
pub fn counted<F: std::future::Future>(
    connection: F,
) -> impl std::future::Future<Output = F::Output> {
    DATABASE_TIME.scope(Cell::new(Duration::ZERO), connection)
}

/// The database time counted on this connection since the last call (zero outside
/// [`counted`]).
pub fn take() -> Duration {
    DATABASE_TIME
        .try_with(|total| total.replace(Duration::ZERO))
        .unwrap_or_default()
}

/// Adds `took` to the database time of the request being served, if any.
pub fn add(took: Duration) {
    let _ = DATABASE_TIME.try_with(|total| total.set(total.get() + took));
}
