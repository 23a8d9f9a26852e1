//! The query-language AST: what a PostgREST-style query string means, independent of any
//! database. Parsed by [`crate::parse`], printed back by the `Display` impls in [`crate::print`],
//! rendered to SQL by [`crate::render`] and evaluated in memory by [`crate::eval`].

/// One item of `select=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectItem {
    /// `*`: every column of the resource, in table order.
    Star,
    /// `alias:column->path::cast.sum()::cast`, alias, JSON path, cast and aggregate optional.
    Column {
        /// Column name as written (validated against the schema cache by the caller).
        name: String,
        /// JSON path into the column (`data->a->>b`); empty for the column itself.
        path: Vec<JsonStep>,
        /// Output key, when renamed with `alias:`.
        alias: Option<String>,
        /// Target type of `::cast`, lower-cased (validated by the dialect when rendered).
        cast: Option<String>,
        /// `.sum()` and the like: the value is an aggregate of the column over a group.
        aggregate: Option<Aggregate>,
    },
    /// `alias:count()::cast`: the number of rows (of each group).
    CountRows {
        /// Output key, when renamed with `alias:` (else `count`).
        alias: Option<String>,
        /// Target type of the count's `::cast`, lower-cased.
        cast: Option<String>,
    },
    /// `alias:relation!hint!inner(items)` or `...relation(items)`: a related resource embedded
    /// in each row (PostgREST's resource embedding).
    Embed(Embed),
}

/// An aggregate function of `select=` (PostgREST's `avg()`, `count()`, `max()`, `min()`,
/// `sum()`): the selected columns without one group the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggregateFunction {
    /// `avg()`
    Avg,
    /// `count()` of a column: its values that are not null.
    Count,
    /// `max()`
    Max,
    /// `min()`
    Min,
    /// `sum()`
    Sum,
}

impl AggregateFunction {
    /// Every function.
    pub const ALL: [AggregateFunction; 5] = [
        AggregateFunction::Avg,
        AggregateFunction::Count,
        AggregateFunction::Max,
        AggregateFunction::Min,
        AggregateFunction::Sum,
    ];

    /// Its name, in `select=` and in SQL (and the output key of an unnamed aggregate).
    pub fn name(self) -> &'static str {
        match self {
            AggregateFunction::Avg => "avg",
            AggregateFunction::Count => "count",
            AggregateFunction::Max => "max",
            AggregateFunction::Min => "min",
            AggregateFunction::Sum => "sum",
        }
    }
}

/// `.sum()::cast` after a selected column: the function, and the cast of its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    /// The function.
    pub function: AggregateFunction,
    /// Target type of the result's `::cast`, lower-cased.
    pub cast: Option<String>,
}

/// An embedded resource in `select=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Embed {
    /// What is embedded, as written: a related table, a foreign-key column or a constraint
    /// name (resolved against the schema's relationships by the caller).
    pub relation: String,
    /// Output key, when renamed with `alias:`.
    pub alias: Option<String>,
    /// `!hint`: which relationship, when several relate the two tables (a constraint, a
    /// column, or a junction table).
    pub hint: Option<String>,
    /// `!inner` or `!left`.
    pub join: Option<Join>,
    /// `...relation(…)`: the related row's keys are spread into the parent object.
    pub spread: bool,
    /// Its own `select` list (empty: nothing of it is output, as in `rel()` used to filter).
    pub select: Vec<SelectItem>,
}

/// How an embedded resource joins its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Join {
    /// `!inner`: parent rows without a related row are left out.
    Inner,
    /// `!left` (the default): every parent row, with `null` or `[]` when nothing relates.
    Left,
}

/// One key of a JSON path: an object field or an array index (negative counts from the end).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JsonKey {
    /// `->name`
    Field(String),
    /// `->0`, `->-1`
    Index(i64),
}

/// One step of a JSON path after a column name: `->key` (JSON) or `->>key` (text, last step only).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonStep {
    /// The key.
    pub key: JsonKey,
    /// `->>`: the value as text rather than JSON.
    pub as_text: bool,
    /// (On a path's first step, set by the planner) the column is not JSON: its value is read
    /// as JSON first (PostgreSQL's `to_jsonb`, as PostgREST reads composite and array columns).
    pub to_json: bool,
}

