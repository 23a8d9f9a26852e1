//! Statements → SQL text plus bound parameters, per database dialect. This is the only place
//! identifiers are quoted; filter values are always bound as parameters (`Value::Text` of the raw
//! query-string text, typed by the database), never spliced into the text.
//!
//! Rendering is total: it never fails. Statements are expected to be well-formed as documented in
//! [`crate::stmt`] (cast targets already validated by [`Dialect::cast_type`], non-empty column and
//! assignment lists); an unknown cast target is rendered without the cast.
//!
//! PostgreSQL-only operators (arrays, ranges, full text) render as PostgreSQL spells them whatever
//! the dialect: the planner rejects them for other databases before rendering. JSON path keys are
//! bound parameters too, never spliced.
//!
//! Predicates whose operand does not match their operator (which [`crate::parse`] never produces)
//! are rendered leniently: an `is` operand renders as `IS …` whatever the operator, a list with
//! any other operator than `in` as `(any)`, a scalar with `in` as a one-element list and a scalar
//! with `is` as `"c" IS ?` (null-safe equality). [`crate::eval`] follows the same rules.

use crate::ast::{
    Condition, Direction, IsValue, JsonKey, JsonStep, Nulls, Operand, Operator, Predicate,
    QualifiedName, Quantifier, RowFunction, Value,
};
use crate::stmt::{
    Constant, CountStmt, DeleteStmt, EmbedStmt, InsertRows, InsertStmt, JsonRows, OnConflict,
    OutputColumn, Relation, SelectStmt, Sql, UpdateStmt, ValueKind,
};

/// What differs between databases.
pub trait Dialect: Send + Sync {
    /// The clause that locks the rows a `SELECT` reads until the transaction ends
    /// (` FOR UPDATE`), where the backend has one; SQLite's writer holds the whole database.
    fn row_lock(&self) -> Option<&'static str> {
        None
    }

    /// Short name (`sqlite`, `postgres`).
    fn name(&self) -> &'static str;

    /// Whether `INSERT … DEFAULT VALUES` may take an `ON CONFLICT` clause (SQLite's grammar
    /// has no upsert there).
    fn upserts_default_values(&self) -> bool {
        true
    }

    /// Whether `INSERT INTO t SELECT FROM …` (a query of no columns) inserts rows of every
    /// column's default (PostgreSQL); otherwise a column must stand in
    /// ([`crate::stmt::InsertRows::Defaults`]).
    fn selects_zero_columns(&self) -> bool {
        false
    }

    /// A `FROM` item of `count` rows (the placeholder of a bound integer), for rows of
    /// defaults: a recursive CTE (SQLite has no `generate_series` of its own).
    fn series(&self, count: &str) -> String {
        format!(
            "(WITH RECURSIVE _rg_series(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM _rg_series \
             WHERE n < {count}) SELECT n FROM _rg_series)"
        )
    }

    /// `"id"`, with embedded `"` doubled and NUL characters removed.
    fn quote_ident(&self, id: &str) -> String {
        let mut out = String::with_capacity(id.len() + 2);
        out.push('"');
        for c in id.chars() {
            match c {
                '"' => out.push_str("\"\""),
                '\0' => {}
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    /// The placeholder of the `index_1_based`-th bound parameter.
    fn placeholder(&self, index_1_based: usize) -> String;

    /// The SQL type for a `::cast` request (case-insensitive), from an allowlist; `None` when the
    /// type is not allowed. Idempotent: a returned name maps to itself.
    fn cast_type(&self, requested: &str) -> Option<&'static str>;

    /// `lhs LIKE rhs` (case-sensitive) or its case-insensitive form.
    fn like(&self, lhs: &str, rhs: &str, case_insensitive: bool) -> String;

    /// A `LIKE` pattern's placeholder the query planner is not to read: SQLite's LIKE
    /// optimization reads a bound pattern when it prepares the statement, and marks it to be
    /// prepared again whenever the pattern is bound; where no index can serve the pattern (it
    /// starts with a wildcard, or a prefix range already does), `+?` (a no-op) spares that.
    fn unplanned_pattern(&self, placeholder: &str) -> String {
        placeholder.to_owned()
    }

    /// The bound pattern for a `like`/`ilike` value: PostgREST's `*` becomes `%`.
    fn like_pattern(&self, value: &str) -> String {
        value.replace('*', "%")
    }

    /// `lhs` matches the regular expression `rhs` (case-insensitively when asked).
    fn regex(&self, lhs: &str, rhs: &str, case_insensitive: bool) -> String;

    /// The bound pattern for a `match`/`imatch` value.
    fn regex_pattern(&self, value: &str, _case_insensitive: bool) -> String {
        value.to_owned()
    }

    /// `lhs->key` (JSON) or `lhs->>key` (text) for a bound key placeholder, an array index when
    /// `index`.
    fn json_step(&self, lhs: &str, key: &str, index: bool, as_text: bool) -> String;

    /// A value that is not JSON as JSON, for a path into it (PostgreSQL: `to_jsonb`).
    fn as_json(&self, expr: &str) -> String {
        expr.to_owned()
    }

    /// A JSON value (a path ending in `->`, or a bound literal) as the database compares and
    /// sorts JSON: PostgreSQL's jsonb compares numbers as numbers by itself; SQLite's `->`
    /// gives JSON text, so its SQL value (`->> '$'`) is compared instead, on both sides.
    fn json_comparable(&self, expr: &str) -> String {
        expr.to_owned()
    }

    /// The bound value of a JSON field key.
    fn json_field_key(&self, field: &str) -> Value {
        Value::Text(field.to_owned())
    }

    /// Whether the database has `op` (PostgreSQL's array, range and full-text operators exist
    /// only there).
    fn supports(&self, op: Operator) -> bool;

    /// Whether a JSON path may follow any column (SQLite's JSON functions read JSON text in any
    /// text column); otherwise only a json or jsonb column has one.
    fn json_paths_on_text(&self) -> bool;

    /// Whether `[name]` quotes an identifier (SQLite; on PostgreSQL it is a subscript).
    fn brackets_quote_identifiers(&self) -> bool;

    /// Whether an embedded resource's JSON is built from whole rows (PostgreSQL's `row_to_json`
    /// and `json_agg`, typed by the columns), rather than key by key (SQLite's `json_object`
    /// and `json_group_array`, typed by [`ValueKind`]).
    fn builds_json_from_rows(&self) -> bool;

    /// Whether a bound parameter whose type the statement does not imply must be cast to be
    /// typed (PostgreSQL: `$1::bigint`); SQLite takes values as they come.
    fn types_parameters(&self) -> bool;

    /// Whether a prepared statement says if it writes (SQLite's `sqlite3_stmt_readonly`);
    /// otherwise it is judged from its words.
    fn reports_read_only(&self) -> bool;

    /// Whether the database has schemas to keep Rowgate's own tables apart (PostgreSQL: a
    /// `rowgate` schema); otherwise they are named `_rowgate_…`.
    fn has_schemas(&self) -> bool;

    /// Whether a transaction holds settings its functions and triggers read
    /// (`set_config`/`current_setting`: PostgREST's `request.*`, `TimeZone`); SQLite has none.
    fn has_transaction_settings(&self) -> bool;

    /// Whether a statement's execution plan can be asked for as JSON (`EXPLAIN (FORMAT JSON)`:
    /// `Accept: application/vnd.pgrst.plan`).
    fn explains_plans(&self) -> bool;

    /// Whether exact counts are kept per statement and brought up to date from the change log
    /// (Rowgate's kept counts, on SQLite, where `count(*)` reads every row); PostgreSQL counts.
    fn keeps_counts(&self) -> bool;

    /// Whether an insert's JSON rows are objects keyed by column name, read with the table's
    /// row type (PostgreSQL's `json_populate_recordset` converts each value to its column's
    /// type), rather than arrays of cells in column order (SQLite's `json_each`, `value ->> i`).
    fn rows_by_name(&self) -> bool;

    /// Bodies up to this many bytes are inserted with one bound value per cell (faster for a
    /// few rows); larger ones as JSON rows ([`Dialect::rows_by_name`]). 0 on PostgreSQL, whose
    /// JSON reading types each value as PostgREST's does: bodies of any size alike.
    fn values_insert_bytes(&self) -> usize;

    /// Whether ORDER BY terms without an explicit null placement must spell out PostgreSQL's
    /// default (nulls last ascending, first descending) because the database's default differs.
    fn explicit_default_nulls(&self) -> bool;
    /// What an update sets a column to for its default, given the default's SQL from the
    /// schema: `DEFAULT` where the backend takes it in `SET`, else the expression (or NULL).
    fn column_default(&self, default_sql: Option<&str>) -> String;

    /// The `LIMIT`/`OFFSET` clause (with a leading space), empty when both are absent.
    fn limit_offset(&self, limit: Option<u64>, offset: Option<u64>) -> String {
        let mut out = String::new();
        if let Some(n) = limit {
            out.push_str(&format!(" LIMIT {}", clamp(n)));
        }
        if let Some(n) = offset {
            out.push_str(&format!(" OFFSET {}", clamp(n)));
        }
        out
    }
}

/// Counts beyond `i64::MAX` are not valid SQL integers; no table is that large anyway.
fn clamp(n: u64) -> u64 {
    n.min(i64::MAX as u64)
}

/// SQLite (≥ 3.39): `?N` placeholders; `LIKE` made case-sensitive by the server's
/// `PRAGMA case_sensitive_like=ON`; `REGEXP` through a `regexp(pattern, text)` function the
/// server registers (regex crate syntax; `imatch` binds the pattern prefixed with `(?i)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sqlite;

/// PostgreSQL: `$N` placeholders, `LIKE`/`ILIKE`, `~`/`~*`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Postgres;

impl Dialect for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn upserts_default_values(&self) -> bool {
        false
    }

    fn placeholder(&self, index_1_based: usize) -> String {
        format!("?{index_1_based}")
    }

    fn cast_type(&self, requested: &str) -> Option<&'static str> {
        Some(match requested.trim().to_ascii_lowercase().as_str() {
            "text" | "varchar" | "char" | "json" | "jsonb" | "date" | "timestamp"
            | "timestamptz" | "uuid" => "TEXT",
            "integer" | "int" | "int2" | "int4" | "int8" | "bigint" | "smallint" | "bool"
            | "boolean" => "INTEGER",
            "real" | "float" | "float4" | "float8" | "double" | "double precision" => "REAL",
            "numeric" | "decimal" => "NUMERIC",
            "blob" => "BLOB",
            _ => return None,
        })
    }

    fn unplanned_pattern(&self, placeholder: &str) -> String {
        format!("+{placeholder}")
    }

    fn like(&self, lhs: &str, rhs: &str, case_insensitive: bool) -> String {
        if case_insensitive {
            format!("lower({lhs}) LIKE lower({rhs})")
        } else {
            format!("{lhs} LIKE {rhs}")
        }
    }

    fn regex(&self, lhs: &str, rhs: &str, _case_insensitive: bool) -> String {
        format!("{lhs} REGEXP {rhs}")
    }

    fn regex_pattern(&self, value: &str, case_insensitive: bool) -> String {
        if case_insensitive {
            format!("(?i){value}")
        } else {
            value.to_owned()
        }
    }

    fn column_default(&self, default_sql: Option<&str>) -> String {
        default_sql.map_or_else(|| "NULL".to_string(), |e| format!("({e})"))
    }

    fn explicit_default_nulls(&self) -> bool {
        true
    }

    fn rows_by_name(&self) -> bool {
        false
    }

    fn supports(&self, op: Operator) -> bool {
        !op.postgres_only()
    }

    fn json_paths_on_text(&self) -> bool {
        true
    }

    fn brackets_quote_identifiers(&self) -> bool {
        true
    }

    fn builds_json_from_rows(&self) -> bool {
        false
    }

    fn types_parameters(&self) -> bool {
        false
    }

    fn has_schemas(&self) -> bool {
        false
    }

    fn has_transaction_settings(&self) -> bool {
        false
    }

    fn explains_plans(&self) -> bool {
        false
    }

    fn keeps_counts(&self) -> bool {
        true
    }

    fn reports_read_only(&self) -> bool {
        true
    }

    fn values_insert_bytes(&self) -> usize {
        64 * 1024
    }

    /// SQLite's `->>` gives numbers as numbers; PostgreSQL's gives text, so it is cast to TEXT to
    /// compare and print the same way on both.
    fn json_step(&self, lhs: &str, key: &str, _index: bool, as_text: bool) -> String {
        if as_text {
            format!("CAST({lhs} ->> {key} AS TEXT)")
        } else {
            format!("{lhs} -> {key}")
        }
    }

    fn json_comparable(&self, expr: &str) -> String {
        format!("({expr} ->> '$')")
    }

    /// A label starting with `$` would read as a whole JSON path: it is spelled `$."label"`.
    fn json_field_key(&self, field: &str) -> Value {
        if field.starts_with('$') {
            Value::Text(format!("$.\"{field}\""))
        } else {
            Value::Text(field.to_owned())
        }
    }

    fn limit_offset(&self, limit: Option<u64>, offset: Option<u64>) -> String {
        match (limit, offset) {
            (None, Some(n)) => format!(" LIMIT -1 OFFSET {}", clamp(n)),
            (l, o) => {
                let mut out = String::new();
                if let Some(n) = l {
                    out.push_str(&format!(" LIMIT {}", clamp(n)));
                }
                if let Some(n) = o {
                    out.push_str(&format!(" OFFSET {}", clamp(n)));
                }
                out
            }
        }
    }
}

