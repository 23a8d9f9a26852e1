//! The response cache: answers to reads kept as encoded bytes and served again for as long as
//! nothing has been committed to the database, from anywhere (SQLite; PostgreSQL as
//! [`crate::db::commit_clock`] tells it, opt-in).
//!
//! An answer is kept under its request — the role, the URL, and every header that can change
//! the answer (all of them but those in [`IGNORED_HEADERS`]) — with the database's commit
//! epoch read *before* the request ran ([`crate::db::Database::commit_epoch`]). A later request
//! with the same key is answered from the cache only when the epoch it reads is still the
//! same: any commit in between, by this process, another worker, another program or the
//! `sqlite3` shell, moves the epoch on, so the cache never answers with data older than the
//! last commit made before the request arrived. Only answers their handlers mark
//! [`Reply::cacheable`] are kept: reads of tables, and of views and custom resources whose
//! SQL calls nothing that changes without a commit (time, randomness: [`crate::schema::volatile`]).
//! `If-None-Match` is answered 304 from a kept answer that has an `ETag`.

use std::sync::Arc;

use http::{header, request::Parts, HeaderName, Method};
use quick_cache::sync::Cache;

use crate::config::CacheConfig;
use crate::db::Database;
use crate::reply::Reply;

/// Request headers that never change an answer: left out of the key, so that clients that
/// differ only in them share entries. (`Origin`: CORS headers are added after the cache;
/// `If-None-Match`: answered from the kept `ETag`.)
const IGNORED_HEADERS: &[&str] = &[
    "user-agent",
    "connection",
    "keep-alive",
    "te",
    "accept-encoding",
    "accept-language",
    "origin",
    "referer",
    "cache-control",
    "pragma",
    "if-none-match",
    "x-request-id",
    "traceparent",
    "tracestate",
    "dnt",
    "upgrade-insecure-requests",
];

/// Conditional headers the cache does not evaluate: such a request goes to its handler.
const CONDITIONAL_HEADERS: &[HeaderName] = &[
    http::header::IF_MATCH,
    http::header::IF_MODIFIED_SINCE,
    http::header::IF_UNMODIFIED_SINCE,
    http::header::IF_RANGE,
];

/// Kept answers, by key.
pub struct ResponseCache {
    entries: Cache<Box<[u8]>, Arc<Kept>, ByMemory>,
    max_entry: usize,
}

/// An answer and the commit epoch it was read at.
struct Kept {
    epoch: u64,
    reply: Reply,
}

/// Weighs entries by the memory they hold.
#[derive(Clone)]
struct ByMemory;

impl quick_cache::Weighter<Box<[u8]>, Arc<Kept>> for ByMemory {
    fn weight(&self, key: &Box<[u8]>, kept: &Arc<Kept>) -> u64 {
        u64::try_from(key.len() + kept.reply.kept_bytes()).unwrap_or(u64::MAX)
    }
}

/// What the cache says of a request.
pub enum Lookup {
    /// Answer with this (the kept answer, or 304).
    Hit(Reply),
    /// Run the request, then offer its answer to [`ResponseCache::keep`] with this ticket.
    Miss(Ticket),
    /// Not a request the cache serves (a write, a conditional request, no epoch).
    Pass,
}

/// A missed request's key and the epoch read before it ran.
pub struct Ticket {
    key: Box<[u8]>,
    epoch: u64,
}

impl ResponseCache {
    /// The cache `config` asks for; `None` when it is off.
    pub fn new(config: &CacheConfig) -> Option<ResponseCache> {
        let capacity = config.max_mb.saturating_mul(1024 * 1024);
        if !config.enabled || capacity == 0 {
            return None;
        }
        let estimated_items = usize::try_from(capacity / 8192).unwrap_or(1024).max(64);
        Some(ResponseCache {
            entries: Cache::with_weighter(estimated_items, capacity, ByMemory),
            max_entry: usize::try_from(config.max_entry_kb.saturating_mul(1024))
                .unwrap_or(usize::MAX),
        })
    }