/// The output key PostgREST gives a selected JSON path: its last field name, or the column's
/// name when the path has no field (`arr->0` → `arr`).
pub fn path_key<'a>(column: &'a str, path: &'a [JsonStep]) -> &'a str {
    path.iter()
        .rev()
        .find_map(|s| match &s.key {
            JsonKey::Field(f) => Some(f.as_str()),
            JsonKey::Index(_) => None,
        })
        .unwrap_or(column)
}

/// A filter operator (`col=op.value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `eq`: `=`
    Eq,
    /// `neq`: `<>`
    Neq,
    /// `gt`: `>`
    Gt,
    /// `gte`: `>=`
    Gte,
    /// `lt`: `<`
    Lt,
    /// `lte`: `<=`
    Lte,
    /// `like`: case-sensitive pattern, `*` or `%` any run, `_` one character.
    Like,
    /// `ilike`: case-insensitive `like`.
    Ilike,
    /// `match`: POSIX-style regular expression, case-sensitive.
    Match,
    /// `imatch`: case-insensitive `match`.
    Imatch,
    /// `in`: one of a list, `in.(a,b,"c,d")`.
    In,
    /// `is`: `null`, `not_null`, `true`, `false`, `unknown`.
    Is,
    /// `isdistinct`: `IS DISTINCT FROM` (null-safe inequality).
    IsDistinct,
    /// `cs`: `@>` contains (arrays, ranges, jsonb), PostgreSQL only.
    Contains,
    /// `cd`: `<@` contained in, PostgreSQL only.
    ContainedIn,
    /// `ov`: `&&` overlaps (arrays, ranges), PostgreSQL only.
    Overlaps,
    /// `sl`: `<<` strictly left of (ranges), PostgreSQL only.
    StrictlyLeft,
    /// `sr`: `>>` strictly right of (ranges), PostgreSQL only.
    StrictlyRight,
    /// `nxr`: `&<` does not extend to the right of (ranges), PostgreSQL only.
    NotExtendsRight,
    /// `nxl`: `&>` does not extend to the left of (ranges), PostgreSQL only.
    NotExtendsLeft,
    /// `adj`: `-|-` adjacent to (ranges), PostgreSQL only.
    Adjacent,
    /// `fts`: full-text match with `to_tsquery`, PostgreSQL only.
    Fts,
    /// `plfts`: full-text match with `plainto_tsquery`, PostgreSQL only.
    Plfts,
    /// `phfts`: full-text match with `phraseto_tsquery`, PostgreSQL only.
    Phfts,
    /// `wfts`: full-text match with `websearch_to_tsquery`, PostgreSQL only.
    Wfts,
}

impl Operator {
    /// Whether the operator exists only on PostgreSQL (array, range and full-text operators).
    pub fn postgres_only(self) -> bool {
        self.is_full_text()
            || matches!(
                self,
                Operator::Contains
                    | Operator::ContainedIn
                    | Operator::Overlaps
                    | Operator::StrictlyLeft
                    | Operator::StrictlyRight
                    | Operator::NotExtendsRight
                    | Operator::NotExtendsLeft
                    | Operator::Adjacent
            )
    }

    /// Whether the operator compares the value with its operand by equality or order (`eq neq
    /// gt gte lt lte in isdistinct`): the operand is read as a value of the compared type.
    pub fn compares_values(self) -> bool {
        matches!(
            self,
            Operator::Eq
                | Operator::Neq
                | Operator::Gt
                | Operator::Gte
                | Operator::Lt
                | Operator::Lte
                | Operator::In
                | Operator::IsDistinct
        )
    }

    /// Whether the operator is a full-text match (`fts plfts phfts wfts`), which takes an optional
    /// language: `fts(english).word`.
    pub fn is_full_text(self) -> bool {
        matches!(
            self,
            Operator::Fts | Operator::Plfts | Operator::Phfts | Operator::Wfts
        )
    }
}

/// The value of an `is.` filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IsValue {
    /// `is.null`
    Null,
    /// `is.not_null`
    NotNull,
    /// `is.true`
    True,
    /// `is.false`
    False,
    /// `is.unknown` (same as null for booleans)
    Unknown,
}