impl Dialect for Postgres {
    fn selects_zero_columns(&self) -> bool {
        true
    }

    fn series(&self, count: &str) -> String {
        format!("generate_series(1, {count}::int8)")
    }

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn row_lock(&self) -> Option<&'static str> {
        Some(" FOR UPDATE")
    }

    fn placeholder(&self, index_1_based: usize) -> String {
        format!("${index_1_based}")
    }

    fn cast_type(&self, requested: &str) -> Option<&'static str> {
        Some(match requested.trim().to_ascii_lowercase().as_str() {
            "text" => "text",
            "varchar" => "varchar",
            "int2" | "smallint" => "int2",
            "int4" | "int" | "integer" => "int4",
            "int8" | "bigint" => "int8",
            "numeric" | "decimal" => "numeric",
            "float4" | "real" => "float4",
            "float8" | "double precision" | "float" | "double" => "float8",
            "bool" | "boolean" => "bool",
            "json" => "json",
            "jsonb" => "jsonb",
            "date" => "date",
            "timestamp" => "timestamp",
            "timestamptz" => "timestamptz",
            "uuid" => "uuid",
            _ => return None,
        })
    }

    fn like(&self, lhs: &str, rhs: &str, case_insensitive: bool) -> String {
        if case_insensitive {
            format!("{lhs} ILIKE {rhs}")
        } else {
            format!("{lhs} LIKE {rhs}")
        }
    }

    fn regex(&self, lhs: &str, rhs: &str, case_insensitive: bool) -> String {
        if case_insensitive {
            format!("{lhs} ~* {rhs}")
        } else {
            format!("{lhs} ~ {rhs}")
        }
    }

    fn column_default(&self, _: Option<&str>) -> String {
        "DEFAULT".to_string()
    }

    fn explicit_default_nulls(&self) -> bool {
        false
    }

    fn rows_by_name(&self) -> bool {
        true
    }

    fn supports(&self, _: Operator) -> bool {
        true
    }

    fn json_paths_on_text(&self) -> bool {
        false
    }

    fn brackets_quote_identifiers(&self) -> bool {
        false
    }

    fn builds_json_from_rows(&self) -> bool {
        true
    }

    fn types_parameters(&self) -> bool {
        true
    }

    fn has_schemas(&self) -> bool {
        true
    }

    fn has_transaction_settings(&self) -> bool {
        true
    }

    fn explains_plans(&self) -> bool {
        true
    }

    fn keeps_counts(&self) -> bool {
        false
    }

    fn reports_read_only(&self) -> bool {
        false
    }

    fn values_insert_bytes(&self) -> usize {
        0
    }

    /// Keys are cast so that `->` picks the object (text) or array (int) form.
    fn as_json(&self, expr: &str) -> String {
        format!("to_jsonb({expr})")
    }

    fn json_step(&self, lhs: &str, key: &str, index: bool, as_text: bool) -> String {
        let arrow = if as_text { "->>" } else { "->" };
        let ty = if index { "int4" } else { "text" };
        format!("{lhs} {arrow} {key}::{ty}")
    }
}

/// Bind `v` and return its placeholder.
#[inline]
pub fn bind(d: &dyn Dialect, out: &mut Sql, v: Value) -> String {
    out.params.push(v);
    d.placeholder(out.params.len())
}

/// `SELECT cols FROM t [WHERE …] [ORDER BY …] [LIMIT n] [OFFSET m]`.
pub fn select(d: &dyn Dialect, s: &SelectStmt) -> Sql {
    select_after(d, Sql::default(), s)
}

/// [`select`] after `prelude` (a `WITH … ` naming the relation the read is from, such as a
/// function call's rows), whose parameters come first.
pub fn select_after(d: &dyn Dialect, prelude: Sql, s: &SelectStmt) -> Sql {
    let mut out = prelude;
    select_at(d, s, None, &mut out);
    out
}

/// A level of the plan tree as rendered: its lv, and what the top level is called (`_0`
/// in a read; in a write's `RETURNING`, the written table's own name, which SQLite requires).
#[derive(Debug, Clone, Copy)]
struct Level<'a> {
    depth: usize,
    top: &'a str,
}

impl<'a> Level<'a> {
    /// The top level of a read.
    const READ: Level<'static> = Level {
        depth: 0,
        top: "_0",
    };

    /// The alias of the table at this level (nothing else in a statement is named so).
    fn alias(self) -> String {
        if self.depth == 0 {
            self.top.to_string()
        } else {
            format!("_{}", self.depth)
        }
    }

    /// The level below.
    fn next(self) -> Level<'a> {
        Level {
            depth: self.depth + 1,
            top: self.top,
        }
    }

    /// The level above.
    fn parent(self) -> Level<'a> {
        Level {
            depth: self.depth.saturating_sub(1),
            top: self.top,
        }
    }
}

