//! What the database may be told about a request (PostgREST's `request.*` settings): its
//! method, path, headers and cookies, and the token's claims. A front end describes its request
//! through [`RequestFacts`] (the HTTP front ends implement it over the request's head); the
//! engine reads them only when a transaction needs them (a function called, a write with
//! triggers on PostgreSQL, or `db.pre_request`), so a plain read pays nothing for them.

use serde_json::{Map, Value as Json};

use crate::auth::Principal;

/// A request as the database sees it through `current_setting('request.…')`.
pub trait RequestFacts: Sync {
    /// The method (`GET`, `POST`, …), as PostgREST's `request.method`.
    fn method(&self) -> &str;
    /// The path, without the query string (`request.path`).
    fn path(&self) -> &str;
    /// Each header as sent (names in lower case), in order; a repeated one more than once.
    fn each_header(&self, visit: &mut dyn FnMut(&str, &str));
}

/// The facts of a request the engine makes itself (a realtime document read, a batch load's
/// rows): as given.
pub struct GivenFacts<'a> {
    /// `request.method`.
    pub method: &'a str,
    /// `request.path`.
    pub path: &'a str,
    /// The headers (lower-case names).
    pub headers: &'a [(&'a str, &'a str)],
}

impl RequestFacts for GivenFacts<'_> {
    fn method(&self) -> &str {
        self.method
    }

    fn path(&self) -> &str {
        self.path
    }

    fn each_header(&self, visit: &mut dyn FnMut(&str, &str)) {
        for (name, value) in self.headers {
            visit(name, value);
        }
    }
}

/// The request as PostgREST hands it to the functions a request calls: the token's claims
/// (and the role) in `request.jwt.claims`, `request.method`, `request.path`,
/// `request.headers` and `request.cookies` (JSON objects keyed by lower-case names).
pub fn request_settings(
    facts: &dyn RequestFacts,
    principal: &Principal,
) -> Vec<(&'static str, String)> {
    let mut claims = (*principal.claims).clone();
    claims
        .entry("role")
        .or_insert_with(|| Json::String(principal.role.clone()));
    let mut headers = Map::new();
    let mut cookies = Map::new();
    facts.each_header(&mut |name, value| {
        if name == "cookie" {
            for pair in value.split(';') {
                if let Some((k, v)) = pair.trim().split_once('=') {
                    cookies.insert(k.to_string(), Json::String(v.to_string()));
                }
            }
        }
        headers.insert(name.to_string(), Json::String(value.to_string()));
    });
    vec![
        ("request.jwt.claims", Json::Object(claims).to_string()),
        ("request.method", facts.method().to_string()),
        ("request.path", facts.path().to_string()),
        ("request.headers", Json::Object(headers).to_string()),
        ("request.cookies", Json::Object(cookies).to_string()),
    ]
}
