//! Resolved statements: what the planner hands to [`crate::render`]. Every identifier in here has
//! already been checked against (and taken from) the schema cache by the caller; rendering only
//! quotes them.

use crate::ast::{Aggregate, Condition, JsonStep, OrderTerm, QualifiedName, RowFunction, Value};

/// A table or view as SQL names it: its name, qualified by its schema where the backend has
/// several (PostgreSQL: the connection's search path need not include the exposed schemas).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The schema, or `None` to leave the name unqualified (SQLite's main database).
    pub schema: Option<String>,
    /// The table or view name.
    pub name: String,
    /// Computed columns a read needs beside the stored ones (PostgREST's computed fields):
    /// functions of the row, read as columns of the relation.
    pub computed: Vec<Computed>,
    /// The relation is a function called with the parent level's row (an embedded computed
    /// relationship): `schema.name(parent)`.
    pub of_parent_row: bool,
    /// Columns whose written values go through a function of their JSON (PostgREST's domain
    /// representations: the JSON value of a body's key, parsed by `f(json)`).
    pub json_inputs: Vec<(String, QualifiedName)>,
    /// The composite type of its rows, where SQL does not know it (a function's rows read
    /// through a CTE): a row handed to a computed column's or relationship's function is cast
    /// to it.
    pub row_type: Option<QualifiedName>,
    /// For a relation of an embedded computed relationship: the parent's row type, where its
    /// row must be cast to it (the parent is a function's rows).
    pub parent_row_type: Option<QualifiedName>,
}

/// A computed column: `function(row)` read as the column `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Computed {
    /// The column's name (the function's).
    pub name: String,
    /// The function's schema, where the backend has several.
    pub schema: Option<String>,
}

impl From<&str> for Relation {
    fn from(name: &str) -> Relation {
        Relation {
            schema: None,
            name: name.to_string(),
            computed: Vec::new(),
            of_parent_row: false,
            json_inputs: Vec::new(),
            row_type: None,
            parent_row_type: None,
        }
    }
}

impl From<String> for Relation {
    fn from(name: String) -> Relation {
        Relation {
            schema: None,
            name,
            computed: Vec::new(),
            of_parent_row: false,
            json_inputs: Vec::new(),
            row_type: None,
            parent_row_type: None,
        }
    }
}

/// One output column of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputColumn {
    /// Source column (schema-cache spelling).
    pub column: String,
    /// JSON path into the column; empty for the column itself.
    pub path: Vec<JsonStep>,
    /// Output key (the alias, or the column name).
    pub key: String,
    /// Cast target, already validated by [`crate::render::Dialect::cast_type`].
    pub cast: Option<String>,
    /// An aggregate of the (cast) value over each group, its result's cast validated too; with
    /// an empty `column`, a `count` counts the rows. A level with aggregates is grouped by its
    /// other columns (and the columns its embeds join on).
    pub aggregate: Option<Aggregate>,
    /// A function giving the column's value its JSON representation (PostgREST's domain
    /// representations), applied before the cast.
    pub format: Option<QualifiedName>,
    /// For a computed column a write returns (PostgreSQL): its function, called with the
    /// written row (`"test"."always_true"("items")`).
    pub written_row: Option<Box<RowFunction>>,
}

impl OutputColumn {
    /// The column itself, under its own name, as it is.
    pub fn plain(name: &str) -> OutputColumn {
        OutputColumn {
            column: name.to_string(),
            path: Vec::new(),
            key: name.to_string(),
            cast: None,
            aggregate: None,
            format: None,
            written_row: None,
        }
    }
}

/// `SELECT … FROM table WHERE … ORDER BY … LIMIT … OFFSET …`.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectStmt {
    /// Table or view name.
    pub table: Relation,
    /// Output columns, in order (never empty).
    pub columns: Vec<OutputColumn>,
    /// Conditions, ANDed.
    pub filters: Vec<Condition>,
    /// ORDER BY terms.
    pub order: Vec<OrderTerm>,
    /// Ordered columns known to be NOT NULL: their null placement cannot matter, so none is
    /// spelled out (an explicit `NULLS LAST` keeps SQLite from ordering by an index).
    pub not_null: Vec<String>,
    /// LIMIT.
    pub limit: Option<u64>,
    /// OFFSET.
    pub offset: Option<u64>,
    /// Related resources embedded in each row (correlated subqueries), in output order.
    pub embeds: Vec<EmbedStmt>,
}

