//! The query-language AST: what a PostgREST-style query string means, independent of any
//! database. Parsed by [`crate::parse`], printed back by the `Display` impls in [`crate::print`],
//! rendered to SQL by [`crate::render`] and evaluated in memory by [`crate::eval`].

/// One item of `select=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectItem {
    /// `*`: every column of the resource, in table order.
    Star,
    /// `alias:column::cast`, alias and cast optional.
    Column {
        /// Column name as written (validated against the schema cache by the caller).
        name: String,
        /// Output key, when renamed with `alias:`.
        alias: Option<String>,
        /// Target type of `::cast`, lower-cased (validated by the dialect when rendered).
        cast: Option<String>,
    },
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
    /// `not.` prefix.
    pub negated: bool,
    /// The operator.
    pub op: Operator,
    /// `(any)`/`(all)`, only with a list operand.
    pub quantifier: Option<Quantifier>,
    /// The value(s).
    pub operand: Operand,
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

/// One term of `order=col.desc.nullslast`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderTerm {
    /// Column name as written.
    pub column: String,
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
