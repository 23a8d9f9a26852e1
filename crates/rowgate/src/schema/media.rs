//! Media type handlers, as PostgREST reads them off PostgreSQL: an aggregate whose result is a
//! domain named after a media type (`CREATE DOMAIN "text/tab-separated-values" AS text`),
//! taking one table's rows (`tsv_agg(projects)`) or any rows (`anyelement`). A read whose
//! `Accept` names that media type is answered by the aggregate over its rows
//! ([`crate::api::media_handler`]).

use rowgate_query::ast::QualifiedName;
use tokio_postgres::Client;

/// One handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaHandler {
    /// The media type it produces (its domain's name), lower-cased; `*/*` for any.
    pub media: String,
    /// The aggregate.
    pub function: QualifiedName,
    /// The table or view whose rows it takes; `None` for any rows (`anyelement`).
    pub relation: Option<String>,
    /// Its domain is over `bytea`: its value is bytes (else text, or JSON's text).
    pub bytes: bool,
}

/// The handlers of `schemas`: their aggregates of one argument, a table's row type or
/// `anyelement`, returning a domain whose name holds a `/`.
pub async fn introspect(
    client: &Client,
    schemas: &[String],
) -> Result<Vec<MediaHandler>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT n.nspname::text, p.proname::text, lower(t.typname::text),
                    bt.typname = 'bytea', c.relname::text
             FROM pg_proc p
             JOIN pg_namespace n ON n.oid = p.pronamespace
             JOIN pg_type t ON t.oid = p.prorettype AND t.typtype = 'd' AND t.typname LIKE '%/%'
             JOIN pg_type bt ON bt.oid = t.typbasetype
             JOIN pg_type a ON a.oid = p.proargtypes[0]
             LEFT JOIN pg_class c ON c.oid = a.typrelid
             WHERE p.prokind = 'a' AND p.pronargs = 1 AND n.nspname = ANY($1)
               -- a table's handler of the same schema (its name is the table's there)
               AND (a.typname = 'anyelement' OR c.relnamespace = p.pronamespace)
             ORDER BY 1, 2",
            &[&schemas],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| MediaHandler {
            function: QualifiedName {
                schema: Some(r.get(0)),
                name: r.get(1),
            },
            media: r.get(2),
            bytes: r.get(3),
            relation: r.get(4),
        })
        .collect())
}