/// How a value is written into JSON the database builds (SQLite's `json_object`: a boolean is
/// stored as 0/1, JSON as text; PostgreSQL's types say it themselves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// As stored (number, text, null).
    Plain,
    /// 0/1 as `false`/`true`.
    Bool,
    /// Text holding JSON, as JSON.
    Json,
}

/// A related resource embedded in each row of a read: a correlated subquery that builds its
/// JSON, an object (or `null`) for a to-one relationship, an array for a to-many one. Its own
/// embeds nest inside it; the whole read stays one statement.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedStmt {
    /// Output key in the parent's object.
    pub key: String,
    /// Where it goes in the parent's output: after this many of the parent's columns.
    pub position: usize,
    /// An array of rows (to-many), or one object or `null` (to-one).
    pub many: bool,
    /// The related rows: table, columns, filters, order, limit, offset, and their embeds.
    pub select: SelectStmt,
    /// How each of `select.columns` is written into the JSON (parallel to them).
    pub kinds: Vec<ValueKind>,
    /// The join: pairs of (related column, parent column) that must be equal.
    pub on: Vec<(String, String)>,
    /// Many-to-many: the junction table between the parent and the related table.
    pub through: Option<Junction>,
    /// `Some(true)`: parent rows without a related row are left out (`!inner`,
    /// `rel=not.is.null`); `Some(false)`: only those are kept (`rel=is.null`).
    pub required: Option<bool>,
    /// Output nothing: the embed only filters its parent (`rel()` or `!inner` with no columns).
    pub hidden: bool,
    /// `...rel(cols)`: its items are the parent's own keys (to-one only), not one key.
    pub spread: bool,
    /// `rel(count)`: not the related rows but their number, under this key
    /// (`[{"count": n}]` for a to-many relationship, `{"count": n}` for a to-one).
    pub count: Option<String>,
}

/// The junction of a many-to-many relationship.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Junction {
    /// The junction table.
    pub table: Relation,
    /// Pairs of (junction column, parent column).
    pub to_parent: Vec<(String, String)>,
    /// Pairs of (junction column, related column).
    pub to_related: Vec<(String, String)>,
}

/// `SELECT count(*) FROM table WHERE …`.
#[derive(Debug, Clone, PartialEq)]
pub struct CountStmt {
    /// Table or view name.
    pub table: Relation,
    /// Conditions, ANDed.
    pub filters: Vec<Condition>,
    /// The read's embeds: those required (or required absent) narrow the rows counted.
    pub embeds: Vec<EmbedStmt>,
}

/// What to do when an inserted row conflicts (upsert).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnConflict {
    /// `ON CONFLICT (target) DO NOTHING`
    Ignore {
        /// Conflict target columns.
        target: Vec<String>,
    },
    /// `ON CONFLICT (target) DO UPDATE SET c = excluded.c` for each `update` column.
    Merge {
        /// Conflict target columns.
        target: Vec<String>,
        /// Columns to overwrite (all inserted columns but the target ones).
        update: Vec<String>,
    },
}

/// The rows of an insert: a JSON array, one element per row (see [`crate::json_rows`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JsonRows {
    /// The JSON text.
    pub text: String,
    /// How many rows it holds.
    pub count: usize,
}

/// An insert's rows, bound one of two ways.
#[derive(Debug, Clone, PartialEq)]
pub enum InsertRows {
    /// One bound value per cell, one inner vector per row (each as long as the columns): the
    /// fastest for a few rows.
    Values(Vec<Vec<Value>>),
    /// One bound JSON text read by the database: a large body held once, compactly.
    Json(JsonRows),
    /// Rows of defaults only (`columns` empty: a body of empty objects): how many. One is
    /// `DEFAULT VALUES`; more are one statement selecting that many rows from a series, so that
    /// a million `{}` cost a number, not a million statements.
    Defaults {
        /// How many rows.
        rows: usize,
        /// Where the database cannot select zero columns into a table
        /// ([`crate::render::Dialect::selects_zero_columns`], SQLite): a column written with its
        /// own default's SQL (`NULL` when it has none, which is its default), standing in for
        /// "every column's default".
        stand_in: Option<(String, String)>,
    },
}