    /// Looks up a request by `role`: a kept answer still current, or a ticket to keep its
    /// answer with.
    pub fn lookup(&self, db: &Database, parts: &Parts, role: &str) -> Lookup {
        if !(parts.method == Method::GET || parts.method == Method::HEAD)
            || CONDITIONAL_HEADERS
                .iter()
                .any(|h| parts.headers.contains_key(h))
        {
            return Lookup::Pass;
        }
        // read before the request's own read begins: see `commit_epoch`
        let Some(epoch) = db.commit_epoch() else {
            return Lookup::Pass;
        };
        let key = key(parts, role);
        match self.entries.get(&key[..]) {
            Some(kept) if kept.epoch == epoch => match kept.reply.header_value(&header::ETAG) {
                Some(tag) if if_none_match(parts, tag) => {
                    let tag = tag.to_str().unwrap_or_default().to_string();
                    // a 304 carries the Cache-Control the 200 would (RFC 9110 §15.4.5)
                    let not_modified = match kept.reply.header_value(&header::CACHE_CONTROL) {
                        Some(cc) => Reply::not_modified(tag)
                            .header(header::CACHE_CONTROL, cc.to_str().unwrap_or_default()),
                        None => Reply::not_modified(tag),
                    };
                    Lookup::Hit(not_modified)
                }
                _ => match kept.reply.to_keep() {
                    Some(reply) => Lookup::Hit(reply),
                    None => Lookup::Pass,
                },
            },
            _ => Lookup::Miss(Ticket { key, epoch }),
        }
    }

    /// Keeps the answer to a missed GET, when its handler marked it cacheable and it is not
    /// too large (a HEAD's answer has no body to keep); says whether it did.
    pub fn keep(&self, ticket: Ticket, method: &Method, reply: &Reply) -> bool {
        if *method != Method::GET {
            return false;
        }
        let Some(kept) = reply.to_keep() else {
            return false;
        };
        if kept.kept_bytes() > self.max_entry {
            return false;
        }
        let kept = kept.compacted();
        self.entries.insert(
            ticket.key,
            Arc::new(Kept {
                epoch: ticket.epoch,
                reply: kept,
            }),
        );
        true
    }

    /// Forgets every answer (the custom resources were reloaded).
    pub fn clear(&self) {
        self.entries.clear();
    }

    /// The memory the kept answers hold, about (`/metrics`).
    pub fn bytes(&self) -> u64 {
        self.entries.weight()
    }
}

/// Whether `If-None-Match` names the kept `ETag`.
fn if_none_match(parts: &Parts, tag: &http::HeaderValue) -> bool {
    tag.to_str()
        .is_ok_and(|tag| crate::reply::if_none_match(&parts.headers, tag))
}

/// The request's key: role, target and the headers that may change the answer, in the order
/// sent, each part ended by a byte no header or URL holds.
fn key(parts: &Parts, role: &str) -> Box<[u8]> {
    let target = parts
        .uri
        .path_and_query()
        .map_or(parts.uri.path(), |pq| pq.as_str());
    let mut key = Vec::with_capacity(role.len() + target.len() + 256);
    key.extend_from_slice(role.as_bytes());
    key.push(0);
    key.extend_from_slice(target.as_bytes());
    for (name, value) in &parts.headers {
        if IGNORED_HEADERS.contains(&name.as_str()) {
            continue;
        }
        key.push(0);
        key.extend_from_slice(name.as_str().as_bytes());
        key.push(b'\n');
        key.extend_from_slice(value.as_bytes());
    }
    key.into_boxed_slice()
}

/// Serves a GET or HEAD through `cache`: answered from it when it holds a current answer,
/// else by `run`, whose answer is kept when it may be.
pub async fn through(
    cache: Option<&ResponseCache>,
    db: &Database,
    metrics: &crate::observe::Metrics,
    parts: &Parts,
    role: &str,
    run: impl std::future::Future<Output = Result<Reply, crate::error::ApiError>>,
) -> Result<Reply, crate::error::ApiError> {
    let Some(cache) = cache else {
        return run.await;
    };
    match cache.lookup(db, parts, role) {
        Lookup::Hit(reply) => {
            metrics.cache_hit();
            Ok(reply)
        }
        Lookup::Miss(ticket) => {
            let reply = run.await?;
            if cache.keep(ticket, &parts.method, &reply) {
                metrics.cache_miss();
            }
            Ok(reply)
        }
        Lookup::Pass => run.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_role_target_and_headers_but_not_ignored_ones() {
        let parts = |uri: &str, headers: &[(&str, &str)]| {
            let mut req = http::Request::get(uri);
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            req.body(()).expect("request").into_parts().0
        };
        let plain = key(&parts("/api/t?a=eq.1", &[]), "anon");
        assert_ne!(plain, key(&parts("/api/t?a=eq.1", &[]), "writer"));
        assert_ne!(plain, key(&parts("/api/t?a=eq.2", &[]), "anon"));
        assert_ne!(
            plain,
            key(
                &parts("/api/t?a=eq.1", &[("prefer", "count=exact")]),
                "anon"
            )
        );
        assert_eq!(
            plain,
            key(&parts("/api/t?a=eq.1", &[("user-agent", "curl")]), "anon")
        );
    }
}
