//! Rowgate's query language, pure (no I/O): the PostgREST query-string syntax parsed into an AST,
//! printed back, rendered to SQL text plus bound parameters per database dialect (the only place
//! identifiers are quoted), and evaluated in memory against a row (for realtime and access rules).
//!
//! Module map:
//! - [`ast`]: the types (`Query`, `Condition`, `Predicate`, `SelectItem`, `OrderTerm`, `Value`).
//! - [`parse`]: query string → AST (`parse_query`, `parse_select`, `parse_order`, `parse_filter`, …).
//! - [`print`]: AST → query string (`Display`), so that parse ∘ print round-trips.
//! - [`stmt`]: resolved statements handed over by the planner.
//! - [`json_rows`]: an insert's rows as one bound JSON text.
//! - [`render`]: statements → [`stmt::Sql`] through the [`render::Dialect`] trait.
//! - [`filter_object`]: ORDS's `q=` filter objects → the same conditions and order.
//! - [`eval`]: a `Condition` evaluated against one row, with SQL three-valued logic.

pub mod ast;
pub mod eval;
pub mod filter_object;
pub mod json_rows;
pub mod parse;
pub mod print;
pub mod render;
pub mod stmt;

pub use ast::*;
pub use parse::{ParseError, ParseErrorKind};