/// `SELECT … FROM t [AS alias] WHERE … ORDER BY … LIMIT …` of one level: `at` is its lv and
/// the join to its parent when it is embedded (`None` at the top).
fn select_at(d: &dyn Dialect, s: &SelectStmt, at: Option<(Level<'_>, &EmbedStmt)>, out: &mut Sql) {
    let lv = at.map_or(Level::READ, |(lv, _)| lv);
    out.text.push_str("SELECT ");
    if s.columns.is_empty() && s.embeds.is_empty() {
        out.text.push('*');
    } else {
        select_list(d, s, lv, out);
    }
    from_where(d, s, at, out);
    group_by(d, s, lv, true, out);
    // order by the table's columns, not by output keys of the same names
    let aliased = at.is_some() || !s.embeds.is_empty();
    let table = if aliased {
        lv.alias()
    } else {
        s.table.name.clone()
    };
    order_by(d, s, lv, &table, out);
    out.text.push_str(&d.limit_offset(s.limit, s.offset));
}

/// One output item of a level, in output order: a column (and its index), or an embed.
#[derive(Clone, Copy)]
enum Item<'a> {
    Column(usize, &'a OutputColumn),
    Embed(&'a EmbedStmt),
}

/// A level's output items in order, hidden embeds left out.
fn items(s: &SelectStmt) -> Vec<Item<'_>> {
    output_items(&s.columns, &s.embeds)
}

/// Columns and embeds in output order, hidden embeds left out.
fn output_items<'a>(columns: &'a [OutputColumn], embeds: &'a [EmbedStmt]) -> Vec<Item<'a>> {
    let mut out = Vec::with_capacity(columns.len() + embeds.len());
    for i in 0..=columns.len() {
        out.extend(
            embeds
                .iter()
                .filter(|e| !e.hidden && e.position == i)
                .map(Item::Embed),
        );
        if let Some(c) = columns.get(i) {
            out.push(Item::Column(i, c));
        }
    }
    out
}

/// A column's value: the column, its JSON path and cast, and its aggregate (unqualified: the
/// innermost table).
fn column_value(d: &dyn Dialect, c: &OutputColumn, out: &mut Sql) -> String {
    let cast = |value: String, to: Option<&str>| match to.and_then(|t| d.cast_type(t)) {
        Some(t) => format!("CAST({value} AS {t})"),
        None => value,
    };
    let value = if c.column.is_empty() {
        "*".to_string() // count(*)
    } else {
        let value = row_field(d, &c.column, c.written_row.as_deref(), &c.path, out);
        let value = match &c.format {
            Some(f) => call(d, f, &value),
            None => value,
        };
        cast(value, c.cast.as_deref())
    };
    match &c.aggregate {
        None => value,
        Some(a) => cast(format!("{}({value})", a.function.name()), a.cast.as_deref()),
    }
}

/// ` GROUP BY …` of a level (at `lv`) with aggregates: its other columns, the items of a to-one
/// spread with aggregates but for those, and the columns of its own its other embeds are
/// joined on (so that they can be read per group); nothing without aggregates or without such
/// columns. `ordinals`: the other columns by their place in the select list (the
/// same expression to PostgreSQL, whose bound JSON path keys would otherwise differ), else by
/// their expressions (SQLite's `json_object` of an embedded row).
fn group_by(d: &dyn Dialect, s: &SelectStmt, lv: Level<'_>, ordinals: bool, out: &mut Sql) {
    // a to-one spread with aggregates among its items: grouped by its other items (a spread
    // without is grouped, as any embed, by the columns it is joined on)
    let aggregating =
        |e: &EmbedStmt| e.spread && !e.many && spread_leaves(e).iter().any(|(_, i)| aggregated(i));
    if !s.columns.iter().any(|c| c.aggregate.is_some()) && !s.embeds.iter().any(aggregating) {
        return;
    }
    let mut terms: Vec<String> = Vec::new();
    if ordinals {
        let mut place = 0;
        for item in items(s) {
            match item {
                Item::Column(_, c) => {
                    place += 1;
                    if c.aggregate.is_none() {
                        terms.push(place.to_string());
                    }
                }
                // an aggregating spread's items are grouped by themselves but for its
                // aggregates (its embeds are refused by the planner: JSON has no equality)
                Item::Embed(e) if aggregating(e) => {
                    for (_, leaf) in spread_leaves(e) {
                        place += 1;
                        if !aggregated(&leaf) {
                            terms.push(place.to_string());
                        }
                    }
                }
                Item::Embed(e) if e.spread => place += spread_keys(e).len(),
                Item::Embed(_) => place += 1,
            }
        }
    } else {
        for c in s.columns.iter().filter(|c| c.aggregate.is_none()) {
            terms.push(column_value(d, c, out));
        }
        for e in s.embeds.iter().filter(|e| !e.hidden && aggregating(e)) {
            for (chain, leaf) in spread_leaves(e) {
                if !aggregated(&leaf) {
                    let term = aside(out, |term| {
                        spread_value(d, &chain, lv.next(), leaf, |v| v.to_string(), term);
                    });
                    terms.push(term);
                }
            }
        }
    }
    // (an aggregating spread's items are grouped themselves: not by the columns it is joined
    // on, which would split its groups)
    for e in s.embeds.iter().filter(|e| !e.hidden && !aggregating(e)) {
        let joined: Vec<&String> = match &e.through {
            Some(j) => j.to_parent.iter().map(|(_, own)| own).collect(),
            None => e.on.iter().map(|(_, own)| own).collect(),
        };
        for own in joined {
            let value = d.quote_ident(own);
            if !terms.contains(&value) {
                terms.push(value);
            }
        }
    }
    if !terms.is_empty() {
        out.text.push_str(" GROUP BY ");
        out.text.push_str(&terms.join(", "));
    }
}

/// The output columns with the embeds among them, each embed a correlated subquery (a spread
/// one, a subquery per item).
fn select_list(d: &dyn Dialect, s: &SelectStmt, lv: Level<'_>, out: &mut Sql) {
    output_list(d, &s.columns, &s.embeds, lv, out);
}

/// ` RETURNING <columns and embeds>` of a write to `table`, whose embeds refer to the written
/// row by the table's name; nothing when nothing is returned.
pub fn returning_with_embeds(
    d: &dyn Dialect,
    columns: &[OutputColumn],
    embeds: &[EmbedStmt],
    table: &str,
    out: &mut Sql,
) {
    if output_items(columns, embeds).is_empty() {
        return;
    }
    out.text.push_str(" RETURNING ");
    output_list(
        d,
        columns,
        embeds,
        Level {
            depth: 0,
            top: table,
        },
        out,
    );
}

/// The columns and embeds of a level, comma-separated, each named by its key.
fn output_list(
    d: &dyn Dialect,
    columns: &[OutputColumn],
    embeds: &[EmbedStmt],
    lv: Level<'_>,
    out: &mut Sql,
) {
    if embeds.is_empty() && !columns.is_empty() {
        // no embeds: the columns as they are (every read without embeds)
        output_columns(d, columns, out);
        return;
    }
    let level = output_items(columns, embeds);
    if level.is_empty() && !d.builds_json_from_rows() {
        // nothing to output (`select=rel()`): SQLite needs a column; the rows are `{}`
        out.text.push('1');
    }
    for (n, item) in level.into_iter().enumerate() {
        if n > 0 {
            out.text.push_str(", ");
        }
        match item {
            Item::Column(_, c) => output_columns(d, std::slice::from_ref(c), out),
            Item::Embed(e) if e.spread && e.many => {
                for (m, key) in spread_keys(e).into_iter().enumerate() {
                    if m > 0 {
                        out.text.push_str(", ");
                    }
                    spread_many_value(d, e, lv.next(), key, out);
                    out.text.push_str(" AS ");
                    out.text.push_str(&d.quote_ident(key));
                }
            }
            Item::Embed(e) if e.spread => {
                for (m, (chain, inner)) in spread_leaves(e).into_iter().enumerate() {
                    if m > 0 {
                        out.text.push_str(", ");
                    }
                    let key = spread_leaf(d, &chain, lv.next(), inner, |v| v.to_string(), out);
                    out.text.push_str(" AS ");
                    out.text.push_str(&d.quote_ident(key));
                }
            }
            Item::Embed(e) => {
                embedded(d, e, lv.next(), out);
                out.text.push_str(" AS ");
                out.text.push_str(&d.quote_ident(&e.key));
            }
        }
    }
}

/// The keys a spread embed puts into its parent: its columns' and embeds', a nested spread's
/// own keys in its place.
fn spread_keys(e: &EmbedStmt) -> Vec<&str> {
    let mut keys = Vec::new();
    for item in items(&e.select) {
        match item {
            Item::Column(_, c) => keys.push(c.key.as_str()),
            Item::Embed(n) if n.spread => keys.extend(spread_keys(n)),
            Item::Embed(n) => keys.push(n.key.as_str()),
        }
    }
    keys
}

/// One key of a to-many spread (PostgREST's `...rel(cols)` of a one-to-many or many-to-many
/// relationship): the JSON array of that key's values over the related rows, in their order
/// (`[]` when there are none), read off the embed's own array of objects.
fn spread_many_value(d: &dyn Dialect, e: &EmbedStmt, lv: Level<'_>, key: &str, out: &mut Sql) {
    let each = d.quote_ident(&format!("_s{}", lv.depth));
    if d.builds_json_from_rows() {
        let key = bind(d, out, Value::Text(key.to_string()));
        let cast = if d.types_parameters() { "::text" } else { "" };
        out.text.push_str(&format!(
            "(SELECT coalesce(json_agg({each}.value -> {key}{cast} ORDER BY {each}.n), '[]') FROM json_array_elements("
        ));
        embedded(d, e, lv, out);
        out.text
            .push_str(&format!(") WITH ORDINALITY AS {each}(value, n))"));
    } else {
        let path = format!("$.\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
        let path = bind(d, out, Value::Text(path));
        out.text.push_str(&format!(
            "(SELECT coalesce(json_group_array(json({each}.value -> {path})), '[]') FROM json_each("
        ));
        embedded(d, e, lv, out);
        out.text.push_str(&format!(") AS {each})"));
    }
}

/// `(SELECT <value> FROM related AS _d WHERE <join> … LIMIT 1)`: one item of a spread
/// (to-one) embed's related row, NULL when there is none; `wrap` shapes a column's value.
/// Returns the item's key.
fn spread_value<'a>(
    d: &dyn Dialect,
    chain: &[&EmbedStmt],
    lv: Level<'_>,
    item: Item<'a>,
    wrap: impl FnOnce(&str) -> String,
    out: &mut Sql,
) -> &'a str {
    let Some((e, inner)) = chain.split_first() else {
        return "";
    };
    out.text.push_str("(SELECT ");
    let key = match item {
        // a nested to-one spread's item: its value read from the related row's related row
        _ if !inner.is_empty() => spread_value(d, inner, lv.next(), item, wrap, out),
        Item::Column(_, c) => {
            let value = column_value(d, c, out);
            out.text.push_str(&wrap(&value));
            &c.key
        }
        Item::Embed(nested) => {
            embedded(d, nested, lv.next(), out);
            &nested.key
        }
    };
    from_where(d, &e.select, Some((lv, e)), out);
    out.text.push_str(" LIMIT 1)");
    key
}

