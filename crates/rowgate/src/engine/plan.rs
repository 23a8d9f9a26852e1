//! Stage 2, plan (pure): an [`ApiRequest`](super::request) resolved against the schema cache into
//! `rowgate-query` statements. Every table, column and cast is checked here; unknown names are
//! 4xx errors naming them, and the statements carry the cache's spellings only.

use std::borrow::Cow;

use rowgate_query::json_rows::{Cell, JsonRowsWriter};
use rowgate_query::render::Dialect;
use rowgate_query::stmt::{
    CountStmt, DeleteStmt, InsertRows, InsertStmt, OnConflict, OutputColumn, SelectStmt, UpdateStmt,
};
use rowgate_query::{
    path_key, Aggregate, AggregateFunction, Condition, Embed, IsValue, JsonStep, Operand, Operator,
    OrderTerm, Predicate, Query, SelectItem, Value,
};
use serde_json::Value as Json;

use super::body::{Member, Members, Shape};
use super::request::{ItemRange, Prefer, Resolution};
pub use super::rows::json_value;
use super::rows::{BodyCell, RowSink};
use crate::auth::policy::Op;
use crate::config::RestConfig;
use crate::error::{ApiError, ErrorCode};
pub use crate::job::OutputShape;
use crate::schema::input::InputType;
use crate::schema::{JsonKind, SchemaCache, Table, Writes};

/// About the most JSON text one INSERT statement binds: the database copies and parses a
/// statement's rows whole (SQLite holds them three times over), so the rows of a large body are
/// inserted by several statements (in one transaction).
const STATEMENT_ROWS_BYTES: usize = 1024 * 1024;

/// Most values one INSERT statement binds (SQLite allows 32,766).
const MAX_PARAMS_PER_STATEMENT: usize = 32_000;

/// A planned read (its embeds still to be resolved: `pending`, `presence`).
pub struct ReadPlan<'q> {
    /// The rows.
    pub select: SelectStmt,
    /// The total, when a count was asked for.
    pub count: Option<CountStmt>,
    /// How rows are written.
    pub shape: OutputShape,
    /// The embeds of `select=`.
    pub pending: Vec<Pending<'q>>,
    /// The `rel=is.null` / `rel=not.is.null` filters on them.
    pub presence: Vec<(String, bool)>,
}

pub use crate::engine::Context;

/// Finds a table or view, or answers 404 naming it.
pub fn table<'a>(schema: &'a SchemaCache, name: &str) -> Result<&'a Table, ApiError> {
    schema.table(name).ok_or_else(|| {
        // named as PostgREST names it, with its schema (SQLite's is `main`)
        let exposed = schema.name();
        let err = ApiError::new(
            ErrorCode::TableNotFound,
            format!("Could not find the table '{exposed}.{name}' in the schema cache"),
        );
        // the closest name, when close enough (PostgREST's fuzzy match: `projectx` finds
        // `projects`, `projxxxx` nothing)
        let closest = schema
            .tables
            .keys()
            .map(|t| (strsim::normalized_damerau_levenshtein(t, name), t))
            .filter(|(score, _)| *score >= 0.75)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        match closest {
            Some((_, similar)) => {
                err.hint(format!("Perhaps you meant the table '{exposed}.{similar}'"))
            }
            None => err,
        }
    })
}

/// Checks a column name, returning the cache's spelling.
pub fn column(table: &Table, name: &str) -> Result<String, ApiError> {
    match table.column(name) {
        Some(c) => Ok(c.name.clone()),
        None => Err(ApiError::new(
            ErrorCode::ColumnNotFound,
            format!(
                "Could not find the '{name}' column of '{}' in the schema cache",
                table.name
            ),
        )),
    }
}

/// `table` with the computed columns one level of a read names (in `select`, its filters or
/// its order) that `may_call` allows (the role's grant of the function), as
/// [`Table::with_computed`].
pub fn with_computed<'t>(
    table: &'t Table,
    select: Option<&[SelectItem]>,
    filters: &[Condition],
    order: &[OrderTerm],
    may_call: impl Fn(&str) -> bool,
) -> Cow<'t, Table> {
    if table.computed.is_empty() {
        return Cow::Borrowed(table);
    }
    fn walk<'c>(c: &'c Condition, out: &mut Vec<&'c str>) {
        match c {
            Condition::Pred(p) => out.push(&p.column),
            Condition::And { items, .. } | Condition::Or { items, .. } => {
                items.iter().for_each(|i| walk(i, out))
            }
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for item in select.unwrap_or(&[]) {
        if let SelectItem::Column { name, .. } = item {
            names.push(name);
        }
    }
    filters.iter().for_each(|c| walk(c, &mut names));
    names.extend(
        order
            .iter()
            .filter(|o| o.relation.is_none())
            .map(|o| o.column.as_str()),
    );
    names.retain(|n| may_call(n));
    table.with_computed(names)
}

/// An embed of `select=` waiting to be resolved (by `api::embed`): its place among the output
/// columns of its level.
pub struct Pending<'q> {
    /// After this many of the level's columns.
    pub position: usize,
    /// As parsed.
    pub embed: &'q Embed,
}

/// A level's `select=` resolved: its columns and how they are written, and its embeds.
pub struct Selection<'q> {
    /// Output columns, in order.
    pub columns: Vec<OutputColumn>,
    /// Their keys and kinds (the embeds' keys are added where they resolve).
    pub shape: OutputShape,
    /// The embeds, in output order.
    pub embeds: Vec<Pending<'q>>,
}