/// `(any)` / `(all)` modifier on `eq like ilike match imatch gt gte lt lte`, with a `{a,b}` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quantifier {
    /// `op(any).{a,b}`: true when the operator holds for at least one value.
    Any,
    /// `op(all).{a,b}`: true when the operator holds for every value.
    All,
}

/// The right-hand side of a predicate, as text from the query string (typed by the database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A single value (`eq.5`, `like.A*`).
    Scalar(String),
    /// A list (`in.(1,2)` or a quantified `{a,b}`).
    List(Vec<String>),
    /// The value of `is.`.
    Is(IsValue),
}

/// `column=[not.]op[(any|all)].value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predicate {
    /// Column name as written (validated against the schema cache by the caller).
    pub column: String,
    /// JSON path into the column (`data->>a=eq.x`); empty for the column itself.
    pub path: Vec<JsonStep>,
    /// `not.` prefix.
    pub negated: bool,
    /// The operator.
    pub op: Operator,
    /// `(any)`/`(all)`, only with a list operand.
    pub quantifier: Option<Quantifier>,
    /// The value(s).
    pub operand: Operand,
    /// Text-search configuration of a full-text operator (`fts(english)`).
    pub language: Option<String>,
    /// Set by the planner for a full-text operator on a column that is not a `tsvector`: the
    /// column is turned into one with `to_tsvector` first. Not part of the query syntax.
    pub vectorize: bool,
    /// Set by the planner for a column of a type with a text representation (PostgREST's
    /// domain representations): each value goes through this function of `text` first. Not
    /// part of the query syntax.
    pub parse: Option<QualifiedName>,
    /// Set by the planner for a computed column a write filters on (PostgreSQL): its function,
    /// called with the written row (`"test"."always_true"("items")`). Not part of the query
    /// syntax.
    pub written_row: Option<Box<RowFunction>>,
    /// Set by the planner for `rel.is.null` / `rel.not.is.null` inside a logic tree, where
    /// `rel` is an embedded resource of the level: whether related rows exist (`or=(a.not.is.null,
    /// b.not.is.null)`). Not part of the query syntax.
    pub related: bool,
    /// Set by the planner for `like` on a column whose index answers a text prefix as a range
    /// (SQLite: TEXT affinity, BINARY collation, leading a BINARY index): a pattern with a
    /// literal prefix is rendered `col >= prefix AND col < prefix⁺`, with the `LIKE` itself only
    /// when the pattern goes on past a trailing `%`. Not part of the query syntax.
    pub prefix_range: bool,
    /// Set by the planner for `like` on a column that is a key of no index (SQLite): no index
    /// can serve its pattern, so the pattern is bound where the query planner does not read it
    /// ([`crate::render::Dialect::unplanned_pattern`]). Not part of the query syntax.
    pub unindexed: bool,
}

impl Predicate {
    /// `column=op.operand` as written: not negated, no quantifier, JSON path or language, none
    /// of the planner's flags set (the other fields are set over it: `Predicate { negated,
    /// ..Predicate::new(…) }`).
    pub fn new(column: impl Into<String>, op: Operator, operand: Operand) -> Predicate {
        Predicate {
            column: column.into(),
            path: Vec::new(),
            negated: false,
            op,
            quantifier: None,
            operand,
            language: None,
            vectorize: false,
            parse: None,
            written_row: None,
            related: false,
            prefix_range: false,
            unindexed: false,
        }
    }
}

/// A computed column of a row a write names by its table's name: its function, called with
/// that row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFunction {
    /// The function (the column's name, in its schema).
    pub function: QualifiedName,
    /// The written table's name, which stands for its row.
    pub row: String,
}

/// A database object (a function, a type) named by the schema cache, schema-qualified where
/// the backend has schemas.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QualifiedName {
    /// Its schema, where the backend has several.
    pub schema: Option<String>,
    /// Its name.
    pub name: String,
}

/// A boolean tree of predicates: top-level query parameters are ANDed; `or=(…)`, `and=(…)` and
/// `not.or=(…)` nest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// A single predicate.
    Pred(Predicate),
    /// `and=(…)` / `not.and=(…)`; an empty list is true.
    And {
        /// `not.and`
        negated: bool,
        /// Operands.
        items: Vec<Condition>,
    },
    /// `or=(…)` / `not.or=(…)`; an empty list is false.
    Or {
        /// `not.or`
        negated: bool,
        /// Operands.
        items: Vec<Condition>,
    },
}