/// SQL rendered aside, to be placed in `out` later (its parameters bound in `out`'s order, as
/// they are rendered): the text `render` writes.
fn aside(out: &mut Sql, render: impl FnOnce(&mut Sql)) -> String {
    let mut side = Sql {
        text: String::new(),
        params: std::mem::take(&mut out.params),
    };
    render(&mut side);
    out.params = side.params;
    side.text
}

/// Whether a spread's item is an aggregate (of the parent's groups).
fn aggregated(item: &Item<'_>) -> bool {
    matches!(item, Item::Column(_, c) if c.aggregate.is_some())
}

/// One item of a to-one spread as its parent's value ([`spread_value`]); an aggregate of it
/// aggregates the parent's group, as PostgREST's join does: `sum((SELECT amount … LIMIT 1))`,
/// `count()` the group's rows.
fn spread_leaf<'a>(
    d: &dyn Dialect,
    chain: &[&EmbedStmt],
    lv: Level<'_>,
    item: Item<'a>,
    wrap: impl FnOnce(&str) -> String,
    out: &mut Sql,
) -> &'a str {
    let Item::Column(_, c) = item else {
        return spread_value(d, chain, lv, item, wrap, out);
    };
    let Some(aggregate) = &c.aggregate else {
        return spread_value(d, chain, lv, item, wrap, out);
    };
    let value = if c.column.is_empty() {
        "*".to_string()
    } else {
        let plain = OutputColumn {
            aggregate: None,
            ..c.clone()
        };
        aside(out, |value| {
            spread_value(
                d,
                chain,
                lv,
                Item::Column(0, &plain),
                |v| v.to_string(),
                value,
            );
        })
    };
    let mut total = format!("{}({value})", aggregate.function.name());
    if let Some(t) = aggregate.cast.as_deref().and_then(|t| d.cast_type(t)) {
        total = format!("CAST({total} AS {t})");
    }
    out.text.push_str(&wrap(&total));
    &c.key
}

/// The items a to-one spread puts into its parent, each with the chain of spreads it is read
/// through: its own columns and embeds, a nested to-one spread's items in its place.
fn spread_leaves(e: &EmbedStmt) -> Vec<(Vec<&EmbedStmt>, Item<'_>)> {
    fn walk<'a>(
        e: &'a EmbedStmt,
        chain: &mut Vec<&'a EmbedStmt>,
        out: &mut Vec<(Vec<&'a EmbedStmt>, Item<'a>)>,
    ) {
        chain.push(e);
        for item in items(&e.select) {
            match item {
                Item::Embed(n) if n.spread && !n.many => walk(n, chain, out),
                other => out.push((chain.clone(), other)),
            }
        }
        chain.pop();
    }
    let mut out = Vec::new();
    walk(e, &mut Vec::new(), &mut out);
    out
}

