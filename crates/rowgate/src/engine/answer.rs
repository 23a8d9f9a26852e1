//! How a table request's outcome becomes its answer: what the plan stage knows that the outcome
//! does not (an item or a collection, a document's etag fields, where a created row is, …),
//! handed back by the engine beside the outcome for the front end's respond stage.

/// How a request's outcome becomes its answer: what the plan stage knows that the outcome
/// does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Rows of a read; an item (404 when there is none) or a singular object is one row with
    /// an `ETag`.
    Read {
        /// A duality view's documents: the fields left out of their etags (each document gets
        /// `_metadata.etag`; an item's `ETag` is its etag).
        documents: Option<Vec<Vec<String>>>,
        /// Whether the URL names an item.
        item: bool,
        /// The table's name (for the 404 of a missing item).
        table: String,
        /// The page's first row.
        offset: u64,
    },
    /// 201, with a representation or a `Location` built from the returned key.
    Insert {
        /// `/{prefix}/{table}?`, to which the key filters are appended.
        location: String,
        /// The primary-key columns.
        key: Vec<String>,
        /// For `resolution=merge-duplicates`, how many rows the body held: when all of them
        /// existed (counted by the job), nothing was created and the answer is 200.
        merged: Option<u64>,
    },
    /// PATCH or DELETE: 200 with the rows, or 204.
    Modify,
    /// A duality view document written: the document read back (201 with its `Location`
    /// when created, else 200), with `_metadata` and its `ETag`; 204 when deleted.
    Document {
        /// Whether a POST created it.
        created: bool,
        /// `/{prefix}/{view}/`, to which the `_id` is appended.
        location: String,
        /// The fields left out of the etag; `None` for a DELETE (nothing is answered).
        nocheck: Option<Vec<Vec<String>>>,
    },
    /// PUT: 200 with the row (an object for an item URL), or 204.
    Upsert {
        /// Whether the URL names an item.
        item: bool,
    },
    /// A read's execution plan (`application/vnd.pgrst.plan`), as the database gave it.
    Plan {
        /// Its `Content-Type` (`application/vnd.pgrst.plan+json; for="…"; charset=utf-8`).
        content_type: String,
    },
    /// A media type handler's value (its aggregate over a read's rows), raw, of its media type.
    Handled {
        /// The media type.
        media: String,
        /// The value is bytes (`bytea`'s hex), else text.
        bytes: bool,
    },
}