/// Resolves `select=` into output columns (`*` or absent → every column) and the embeds among
/// them.
pub fn output<'q>(
    table: &Table,
    select: Option<&'q [SelectItem]>,
    dialect: &dyn Dialect,
) -> Result<Selection<'q>, ApiError> {
    let mut columns = Vec::new();
    let mut kinds = Vec::new();
    let mut embeds = Vec::new();
    for item in select.unwrap_or(&[SelectItem::Star]) {
        match item {
            SelectItem::Star => {
                // (computed columns only when named, as PostgREST)
                for c in table.columns.iter().filter(|c| c.computed.is_none()) {
                    columns.push(OutputColumn {
                        format: c.represented(|r| &r.to_json),
                        ..OutputColumn::plain(&c.name)
                    });
                    kinds.push(c.json_kind);
                }
            }
            // `count` as a column of a table without one: PostgREST's older count of rows
            SelectItem::Column {
                name,
                path,
                alias,
                cast: None,
                aggregate: None,
            } if name == "count" && path.is_empty() && table.column(name).is_none() => {
                columns.push(count_rows(alias.as_deref(), None, dialect)?);
                kinds.push(JsonKind::Auto);
            }
            SelectItem::CountRows { alias, cast } => {
                columns.push(count_rows(alias.as_deref(), cast.as_deref(), dialect)?);
                kinds.push(JsonKind::Auto);
            }
            SelectItem::Embed(embed) => embeds.push(Pending {
                position: columns.len(),
                embed,
            }),
            SelectItem::Column {
                name,
                path,
                alias,
                cast,
                aggregate,
            } => {
                let name = column(table, name)?;
                let json = json_path(table, &name, path, dialect);
                let cast = cast_to(cast.as_deref(), dialect)?;
                let aggregate = match aggregate {
                    None => None,
                    Some(a) => Some(Aggregate {
                        function: a.function,
                        cast: cast_to(a.cast.as_deref(), dialect)?,
                    }),
                };
                let stored = table.column(&name);
                let kind = match (&cast, path.last(), stored, &aggregate) {
                    // a sum, an average or a count is a number; a least or greatest value is
                    // of its column's kind
                    (_, _, _, Some(a))
                        if a.cast.is_some()
                            || !matches!(
                                a.function,
                                AggregateFunction::Min | AggregateFunction::Max
                            ) =>
                    {
                        JsonKind::Auto
                    }
                    (None, None, Some(c), _) => c.json_kind,
                    (None, Some(step), _, _) if !step.as_text => JsonKind::Json,
                    _ => JsonKind::Auto,
                };
                kinds.push(kind);
                let key = match (alias, &aggregate) {
                    (Some(alias), _) => alias.clone(),
                    (None, Some(a)) => a.function.name().to_string(),
                    (None, None) => path_key(&name, path).to_owned(),
                };
                // a domain's JSON representation, for the column itself (not a path into it)
                let format = stored
                    .filter(|_| path.is_empty())
                    .and_then(|c| c.represented(|r| &r.to_json));
                columns.push(OutputColumn {
                    key,
                    column: name,
                    path: json,
                    cast,
                    aggregate,
                    format,
                    written_row: None,
                });
            }
        }
    }
    let keys = columns.iter().map(|c| c.key.clone()).collect();
    Ok(Selection {
        columns,
        shape: OutputShape {
            keys,
            kinds,
            sort: Vec::new(),
        },
        embeds,
    })
}

/// A `::cast` of `select=` as the dialect spells the type; 400 for a type it does not have.
fn cast_to(requested: Option<&str>, dialect: &dyn Dialect) -> Result<Option<String>, ApiError> {
    let Some(requested) = requested else {
        return Ok(None);
    };
    match dialect.cast_type(requested) {
        Some(t) => Ok(Some(t.to_string())),
        None => Err(ApiError::new(
            ErrorCode::QueryParse,
            format!("unsupported cast type '{requested}'"),
        )
        .hint("use one of text, integer, bigint, real, numeric, boolean, json")),
    }
}

/// `count()`: the number of rows (of each group), under `alias` or `count`.
fn count_rows(
    alias: Option<&str>,
    cast: Option<&str>,
    dialect: &dyn Dialect,
) -> Result<OutputColumn, ApiError> {
    Ok(OutputColumn {
        column: String::new(),
        path: Vec::new(),
        key: alias.unwrap_or("count").to_string(),
        cast: None,
        aggregate: Some(Aggregate {
            function: AggregateFunction::Count,
            cast: cast_to(cast, dialect)?,
        }),
        format: None,
        written_row: None,
    })
}

/// Whether `select=` holds an aggregate, at any depth.
pub fn has_aggregates(select: &[SelectItem]) -> bool {
    select.iter().any(|item| match item {
        SelectItem::Column { aggregate, .. } => aggregate.is_some(),
        SelectItem::CountRows { .. } => true,
        SelectItem::Star => false,
        SelectItem::Embed(e) => has_aggregates(&e.select),
    })
}

/// Aggregates in `select=` are refused while `rest.aggregates` is off (400 `PGRST123`, as
/// PostgREST's `db-aggregates-enabled`), and in what a write returns (400 `PGRST127`: the
/// written rows are returned as they are).
pub fn aggregates_allowed(
    select: Option<&[SelectItem]>,
    rest: &RestConfig,
    write: bool,
) -> Result<(), ApiError> {
    if !select.is_some_and(has_aggregates) {
        return Ok(());
    }
    if !rest.aggregates {
        return Err(ApiError::new(
            ErrorCode::AggregatesOff,
            "Use of aggregate functions is not allowed",
        )
        .hint("an operator turns them on with rest.aggregates = true"));
    }
    if write {
        return Err(ApiError::new(
            ErrorCode::AggregateNotImplemented,
            "Feature not implemented",
        )
        .details("Aggregates are not implemented in the representation of a write."));
    }
    Ok(())
}

/// With aggregates among `columns`, the rows are grouped by the other columns: an order term
/// must name one of those (as PostgreSQL requires; SQLite would order by some row's value).
pub fn grouped_order(
    table: &Table,
    columns: &[OutputColumn],
    order: &[OrderTerm],
) -> Result<(), ApiError> {
    if !columns.iter().any(|c| c.aggregate.is_some()) {
        return Ok(());
    }
    let grouped = |t: &OrderTerm| {
        columns
            .iter()
            .any(|c| c.aggregate.is_none() && c.column == t.column && c.path == t.path)
    };
    match order.iter().find(|t| t.relation.is_none() && !grouped(t)) {
        None => Ok(()),
        Some(t) => Err(ApiError::new(
            ErrorCode::GroupingError,
            format!(
                "column \"{}.{}\" must appear in the GROUP BY clause or be used in an aggregate function",
                table.name, t.column
            ),
        )
        .hint("order by the columns selected without an aggregate")),
    }
}

