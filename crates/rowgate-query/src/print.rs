//! AST → PostgREST query syntax, the inverse of [`crate::parse`]: for every AST the parser can
//! produce, parsing the printed form gives the same AST back. Identifiers and values are
//! double-quoted (with backslash escapes) whenever the plain form would not parse back.
//!
//! - `Display for SelectItem`: one `select=` item (`alias:"my col"::text`).
//! - `Display for Predicate`: the value of a filter parameter, `[not.]op[(any|all)].value`.
//! - `Display for Condition`: the form of an item inside a logic tree: `col.[not.]op.value` or
//!   `[not.]or(…)` / `[not.]and(…)`.
//! - `Display for OrderTerm`: one `order=` term.
//! - [`filter_param`], [`select_param`], [`order_param`], [`columns_param`] and
//!   [`to_query_string`] give whole `(key, value)` query pairs (not percent-encoded).

use std::fmt::{self, Write as _};

use crate::ast::{
    Condition, Direction, Embed, IsValue, Join, JsonKey, JsonStep, Nulls, Operand, Operator,
    OrderTerm, Predicate, Quantifier, Query, SelectItem,
};
use crate::parse::is_ident_char;

/// Query keys that [`crate::parse::parse_query`] does not read as a column filter.
const RESERVED_KEYS: &[&str] = &[
    "select",
    "order",
    "limit",
    "offset",
    "columns",
    "on_conflict",
    "or",
    "and",
];

/// An identifier as written in a query string: plain when it parses back as is, else quoted.
pub fn ident(name: &str) -> String {
    if !name.is_empty() && name.chars().all(is_ident_char) {
        name.to_owned()
    } else {
        quoted(name)
    }
}

/// A JSON path as written after a column name: `->a->>b`, `->0`; a field name that would read
/// as an array index is quoted (`->"0"`).
pub fn json_path(path: &[JsonStep]) -> String {
    let mut out = String::new();
    for step in path {
        out.push_str(if step.as_text { "->>" } else { "->" });
        match &step.key {
            JsonKey::Index(i) => out.push_str(&i.to_string()),
            JsonKey::Field(f) if f.bytes().all(|b| b.is_ascii_digit()) => out.push_str(&quoted(f)),
            JsonKey::Field(f) => out.push_str(&ident(f)),
        }
    }
    out
}

/// `"s"` with `"` and `\` backslash-escaped.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// A list element (`in.(…)`, `{…}`), quoted when needed.
fn element(s: &str) -> String {
    if s.is_empty()
        || s.trim_start() != s
        || s.starts_with('[')
        || s.contains([',', '(', ')', '{', '}', '"', '\\'])
    {
        quoted(s)
    } else {
        s.to_owned()
    }
}

/// A scalar value inside a logic tree, quoted when needed.
fn logic_scalar(s: &str) -> String {
    element(s)
}

/// An operator as spelled in a query string (`eq`, `cs`, `fts`).
pub fn operator_name(op: Operator) -> &'static str {
    match op {
        Operator::Eq => "eq",
        Operator::Neq => "neq",
        Operator::Gt => "gt",
        Operator::Gte => "gte",
        Operator::Lt => "lt",
        Operator::Lte => "lte",
        Operator::Like => "like",
        Operator::Ilike => "ilike",
        Operator::Match => "match",
        Operator::Imatch => "imatch",
        Operator::In => "in",
        Operator::Is => "is",
        Operator::IsDistinct => "isdistinct",
        Operator::Contains => "cs",
        Operator::ContainedIn => "cd",
        Operator::Overlaps => "ov",
        Operator::StrictlyLeft => "sl",
        Operator::StrictlyRight => "sr",
        Operator::NotExtendsRight => "nxr",
        Operator::NotExtendsLeft => "nxl",
        Operator::Adjacent => "adj",
        Operator::Fts => "fts",
        Operator::Plfts => "plfts",
        Operator::Phfts => "phfts",
        Operator::Wfts => "wfts",
    }
}

fn is_name(v: IsValue) -> &'static str {
    match v {
        IsValue::Null => "null",
        IsValue::NotNull => "not_null",
        IsValue::True => "true",
        IsValue::False => "false",
        IsValue::Unknown => "unknown",
    }
}

