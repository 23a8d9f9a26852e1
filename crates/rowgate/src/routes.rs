//! The built-in routes, in one table: what `App` routes, what a custom resource may not take and
//! what the REST prefix may not shadow all come from here.

/// What a URL path routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/live`: the process is up.
    Live,
    /// `/ready`: the schema cache is loaded and the database answers.
    Ready,
    /// `/{prefix}/` and `/openapi.json`: the OpenAPI document.
    OpenApi,
    /// `/{prefix}/{table}`.
    Table,
    /// `/{prefix}/{table}/{key}`.
    Item,
    /// `/{prefix}/rpc/{function}`: a function call (a table named `rpc` has no item URLs).
    Rpc,
    /// `/oauth/token`.
    Token,
    /// `/metrics`: Prometheus text.
    Metrics,
    /// `/realtime`: WebSocket change feeds.
    Realtime,
    /// `/realtime/sse`: one table's changes as Server-Sent Events.
    RealtimeEvents,
    /// `/realtime/v1/websocket`: Supabase's realtime protocol.
    RealtimeSupabase,
    /// `/ords/…`: the ORDS front end.
    Ords,
    /// `/_/…`: the admin console, its pages and its API.
    Console,
    /// `/auth/v1/…`: people's accounts, Supabase Auth's API.
    Accounts,
}

/// The built-in routes at fixed paths (the REST prefix's are added from the configuration).
pub const FIXED: &[(&str, Route)] = &[
    ("/live", Route::Live),
    ("/ready", Route::Ready),
    ("/openapi.json", Route::OpenApi),
    ("/oauth/token", Route::Token),
    ("/metrics", Route::Metrics),
    ("/realtime", Route::Realtime),
    ("/realtime/sse", Route::RealtimeEvents),
    ("/realtime/v1/websocket", Route::RealtimeSupabase),
    ("/ords/{*rest}", Route::Ords),
    ("/_", Route::Console),
    ("/_/", Route::Console),
    ("/_/{*rest}", Route::Console),
    ("/auth/v1/{*rest}", Route::Accounts),
];

/// Paths kept for the server, with everything under them: the fixed routes' first segments, and
/// `/ords` (the ORDS front end's).
pub const RESERVED: &[&str] = &[
    "/live",
    "/ready",
    "/openapi.json",
    "/oauth",
    "/metrics",
    "/realtime",
    "/ords",
    "/_",
    "/auth",
];

/// The reserved path `path` is, or lies under, if any.
pub fn reserved_by(path: &str) -> Option<&'static str> {
    RESERVED
        .iter()
        .copied()
        .find(|reserved| under(path, reserved))
}

/// Whether `path` is `root` or lies under it.
pub fn under(path: &str, root: &str) -> bool {
    path.strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixed_route_is_reserved() {
        for (path, _) in FIXED {
            assert!(reserved_by(path).is_some(), "{path}");
        }
        assert_eq!(reserved_by("/oauth/x"), Some("/oauth"));
        assert_eq!(reserved_by("/ords/hr/emp/"), Some("/ords"));
        assert_eq!(reserved_by("/metricsx"), None);
        assert_eq!(reserved_by("/api"), None);
    }
}