/// The key an embed is known by in the output and in its parameters' paths: its alias, or
/// what it names.
pub fn embed_key(e: &Embed) -> &str {
    e.alias.as_deref().unwrap_or(&e.relation)
}

/// A level's filters without its `rel=is.null` / `rel=not.is.null` ones on an embed, which say
/// whether the embed must have related rows (true) or must have none (false).
pub fn split_presence<'f>(
    filters: &'f [Condition],
    embeds: &[Pending<'_>],
) -> (Cow<'f, [Condition]>, Vec<(String, bool)>) {
    // which embed a filter says must (true) or must not (false) have related rows
    let tests_presence = |p: &Predicate| {
        p.path.is_empty()
            && p.op == Operator::Is
            && matches!(p.operand, Operand::Is(IsValue::Null | IsValue::NotNull))
            && embeds.iter().any(|e| embed_key(e.embed) == p.column)
    };
    let presence_of = |c: &Condition| match c {
        Condition::Pred(p) if tests_presence(p) => Some((
            p.column.clone(),
            matches!(p.operand, Operand::Is(IsValue::NotNull)) != p.negated,
        )),
        _ => None,
    };
    let presence: Vec<(String, bool)> = filters.iter().filter_map(presence_of).collect();
    // in a logic tree, such a filter is one of its tests (`or=(a.not.is.null,b.not.is.null)`)
    fn mark(c: &mut Condition, is_presence: &dyn Fn(&Predicate) -> bool) {
        match c {
            Condition::Pred(p) => p.related = is_presence(p),
            Condition::And { items, .. } | Condition::Or { items, .. } => {
                items.iter_mut().for_each(|i| mark(i, is_presence))
            }
        }
    }
    let in_trees = |c: &Condition| {
        fn any(c: &Condition, test: &dyn Fn(&Predicate) -> bool) -> bool {
            match c {
                Condition::Pred(p) => test(p),
                Condition::And { items, .. } | Condition::Or { items, .. } => {
                    items.iter().any(|i| any(i, test))
                }
            }
        }
        matches!(c, Condition::And { .. } | Condition::Or { .. }) && any(c, &tests_presence)
    };
    if presence.is_empty() && !filters.iter().any(in_trees) {
        // the common case, a read without such filters: nothing copied
        return (Cow::Borrowed(filters), presence);
    }
    let rest = filters
        .iter()
        .filter(|c| presence_of(c).is_none())
        .cloned()
        .map(|mut c| {
            if in_trees(&c) {
                mark(&mut c, &tests_presence);
            }
            c
        })
        .collect();
    (Cow::Owned(rest), presence)
}

/// The table's columns that can never be NULL (their null placement in an order is moot).
pub fn never_null(table: &Table) -> Vec<String> {
    table
        .columns
        .iter()
        .filter(|c| c.never_null)
        .map(|c| c.name.clone())
        .collect()
}

/// A JSON path into the column `name`: on PostgreSQL, where `->` takes only JSON, a column of
/// another type (a composite, an array) is read as JSON first, as PostgREST does; SQLite keeps
/// JSON in any column, and answers 400 for text that is not JSON.
fn json_path(table: &Table, name: &str, path: &[JsonStep], dialect: &dyn Dialect) -> Vec<JsonStep> {
    let is_json = table
        .column(name)
        .is_some_and(|c| c.json_kind == JsonKind::Json);
    let mut path = path.to_vec();
    if let Some(first) = path.first_mut() {
        first.to_json = !is_json && !dialect.json_paths_on_text();
    }
    path
}

/// Checks every column and operator of a filter tree, rewriting names to the cache's spelling:
/// PostgreSQL-only operators are refused on other databases; a full-text operator on a column
/// that is not a `tsvector` is marked to go through `to_tsvector`.
pub fn conditions(
    table: &Table,
    filters: &[Condition],
    dialect: &dyn Dialect,
) -> Result<Vec<Condition>, ApiError> {
    filters
        .iter()
        .map(|c| condition(table, c, dialect))
        .collect()
}

fn condition(table: &Table, c: &Condition, dialect: &dyn Dialect) -> Result<Condition, ApiError> {
    Ok(match c {
        // the presence of an embedded resource's rows, which the renderer tests
        Condition::Pred(p) if p.related => c.clone(),
        Condition::Pred(p) => {
            let name = column(table, &p.column)?;
            let path = json_path(table, &name, &p.path, dialect);
            if !dialect.supports(p.op) {
                return Err(ApiError::new(
                    ErrorCode::QueryParse,
                    format!(
                        "operator '{}' is only available on PostgreSQL",
                        rowgate_query::print::operator_name(p.op)
                    ),
                )
                .hint("array, range and full-text operators need the PostgreSQL backend"));
            }
            let vectorize = p.op.is_full_text()
                && table
                    .column(&name)
                    .is_some_and(|c| !c.is_of_type("tsvector"))
                || p.op.is_full_text() && !p.path.is_empty();
            if p.path.is_empty() && p.op.compares_values() {
                check_operand(table, &name, &p.operand)?;
            }
            let is_bool = p.path.is_empty()
                && table
                    .column(&name)
                    .is_some_and(|c| c.json_kind == JsonKind::Bool);
            let operand = match &p.operand {
                Operand::Scalar(v) if is_bool => Operand::Scalar(bool_literal(v)),
                Operand::List(items) if is_bool => {
                    Operand::List(items.iter().map(|v| bool_literal(v)).collect())
                }
                other => other.clone(),
            };
            // a domain's text representation parses the values it is compared with
            let parse = table
                .column(&name)
                .filter(|_| p.path.is_empty() && p.op.compares_values())
                .and_then(|c| c.represented(|r| &r.from_text));
            let like_on = |flag: fn(&crate::schema::Column) -> bool| {
                p.op == Operator::Like && p.path.is_empty() && table.column(&name).is_some_and(flag)
            };
            let prefix_range = like_on(|c| c.prefix_indexed);
            let unindexed = like_on(|c| c.unindexed);
            Condition::Pred(Predicate {
                column: name,
                path,
                operand,
                vectorize,
                parse,
                prefix_range,
                unindexed,
                ..p.clone()
            })
        }
        Condition::And { negated, items } => Condition::And {
            negated: *negated,
            items: conditions(table, items, dialect)?,
        },
        Condition::Or { negated, items } => Condition::Or {
            negated: *negated,
            items: conditions(table, items, dialect)?,
        },
    })
}