/// ` FROM t [AS alias] WHERE <join to the parent> AND <filters> AND <required embeds>`.
fn from_where(d: &dyn Dialect, s: &SelectStmt, at: Option<(Level<'_>, &EmbedStmt)>, out: &mut Sql) {
    let lv = at.map_or(Level::READ, |(lv, _)| lv);
    out.text.push_str(" FROM ");
    let aliased = at.is_some() || !s.embeds.is_empty();
    let parent = at.map(|(lv, _)| lv.parent().alias());
    push_source(
        d,
        &s.table,
        aliased.then(|| lv.alias()),
        parent.as_deref(),
        &mut out.text,
    );
    let required: Vec<&EmbedStmt> = s.embeds.iter().filter(|e| e.required.is_some()).collect();
    if at.is_none() && s.filters.is_empty() && required.is_empty() {
        return;
    }
    out.text.push_str(" WHERE ");
    let mut first = true;
    let mut and = |out: &mut Sql| {
        if !std::mem::take(&mut first) {
            out.text.push_str(" AND ");
        }
    };
    if let Some((lv, e)) = at {
        and(out);
        join_to_parent(d, e, lv, out);
    }
    for c in &s.filters {
        and(out);
        level_condition(d, c, Some((&s.embeds, lv)), out);
    }
    for e in required {
        and(out);
        if e.required == Some(false) {
            out.text.push_str("NOT ");
        }
        out.text.push_str("EXISTS (SELECT 1");
        from_where(d, &e.select, Some((lv.next(), e)), out);
        out.text.push(')');
    }
}

/// The related rows' link to the parent row at `lv - 1`: their columns equal to the
/// parent's, directly or through the junction of a many-to-many relationship.
fn join_to_parent(d: &dyn Dialect, e: &EmbedStmt, lv: Level<'_>, out: &mut Sql) {
    let here = d.quote_ident(&lv.alias());
    let parent = d.quote_ident(&lv.parent().alias());
    let pair = |a: &str, x: &str, b: &str, y: &str| {
        format!("{a}.{} = {b}.{}", d.quote_ident(x), d.quote_ident(y))
    };
    let Some(j) = &e.through else {
        if e.on.is_empty() {
            // the rows of a function of the parent's row: related as they come
            out.text.push_str("TRUE");
            return;
        }
        let terms: Vec<String> =
            e.on.iter()
                .map(|(related, parent_col)| pair(&here, related, &parent, parent_col))
                .collect();
        out.text.push_str(&terms.join(" AND "));
        return;
    };
    let junction = d.quote_ident(&format!("_j{}", lv.depth));
    out.text.push_str("EXISTS (SELECT 1 FROM ");
    push_relation(d, &j.table, &mut out.text);
    out.text.push_str(" AS ");
    out.text.push_str(&junction);
    out.text.push_str(" WHERE ");
    let terms: Vec<String> = j
        .to_related
        .iter()
        .map(|(jc, related)| pair(&junction, jc, &here, related))
        .chain(
            j.to_parent
                .iter()
                .map(|(jc, parent_col)| pair(&junction, jc, &parent, parent_col)),
        )
        .collect();
    out.text.push_str(&terms.join(" AND "));
    out.text.push(')');
}

/// One embedded resource at `lv` as a scalar subquery of its parent's row: its JSON, an
/// array (to-many, `[]` when nothing relates) or an object (to-one, NULL when nothing does).
fn embedded(d: &dyn Dialect, e: &EmbedStmt, lv: Level<'_>, out: &mut Sql) {
    if let Some(key) = &e.count {
        related_count(d, e, key, lv, out);
        return;
    }
    let row = d.quote_ident(&format!("_r{}", lv.depth));
    if d.builds_json_from_rows() {
        out.text.push_str(if e.many {
            "(SELECT coalesce(json_agg("
        } else {
            "(SELECT row_to_json("
        });
        out.text.push_str(&row);
        out.text.push_str(if e.many {
            "), '[]') FROM ("
        } else {
            ") FROM ("
        });
        select_at(d, &e.select, Some((lv, e)), out);
        out.text.push_str(") AS ");
        out.text.push_str(&row);
        out.text.push(')');
        return;
    }
    if e.many {
        out.text.push_str("(SELECT coalesce(json_group_array(json(");
        out.text.push_str(&row);
        out.text.push_str(")), '[]') FROM (SELECT ");
        json_object(d, e, lv, out);
        out.text.push_str(" AS ");
        out.text.push_str(&row);
        from_where(d, &e.select, Some((lv, e)), out);
        group_by(d, &e.select, lv, false, out);
        order_by(d, &e.select, lv, &lv.alias(), out);
        out.text
            .push_str(&d.limit_offset(e.select.limit, e.select.offset));
        out.text.push_str("))");
    } else {
        out.text.push_str("(SELECT ");
        json_object(d, e, lv, out);
        from_where(d, &e.select, Some((lv, e)), out);
        group_by(d, &e.select, lv, false, out);
        out.text.push_str(" LIMIT 1)");
    }
}

/// `rel(count)`: the number of related rows as `[{"count": n}]` (to-many) or `{"count": n}`.
fn related_count(d: &dyn Dialect, e: &EmbedStmt, key: &str, lv: Level<'_>, out: &mut Sql) {
    let key = bind(d, out, Value::Text(key.to_string()));
    let (object, array) = if d.builds_json_from_rows() {
        ("json_build_object", "json_build_array")
    } else {
        ("json_object", "json_array")
    };
    let cast = if d.types_parameters() { "::text" } else { "" };
    let counted = format!("{object}({key}{cast}, count(*))");
    out.text.push_str("(SELECT ");
    if e.many {
        out.text.push_str(&format!("{array}({counted})"));
    } else {
        out.text.push_str(&counted);
    }
    from_where(d, &e.select, Some((lv, e)), out);
    out.text.push(')');
}

/// SQLite: `json_object(?, value, …)` of one related row, keys bound, values written as their
/// kinds say, nested embeds as JSON, a spread embed's items among the row's own.
fn json_object(d: &dyn Dialect, e: &EmbedStmt, lv: Level<'_>, out: &mut Sql) {
    out.text.push_str("json_object(");
    let mut first = true;
    let mut pair = |key: &str, out: &mut Sql| {
        if !std::mem::take(&mut first) {
            out.text.push_str(", ");
        }
        let key = bind(d, out, Value::Text(key.to_string()));
        out.text.push_str(&key);
        out.text.push_str(", ");
    };
    for item in items(&e.select) {
        match item {
            Item::Column(i, c) => {
                pair(&c.key, out);
                let value = column_value(d, c, out);
                out.text.push_str(&json_value(kind_of(e, i), &value));
            }
            Item::Embed(spread) if spread.spread && spread.many => {
                for key in spread_keys(spread) {
                    pair(key, out);
                    out.text.push_str("json(");
                    spread_many_value(d, spread, lv.next(), key, out);
                    out.text.push(')');
                }
            }
            Item::Embed(spread) if spread.spread => {
                for (chain, inner) in spread_leaves(spread) {
                    let key = match inner {
                        Item::Column(_, c) => &c.key,
                        Item::Embed(n) => &n.key,
                    };
                    pair(key, out);
                    // a subquery's value is plain: what is JSON is made JSON outside it
                    let owner = chain.last().copied().unwrap_or(spread);
                    let kind = match inner {
                        Item::Column(j, _) => kind_of(owner, j),
                        Item::Embed(_) => ValueKind::Json,
                    };
                    if kind != ValueKind::Plain {
                        out.text.push_str("json(");
                    }
                    spread_leaf(
                        d,
                        &chain,
                        lv.next(),
                        inner,
                        |v| spread_json_text(kind, v),
                        out,
                    );
                    if kind != ValueKind::Plain {
                        out.text.push(')');
                    }
                }
            }
            Item::Embed(nested) => {
                pair(&nested.key, out);
                out.text.push_str("json(");
                embedded(d, nested, lv.next(), out);
                out.text.push(')');
            }
        }
    }
    out.text.push(')');
}

/// SQLite: a column's value as a `json_object` argument, written as the top-level rows are: a
/// boolean as `true`/`false`, JSON text as JSON (text that is not JSON as a string), a blob
/// (which JSON cannot hold) as PostgreSQL's `\\x…` hex text.
fn json_value(kind: ValueKind, value: &str) -> String {
    match kind {
        ValueKind::Plain => plain_json_value(value),
        ValueKind::Bool => format!(
            "CASE WHEN {value} IS NULL THEN NULL WHEN {value} THEN json('true') ELSE json('false') END"
        ),
        ValueKind::Json => format!(
            "CASE WHEN json_valid({value}) THEN json({value}) ELSE {} END",
            plain_json_value(value)
        ),
    }
}

/// SQLite: the value of a spread item inside its subquery, where JSON is lost: plain values as
/// [`json_value`] writes them; booleans and JSON as JSON text, made JSON again outside.
fn spread_json_text(kind: ValueKind, value: &str) -> String {
    match kind {
        ValueKind::Plain => plain_json_value(value),
        ValueKind::Bool => {
            format!("CASE WHEN {value} IS NULL THEN NULL WHEN {value} THEN 'true' ELSE 'false' END")
        }
        ValueKind::Json => format!(
            "CASE WHEN json_valid({value}) THEN {value} ELSE json_quote({}) END",
            plain_json_value(value)
        ),
    }
}

/// SQLite: a value `json_object` can hold: a blob as `\\x` and its hex digits, anything else as
/// it is.
fn plain_json_value(value: &str) -> String {
    format!("iif(typeof({value}) = 'blob', '\\x' || lower(hex({value})), {value})")
}

/// How the `i`-th column of an embed is written into its JSON.
fn kind_of(e: &EmbedStmt, i: usize) -> ValueKind {
    e.kinds.get(i).copied().unwrap_or(ValueKind::Plain)
}

/// `SELECT 1 FROM t [WHERE …]`: the rows a count counts, for a planner's estimate of them.
pub fn matching_rows(d: &dyn Dialect, s: &CountStmt) -> Sql {
    matching_rows_after(d, Sql::default(), s)
}

/// [`matching_rows`] after `prelude` (see [`select_after`]).
pub fn matching_rows_after(d: &dyn Dialect, prelude: Sql, s: &CountStmt) -> Sql {
    let mut out = prelude;
    out.text.push_str("SELECT 1");
    count_from(d, s, &mut out);
    out
}

/// `SELECT count(*) FROM t [WHERE …]`.
pub fn count(d: &dyn Dialect, s: &CountStmt) -> Sql {
    count_after(d, Sql::default(), s)
}

/// [`count`] after `prelude` (see [`select_after`]).
pub fn count_after(d: &dyn Dialect, prelude: Sql, s: &CountStmt) -> Sql {
    let mut out = prelude;
    out.text.push_str("SELECT count(*)");
    count_from(d, s, &mut out);
    out
}

/// ` FROM t WHERE …` of a count: its filters and its required embeds.
fn count_from(d: &dyn Dialect, s: &CountStmt, out: &mut Sql) {
    if s.embeds.is_empty() {
        out.text.push_str(" FROM ");
        push_source(d, &s.table, None, None, &mut out.text);
        where_clause(d, &s.filters, out);
        return;
    }
    let rows = SelectStmt {
        table: s.table.clone(),
        columns: Vec::new(),
        filters: s.filters.clone(),
        order: Vec::new(),
        not_null: Vec::new(),
        limit: None,
        offset: None,
        embeds: s.embeds.clone(),
    };
    from_where(d, &rows, None, out);
}

/// `INSERT INTO t (cols) VALUES (…), … | SELECT … FROM <rows> [ON CONFLICT …] [RETURNING …]`:
/// bound values, or a JSON text moved into the parameters (not copied); when there are no
/// columns, `DEFAULT VALUES` (one row) or a series of rows of defaults.
pub fn insert(d: &dyn Dialect, mut s: InsertStmt) -> Sql {
    let mut out = Sql::default();
    out.text.push_str("INSERT INTO ");
    push_relation(d, &s.table, &mut out.text);
    let columns: Vec<String> = s.all_columns().cloned().collect();
    if columns.is_empty() {
        match &s.rows {
            InsertRows::Defaults { rows, stand_in } if *rows != 1 => {
                match stand_in.as_ref().filter(|_| !d.selects_zero_columns()) {
                    Some((column, default)) => {
                        out.text.push_str(" (");
                        out.text.push_str(&d.quote_ident(column));
                        out.text.push_str(") SELECT ");
                        out.text.push_str(default);
                    }
                    None => out.text.push_str(" SELECT"),
                }
                let from = series_from(d, *rows, &mut out);
                out.text.push_str(&from);
                out.text.push_str(" WHERE true");
            }
            _ => out.text.push_str(" DEFAULT VALUES"),
        }
    } else {
        out.text.push_str(" (");
        push_idents(d, &columns, &mut out.text);
        out.text.push_str(") ");
        match std::mem::take(&mut s.rows) {
            InsertRows::Values(rows) if !rows.is_empty() => {
                let constants: Vec<String> = s
                    .constants
                    .iter()
                    .map(|c| constant(d, c, &mut out))
                    .collect();
                out.text.push_str("VALUES ");
                for (i, row) in rows.into_iter().enumerate() {
                    out.text.push_str(if i == 0 { "(" } else { ", (" });
                    for (j, v) in row.into_iter().enumerate() {
                        if j > 0 {
                            out.text.push_str(", ");
                        }
                        let ph = bind(d, &mut out, v);
                        out.text.push_str(&ph);
                    }
                    for c in &constants {
                        out.text.push_str(", ");
                        out.text.push_str(c);
                    }
                    out.text.push(')');
                }
            }
            rows => select_rows(d, &s, &columns, rows, &|_, cell| cell, &mut out),
        }
    }
    // A row of defaults writes no column, so an upsert of it updates nothing: only `DO
    // NOTHING` is at stake. Where the grammar has no room for it (SQLite), a default row that
    // duplicates a key is refused (409) instead of skipped.
    let on_conflict = s
        .on_conflict
        .as_ref()
        .filter(|_| !columns.is_empty() || d.upserts_default_values());
    if let Some(oc) = on_conflict {
        let (target, update) = match oc {
            OnConflict::Ignore { target } => (target, &[][..]),
            OnConflict::Merge { target, update } => (target, &update[..]),
        };
        out.text.push_str(" ON CONFLICT");
        if !target.is_empty() {
            out.text.push_str(" (");
            push_idents(d, target, &mut out.text);
            out.text.push(')');
        }
        if update.is_empty() {
            out.text.push_str(" DO NOTHING");
        } else {
            out.text.push_str(" DO UPDATE SET ");
            for (i, c) in update.iter().enumerate() {
                if i > 0 {
                    out.text.push_str(", ");
                }
                let q = d.quote_ident(c);
                out.text.push_str(&format!("{q} = excluded.{q}"));
            }
        }
    }
    returning(d, &s.returning, &mut out);
    out
}

/// `SELECT <cell> AS "c", … [FROM <rows>] WHERE true`: an insert's rows as a query, giving the
/// columns `wanted` (each one of `s.columns` or of its constants), the rows bound once more.
/// `typed` wraps each cell of the rows with its column's name (a caller comparing the cells
/// casts them to the column's type); constants are cast to their own type. Without `s.columns`
/// the query gives one row.
pub fn rows_select(
    d: &dyn Dialect,
    s: &InsertStmt,
    wanted: &[String],
    typed: &dyn Fn(&str, String) -> String,
    out: &mut Sql,
) {
    select_rows(d, s, wanted, s.rows.clone(), typed, out);
}

/// [`rows_select`] of `rows` (the statement's, moved or copied by the caller). The `WHERE`
/// keeps SQLite from reading a following `ON CONFLICT` as a join constraint.
fn select_rows(
    d: &dyn Dialect,
    s: &InsertStmt,
    wanted: &[String],
    rows: InsertRows,
    typed: &dyn Fn(&str, String) -> String,
    out: &mut Sql,
) {
    let from = if s.columns.is_empty() {
        match rows {
            InsertRows::Defaults { rows, .. } if rows != 1 => series_from(d, rows, out),
            _ => String::new(),
        }
    } else {
        match rows {
            // (rows of defaults have no columns: none to select)
            InsertRows::Defaults { .. } => select_from_json(
                d,
                s,
                JsonRows {
                    text: "[]".into(),
                    count: 0,
                },
                out,
            ),
            InsertRows::Values(rows) if rows.is_empty() => select_from_json(
                d,
                s,
                JsonRows {
                    text: "[]".into(),
                    count: 0,
                },
                out,
            ),
            InsertRows::Values(rows) => {
                let mut from = String::from(" FROM (VALUES ");
                for (i, row) in rows.into_iter().enumerate() {
                    from.push_str(if i == 0 { "(" } else { ", (" });
                    for (j, v) in row.into_iter().enumerate() {
                        if j > 0 {
                            from.push_str(", ");
                        }
                        from.push_str(&bind(d, out, v));
                    }
                    from.push(')');
                }
                from.push_str(") AS v");
                from
            }
            InsertRows::Json(rows) => select_from_json(d, s, rows, out),
        }
    };
    let values = from.starts_with(" FROM (VALUES");
    out.text.push_str("SELECT ");
    for (i, column) in wanted.iter().enumerate() {
        if i > 0 {
            out.text.push_str(", ");
        }
        let cell = match s.columns.iter().position(|c| c == column) {
            Some(index) if values => typed(column, format!("v.column{}", index + 1)),
            Some(_) if d.rows_by_name() => match json_input(&s.table, column) {
                Some(f) => {
                    let key = bind(d, out, Value::Text(column.clone()));
                    call(d, f, &format!("_e.j -> {key}"))
                }
                None => typed(column, format!("r.{}", d.quote_ident(column))),
            },
            Some(index) => typed(column, format!("value ->> {index}")),
            None => match s.constants.iter().find(|c| c.column == *column) {
                Some(c) => constant(d, c, out),
                None => "NULL".to_string(),
            },
        };
        out.text.push_str(&cell);
        out.text.push_str(" AS ");
        out.text.push_str(&d.quote_ident(column));
    }
    out.text.push_str(&from);
    out.text.push_str(" WHERE true");
}

/// ` FROM <a series of rows>`, the count bound.
fn series_from(d: &dyn Dialect, rows: usize, out: &mut Sql) -> String {
    let count = bind(d, out, Value::Int(i64::try_from(rows).unwrap_or(i64::MAX)));
    format!(" FROM {}", d.series(&count))
}

/// ` FROM <the JSON rows>`, the text bound.
fn select_from_json(d: &dyn Dialect, s: &InsertStmt, rows: JsonRows, out: &mut Sql) -> String {
    let ph = bind(d, out, Value::Text(rows.text));
    let parsed: Vec<&String> = s
        .columns
        .iter()
        .filter(|c| json_input(&s.table, c).is_some())
        .collect();
    if d.rows_by_name() && !parsed.is_empty() {
        // each row's parsed keys are read from its JSON (`_e.j`), the others as the table's
        // types read them
        let mut from = format!(" FROM json_array_elements({ph}::json) AS _e(j) CROSS JOIN LATERAL json_populate_record(NULL::");
        push_relation(d, &s.table, &mut from);
        from.push_str(", (_e.j::jsonb");
        for c in parsed {
            let key = bind(d, out, Value::Text(c.clone()));
            from.push_str(&format!(" - {key}::text"));
        }
        from.push_str(")::json) AS r");
        from
    } else if d.rows_by_name() {
        let mut from = String::from(" FROM json_populate_recordset(NULL::");
        push_relation(d, &s.table, &mut from);
        from.push_str(&format!(", {ph}::json) AS r"));
        from
    } else {
        format!(" FROM json_each({ph})")
    }
}

/// The function a written value of `column` goes through, if any (a domain representation).
fn json_input<'r>(relation: &'r Relation, column: &str) -> Option<&'r QualifiedName> {
    relation
        .json_inputs
        .iter()
        .find(|(c, _)| c == column)
        .map(|(_, f)| f)
}

