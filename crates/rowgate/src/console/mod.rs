//! The admin console at `/_/` (`[console]`): one page, written with Preact and htm (vendored
//! at a pinned version, 13 KB), whose files are compiled into the binary ([`assets`]), and its
//! API under `/_/api/` ([`admin`], and [`users`] for people's accounts) for the roles in
//! `console.roles`.
//!
//! The page signs in with client credentials at `/oauth/token`, keeps the token for the tab
//! (`sessionStorage`) and sends it as a bearer token. It browses and edits tables through the
//! REST API and follows a table's changes through `/realtime/sse`, so the role's grants apply
//! there as to any client; only what no other endpoint serves is in its API.

pub mod admin;
pub mod assets;
pub mod users;

/// Where the console's API lives under `/_/`.
const API: &str = "/_/api/";

/// The part of `path` after `/_/api/` when it names the console's API.
pub fn api_path(path: &str) -> Option<&str> {
    path.strip_prefix(API)
        .or_else(|| (path == "/_/api").then_some(""))
}