/// A filter's value (or list) checked against what the column accepts: `?team_id=eq.abc` is
/// PostgreSQL's 22P02 on SQLite too, not an empty answer.
fn check_operand(table: &Table, name: &str, operand: &Operand) -> Result<(), ApiError> {
    let Some(input) = table.column(name).map(|c| c.input) else {
        return Ok(());
    };
    let check = |v: &str| {
        input
            .check_text(v)
            .map_err(|e| e.details(format!("column {name} of {}", table.name)))
    };
    match operand {
        Operand::Scalar(v) => check(v),
        Operand::List(items) => items.iter().try_for_each(|v| check(v)),
        _ => Ok(()),
    }
}

/// A filter value for a boolean column as SQLite stores it: PostgreSQL's boolean spellings
/// (`true`, `t`, `yes`, `on`, … in any case) become `1` or `0`; anything else is left as written.
fn bool_literal(v: &str) -> String {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "t" | "yes" | "y" | "on" => "1".into(),
        "false" | "f" | "no" | "n" | "off" => "0".into(),
        _ => v.to_string(),
    }
}

/// Checks `order=` terms against the table, rewriting names to the cache's spelling; a term on
/// an embedded resource (`rel(col)`) is checked where the embed is resolved.
pub fn order(
    table: &Table,
    terms: &[OrderTerm],
    dialect: &dyn Dialect,
) -> Result<Vec<OrderTerm>, ApiError> {
    terms
        .iter()
        .map(|t| {
            if t.relation.is_some() {
                return Ok(t.clone());
            }
            let name = column(table, &t.column)?;
            Ok(OrderTerm {
                path: json_path(table, &name, &t.path, dialect),
                column: name,
                ..t.clone()
            })
        })
        .collect()
}

/// The filters that select one row by its primary key from an item URL segment (`1` or, for a
/// composite key, `a,b` in key order).
pub fn item_filters(table: &Table, key: &str) -> Result<Vec<Condition>, ApiError> {
    if table.primary_key.is_empty() {
        return Err(ApiError::new(
            ErrorCode::NoPrimaryKey,
            format!(
                "'{}' has no primary key, so it has no item URLs",
                table.name
            ),
        )
        .hint(format!(
            "filter the collection instead: /{}?col=eq.value",
            table.name
        )));
    }
    let parts: Vec<&str> = if table.primary_key.len() == 1 {
        vec![key]
    } else {
        key.split(',').collect()
    };
    if parts.len() != table.primary_key.len() {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!(
                "'{}' has a {}-column primary key ({}); the item URL gives {} value(s)",
                table.name,
                table.primary_key.len(),
                table.primary_key.join(", "),
                parts.len()
            ),
        ));
    }
    for (col, value) in table.primary_key.iter().zip(&parts) {
        let Some((min, max)) = table
            .column(col)
            .and_then(crate::schema::Column::integer_range)
        else {
            continue;
        };
        if !value
            .trim()
            .parse::<i64>()
            .is_ok_and(|v| (min..=max).contains(&v))
        {
            return Err(ApiError::new(
                ErrorCode::QueryParse,
                format!(
                    "the key column '{col}' of '{}' is an integer from {min} to {max}",
                    table.name
                ),
            )
            .details(format!("the item URL gives {value:?}")));
        }
    }
    Ok(table
        .primary_key
        .iter()
        .zip(parts)
        .map(|(col, v)| eq(col, v))
        .collect())
}

/// `col = value` for each key column and its value.
pub fn key_filters(key: &[(String, String)]) -> Vec<Condition> {
    key.iter().map(|(col, v)| eq(col, v)).collect()
}

fn eq(column: &str, value: &str) -> Condition {
    Condition::Pred(Predicate::new(
        column,
        Operator::Eq,
        Operand::Scalar(value.to_string()),
    ))
}

/// Plans a read of `table` (`item` = the item URL's filters, already resolved).
pub fn read<'q>(
    table: &Table,
    query: &'q Query,
    range: Option<ItemRange>,
    with_count: bool,
    max_rows: u64,
    item: Option<Vec<Condition>>,
    dialect: &dyn Dialect,
) -> Result<ReadPlan<'q>, ApiError> {
    let selection = output(table, query.select.as_deref(), dialect)?;
    let order = order(table, &query.order, dialect)?;
    grouped_order(table, &selection.columns, &order)?;
    let (filters, presence) = split_presence(&query.filters, &selection.embeds);
    let mut filters = conditions(table, &filters, dialect)?;
    if let Some(item) = item {
        filters.extend(item);
    }
    let (mut offset, mut limit) = (query.offset, query.limit);
    if let Some(r) = range {
        // the rows both the query string's window and the Range header's take (PostgREST's
        // intersection of the two)
        let start = offset.unwrap_or(0).max(r.offset);
        let ends = [
            limit.map(|l| offset.unwrap_or(0).saturating_add(l)),
            r.limit.map(|l| r.offset.saturating_add(l)),
        ];
        let end = ends.into_iter().flatten().min();
        offset = Some(start).filter(|&o| o > 0);
        limit = end.map(|e| e.saturating_sub(start));
    }
    if max_rows > 0 {
        limit = Some(limit.map_or(max_rows, |l| l.min(max_rows)));
    }
    let count = with_count.then(|| CountStmt {
        table: table.relation(),
        filters: filters.clone(),
        embeds: Vec::new(),
    });
    Ok(ReadPlan {
        select: SelectStmt {
            table: table.relation(),
            columns: selection.columns,
            filters,
            order,
            not_null: never_null(table),
            limit,
            offset,
            embeds: Vec::new(),
        },
        count,
        shape: selection.shape,
        pending: selection.embeds,
        presence,
    })
}