/// A constant's value bound, cast to its type when it has one.
fn constant(d: &dyn Dialect, c: &Constant, out: &mut Sql) -> String {
    let ph = bind(d, out, c.value.clone());
    match &c.cast {
        Some(t) => format!("CAST({ph} AS {t})"),
        None => ph,
    }
}

/// `UPDATE t SET c = ?, … [WHERE …] [RETURNING …]`.
pub fn update(d: &dyn Dialect, s: &UpdateStmt) -> Sql {
    let mut out = Sql::default();
    out.text.push_str("UPDATE ");
    push_relation(d, &s.table, &mut out.text);
    out.text.push_str(" SET ");
    for (i, (c, v)) in s.set.iter().enumerate() {
        if i > 0 {
            out.text.push_str(", ");
        }
        out.text.push_str(&d.quote_ident(c));
        out.text.push_str(" = ");
        let ph = bind(d, &mut out, v.clone());
        match json_input(&s.table, c) {
            Some(f) => out
                .text
                .push_str(&call(d, f, &format!("CAST({ph} AS json)"))),
            None => out.text.push_str(&ph),
        }
    }
    for (i, (c, default)) in s.defaults.iter().enumerate() {
        if i > 0 || !s.set.is_empty() {
            out.text.push_str(", ");
        }
        out.text.push_str(&d.quote_ident(c));
        out.text.push_str(" = ");
        out.text.push_str(&d.column_default(default.as_deref()));
    }
    where_clause(d, &s.filters, &mut out);
    returning(d, &s.returning, &mut out);
    out
}

/// `DELETE FROM t [WHERE …] [RETURNING …]`.
pub fn delete(d: &dyn Dialect, s: &DeleteStmt) -> Sql {
    let mut out = Sql::default();
    out.text.push_str("DELETE FROM ");
    push_relation(d, &s.table, &mut out.text);
    where_clause(d, &s.filters, &mut out);
    returning(d, &s.returning, &mut out);
    out
}