impl fmt::Display for SelectItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectItem::Star => f.write_str("*"),
            SelectItem::Column {
                name,
                path,
                alias,
                cast,
                aggregate,
            } => {
                if let Some(a) = alias {
                    write!(f, "{}:", ident(a))?;
                }
                f.write_str(&ident(name))?;
                f.write_str(&json_path(path))?;
                if let Some(c) = cast {
                    write!(f, "::{c}")?;
                }
                if let Some(a) = aggregate {
                    write!(f, ".{}()", a.function.name())?;
                    if let Some(c) = &a.cast {
                        write!(f, "::{c}")?;
                    }
                }
                Ok(())
            }
            SelectItem::CountRows { alias, cast } => {
                if let Some(a) = alias {
                    write!(f, "{}:", ident(a))?;
                }
                f.write_str("count()")?;
                if let Some(c) = cast {
                    write!(f, "::{c}")?;
                }
                Ok(())
            }
            SelectItem::Embed(e) => write!(f, "{e}"),
        }
    }
}

/// `[...][alias:]relation[!hint][!inner|!left](items)`; a hint spelled like a join type is
/// quoted.
impl fmt::Display for Embed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.spread {
            f.write_str("...")?;
        }
        if let Some(a) = &self.alias {
            write!(f, "{}:", ident(a))?;
        }
        if self.relation == "count" && self.hint.is_none() && self.join.is_none() {
            // (unquoted, `count()` is the count of rows)
            f.write_str(&quoted(&self.relation))?;
        } else {
            f.write_str(&ident(&self.relation))?;
        }
        if let Some(h) = &self.hint {
            let h = if h == "inner" || h == "left" {
                quoted(h)
            } else {
                ident(h)
            };
            write!(f, "!{h}")?;
        }
        match self.join {
            Some(Join::Inner) => f.write_str("!inner")?,
            Some(Join::Left) => f.write_str("!left")?,
            None => {}
        }
        write!(f, "({})", join(&self.select))
    }
}

fn write_predicate_value(p: &Predicate, in_logic: bool, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if p.negated {
        f.write_str("not.")?;
    }
    f.write_str(operator_name(p.op))?;
    if let Some(lang) = &p.language {
        write!(f, "({})", ident(lang))?;
    }
    match p.quantifier {
        Some(Quantifier::Any) => f.write_str("(any)")?,
        Some(Quantifier::All) => f.write_str("(all)")?,
        None => {}
    }
    f.write_char('.')?;
    match &p.operand {
        Operand::Scalar(v) if in_logic => f.write_str(&logic_scalar(v)),
        Operand::Scalar(v) => f.write_str(v),
        Operand::Is(v) => f.write_str(is_name(*v)),
        Operand::List(items) => {
            let (open, close) = if p.op == Operator::In {
                ('(', ')')
            } else {
                ('{', '}')
            };
            f.write_char(open)?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_char(',')?;
                }
                f.write_str(&element(item))?;
            }
            f.write_char(close)
        }
    }
}

/// The value of a filter parameter: `[not.]op[(any|all)].value` (the column is the key, see
/// [`filter_param`]).
impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_predicate_value(self, false, f)
    }
}

/// One item of a logic tree: `col.[not.]op.value`, `[not.]or(…)` or `[not.]and(…)`.
impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Pred(p) => {
                write!(f, "{}{}.", ident(&p.column), json_path(&p.path))?;
                write_predicate_value(p, true, f)
            }
            Condition::And { negated, items } => write_group(f, *negated, "and", items),
            Condition::Or { negated, items } => write_group(f, *negated, "or", items),
        }
    }
}

fn write_group(
    f: &mut fmt::Formatter<'_>,
    negated: bool,
    name: &str,
    items: &[Condition],
) -> fmt::Result {
    if negated {
        f.write_str("not.")?;
    }
    f.write_str(name)?;
    write_items(f, items)
}

fn write_items(f: &mut impl fmt::Write, items: &[Condition]) -> fmt::Result {
    f.write_char('(')?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_char(',')?;
        }
        write!(f, "{item}")?;
    }
    f.write_char(')')
}

