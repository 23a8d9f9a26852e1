//! Rowgate: serves a SQL database as a PostgREST-compatible REST API.
//!
//! Module map (see ARCHITECTURE.md):
//! - [`cli`]: command line; [`config`]: configuration (file < env < flags).
//! - [`server`]: hyper accept loop, dispatch, graceful shutdown; [`app`]: shared state, routes;
//!   [`mended`]: the connection's bytes mended where hyper's parser would refuse or answer bare.
//! - [`api`]: the AutoREST pipeline (request → plan → render → execute → respond).
//! - [`job`]: what a request asks of the database, as data, run by a backend.
//! - [`schema`]: the schema cache; [`db`]: the SQLite data path (reader pool, group-commit writer).
//! - [`resources`]: custom resources declared in config (SQL → JSON or a template).
//! - [`rpc`]: functions as RPC at `/{prefix}/rpc/{name}` (PostgreSQL functions, resource functions).
//! - [`openapi`]: the generated API description; [`error`]: the one error-code table.
//! - [`demo`]: the deterministic demo database.
//! - [`supervisor`]: the process that keeps workers running; [`worker`]: a worker's side of it.
//! - [`observe`]: the metrics at `/metrics`; [`realtime`]: change capture and WebSocket feeds.
//! - [`proxies`]: the trusted proxies whose `X-Forwarded-*` headers count, and the client's address;
//!   [`per_address`]: open connections per client address.

pub mod accounts;
pub mod api;
pub mod app;
pub mod auth;
pub mod cache;
pub mod check;
pub mod cli;
pub mod config;
pub mod console;
pub mod cors;
pub mod db;
pub mod demo;
pub mod duality;
pub mod engine;
pub mod error;
pub mod histogram;
pub mod job;
pub mod mended;
pub mod observe;
pub mod openapi;
pub mod ords;
pub mod per_address;
pub mod proxies;
pub mod realtime;
pub mod reply;
pub mod request_body;
pub mod resources;
pub mod routes;
pub mod rpc;
pub mod schema;
pub mod server;
pub mod supervisor;
pub mod tasks;
pub mod token_endpoint;
pub mod worker;