/// A body's value for the column `name` (resolved), checked against what the column accepts
/// (on SQLite: PostgreSQL's answer to a value of the wrong type).
/// A body's JSON value for the column `name`, checked against what the column accepts.
pub fn column_value(table: &Table, name: &str, v: &Json) -> Result<Value, ApiError> {
    // PostgreSQL's text and jsonb cannot hold NUL, written or nested (an insert's
    // json_populate_recordset refuses it; an update is held to the same)
    let native = table
        .column(name)
        .is_some_and(|c| c.input == InputType::Native);
    if native && holds_nul(v) {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "text cannot hold NUL (\\u0000) in PostgreSQL",
        )
        .details(format!("column {name} of {}", table.name)));
    }
    // a domain parsed from JSON takes the value's JSON text (the statement parses it)
    if table
        .column(name)
        .is_some_and(|c| c.represented(|r| &r.from_json).is_some())
    {
        return Ok(Value::Text(v.to_string()));
    }
    // a JSON column stores a JSON string as JSON ("text", quoted), as an insert does
    if let Json::String(_) = v {
        if table
            .column(name)
            .is_some_and(|c| c.json_kind == crate::schema::JsonKind::Json)
        {
            return Ok(Value::Text(v.to_string()));
        }
    }
    if let (Some(c), Json::String(text)) = (table.column(name), v) {
        if let Some(kind) = native
            .then(|| InputType::postgres_temporal(&c.decl_type))
            .flatten()
        {
            kind.check_postgres_temporal(text)
                .map_err(|e| e.details(format!("column {name} of {}", table.name)))?;
        }
    }
    checked_value(table, name, json_value(v))
}

/// A PATCH or PUT body's member for the column `name` (resolved), checked as
/// [`column_value`] checks a value; a nested object or array is its JSON text.
pub fn member_value(table: &Table, name: &str, member: &Member) -> Result<Value, ApiError> {
    let text = match member {
        Member::Scalar(v) => return column_value(table, name, v),
        Member::Nested(text) => text,
    };
    let native = table
        .column(name)
        .is_some_and(|c| c.input == InputType::Native);
    if native && text_holds_nul(text) {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "text cannot hold NUL (\\u0000) in PostgreSQL",
        )
        .details(format!("column {name} of {}", table.name)));
    }
    checked_value(table, name, Value::Text(text.clone()))
}

/// Whether compact JSON text (as serde_json writes it) holds NUL in a string or a key.
fn text_holds_nul(text: &str) -> bool {
    let mut bytes = text.as_bytes().iter();
    while let Some(&c) = bytes.next() {
        if c == b'\\' {
            match bytes.next() {
                Some(b'u') => {
                    if bytes.as_slice().starts_with(b"0000") {
                        return true;
                    }
                }
                _ => continue,
            }
        }
    }
    false
}