impl Default for InsertRows {
    fn default() -> InsertRows {
        InsertRows::Values(Vec::new())
    }
}

impl InsertRows {
    /// How many rows.
    pub fn count(&self) -> usize {
        match self {
            InsertRows::Values(rows) => rows.len(),
            InsertRows::Json(rows) => rows.count,
            InsertRows::Defaults { rows, .. } => *rows,
        }
    }
}

/// `INSERT INTO table (columns) VALUES … | SELECT … FROM <rows> [ON CONFLICT …] [RETURNING …]`.
#[derive(Debug, Clone, PartialEq)]
pub struct InsertStmt {
    /// Table name.
    pub table: Relation,
    /// The columns whose values `rows` holds, in the order of each row's cells. Empty: rows of
    /// defaults (and `constants`): as many as [`InsertRows::Defaults`] says, else one.
    pub columns: Vec<String>,
    /// The rows, one cell per column (as JSON, written by a
    /// [`crate::json_rows::JsonRowsWriter`]).
    pub rows: InsertRows,
    /// Columns given the same value in every row (a row filter's pinned column), after
    /// `columns`.
    pub constants: Vec<Constant>,
    /// Upsert behaviour.
    pub on_conflict: Option<OnConflict>,
    /// Columns to return (`RETURNING`); empty means no RETURNING clause.
    pub returning: Vec<OutputColumn>,
}

impl InsertStmt {
    /// Every inserted column: `columns`, then the constants' columns.
    pub fn all_columns(&self) -> impl Iterator<Item = &String> {
        self.columns
            .iter()
            .chain(self.constants.iter().map(|c| &c.column))
    }
}

/// A column an insert gives the same value in every row.
#[derive(Debug, Clone, PartialEq)]
pub struct Constant {
    /// The column.
    pub column: String,
    /// Its value.
    pub value: Value,
    /// The column's SQL type, which the bound value is cast to (PostgreSQL gives a parameter in
    /// a select list the type text, not the column's); a plain type name or `None`.
    pub cast: Option<String>,
}

/// `UPDATE table SET c = ?, … WHERE … [RETURNING …]`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateStmt {
    /// Table name.
    pub table: Relation,
    /// Assignments (never empty, with `defaults`).
    pub set: Vec<(String, Value)>,
    /// Columns set to their defaults (`Prefer: missing=default` with `columns=`), each with
    /// its default's SQL from the schema (for backends without `SET c = DEFAULT`).
    pub defaults: Vec<(String, Option<String>)>,
    /// Conditions, ANDed.
    pub filters: Vec<Condition>,
    /// Columns to return; empty means no RETURNING clause.
    pub returning: Vec<OutputColumn>,
}

/// `DELETE FROM table WHERE … [RETURNING …]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DeleteStmt {
    /// Table name.
    pub table: Relation,
    /// Conditions, ANDed.
    pub filters: Vec<Condition>,
    /// Columns to return; empty means no RETURNING clause.
    pub returning: Vec<OutputColumn>,
}

/// Rendered SQL: text with dialect placeholders and the values to bind, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sql {
    /// Statement text.
    pub text: String,
    /// Bound parameters, in placeholder order.
    pub params: Vec<Value>,
}

impl Sql {
    /// Whether the distinct placeholders of the text (`?N` with `prefix` `?`, `$N` with `$`;
    /// quoted identifiers left out) are exactly `1..=params`: every value is bound, none is
    /// spliced into the text, and no placeholder is left without one. (The tests' and fuzz
    /// targets' check of what the renderer makes.)
    pub fn binds_every_placeholder(&self, prefix: char) -> bool {
        let mut text = String::new();
        let mut quoted = false;
        for c in self.text.chars() {
            if c == '"' {
                quoted = !quoted;
            } else if !quoted {
                text.push(c);
            }
        }
        let mut found: Vec<usize> = text
            .split(prefix)
            .skip(1)
            .filter_map(|rest| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .collect();
        // a placeholder may be used more than once (a JSON path repeated per list item, a
        // text search language), in any order
        found.sort_unstable();
        found.dedup();
        found == (1..=self.params.len()).collect::<Vec<_>>()
    }
}