/// One `order=` term: `[rel(]col[)][.asc|.desc][.nullsfirst|.nullslast]`.
impl fmt::Display for OrderTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.relation {
            Some(r) => write!(
                f,
                "{}({}{})",
                ident(r),
                ident(&self.column),
                json_path(&self.path)
            )?,
            None => write!(f, "{}{}", ident(&self.column), json_path(&self.path))?,
        }
        match self.direction {
            Some(Direction::Asc) => f.write_str(".asc")?,
            Some(Direction::Desc) => f.write_str(".desc")?,
            None => {}
        }
        match self.nulls {
            Some(Nulls::First) => f.write_str(".nullsfirst"),
            Some(Nulls::Last) => f.write_str(".nullslast"),
            None => Ok(()),
        }
    }
}

/// The `(key, value)` query pair that [`crate::parse::parse_query`] turns back into `c`:
/// a predicate gives `(column, "[not.]op.value")` (the column quoted when it would otherwise read
/// as a reserved key), a group gives `("or" | "not.or" | "and" | "not.and", "(…)")`.
pub fn filter_param(c: &Condition) -> (String, String) {
    match c {
        Condition::Pred(p) => {
            let key = if RESERVED_KEYS.contains(&p.column.as_str()) {
                quoted(&p.column)
            } else {
                ident(&p.column)
            } + &json_path(&p.path);
            (key, p.to_string())
        }
        Condition::And { negated, items } | Condition::Or { negated, items } => {
            let name = match (c, negated) {
                (Condition::Or { .. }, false) => "or",
                (Condition::Or { .. }, true) => "not.or",
                (_, false) => "and",
                (_, true) => "not.and",
            };
            let mut value = String::new();
            // writing into a String cannot fail
            let _ = write_items(&mut value, items);
            (name.to_owned(), value)
        }
    }
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{item}");
    }
    out
}

/// The value of `select=` for these items.
pub fn select_param(items: &[SelectItem]) -> String {
    join(items)
}

/// The value of `order=` for these terms.
pub fn order_param(terms: &[OrderTerm]) -> String {
    join(terms)
}

/// The value of `columns=` / `on_conflict=` for these columns.
pub fn columns_param(columns: &[String]) -> String {
    let quoted: Vec<String> = columns.iter().map(|c| ident(c)).collect();
    quoted.join(",")
}

/// The whole query as `(key, value)` pairs (not percent-encoded), in the order `select`, filters,
/// `order`, `limit`, `offset`, `columns`, `on_conflict`, then each embed's parameters under its
/// path (`driver.points=…`). An empty `order` list is left out.
pub fn to_query_string(q: &Query) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(items) = &q.select {
        out.push(("select".to_owned(), select_param(items)));
    }
    out.extend(q.filters.iter().map(filter_param));
    if !q.order.is_empty() {
        out.push(("order".to_owned(), order_param(&q.order)));
    }
    if let Some(n) = q.limit {
        out.push(("limit".to_owned(), n.to_string()));
    }
    if let Some(n) = q.offset {
        out.push(("offset".to_owned(), n.to_string()));
    }
    if let Some(c) = &q.columns {
        out.push(("columns".to_owned(), columns_param(c)));
    }
    if let Some(c) = &q.on_conflict {
        out.push(("on_conflict".to_owned(), columns_param(c)));
    }
    for e in &q.embedded {
        // a key named `not` would read as the `not.` of `not.or` / `not.and`
        let key = |p: &String| if p == "not" { quoted(p) } else { ident(p) };
        let prefix: String = e.path.iter().map(|p| key(p) + ".").collect();
        for c in &e.filters {
            let (key, value) = filter_param(c);
            out.push((format!("{prefix}{key}"), value));
        }
        if !e.order.is_empty() {
            out.push((format!("{prefix}order"), order_param(&e.order)));
        }
        if let Some(n) = e.limit {
            out.push((format!("{prefix}limit"), n.to_string()));
        }
        if let Some(n) = e.offset {
            out.push((format!("{prefix}offset"), n.to_string()));
        }
    }
    out
}