/// Whether a JSON value holds NUL in a string or a key, at any depth.
fn holds_nul(v: &Json) -> bool {
    match v {
        Json::String(s) => s.contains('\0'),
        Json::Array(items) => items.iter().any(holds_nul),
        Json::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// `value` for the column `name`, checked against what the column accepts.
fn checked_value(table: &Table, name: &str, value: Value) -> Result<Value, ApiError> {
    match table.column(name) {
        Some(c) => c
            .input
            .check_value(value)
            .map_err(|e| e.details(format!("column {name} of {}", table.name))),
        None => Ok(value),
    }
}

/// A planned insert: one or more statements run in one transaction.
#[derive(Debug, Clone)]
pub struct InsertPlan {
    /// The statements.
    pub stmts: Vec<InsertStmt>,
    /// How returned rows are written (when `returning` is set on the statements).
    pub shape: OutputShape,
    /// Number of rows in the body.
    pub rows: usize,
}

/// Plans `POST` (insert or upsert) of a body: its length, and the reading of its rows into a
/// sink ([`super::rows::read_rows`]).
/// `returning` are the columns to give back (empty for none).
#[allow(clippy::too_many_arguments)]
pub fn insert(
    d: &dyn Dialect,
    table: &Table,
    query: &Query,
    body: (
        usize,
        impl FnOnce(&mut dyn RowSink) -> Result<usize, ApiError>,
    ),
    prefer: &Prefer,
    returning: Vec<OutputColumn>,
    shape: OutputShape,
) -> Result<InsertPlan, ApiError> {
    writable(table, Op::Insert)?;
    if matches!(prefer.resolution, Some(Resolution::Merge)) {
        writable(table, Op::Update)?;
    }
    let (body_len, read) = body;
    let mut rows = RowsPlanner::new(d, table, prefer.missing_default, body_len);
    let count = read(&mut rows)?;
    // named conflict columns must exist, whether or not a resolution uses them
    for c in query.on_conflict.iter().flatten() {
        column(table, c)?;
    }
    let on_conflict = match prefer.resolution {
        None => None,
        Some(resolution) => {
            let target = match &query.on_conflict {
                Some(cols) => cols
                    .iter()
                    .map(|c| column(table, c))
                    .collect::<Result<Vec<_>, _>>()?,
                None if !table.primary_key.is_empty() => table.primary_key.clone(),
                None => {
                    return Err(ApiError::new(
                        ErrorCode::NoPrimaryKey,
                        format!(
                            "'{}' has no primary key to resolve conflicts on",
                            table.name
                        ),
                    )
                    .hint("name the conflict columns with on_conflict="))
                }
            };
            Some(match resolution {
                Resolution::Ignore => OnConflict::Ignore { target },
                Resolution::Merge => OnConflict::Merge {
                    update: overwritten(&target, &rows.columns),
                    target,
                },
            })
        }
    };
    let mut stmts = Vec::new();
    for group in rows.groups {
        let on_conflict = on_conflict.clone().map(|oc| match oc {
            OnConflict::Merge { target, .. } => OnConflict::Merge {
                update: overwritten(&target, &group.columns),
                target,
            },
            other => other,
        });
        let columns = group.columns.clone();
        if columns.is_empty() {
            // rows of defaults: one statement, however many
            stmts.push(InsertStmt {
                table: table.relation(),
                columns,
                rows: InsertRows::Defaults {
                    rows: group.count(),
                    stand_in: stand_in(d, table),
                },
                constants: Vec::new(),
                on_conflict,
                returning: returning.clone(),
            });
            continue;
        }
        for rows in group.finish() {
            stmts.push(InsertStmt {
                table: table.relation(),
                columns: columns.clone(),
                rows,
                constants: Vec::new(),
                on_conflict: on_conflict.clone(),
                returning: returning.clone(),
            });
        }
    }
    Ok(InsertPlan {
        stmts,
        shape,
        rows: count,
    })
}

/// For a database that cannot select zero columns into a table: the first column that can be
/// written, with its default's SQL, to insert rows of defaults through
/// ([`InsertRows::Defaults`]).
fn stand_in(d: &dyn Dialect, table: &Table) -> Option<(String, String)> {
    if d.selects_zero_columns() {
        return None;
    }
    table
        .columns
        .iter()
        .find(|c| !c.generated && c.computed.is_none())
        .map(|c| (c.name.clone(), d.column_default(c.default.as_deref())))
}

/// The rows of an insert as they are read: each value checked against its column and written
/// into compact JSON rows, one set of rows per combination of given columns (with
/// `missing=default` an absent key takes the column's default, which only leaving the column out
/// of the INSERT expresses).
struct RowsPlanner<'a> {
    d: &'a dyn Dialect,
    table: &'a Table,
    missing_default: bool,
    /// The body's keys as columns (schema-cache spelling), with what each accepts.
    columns: Vec<String>,
    inputs: Vec<InputType>,
    /// Which of them are JSON columns (a JSON string is stored there as JSON, quoted).
    json: Vec<bool>,
    /// Which of them are integer columns.
    integer: Vec<bool>,
    /// Per key, a PostgreSQL date or timestamp column's check of what is written to it.
    temporal: Vec<Option<InputType>>,
    groups: Vec<RowGroup>,
    /// The current row's given columns (reused from row to row).
    present: Vec<bool>,
    /// The body's length: small bodies are bound as values, the rows of large ones as JSON
    /// texts with room reserved for about that much.
    body_len: usize,
}

/// Rows that give the same columns.
struct RowGroup {
    present: Vec<bool>,
    columns: Vec<String>,
    rows: GroupRows,
}

/// A group's rows as they are written.
enum GroupRows {
    Values(Vec<Vec<Value>>),
    Json(JsonRowsWriter),
    /// Rows that give no column (`{}`): only their number.
    Defaults(usize),
}

impl RowGroup {
    fn begin_row(&mut self) {
        match &mut self.rows {
            GroupRows::Values(rows) => rows.push(Vec::with_capacity(self.columns.len())),
            GroupRows::Json(writer) => writer.begin_row(),
            GroupRows::Defaults(rows) => *rows += 1,
        }
    }

    /// The next cell of the row: a checked value, or JSON text to be read by the column's type.
    fn cell(&mut self, value: Value, json: Option<String>) {
        match &mut self.rows {
            GroupRows::Values(rows) => {
                let row = rows.last_mut().expect("a row was begun");
                row.push(json.map_or(value, Value::Text));
            }
            GroupRows::Json(writer) => match &json {
                Some(text) => writer.cell(Cell::Json(text)),
                None => writer.cell(Cell::Value(&value)),
            },
            GroupRows::Defaults(_) => {}
        }
    }

    fn end_row(&mut self) {
        if let GroupRows::Json(writer) = &mut self.rows {
            writer.end_row();
        }
    }

    /// How many rows so far.
    fn count(&self) -> usize {
        match &self.rows {
            GroupRows::Values(rows) => rows.len(),
            GroupRows::Json(writer) => writer.count(),
            GroupRows::Defaults(rows) => *rows,
        }
    }

    /// The rows, as one or more statements' worth.
    fn finish(self) -> Vec<InsertRows> {
        match self.rows {
            GroupRows::Values(rows) => {
                let per_stmt = (MAX_PARAMS_PER_STATEMENT / self.columns.len().max(1)).max(1);
                let mut rows = rows.into_iter();
                std::iter::from_fn(|| {
                    let chunk: Vec<Vec<Value>> = rows.by_ref().take(per_stmt).collect();
                    (!chunk.is_empty()).then_some(InsertRows::Values(chunk))
                })
                .collect()
            }
            GroupRows::Json(writer) => writer
                .finish()
                .into_iter()
                .filter(|piece| piece.count > 0)
                .map(InsertRows::Json)
                .collect(),
            GroupRows::Defaults(rows) => vec![InsertRows::Defaults {
                rows,
                stand_in: None,
            }],
        }
    }
}

impl<'a> RowsPlanner<'a> {
    fn new(
        d: &'a dyn Dialect,
        table: &'a Table,
        missing_default: bool,
        body_len: usize,
    ) -> RowsPlanner<'a> {
        RowsPlanner {
            d,
            table,
            missing_default,
            columns: Vec::new(),
            inputs: Vec::new(),
            json: Vec::new(),
            integer: Vec::new(),
            temporal: Vec::new(),
            groups: Vec::new(),
            present: Vec::new(),
            body_len,
        }
    }

    /// The one set of rows (a body read without `missing=default`), or none.
    fn into_single(self) -> Option<RowGroup> {
        self.groups.into_iter().next()
    }
}