impl Condition {
    /// The same tree with each predicate's column renamed by `rename` (a front end's names
    /// resolved to the table's), or the first refusal.
    pub fn try_map_columns<E>(
        &self,
        rename: &dyn Fn(&str) -> Result<String, E>,
    ) -> Result<Condition, E> {
        Ok(match self {
            Condition::Pred(p) => Condition::Pred(Predicate {
                column: rename(&p.column)?,
                ..p.clone()
            }),
            Condition::And { negated, items } => Condition::And {
                negated: *negated,
                items: items
                    .iter()
                    .map(|i| i.try_map_columns(rename))
                    .collect::<Result<_, _>>()?,
            },
            Condition::Or { negated, items } => Condition::Or {
                negated: *negated,
                items: items
                    .iter()
                    .map(|i| i.try_map_columns(rename))
                    .collect::<Result<_, _>>()?,
            },
        })
    }
}

/// Sort direction of one `order=` term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `.asc`
    Asc,
    /// `.desc`
    Desc,
}

/// Null placement of one `order=` term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Nulls {
    /// `.nullsfirst`
    First,
    /// `.nullslast`
    Last,
}

/// One term of `order=col.desc.nullslast`, or `order=rel(col).desc` (a column of an embedded
/// to-one resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderTerm {
    /// The embedded to-one resource (its key) the column belongs to, when ordering by it.
    pub relation: Option<String>,
    /// Column name as written.
    pub column: String,
    /// JSON path into the column (`order=data->>a.desc`); empty for the column itself.
    pub path: Vec<JsonStep>,
    /// Explicit direction, if any (default ascending).
    pub direction: Option<Direction>,
    /// Explicit null placement, if any (default: PostgreSQL's, nulls last when ascending).
    pub nulls: Option<Nulls>,
}

/// A whole parsed query string for a table or view resource.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Query {
    /// `select=`; `None` when absent (means `*`).
    pub select: Option<Vec<SelectItem>>,
    /// Filters, ANDed: one entry per filter parameter and per `or=`/`and=` parameter, in order.
    pub filters: Vec<Condition>,
    /// `order=`.
    pub order: Vec<OrderTerm>,
    /// `limit=`.
    pub limit: Option<u64>,
    /// `offset=`.
    pub offset: Option<u64>,
    /// `columns=` (writes): the keys taken from the body.
    pub columns: Option<Vec<String>>,
    /// `on_conflict=` (upsert): the conflict target columns.
    pub on_conflict: Option<Vec<String>>,
    /// The parameters of embedded resources (`driver.points=gt.10`, `driver.order=…`), one
    /// entry per embed path, in the order first named.
    pub embedded: Vec<EmbedParams>,
}

/// The query parameters of one embedded resource, named by its path of embed keys (aliases or
/// relation names) from the top: `team.driver.limit=2` → `["team", "driver"]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EmbedParams {
    /// Embed keys from the top.
    pub path: Vec<String>,
    /// Filters, ANDed (`path.col=op.value`, `path.or=(…)`).
    pub filters: Vec<Condition>,
    /// `path.order=`.
    pub order: Vec<OrderTerm>,
    /// `path.limit=`.
    pub limit: Option<u64>,
    /// `path.offset=`.
    pub offset: Option<u64>,
}

impl Query {
    /// The parameters of the embed at `path`, added when first named.
    pub fn embedded_mut(&mut self, path: &[String]) -> &mut EmbedParams {
        let at = match self.embedded.iter().position(|e| e.path == path) {
            Some(i) => i,
            None => {
                self.embedded.push(EmbedParams {
                    path: path.to_vec(),
                    ..EmbedParams::default()
                });
                self.embedded.len() - 1
            }
        };
        &mut self.embedded[at]
    }

    /// The parameters of the embed at `path`, if any were given.
    pub fn embedded(&self, path: &[String]) -> Option<&EmbedParams> {
        self.embedded.iter().find(|e| e.path == path)
    }
}

/// A database value: a bound SQL parameter, or a column value of a row evaluated in memory.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// Integer.
    Int(i64),
    /// Floating point.
    Real(f64),
    /// Text.
    Text(String),
    /// Boolean (bound as 1/0 on SQLite).
    Bool(bool),
}