/// A read's source: the relation (a function of the `parent` row's for a computed
/// relationship), or, when it needs computed columns, the relation with them (`(SELECT _c.*,
/// f(_c) AS f FROM t AS _c) AS t`: PostgreSQL folds the subquery into the read, calling only
/// the functions the read uses); aliased as `alias` if given.
fn push_source(
    d: &dyn Dialect,
    relation: &Relation,
    alias: Option<String>,
    parent: Option<&str>,
    text: &mut String,
) {
    // a row, cast to its type where SQL does not know it
    let row = |alias: &str, of: Option<&QualifiedName>| match of {
        Some(t) => format!("CAST({} AS {})", d.quote_ident(alias), qualified(d, t)),
        None => d.quote_ident(alias),
    };
    let push_relation = |text: &mut String| {
        push_relation(d, relation, text);
        if let (true, Some(parent)) = (relation.of_parent_row, parent) {
            text.push('(');
            text.push_str(&row(parent, relation.parent_row_type.as_ref()));
            text.push(')');
        }
    };
    if relation.computed.is_empty() {
        push_relation(text);
    } else {
        let whole = row("_c", relation.row_type.as_ref());
        text.push_str("(SELECT ");
        text.push_str(&d.quote_ident("_c"));
        text.push_str(".*");
        for c in &relation.computed {
            text.push_str(", ");
            if let Some(schema) = &c.schema {
                text.push_str(&d.quote_ident(schema));
                text.push('.');
            }
            text.push_str(&d.quote_ident(&c.name));
            text.push('(');
            text.push_str(&whole);
            text.push_str(") AS ");
            text.push_str(&d.quote_ident(&c.name));
        }
        text.push_str(" FROM ");
        push_relation(text);
        text.push_str(" AS ");
        text.push_str(&d.quote_ident("_c"));
        text.push(')');
        if alias.is_none() {
            text.push_str(" AS ");
            text.push_str(&d.quote_ident(&relation.name));
        }
    }
    if let Some(alias) = alias {
        text.push_str(" AS ");
        text.push_str(&d.quote_ident(&alias));
    }
}

/// `schema.name` (or `name`), quoted: an object the schema cache named.
pub fn qualified(d: &dyn Dialect, name: &QualifiedName) -> String {
    let mut text = String::new();
    if let Some(schema) = &name.schema {
        text.push_str(&d.quote_ident(schema));
        text.push('.');
    }
    text.push_str(&d.quote_ident(&name.name));
    text
}

/// `schema.f(argument)`: a call of a function the schema cache named.
pub fn call(d: &dyn Dialect, f: &QualifiedName, argument: &str) -> String {
    let mut text = qualified(d, f);
    text.push('(');
    text.push_str(argument);
    text.push(')');
    text
}

/// A bound filter value, through the column's text parser when it has one.
fn filter_value(d: &dyn Dialect, p: &Predicate, placeholder: String) -> String {
    match &p.parse {
        Some(f) => call(d, f, &format!("CAST({placeholder} AS text)")),
        None => placeholder,
    }
}

/// Appends a relation's quoted name, schema-qualified when it has a schema.
pub fn push_relation(d: &dyn Dialect, relation: &Relation, text: &mut String) {
    if let Some(schema) = &relation.schema {
        text.push_str(&d.quote_ident(schema));
        text.push('.');
    }
    text.push_str(&d.quote_ident(&relation.name));
}

fn push_idents(d: &dyn Dialect, ids: &[String], text: &mut String) {
    for (i, c) in ids.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(&d.quote_ident(c));
    }
}

/// `"c"` or, with a JSON path, `("c" -> ?1 ->> ?2)`, binding the path's keys.
fn field(d: &dyn Dialect, column: &str, path: &[JsonStep], out: &mut Sql) -> String {
    json_path(d, d.quote_ident(column), path, out)
}

/// A column of a written row, with its JSON path: a computed one (`written_row`) as its
/// function called with the row, `"test"."always_true"("items")`.
fn row_field(
    d: &dyn Dialect,
    column: &str,
    written_row: Option<&RowFunction>,
    path: &[JsonStep],
    out: &mut Sql,
) -> String {
    match written_row {
        Some(f) => {
            let expr = call(d, &f.function, &d.quote_ident(&f.row));
            json_path(d, expr, path, out)
        }
        None => field(d, column, path, out),
    }
}

/// `expr` followed by a JSON path's steps (bound keys and indexes).
fn json_path(d: &dyn Dialect, mut expr: String, path: &[JsonStep], out: &mut Sql) -> String {
    if path.first().is_some_and(|s| s.to_json) {
        expr = d.as_json(&expr);
    }
    if path.is_empty() {
        return expr;
    }
    for step in path {
        let (key, index) = match &step.key {
            JsonKey::Field(f) => (bind(d, out, d.json_field_key(f)), false),
            JsonKey::Index(i) => (bind(d, out, Value::Int(*i)), true),
        };
        expr = d.json_step(&expr, &key, index, step.as_text);
    }
    format!("({expr})")
}

/// `"c"`, `CAST("c" AS T) AS "key"`, `"c" AS "key"`, comma-separated.
fn output_columns(d: &dyn Dialect, cols: &[OutputColumn], out: &mut Sql) {
    for (i, c) in cols.iter().enumerate() {
        if i > 0 {
            out.text.push_str(", ");
        }
        let value = column_value(d, c, out);
        out.text.push_str(&value);
        let cast = c.cast.as_deref().and_then(|t| d.cast_type(t));
        if cast.is_some()
            || c.aggregate.is_some()
            || c.format.is_some()
            || c.key != c.column
            || !c.path.is_empty()
            || c.written_row.is_some()
        {
            out.text.push_str(" AS ");
            out.text.push_str(&d.quote_ident(&c.key));
        }
    }
}

fn returning(d: &dyn Dialect, cols: &[OutputColumn], out: &mut Sql) {
    if !cols.is_empty() {
        out.text.push_str(" RETURNING ");
        output_columns(d, cols, out);
    }
}

/// ` WHERE c1 AND c2 …`, nothing when there are no filters.
fn where_clause(d: &dyn Dialect, filters: &[Condition], out: &mut Sql) {
    if filters.is_empty() {
        return;
    }
    out.text.push_str(" WHERE ");
    for (i, c) in filters.iter().enumerate() {
        if i > 0 {
            out.text.push_str(" AND ");
        }
        condition(d, c, out);
    }
}

/// ` ORDER BY "t"."c" ASC NULLS LAST, …` (the level's `table` qualifying its own columns, so
/// that an output key of the same name never stands for one), nothing when there are no terms.
fn order_by(d: &dyn Dialect, s: &SelectStmt, lv: Level<'_>, table: &str, out: &mut Sql) {
    let (terms, not_null) = (&s.order, &s.not_null);
    if terms.is_empty() {
        return;
    }
    out.text.push_str(" ORDER BY ");
    for (i, t) in terms.iter().enumerate() {
        if i > 0 {
            out.text.push_str(", ");
        }
        let own = format!("{}.{}", d.quote_ident(table), d.quote_ident(&t.column));
        let mut col = if t.relation.is_none() {
            json_path(d, own, &t.path, out)
        } else {
            field(d, &t.column, &t.path, out)
        };
        // a column of an embedded to-one row: its value, NULL when no row relates
        let embed = t
            .relation
            .as_ref()
            .and_then(|r| s.embeds.iter().find(|e| e.key == *r && !e.many));
        if let Some(e) = embed {
            let from = aside(out, |from| {
                from_where(d, &e.select, Some((lv.next(), e)), from)
            });
            col = format!("(SELECT {col}{from} LIMIT 1)");
        }
        if ends_in_json(&t.path) {
            out.text.push_str(&d.json_comparable(&col));
        } else {
            out.text.push_str(&col);
        }
        let dir = t.direction.unwrap_or(Direction::Asc);
        out.text.push_str(match dir {
            Direction::Asc => " ASC",
            Direction::Desc => " DESC",
        });
        let nulls = match (t.nulls, d.explicit_default_nulls()) {
            _ if t.relation.is_none() && t.path.is_empty() && not_null.contains(&t.column) => None,
            (Some(n), _) => Some(n),
            (None, true) => Some(match dir {
                Direction::Asc => Nulls::Last,
                Direction::Desc => Nulls::First,
            }),
            (None, false) => None,
        };
        match nulls {
            Some(Nulls::First) => out.text.push_str(" NULLS FIRST"),
            Some(Nulls::Last) => out.text.push_str(" NULLS LAST"),
            None => {}
        }
    }
}

/// Append `c` as a self-contained SQL boolean expression to `out.text` (groups are
/// parenthesized), binding its values to `out.params`.
pub fn condition(d: &dyn Dialect, c: &Condition, out: &mut Sql) {
    level_condition(d, c, None, out);
}

/// The embeds of a level (at its place), whose presence a logic tree may test.
type LevelEmbeds<'a, 'l> = Option<(&'a [EmbedStmt], Level<'l>)>;

/// [`condition`] at a level whose embeds a test of their presence names
/// ([`Predicate::related`]: `EXISTS` of its related rows, `NOT EXISTS` for `is.null`).
fn level_condition(d: &dyn Dialect, c: &Condition, at: LevelEmbeds<'_, '_>, out: &mut Sql) {
    match c {
        Condition::Pred(p) if p.related => {
            let embed = at.and_then(|(embeds, lv)| {
                embeds.iter().find(|e| e.key == p.column).map(|e| (e, lv))
            });
            let Some((e, lv)) = embed else {
                out.text.push_str("FALSE");
                return;
            };
            let exists = matches!(p.operand, Operand::Is(IsValue::NotNull)) != p.negated;
            if !exists {
                out.text.push_str("NOT ");
            }
            out.text.push_str("EXISTS (SELECT 1");
            from_where(d, &e.select, Some((lv.next(), e)), out);
            out.text.push(')');
        }
        Condition::Pred(p) => predicate(d, p, out),
        Condition::And { negated, items } => group(d, *negated, items, (" AND ", "1 = 1"), at, out),
        Condition::Or { negated, items } => group(d, *negated, items, (" OR ", "1 = 0"), at, out),
    }
}