impl RowSink for RowsPlanner<'_> {
    fn knows(&self, key: &str) -> bool {
        self.table.column(key).is_some()
    }

    fn keys(&mut self, keys: &[String]) -> Result<(), ApiError> {
        self.columns = keys
            .iter()
            .map(|k| column(self.table, k))
            .collect::<Result<_, _>>()?;
        self.inputs = self
            .columns
            .iter()
            .map(|c| self.table.column(c).map_or(InputType::Any, |c| c.input))
            .collect();
        self.json = self
            .columns
            .iter()
            .map(|c| {
                self.table
                    .column(c)
                    .is_some_and(|c| c.json_kind == crate::schema::JsonKind::Json)
            })
            .collect();
        self.temporal = self
            .columns
            .iter()
            .map(|c| {
                self.table
                    .column(c)
                    .filter(|c| c.input == InputType::Native)
                    .and_then(|c| InputType::postgres_temporal(&c.decl_type))
            })
            .collect();
        self.integer = self
            .columns
            .iter()
            .map(|c| {
                self.table
                    .column(c)
                    .and_then(crate::schema::Column::integer_range)
                    .is_some()
            })
            .collect();
        Ok(())
    }

    fn row(&mut self, cells: &mut [Option<BodyCell>]) -> Result<(), ApiError> {
        self.present.clear();
        self.present
            .extend(cells.iter().map(|c| !self.missing_default || c.is_some()));
        let group = match self.groups.iter().position(|g| g.present == self.present) {
            Some(i) => &mut self.groups[i],
            None => {
                let columns: Vec<String> = self
                    .columns
                    .iter()
                    .zip(&self.present)
                    .filter(|(_, p)| **p)
                    .map(|(c, _)| c.clone())
                    .collect();
                let rows = if columns.is_empty() {
                    GroupRows::Defaults(0)
                } else if self.body_len < self.d.values_insert_bytes() {
                    GroupRows::Values(Vec::new())
                } else {
                    GroupRows::Json(JsonRowsWriter::cut(
                        self.d,
                        &columns,
                        std::mem::take(&mut self.body_len),
                        STATEMENT_ROWS_BYTES,
                    ))
                };
                self.groups.push(RowGroup {
                    present: self.present.clone(),
                    columns,
                    rows,
                });
                self.groups.last_mut().expect("just pushed")
            }
        };
        group.begin_row();
        for (i, cell) in cells.iter_mut().enumerate() {
            if !self.present[i] {
                continue;
            }
            let input = self.inputs[i];
            let refused = |e: ApiError| {
                e.details(format!("column {} of {}", self.columns[i], self.table.name))
            };
            let cell = cell.take();
            if let (Some(kind), Some(BodyCell::Value(Value::Text(text)))) =
                (self.temporal[i], &cell)
            {
                kind.check_postgres_temporal(text).map_err(refused)?;
            }
            match cell {
                None => group.cell(Value::Null, None),
                Some(BodyCell::Json(text))
                    if matches!(input, InputType::Native | InputType::Any) =>
                {
                    group.cell(Value::Null, Some(text))
                }
                Some(BodyCell::Json(text)) => {
                    group.cell(input.check_value(Value::Text(text)).map_err(refused)?, None)
                }
                // (PostgreSQL's insert writes a string into a JSON column as JSON itself)
                Some(BodyCell::Value(Value::Text(text)))
                    if self.json[i] && input != InputType::Native =>
                {
                    let quoted = Json::String(text).to_string();
                    group.cell(Value::Text(quoted), None)
                }
                // an integer column's value written with a fraction (112.0) is an integer, as
                // JSON Schema counts it
                Some(BodyCell::Value(Value::Real(f))) if self.integer[i] => {
                    let v = super::rows::integral(f).map_or(Value::Real(f), Value::Int);
                    group.cell(input.check_value(v).map_err(refused)?, None)
                }
                Some(BodyCell::Value(v)) => {
                    group.cell(input.check_value(v).map_err(refused)?, None)
                }
            }
        }
        group.end_row();
        Ok(())
    }
}

/// A null written to a column that takes none is refused before any row is touched, whether or
/// not a row would change; `what` names the column in the error.
pub fn refuse_null(
    table: &Table,
    column: &str,
    null: bool,
    what: impl FnOnce() -> String,
) -> Result<(), ApiError> {
    if null && table.column(column).is_some_and(|c| c.never_null) {
        return Err(ApiError::new(
            ErrorCode::NotNullViolation,
            "a NOT NULL constraint was violated",
        )
        .details(format!("{} may not be null", what())));
    }
    Ok(())
}

/// Plans `PATCH`: the body's keys become assignments.
///
/// With `columns=`, only those keys of the body are read (each must be a column), and with
/// `missing_default` those the body lacks are set to their defaults, as PostgREST does.
pub fn update(
    table: &Table,
    filters: Vec<Condition>,
    body: Option<&Members>,
    returning: Vec<OutputColumn>,
    (columns, missing_default): (Option<&[String]>, bool),
) -> Result<Option<UpdateStmt>, ApiError> {
    writable(table, Op::Update)?;
    let Some(o) = body else {
        return Ok(None); // `[]` changes nothing, as `{}`
    };
    let mut defaults = Vec::new();
    if let Some(columns) = columns {
        for c in columns {
            let name = column(table, c)?;
            if missing_default && !o.contains_key(c) && !defaults.iter().any(|(n, _)| *n == name) {
                let default = table.column(&name).and_then(|c| c.default.clone());
                defaults.push((name, default));
            }
        }
    }
    let set: Vec<(String, Value)> = o
        .iter()
        .filter(|(k, _)| columns.is_none_or(|cs| cs.contains(k)))
        .map(|(k, v)| {
            let name = column(table, k)?;
            // refused whether or not a row matches: the change is wrong for any row
            refuse_null(table, &name, v.is_null(), || {
                format!("column {name} of {}", table.name)
            })?;
            // (a simple CHECK bound likewise)
            let bounds = table.column(&name).map(|c| c.bounds).unwrap_or_default();
            let number = match v {
                Member::Scalar(v) => v.as_f64(),
                Member::Nested(_) => None,
            };
            if number.is_some_and(|n| !bounds.admit(n)) {
                return Err(ApiError::new(
                    ErrorCode::CheckViolation,
                    "a CHECK constraint was violated",
                )
                .details(format!(
                    "{name} = {v} in {}: its CHECK constraint needs {name} {}",
                    table.name,
                    bounds.describe()
                )));
            }
            let value = member_value(table, &name, v)?;
            Ok((name, value))
        })
        .collect::<Result<_, ApiError>>()?;
    if set.is_empty() && defaults.is_empty() {
        return Ok(None);
    }
    Ok(Some(UpdateStmt {
        table: table.relation(),
        set,
        defaults,
        filters,
        returning,
    }))
}