fn group(
    d: &dyn Dialect,
    negated: bool,
    items: &[Condition],
    (sep, empty): (&str, &str),
    at: LevelEmbeds<'_, '_>,
    out: &mut Sql,
) {
    if negated {
        out.text.push_str("NOT ");
    }
    if items.is_empty() {
        if negated {
            out.text.push_str(&format!("({empty})"));
        } else {
            out.text.push_str(empty);
        }
        return;
    }
    out.text.push('(');
    for (i, c) in items.iter().enumerate() {
        if i > 0 {
            out.text.push_str(sep);
        }
        level_condition(d, c, at, out);
    }
    out.text.push(')');
}

fn predicate(d: &dyn Dialect, p: &Predicate, out: &mut Sql) {
    if p.negated {
        out.text.push_str("NOT (");
    }
    // An empty list needs no column (and must bind none of its path's keys).
    let empty_list = matches!(&p.operand, Operand::List(items) if items.is_empty());
    let col = if empty_list {
        String::new()
    } else {
        row_field(d, &p.column, p.written_row.as_deref(), &p.path, out)
    };
    // a JSON value compared with a literal: compared as JSON (numbers as numbers)
    let json = json_comparison(p);
    let col = if json { d.json_comparable(&col) } else { col };
    match &p.operand {
        Operand::Is(v) => {
            out.text.push_str(&col);
            out.text.push_str(match v {
                IsValue::Null | IsValue::Unknown => " IS NULL",
                IsValue::NotNull => " IS NOT NULL",
                IsValue::True => " IS TRUE",
                IsValue::False => " IS FALSE",
            });
        }
        Operand::List(items) if p.op == Operator::In => {
            if items.is_empty() {
                out.text.push_str("1 = 0");
            } else {
                out.text.push_str(&col);
                out.text.push_str(" IN (");
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.text.push_str(", ");
                    }
                    let ph = filter_value(d, p, bind(d, out, Value::Text(v.clone())));
                    if json {
                        out.text.push_str(&d.json_comparable(&ph));
                    } else {
                        out.text.push_str(&ph);
                    }
                }
                out.text.push(')');
            }
        }
        Operand::List(items) => {
            let q = p.quantifier.unwrap_or(Quantifier::Any);
            if items.is_empty() {
                out.text.push_str(match q {
                    Quantifier::Any => "1 = 0",
                    Quantifier::All => "1 = 1",
                });
            } else {
                let sep = match q {
                    Quantifier::Any => " OR ",
                    Quantifier::All => " AND ",
                };
                // `NOT (…)` already parenthesizes a negated predicate
                let wrap = !p.negated;
                if wrap {
                    out.text.push('(');
                }
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.text.push_str(sep);
                    }
                    binary(d, &col, p, v, out);
                }
                if wrap {
                    out.text.push(')');
                }
            }
        }
        Operand::Scalar(v) => binary(d, &col, p, v, out),
    }
    if p.negated {
        out.text.push(')');
    }
}

/// The text range every match of a case-sensitive `LIKE` pattern lies in, byte-wise: its
/// literal prefix (up to the first `%` or `_`) and that prefix with its last byte one higher.
/// It is why a prefix `like` is rendered as a range ([`Predicate::prefix_range`]): SQLite's own
/// LIKE optimization does the same with a pattern it can see, but a bound pattern makes it
/// prepare the statement again at every execution (the plan depends on the bound value), which
/// cost S7 a tenth of its CPU.
#[derive(Debug, PartialEq, Eq)]
struct PrefixRange {
    low: String,
    high: String,
    /// Nothing but `%` after the prefix: the range alone is the whole test.
    complete: bool,
}

fn like_prefix_range(pattern: &str) -> Option<PrefixRange> {
    let end = pattern.find(['%', '_']).unwrap_or(pattern.len());
    let low = &pattern[..end];
    let mut high = low.as_bytes().to_vec();
    *high.last_mut()? += 1; // UTF-8 has no 0xFF byte
    Some(PrefixRange {
        high: String::from_utf8(high).ok()?,
        complete: end < pattern.len() && pattern[end..].bytes().all(|b| b == b'%'),
        low: low.to_owned(),
    })
}

/// `col op ?` for one value of `p`.
fn binary(d: &dyn Dialect, col: &str, p: &Predicate, v: &str, out: &mut Sql) {
    let op = p.op;
    let sym = match op {
        Operator::Eq | Operator::In => "=",
        Operator::Neq => "<>",
        Operator::Gt => ">",
        Operator::Gte => ">=",
        Operator::Lt => "<",
        Operator::Lte => "<=",
        Operator::IsDistinct => "IS DISTINCT FROM",
        Operator::Is => "IS",
        Operator::Like | Operator::Ilike => {
            let pattern = d.like_pattern(v);
            let range = (op == Operator::Like && p.prefix_range)
                .then(|| like_prefix_range(&pattern))
                .flatten();
            match range {
                Some(range) => {
                    let lo = bind(d, out, Value::Text(range.low));
                    let hi = bind(d, out, Value::Text(range.high));
                    out.text
                        .push_str(&format!("({col} >= {lo} AND {col} < {hi}"));
                    if !range.complete {
                        let ph = bind(d, out, Value::Text(pattern));
                        out.text.push_str(" AND ");
                        out.text
                            .push_str(&d.like(col, &d.unplanned_pattern(&ph), false));
                    }
                    out.text.push(')');
                }
                None => {
                    let wildcard_first = pattern.starts_with(['%', '_']);
                    let ph = bind(d, out, Value::Text(pattern));
                    let ph = if (wildcard_first || p.unindexed) && op == Operator::Like {
                        d.unplanned_pattern(&ph)
                    } else {
                        ph
                    };
                    out.text.push_str(&d.like(col, &ph, op == Operator::Ilike));
                }
            }
            return;
        }
        Operator::Match | Operator::Imatch => {
            let ci = op == Operator::Imatch;
            let ph = bind(d, out, Value::Text(d.regex_pattern(v, ci)));
            out.text.push_str(&d.regex(col, &ph, ci));
            return;
        }
        Operator::Contains => "@>",
        Operator::ContainedIn => "<@",
        Operator::Overlaps => "&&",
        Operator::StrictlyLeft => "<<",
        Operator::StrictlyRight => ">>",
        Operator::NotExtendsRight => "&<",
        Operator::NotExtendsLeft => "&>",
        Operator::Adjacent => "-|-",
        Operator::Fts | Operator::Plfts | Operator::Phfts | Operator::Wfts => {
            full_text(d, col, p, v, out);
            return;
        }
    };
    let ph = filter_value(d, p, bind(d, out, Value::Text(v.to_owned())));
    let ph = if json_comparison(p) {
        d.json_comparable(&ph)
    } else {
        ph
    };
    out.text.push_str(&format!("{col} {sym} {ph}"));
}

/// Whether a path ends in a JSON value (`->`), not text (`->>`).
fn ends_in_json(path: &[JsonStep]) -> bool {
    path.last().is_some_and(|s| !s.as_text)
}

/// Whether `p` compares a JSON value (a path ending in `->`) with literals by order or
/// equality: both sides are then compared as JSON.
fn json_comparison(p: &Predicate) -> bool {
    ends_in_json(&p.path) && p.op.compares_values()
}

/// `col @@ to_tsquery([lang,] ?)` (or `plainto_`, `phraseto_`, `websearch_to_tsquery`); a column
/// the planner marked `vectorize` goes through `to_tsvector([lang,] col)` first.
fn full_text(d: &dyn Dialect, col: &str, p: &Predicate, v: &str, out: &mut Sql) {
    let function = match p.op {
        Operator::Plfts => "plainto_tsquery",
        Operator::Phfts => "phraseto_tsquery",
        Operator::Wfts => "websearch_to_tsquery",
        _ => "to_tsquery",
    };
    let lang = p
        .language
        .as_ref()
        .map(|l| format!("{}::regconfig, ", bind(d, out, Value::Text(l.clone()))));
    let lang = lang.as_deref().unwrap_or("");
    let query = bind(d, out, Value::Text(v.to_owned()));
    if p.vectorize {
        out.text.push_str(&format!("to_tsvector({lang}{col})"));
    } else {
        out.text.push_str(col);
    }
    out.text.push_str(&format!(" @@ {function}({lang}{query})"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_like_prefix_is_the_range_of_its_literal_start() {
        let range = |p: &str| like_prefix_range(p).map(|r| (r.low, r.high, r.complete));
        let owned = |l: &str, h: &str, c| Some((l.to_owned(), h.to_owned(), c));
        assert_eq!(range("Sm%"), owned("Sm", "Sn", true));
        assert_eq!(range("Sm%%"), owned("Sm", "Sn", true));
        assert_eq!(range("Sm%th"), owned("Sm", "Sn", false));
        assert_eq!(range("Sm_"), owned("Sm", "Sn", false));
        assert_eq!(range("Smith"), owned("Smith", "Smiti", false));
        assert_eq!(range("é%"), owned("é", "ê", true));
        // nothing literal before the first wildcard, or a last byte that cannot be raised
        assert_eq!(range("%a"), None);
        assert_eq!(range("_a%"), None);
        assert_eq!(range("\u{7f}%"), None);
        assert_eq!(range("\u{bf}%"), None);
    }
}