/// Plans `DELETE`.
pub fn delete(
    table: &Table,
    filters: Vec<Condition>,
    returning: Vec<OutputColumn>,
) -> Result<DeleteStmt, ApiError> {
    writable(table, Op::Delete)?;
    Ok(DeleteStmt {
        table: table.relation(),
        filters,
        returning,
    })
}

/// Plans `PUT`: a single-row upsert by the full primary key. `key` holds the key values from the
/// URL (item URL or `pk=eq.v` filters); the body must agree with them.
#[allow(clippy::too_many_arguments)]
pub fn put(
    d: &dyn Dialect,
    table: &Table,
    key: &[(String, String)],
    body: Shape,
    returning: Vec<OutputColumn>,
) -> Result<InsertStmt, ApiError> {
    writable(table, Op::Insert)?;
    writable(table, Op::Update)?;
    let Some(mut object) = body.one_object("PUT")? else {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "the PUT body must be one JSON object, or an array of one",
        ));
    };
    for (col, url_value) in key {
        match object.get(col) {
            None => {
                object.insert(col.clone(), Member::Scalar(Json::String(url_value.clone())));
            }
            Some(v) if json_matches(v, url_value) => {}
            Some(v) => {
                return Err(ApiError::new(
                    ErrorCode::PutKeyMismatch,
                    "Payload values do not match URL in primary key column(s)",
                )
                .details(format!(
                    "{col} is {url_value} in the URL and {v} in the body"
                )))
            }
        }
    }
    let keys: Vec<String> = object.keys().cloned().collect();
    // one row: bound as values where the database binds small bodies so (a large value is
    // then copied the fewest times)
    let mut rows = RowsPlanner::new(d, table, false, 0);
    rows.keys(&keys)?;
    let mut cells: Vec<Option<BodyCell>> =
        object.into_values().map(|v| Some(v.into_cell())).collect();
    rows.row(&mut cells)?;
    let columns = rows.columns.clone();
    let json = rows
        .into_single()
        .and_then(|g| g.finish().into_iter().next())
        .unwrap_or_default();
    let target = table.primary_key.clone();
    let update = overwritten(&target, &columns);
    Ok(InsertStmt {
        table: table.relation(),
        on_conflict: Some(OnConflict::Merge { update, target }),
        columns,
        rows: json,
        constants: Vec::new(),
        returning,
    })
}

/// The columns an upsert of `given` columns overwrites on a conflict over `target`: those that
/// are not the target's. When every given column is a target column, those are set to
/// themselves, so that the existing row is "updated" and RETURNING gives it (as PostgREST
/// does); DO NOTHING would leave it out of the representation.
fn overwritten(target: &[String], given: &[String]) -> Vec<String> {
    let others: Vec<String> = given
        .iter()
        .filter(|c| !target.contains(c))
        .cloned()
        .collect();
    if others.is_empty() {
        given.to_vec()
    } else {
        others
    }
}

fn json_matches(v: &Member, text: &str) -> bool {
    match v {
        Member::Scalar(Json::String(s)) => s == text,
        Member::Scalar(Json::Number(n)) => {
            n.to_string() == text || n.as_f64() == text.parse::<f64>().ok()
        }
        _ => false,
    }
}

/// The primary-key values of a `PUT` given as `pk=eq.v` filters: every key column exactly once,
/// nothing else, and no limit/offset.
pub fn put_key(table: &Table, query: &Query) -> Result<Vec<(String, String)>, ApiError> {
    let invalid = || {
        ApiError::new(
            ErrorCode::InvalidPut,
            "Filters must include all and only primary key columns with 'eq' operators",
        )
        // this URL (without the key's filters) takes every method but PUT
        .allow("GET, HEAD, POST, PATCH, DELETE")
        .hint(format!(
            "PUT /{}?{}",
            table.name,
            table
                .primary_key
                .iter()
                .map(|c| format!("{c}=eq.…"))
                .collect::<Vec<_>>()
                .join("&")
        ))
    };
    if table.primary_key.is_empty() {
        return Err(invalid());
    }
    let mut key = Vec::new();
    for f in &query.filters {
        match f {
            Condition::Pred(Predicate {
                column: c,
                path,
                negated: false,
                op: Operator::Eq,
                quantifier: None,
                operand: Operand::Scalar(v),
                ..
            }) if path.is_empty()
                && table.primary_key.contains(c)
                && !key.iter().any(|(k, _)| k == c) =>
            {
                key.push((c.clone(), v.clone()));
            }
            _ => return Err(invalid()),
        }
    }
    if key.len() != table.primary_key.len() {
        return Err(invalid());
    }
    // (after the key: a PUT to the collection URL without it is not a PUT at all, 405)
    if query.limit.is_some() || query.offset.is_some() {
        return Err(ApiError::new(
            ErrorCode::PutLimit,
            "limit/offset querystring parameters are not allowed for PUT",
        ));
    }
    Ok(key)
}

/// Refuses a write a view does not take (405, with the methods it does take in `Allow`).
pub fn writable(table: &Table, op: Op) -> Result<(), ApiError> {
    let w = table.writes;
    let takes = match op {
        Op::Select => true,
        Op::Insert => w.insert,
        Op::Update => w.update,
        Op::Delete => w.delete,
    };
    if takes {
        return Ok(());
    }
    let what = if w == Writes::NONE {
        "views are read-only".to_string()
    } else {
        format!("it cannot be written by {}", op.verb())
    };
    Err(ApiError::new(
        ErrorCode::ReadOnlyResource,
        format!("'{}' is a view; {what}", table.name),
    )
    .allow(&allowed_methods(table, false)))
}

/// The methods `table` answers, as `Allow` lists them (`item`: its one-row URL).
pub fn allowed_methods(table: &Table, item: bool) -> String {
    let w = table.writes;
    let mut methods = vec!["GET", "HEAD"];
    if w.insert && !item {
        methods.push("POST");
    }
    // (PUT takes the key's filters, `pk=eq.v`: not the collection URL as such)
    if w.insert && w.update && item {
        methods.push("PUT");
    }
    if w.update {
        methods.push("PATCH");
    }
    if w.delete {
        methods.push("DELETE");
    }
    methods.join(", ")
}
