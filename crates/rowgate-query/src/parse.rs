//! PostgREST query syntax → AST: `select=`, filters (`col=[not.]op[(any|all)].value`), logic trees
//! (`or=(…)`, `and=(…)`, `not.or=(…)`, `not.and=(…)`), `order=`, `limit=`, `offset=`, `columns=`
//! and `on_conflict=`.
//!
//! Every function takes already percent-decoded text, never panics (whatever the input: non-ASCII,
//! huge, unbalanced quotes or parentheses) and reports failures as a [`ParseError`] shaped like
//! PostgREST's `PGRST100` errors: `message` says what could not be parsed, `details` points at the
//! bad part.
//!
//! Grammar notes (as PostgREST):
//! - Identifiers are either unquoted (letters, including non-ASCII ones, digits, `_`, `$`, and
//!   inner spaces) or double-quoted (`"weird.name"`), where `\x` stands for `x` and `""` for `"`.
//! - A top-level filter value is everything after the first `op.`, verbatim (`eq.1.5`).
//! - Inside a logic tree a value ends at `,` or `)` unless double-quoted (`name.eq."a,b"`).
//! - A column may be followed by a JSON path: `data->a->>b`, `arr->0`; keys are identifiers or
//!   (optionally negative) integers for array indexes; `->>` (text) only as the last step.
//! - List elements (`in.(…)`, quantified `{…}`) are verbatim up to `,` or the closing bracket,
//!   unless double-quoted, with backslash escapes inside the quotes.

use std::fmt;

use crate::ast::{
    Aggregate, AggregateFunction, Condition, Direction, Embed, IsValue, Join, JsonKey, JsonStep,
    Nulls, Operand, Operator, OrderTerm, Predicate, Quantifier, Query, SelectItem,
};

/// Maximum nesting of logic groups (`or=(and(or(…)))` is 3 deep). Deeper trees are rejected so a
/// request cannot make the parser, the renderer or the database recurse without bound.
pub const MAX_LOGIC_DEPTH: usize = 32;

/// At most this many characters of the input are quoted back in an error.
const MAX_QUOTED: usize = 120;

/// Which query parameter could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseErrorKind {
    /// `select=`
    Select,
    /// A column filter (`col=op.value`).
    Filter,
    /// `order=`
    Order,
    /// `limit=` or `offset=`
    Limit,
    /// A negative `limit=`: a range no result satisfies (PostgREST's 416).
    NegativeLimit,
    /// `or=`, `and=`, `not.or=`, `not.and=`
    Logic,
    /// `columns=` or `on_conflict=`
    Columns,
}

/// A query string that could not be parsed (PostgREST's `PGRST100`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Which parameter was bad.
    pub kind: ParseErrorKind,
    /// What is wrong, e.g. `failed to parse filter (foo.1)`.
    pub message: String,
    /// Where: the offending fragment and its position.
    pub details: Option<String>,
    /// How to fix it, when there is an obvious way.
    pub hint: Option<String>,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(d) = &self.details {
            write!(f, ": {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseError {}

/// Parse a whole query string, given as already percent-decoded `(key, value)` pairs.
///
/// Reserved keys: `select`, `order`, `limit`, `offset`, `columns`, `on_conflict`, `or`, `and`,
/// `not.or`, `not.and`; a repeated one replaces the earlier value (logic keys accumulate, like
/// filters). Every other key is a column filter, see [`parse_filter`].
pub fn parse_query<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Query, ParseError> {
    let mut q = Query::default();
    for (key, value) in pairs {
        match key {
            // an empty `select=` is every column, as PostgREST reads it
            "select" if value.trim().is_empty() => q.select = None,
            "select" => q.select = Some(parse_select(value)?),
            "order" => q.order = parse_order(value)?,
            "limit" => q.limit = Some(parse_count("limit", value)?),
            "offset" => q.offset = Some(parse_count("offset", value)?),
            "columns" => q.columns = Some(parse_columns_as("columns", value)?),
            "on_conflict" => q.on_conflict = Some(parse_columns_as("on_conflict", value)?),
            "or" | "and" | "not.or" | "not.and" => q.filters.push(parse_logic(key, value)?),
            _ => match embed_key(key) {
                Some((path, param)) => {
                    let embedded = q.embedded_mut(&path);
                    match param {
                        "order" => embedded.order = parse_order(value)?,
                        "limit" => embedded.limit = Some(parse_count("limit", value)?),
                        "offset" => embedded.offset = Some(parse_count("offset", value)?),
                        "or" | "and" | "not.or" | "not.and" => {
                            embedded.filters.push(parse_logic(param, value)?)
                        }
                        column => embedded.filters.push(parse_filter(column, value)?),
                    }
                }
                None => q.filters.push(parse_filter(key, value)?),
            },
        }
    }
    Ok(q)
}

/// Parse `select=`: a comma list of `*`, `col`, `alias:col`, `col::type`, `alias:col::type`, each
/// column optionally followed by a JSON path (`alias:data->a->>b::int`), and embedded resources
/// `alias:relation!hint!inner(items)` / `...relation(items)`, nested at most
/// [`MAX_EMBED_DEPTH`] deep.
pub fn parse_select(s: &str) -> Result<Vec<SelectItem>, ParseError> {
    let err = |f: Fail| {
        let depth = f.depth;
        let mut e = f.into_error(ParseErrorKind::Select, "select parameter", s);
        if depth {
            e.hint = Some(format!(
                "embedded resources may nest at most {MAX_EMBED_DEPTH} levels deep"
            ));
        }
        e
    };
    if s.trim().is_empty() {
        return Err(err(Fail::at(0, "empty select list")));
    }
    let mut cur = Cur::new(s);
    let items = select_list(&mut cur, 0).map_err(err)?;
    cur.skip_ws();
    match cur.peek() {
        None => Ok(items),
        Some(c) => Err(err(Fail::unexpected(c, cur.pos))),
    }
}

/// Embedded resources nest at most this deep (`a(b(c(…)))`).
pub const MAX_EMBED_DEPTH: usize = 16;

/// A comma list of select items, up to the end or the `)` closing an embed.
fn select_list(cur: &mut Cur<'_>, depth: usize) -> Result<Vec<SelectItem>, Fail> {
    let mut items = Vec::new();
    loop {
        cur.skip_ws();
        items.push(select_item(cur, depth)?);
        cur.skip_ws();
        if cur.peek() != Some(',') {
            return Ok(items);
        }
        let at = cur.pos;
        cur.bump();
        cur.skip_ws();
        if matches!(cur.peek(), None | Some(')')) {
            return Err(Fail::at(at, "trailing \",\""));
        }
    }
}

/// One select item: `*`, a column, or an embedded resource.
fn select_item(cur: &mut Cur<'_>, depth: usize) -> Result<SelectItem, Fail> {
    let spread = cur.eat_str("...");
    if !spread && cur.eat('*') {
        return Ok(SelectItem::Star);
    }
    let mut start = cur.pos;
    let first = parse_ident(cur)?;
    let mut written = &cur.s[start..cur.pos];
    cur.skip_ws();
    let (alias, name) = if !spread && cur.peek() == Some(':') && cur.peek2() != Some(':') {
        cur.bump();
        cur.skip_ws();
        start = cur.pos;
        let name = parse_ident(cur)?;
        written = &cur.s[start..cur.pos];
        cur.skip_ws();
        (Some(first), name)
    } else {
        (None, first)
    };
    // `count()` unquoted counts rows; `"count"()` embeds a relation of that name
    let count_rows = written.trim_end() == "count";
    if !spread && count_rows && cur.peek() == Some('(') && cur.peek2() == Some(')') {
        cur.bump();
        cur.bump();
        cur.skip_ws();
        let cast = parse_cast(cur)?;
        return Ok(SelectItem::CountRows { alias, cast });
    }
    if spread || matches!(cur.peek(), Some('(' | '!')) {
        return embed(cur, depth, name, alias, spread);
    }
    let path = parse_path(cur)?;
    cur.skip_ws();
    let cast = parse_cast(cur)?;
    let aggregate = parse_aggregate(cur)?;
    Ok(SelectItem::Column {
        name,
        path,
        alias,
        cast,
        aggregate,
    })
}

/// `::type` at the cursor, if there: the type, lower-cased.
fn parse_cast(cur: &mut Cur<'_>) -> Result<Option<String>, Fail> {
    if !cur.eat_str("::") {
        return Ok(None);
    }
    cur.skip_ws();
    let at = cur.pos;
    let t = cur.take_while(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ');
    let t = t.trim_end();
    if t.is_empty() {
        return Err(Fail::at(at, "expected a type name after \"::\""));
    }
    cur.skip_ws();
    Ok(Some(t.to_ascii_lowercase()))
}

/// `.sum()::type` at the cursor, if there: an aggregate function and the cast of its result.
fn parse_aggregate(cur: &mut Cur<'_>) -> Result<Option<Aggregate>, Fail> {
    let at = cur.pos;
    if !cur.eat('.') {
        return Ok(None);
    }
    let word = cur.take_while(|c| c.is_ascii_alphabetic());
    let function = AggregateFunction::ALL
        .into_iter()
        .find(|f| f.name() == word)
        .filter(|_| cur.eat_str("()"))
        .ok_or_else(|| {
            Fail::at(
                at,
                "expected an aggregate function after \".\": avg(), count(), max(), min() or sum()",
            )
        })?;
    cur.skip_ws();
    let cast = parse_cast(cur)?;
    Ok(Some(Aggregate { function, cast }))
}

/// The rest of an embedded resource after its name: `!hint`, `!inner` / `!left`, then its
/// parenthesized select list.
fn embed(
    cur: &mut Cur<'_>,
    depth: usize,
    relation: String,
    alias: Option<String>,
    spread: bool,
) -> Result<SelectItem, Fail> {
    let (mut hint, mut join) = (None, None);
    while cur.eat('!') {
        let at = cur.pos;
        // a join type is a bare word; a quoted "inner" is a hint naming something so called
        let bare = cur.peek() != Some('"');
        let word = parse_ident(cur)?;
        match word.as_str() {
            "inner" if bare && join.is_none() => join = Some(Join::Inner),
            "left" if bare && join.is_none() => join = Some(Join::Left),
            _ if hint.is_none() && join.is_none() => hint = Some(word),
            _ => {
                return Err(Fail::at(
                    at,
                    "an embed takes one hint, then !inner or !left",
                ))
            }
        }
        cur.skip_ws();
    }
    if !cur.eat('(') {
        return Err(match cur.peek() {
            Some(c) => Fail::at(
                cur.pos,
                format!(
                    "unexpected {} (an embedded resource's columns follow in parentheses)",
                    quote(c.encode_utf8(&mut [0; 4]))
                ),
            ),
            None => Fail::at(
                cur.pos,
                "expected \"(\" and the embedded resource's columns",
            ),
        });
    }
    if depth + 1 >= MAX_EMBED_DEPTH {
        return Err(Fail {
            depth: true,
            ..Fail::at(cur.pos, "embedded resources nest too deep")
        });
    }
    cur.skip_ws();
    let select = if cur.peek() == Some(')') {
        Vec::new()
    } else {
        select_list(cur, depth + 1)?
    };
    cur.skip_ws();
    if !cur.eat(')') {
        return Err(match cur.peek() {
            Some(c) => Fail::unexpected(c, cur.pos),
            None => Fail::at(cur.pos, "missing \")\""),
        });
    }
    Ok(SelectItem::Embed(Embed {
        relation,
        alias,
        hint,
        join,
        spread,
        select,
    }))
}

/// Splits a query key naming an embedded resource's parameter (`driver.points`,
/// `team.driver.order`, `driver.not.or`) into the embed path and the parameter; `None` for a
/// key without an unquoted `.` (a top-level parameter).
fn embed_key(key: &str) -> Option<(Vec<String>, &str)> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in key.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '.' if !quoted => {
                parts.push(&key[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&key[start..]);
    if parts.len() < 2 {
        return None;
    }
    let tail = if parts.len() >= 3 && parts[parts.len() - 2] == "not" {
        let at = key.len() - parts[parts.len() - 1].len() - "not.".len();
        parts.truncate(parts.len() - 2);
        &key[at..]
    } else {
        parts.pop().unwrap_or("")
    };
    let mut path = Vec::with_capacity(parts.len());
    for part in parts {
        let mut cur = Cur::new(part);
        let name = parse_ident(&mut cur).ok()?;
        if cur.peek().is_some() {
            return None;
        }
        path.push(name);
    }
    (!path.is_empty()).then_some((path, tail))
}

/// Parse one column filter: `column` is the query key (an identifier, possibly double-quoted),
/// `value` is `[not.]op[(any|all)].value`.
///
/// Operators: `eq neq gt gte lt lte like ilike match imatch in is isdistinct`. `in.(a,b,"c,d")`
/// takes a list; `is.` takes `null`, `not_null`, `true`, `false` or `unknown` (any case); the
/// quantified form `op(any).{a,b}` / `op(all).{a,b}` (for `eq like ilike match imatch gt gte lt
/// lte`) takes a braced list. Otherwise the value is everything after the first `op.`, verbatim.
pub fn parse_filter(column: &str, value: &str) -> Result<Condition, ParseError> {
    let (column, path) = parse_whole_field(column).map_err(|f| {
        let mut e = f.into_error(ParseErrorKind::Filter, "filter column", column);
        e.hint = Some("quote column names with special characters: \"my col\"".into());
        e
    })?;
    let mut cur = Cur::new(value);
    let pred = parse_op_value(&mut cur, column, path, false)
        .map_err(|f| f.into_error(ParseErrorKind::Filter, "filter", value))?;
    if let Some(c) = cur.peek() {
        return Err(Fail::unexpected(c, cur.pos).into_error(
            ParseErrorKind::Filter,
            "filter",
            value,
        ));
    }
    Ok(Condition::Pred(pred))
}

/// Parse a logic tree: `key` is `or`, `and`, `not.or` or `not.and`, `value` is a parenthesized
/// comma list of `col.[not.]op.value` items (`not.col.op.value` is accepted too) and nested `or(…)`, `and(…)`, `not.or(…)`,
/// `not.and(…)` groups, at most [`MAX_LOGIC_DEPTH`] deep.
pub fn parse_logic(key: &str, value: &str) -> Result<Condition, ParseError> {
    let (negated, is_or) = match key {
        "or" => (false, true),
        "and" => (false, false),
        "not.or" => (true, true),
        "not.and" => (true, false),
        _ => {
            return Err(ParseError {
                kind: ParseErrorKind::Logic,
                message: format!("unknown logic operator {}", quote(key)),
                details: None,
                hint: Some("use or, and, not.or or not.and".into()),
            })
        }
    };
    let mut cur = Cur::new(value);
    let items = parse_group(&mut cur, 1)
        .and_then(|items| {
            cur.skip_ws();
            match cur.peek() {
                None => Ok(items),
                Some(c) => Err(Fail::unexpected(c, cur.pos)),
            }
        })
        .map_err(|f| {
            let depth = f.depth;
            let mut e = f.into_error(ParseErrorKind::Logic, "logic tree", value);
            if depth {
                e.hint = Some(format!(
                    "logic trees may nest at most {MAX_LOGIC_DEPTH} levels deep"
                ));
            }
            e
        })?;
    Ok(if is_or {
        Condition::Or { negated, items }
    } else {
        Condition::And { negated, items }
    })
}

/// Parse `order=`: a comma list of `col[.asc|.desc][.nullsfirst|.nullslast]`, where `col` may be
/// `rel(col)`: a column of an embedded to-one resource.
pub fn parse_order(s: &str) -> Result<Vec<OrderTerm>, ParseError> {
    let err = |f: Fail| f.into_error(ParseErrorKind::Order, "order", s);
    if s.trim().is_empty() {
        return Err(err(Fail::at(0, "empty order list")));
    }
    let mut cur = Cur::new(s);
    let mut terms = Vec::new();
    loop {
        cur.skip_ws();
        let first = parse_ident(&mut cur).map_err(err)?;
        let (relation, column) = if cur.eat('(') {
            cur.skip_ws();
            let column = parse_ident(&mut cur).map_err(err)?;
            (Some(first), column)
        } else {
            (None, first)
        };
        let path = parse_path(&mut cur).map_err(err)?;
        cur.skip_ws();
        if relation.is_some() && !cur.eat(')') {
            return Err(err(match cur.peek() {
                Some(c) => Fail::unexpected(c, cur.pos),
                None => Fail::at(cur.pos, "missing \")\""),
            }));
        }
        cur.skip_ws();
        let mut direction = None;
        let mut nulls = None;
        if cur.eat('.') {
            let at = cur.pos;
            match cur.take_while(|c| c.is_ascii_alphanumeric() || c == '_') {
                "asc" => direction = Some(Direction::Asc),
                "desc" => direction = Some(Direction::Desc),
                "nullsfirst" => nulls = Some(Nulls::First),
                "nullslast" => nulls = Some(Nulls::Last),
                w => return Err(err(order_modifier_error(w, at))),
            }
            if direction.is_some() && cur.eat('.') {
                let at = cur.pos;
                match cur.take_while(|c| c.is_ascii_alphanumeric() || c == '_') {
                    "nullsfirst" => nulls = Some(Nulls::First),
                    "nullslast" => nulls = Some(Nulls::Last),
                    w => return Err(err(order_modifier_error(w, at))),
                }
            }
        }
        terms.push(OrderTerm {
            relation,
            column,
            path,
            direction,
            nulls,
        });
        cur.skip_ws();
        match cur.peek() {
            None => break,
            Some(',') => {
                cur.bump();
            }
            Some(c) => return Err(err(Fail::unexpected(c, cur.pos))),
        }
    }
    Ok(terms)
}

/// Parse a comma list of identifiers (`columns=` and `on_conflict=`).
pub fn parse_columns(s: &str) -> Result<Vec<String>, ParseError> {
    parse_columns_as("columns", s)
}

fn parse_columns_as(param: &str, s: &str) -> Result<Vec<String>, ParseError> {
    let what = format!("{param} parameter");
    let err = |f: Fail| f.into_error(ParseErrorKind::Columns, &what, s);
    if s.trim().is_empty() {
        return Err(err(Fail::at(0, "empty column list")));
    }
    let mut cur = Cur::new(s);
    let mut cols = Vec::new();
    loop {
        cur.skip_ws();
        cols.push(parse_ident(&mut cur).map_err(err)?);
        cur.skip_ws();
        match cur.peek() {
            None => break,
            Some(',') => {
                cur.bump();
            }
            Some(c) => return Err(err(Fail::unexpected(c, cur.pos))),
        }
    }
    Ok(cols)
}

fn parse_count(param: &str, s: &str) -> Result<u64, ParseError> {
    let bad = |why: &str| ParseError {
        kind: ParseErrorKind::Limit,
        message: format!("failed to parse {param} parameter ({})", clip(s)),
        details: Some(format!("{param} {why}, got {}", quote(s))),
        hint: None,
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    // as PostgREST: a negative offset is no offset, a negative limit a range nothing satisfies
    match s.strip_prefix('-').filter(|n| digits(n)) {
        Some(_) if param == "offset" => return Ok(0),
        Some(_) => {
            return Err(ParseError {
                kind: ParseErrorKind::NegativeLimit,
                message: "Requested range not satisfiable".to_string(),
                details: Some("Limit should be greater than or equal to zero.".to_string()),
                hint: None,
            })
        }
        None => {}
    }
    if !digits(s) {
        return Err(bad("must be a non-negative integer"));
    }
    s.parse::<u64>().map_err(|_| bad("is too large"))
}

// ---------------------------------------------------------------------------------------------
// Errors

/// An internal failure: byte position in the parsed text and what went wrong there.
struct Fail {
    pos: usize,
    msg: String,
    /// The depth limit was hit.
    depth: bool,
}

impl Fail {
    fn at(pos: usize, msg: impl Into<String>) -> Self {
        Fail {
            pos,
            msg: msg.into(),
            depth: false,
        }
    }

    fn unexpected(c: char, pos: usize) -> Self {
        Fail::at(
            pos,
            format!("unexpected {}", quote(c.encode_utf8(&mut [0; 4]))),
        )
    }

    fn into_error(self, kind: ParseErrorKind, what: &str, input: &str) -> ParseError {
        let char_pos = input.get(..self.pos).map_or(0, |p| p.chars().count()) + 1;
        ParseError {
            kind,
            message: format!("failed to parse {what} ({})", clip(input)),
            details: Some(format!(
                "{} at position {char_pos} in {}",
                self.msg,
                quote(input)
            )),
            hint: None,
        }
    }
}

fn order_modifier_error(w: &str, at: usize) -> Fail {
    if w.is_empty() {
        Fail::at(
            at,
            "expected asc, desc, nullsfirst or nullslast after \".\"",
        )
    } else {
        Fail::at(
            at,
            format!(
                "unknown order modifier {} (expected asc, desc, nullsfirst or nullslast)",
                quote(w)
            ),
        )
    }
}

/// Clip `s` to [`MAX_QUOTED`] characters.
fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_QUOTED) {
        Some((i, _)) => format!("{}…", s.get(..i).unwrap_or("")),
        None => s.to_owned(),
    }
}

/// `"s"`, clipped, with `"` and `\` escaped.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in clip(s).chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------------------------
// Cursor

/// A position in a string, always on a char boundary.
struct Cur<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cur<'a> {
    fn new(s: &'a str) -> Self {
        Cur { s, pos: 0 }
    }

    fn rest(&self) -> &'a str {
        self.s.get(self.pos..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek2(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn starts_with(&self, t: &str) -> bool {
        self.rest().starts_with(t)
    }

    fn eat_str(&mut self, t: &str) -> bool {
        if self.starts_with(t) {
            self.pos += t.len();
            true
        } else {
            false
        }
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let rest = self.rest();
        let n = rest.find(|c: char| !f(c)).unwrap_or(rest.len());
        self.pos += n;
        rest.get(..n).unwrap_or("")
    }

    fn skip_ws(&mut self) {
        self.take_while(char::is_whitespace);
    }
}

// ---------------------------------------------------------------------------------------------
// Identifiers

/// Characters allowed in an unquoted identifier (besides inner spaces).
pub(crate) fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// An identifier at the cursor: `"quoted"` or unquoted (trailing spaces are consumed and dropped).
fn parse_ident(cur: &mut Cur<'_>) -> Result<String, Fail> {
    let start = cur.pos;
    match cur.peek() {
        Some('"') => {
            cur.bump();
            let mut out = String::new();
            loop {
                match cur.bump() {
                    None => return Err(Fail::at(start, "unterminated quoted identifier")),
                    Some('\\') => match cur.bump() {
                        None => return Err(Fail::at(start, "unterminated quoted identifier")),
                        Some(c) => out.push(c),
                    },
                    Some('"') => {
                        if cur.eat('"') {
                            out.push('"');
                        } else {
                            break;
                        }
                    }
                    Some(c) => out.push(c),
                }
            }
            if out.is_empty() {
                return Err(Fail::at(start, "empty quoted identifier"));
            }
            Ok(out)
        }
        Some(c) if is_ident_char(c) => {
            // words joined by dashes that do not start an arrow (`field-with_sep`, as
            // PostgREST reads names)
            let mut name = String::new();
            loop {
                name.push_str(cur.take_while(|c| is_ident_char(c) || c == ' '));
                if cur.peek() == Some('-') && cur.peek2().is_some_and(is_ident_char) {
                    cur.bump();
                    name.push('-');
                } else {
                    break;
                }
            }
            Ok(name.trim_end().to_owned())
        }
        Some(c) => Err(Fail::at(
            start,
            format!(
                "expected a column name, found {}",
                quote(c.encode_utf8(&mut [0; 4]))
            ),
        )),
        None => Err(Fail::at(start, "expected a column name, found the end")),
    }
}

/// A string that must be exactly one identifier with an optional JSON path (surrounding
/// whitespace allowed): a filter's key.
fn parse_whole_field(s: &str) -> Result<(String, Vec<JsonStep>), Fail> {
    let mut cur = Cur::new(s);
    cur.skip_ws();
    let name = parse_ident(&mut cur)?;
    let path = parse_path(&mut cur)?;
    cur.skip_ws();
    match cur.peek() {
        None => Ok((name, path)),
        Some(c) => Err(Fail::unexpected(c, cur.pos)),
    }
}

/// A JSON path at the cursor (possibly empty): `->key`, `->>key`, `->0`, `->-1`, repeated, with
/// `->>` only as the last step. A quoted key is always a field name.
fn parse_path(cur: &mut Cur<'_>) -> Result<Vec<JsonStep>, Fail> {
    let mut path = Vec::new();
    loop {
        let at = cur.pos;
        let as_text = if cur.eat_str("->>") {
            true
        } else if cur.eat_str("->") {
            false
        } else {
            return Ok(path);
        };
        if path.last().is_some_and(|s: &JsonStep| s.as_text) {
            return Err(Fail::at(
                at,
                "\"->>\" (as text) must be the last step of a JSON path",
            ));
        }
        let key_at = cur.pos;
        let key = if cur.peek() == Some('"') {
            JsonKey::Field(parse_ident(cur)?)
        } else if let Some(text) = index_at(cur) {
            JsonKey::Index(text.parse().map_err(|_| {
                Fail::at(
                    key_at,
                    format!("array index {} is out of range", quote(text)),
                )
            })?)
        } else if cur.peek() == Some('-') {
            return Err(Fail::at(key_at, "expected an array index after \"->-\""));
        } else {
            JsonKey::Field(json_key(cur, key_at)?)
        };
        path.push(JsonStep {
            key,
            as_text,
            to_json: false,
        });
    }
}

/// An array index at the cursor (`[-]digits` ending the step: before `->`, `::`, `.`, `,`,
/// `)` or the end), consumed; else nothing is consumed.
fn index_at<'a>(cur: &mut Cur<'a>) -> Option<&'a str> {
    let rest = cur.rest();
    let digits = rest.strip_prefix('-').unwrap_or(rest);
    let n = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let after = &digits[n..];
    let ends = after.is_empty()
        || ["->", "::", ".", ",", ")"]
            .iter()
            .any(|e| after.starts_with(e));
    if n == 0 || !ends {
        return None;
    }
    let len = rest.len() - after.len();
    cur.pos += len;
    Some(&rest[..len])
}

/// A JSON key at the cursor, as PostgREST reads one: any characters but `(-:.,>)`, trimmed,
/// in parts joined by dashes that do not start an arrow (`23-xy-45`, `!@#$%^&*_a`).
fn json_key(cur: &mut Cur<'_>, key_at: usize) -> Result<String, Fail> {
    let mut key = String::new();
    loop {
        let part = cur.take_while(|c| !"(-:.,>)".contains(c)).trim();
        if part.is_empty() {
            return Err(Fail::at(
                key_at,
                "expected a key or an array index after \"->\"",
            ));
        }
        key.push_str(part);
        if cur.peek() == Some('-') && cur.peek2() != Some('>') {
            cur.bump();
            key.push('-');
        } else {
            return Ok(key);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Filters

fn operator(name: &str) -> Option<Operator> {
    Some(match name {
        "eq" => Operator::Eq,
        "neq" => Operator::Neq,
        "gt" => Operator::Gt,
        "gte" => Operator::Gte,
        "lt" => Operator::Lt,
        "lte" => Operator::Lte,
        "like" => Operator::Like,
        "ilike" => Operator::Ilike,
        "match" => Operator::Match,
        "imatch" => Operator::Imatch,
        "in" => Operator::In,
        "is" => Operator::Is,
        "isdistinct" => Operator::IsDistinct,
        "cs" => Operator::Contains,
        "cd" => Operator::ContainedIn,
        "ov" => Operator::Overlaps,
        "sl" => Operator::StrictlyLeft,
        "sr" => Operator::StrictlyRight,
        "nxr" => Operator::NotExtendsRight,
        "nxl" => Operator::NotExtendsLeft,
        "adj" => Operator::Adjacent,
        "fts" => Operator::Fts,
        "plfts" => Operator::Plfts,
        "phfts" => Operator::Phfts,
        "wfts" => Operator::Wfts,
        _ => return None,
    })
}

fn quantifiable(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::Like
            | Operator::Ilike
            | Operator::Match
            | Operator::Imatch
            | Operator::Gt
            | Operator::Gte
            | Operator::Lt
            | Operator::Lte
    )
}

fn is_value(s: &str) -> Option<IsValue> {
    Some(match s.to_ascii_lowercase().as_str() {
        "null" => IsValue::Null,
        "not_null" => IsValue::NotNull,
        "true" => IsValue::True,
        "false" => IsValue::False,
        "unknown" => IsValue::Unknown,
        _ => return None,
    })
}

/// `[not.]op[(any|all)].value` at the cursor. At top level (`in_logic == false`) a scalar value is
/// the rest of the input; inside a logic tree it ends at `,` or `)` unless quoted.
fn parse_op_value(
    cur: &mut Cur<'_>,
    column: String,
    path: Vec<JsonStep>,
    in_logic: bool,
) -> Result<Predicate, Fail> {
    let negated = cur.eat_str("not.");
    let op_at = cur.pos;
    let name = cur.take_while(|c| c.is_ascii_alphanumeric() || c == '_');
    if name.is_empty() {
        return Err(match cur.peek() {
            None => Fail::at(op_at, "missing operator"),
            Some(c) => Fail::at(
                op_at,
                format!(
                    "expected an operator, found {}",
                    quote(c.encode_utf8(&mut [0; 4]))
                ),
            ),
        });
    }
    let Some(op) = operator(name) else {
        return Err(Fail::at(
            op_at,
            format!(
                "operator {} is unknown (supported: eq, neq, gt, gte, lt, lte, like, ilike, match, imatch, in, is, isdistinct, cs, cd, ov, sl, sr, nxr, nxl, adj, fts, plfts, phfts, wfts)",
                quote(name)
            ),
        ));
    };
    let mut language = None;
    if op.is_full_text() && cur.peek() == Some('(') {
        let at = cur.pos;
        cur.bump();
        let lang = cur.take_while(|c| c.is_ascii_alphanumeric() || c == '_');
        if lang.is_empty() || !cur.eat(')') {
            return Err(Fail::at(
                at,
                format!("expected a text search language in parentheses: {name}(english)"),
            ));
        }
        language = Some(lang.to_owned());
    }
    let quantifier = if language.is_none() && cur.peek() == Some('(') {
        let q_at = cur.pos;
        cur.bump();
        let q = match cur.take_while(|c| c.is_ascii_alphanumeric() || c == '_') {
            "any" => Quantifier::Any,
            "all" => Quantifier::All,
            other => {
                return Err(Fail::at(
                    q_at,
                    format!("unknown quantifier {} (expected any or all)", quote(other)),
                ))
            }
        };
        if !cur.eat(')') {
            return Err(Fail::at(cur.pos, "expected \")\" after the quantifier"));
        }
        if !quantifiable(op) {
            return Err(Fail::at(
                q_at,
                format!("operator {} does not take (any) or (all)", quote(name)),
            ));
        }
        Some(q)
    } else {
        None
    };
    if !cur.eat('.') {
        return Err(match cur.peek() {
            None => Fail::at(
                cur.pos,
                format!("missing \".\" and value after {}", quote(name)),
            ),
            Some(c) => Fail::at(
                cur.pos,
                format!(
                    "expected \".\" after the operator, found {}",
                    quote(c.encode_utf8(&mut [0; 4]))
                ),
            ),
        });
    }
    let operand = if op == Operator::In {
        if cur.peek() != Some('(') {
            return Err(Fail::at(
                cur.pos,
                "in. expects a parenthesized list: in.(a,b)",
            ));
        }
        Operand::List(parse_list(cur, '(', ')')?)
    } else if op == Operator::Is {
        let at = cur.pos;
        let raw = if in_logic {
            cur.take_while(|c| c != ',' && c != ')')
        } else {
            cur.take_while(|_| true)
        };
        match is_value(raw) {
            Some(v) => Operand::Is(v),
            None => {
                return Err(Fail::at(
                    at,
                    format!(
                        "unknown is value {} (expected null, not_null, true, false or unknown)",
                        quote(raw)
                    ),
                ))
            }
        }
    } else if quantifier.is_some() {
        if cur.peek() != Some('{') {
            return Err(Fail::at(
                cur.pos,
                "(any)/(all) expect a braced list: eq(any).{a,b}",
            ));
        }
        Operand::List(parse_list(cur, '{', '}')?)
    } else if in_logic {
        Operand::Scalar(parse_logic_scalar(cur, op.postgres_only()))
    } else {
        Operand::Scalar(cur.take_while(|_| true).to_owned())
    };
    Ok(Predicate {
        path,
        negated,
        quantifier,
        language,
        ..Predicate::new(column, op, operand)
    })
}

/// A double-quoted string at the cursor (backslash escapes). `None`, cursor unchanged, when the
/// quote is not terminated.
fn quoted_value(cur: &mut Cur<'_>) -> Option<String> {
    let save = cur.pos;
    if !cur.eat('"') {
        return None;
    }
    let mut out = String::new();
    loop {
        match cur.bump() {
            None => {
                cur.pos = save;
                return None;
            }
            Some('\\') => match cur.bump() {
                None => {
                    cur.pos = save;
                    return None;
                }
                Some(c) => out.push(c),
            },
            Some('"') => return Some(out),
            Some(c) => out.push(c),
        }
    }
}

/// One list element ending before `,` or `close`: a quoted string followed by one of them, or
/// the raw text up to one of them.
fn list_element(cur: &mut Cur<'_>, close: char) -> String {
    let save = cur.pos;
    if let Some(v) = quoted_value(cur) {
        if matches!(cur.peek(), Some(c) if c == ',' || c == close) {
            return v;
        }
        cur.pos = save;
    }
    cur.take_while(|c| c != ',' && c != close).to_owned()
}

/// `(a,b)` or `{a,b}` at the cursor, spaces after the opening bracket skipped (as PostgREST
/// reads `in.( 1,2)`); `()`, or only spaces between, is the empty list.
fn parse_list(cur: &mut Cur<'_>, open: char, close: char) -> Result<Vec<String>, Fail> {
    let start = cur.pos;
    if !cur.eat(open) {
        return Err(Fail::at(start, format!("expected \"{open}\"")));
    }
    let mut items = Vec::new();
    cur.skip_ws();
    if cur.eat(close) {
        return Ok(items);
    }
    loop {
        items.push(list_element(cur, close));
        match cur.bump() {
            Some(',') => {}
            Some(c) if c == close => return Ok(items),
            _ => {
                return Err(Fail::at(
                    start,
                    format!("unterminated list: missing \"{close}\""),
                ))
            }
        }
    }
}

/// A scalar value inside a logic tree: quoted (then followed by `,` or `)`), a `{…}` array
/// literal, for a range operator (`ranges`) a `[a,b)`-style range literal, or raw text up to `,`
/// or `)`.
fn parse_logic_scalar(cur: &mut Cur<'_>, ranges: bool) -> String {
    let save = cur.pos;
    if let Some(v) = quoted_value(cur) {
        if matches!(cur.peek(), Some(',' | ')')) {
            return v;
        }
        cur.pos = save;
    }
    if cur.peek() == Some('{') {
        // PostgREST's array literal: `{` then anything but braces then `}`
        let rest = cur.rest();
        let after = rest.get(1..).unwrap_or("");
        if let Some(end) = after.find(['{', '}']) {
            if after.get(end..).is_some_and(|r| r.starts_with('}')) {
                let v = rest.get(..end + 2).unwrap_or("").to_owned();
                cur.pos += end + 2;
                return v;
            }
        }
    }
    if ranges && matches!(cur.peek(), Some('[' | '(')) {
        let rest = cur.rest();
        if let Some(end) = rest.get(1..).and_then(|r| r.find([']', ')'])) {
            let v = rest.get(..end + 2).unwrap_or("").to_owned();
            cur.pos += end + 2;
            return v;
        }
    }
    cur.take_while(|c| c != ',' && c != ')').to_owned()
}

/// `( item, item, … )` at the cursor, `depth` being this group's nesting level (1 for the value of
/// `or=`).
fn parse_group(cur: &mut Cur<'_>, depth: usize) -> Result<Vec<Condition>, Fail> {
    if depth > MAX_LOGIC_DEPTH {
        let mut f = Fail::at(
            cur.pos,
            format!("logic tree nested deeper than {MAX_LOGIC_DEPTH} levels"),
        );
        f.depth = true;
        return Err(f);
    }
    cur.skip_ws();
    let start = cur.pos;
    if !cur.eat('(') {
        return Err(match cur.peek() {
            None => Fail::at(start, "expected \"(\", found the end"),
            Some(c) => Fail::at(
                start,
                format!(
                    "expected \"(\", found {}",
                    quote(c.encode_utf8(&mut [0; 4]))
                ),
            ),
        });
    }
    cur.skip_ws();
    if cur.peek() == Some(')') {
        return Err(Fail::at(start, "empty logic group"));
    }
    let mut items = Vec::new();
    loop {
        cur.skip_ws();
        items.push(parse_logic_item(cur, depth)?);
        cur.skip_ws();
        match cur.bump() {
            Some(',') => {}
            Some(')') => return Ok(items),
            None => return Err(Fail::at(start, "unbalanced parentheses: missing \")\"")),
            Some(c) => return Err(Fail::unexpected(c, cur.pos - c.len_utf8())),
        }
    }
}

fn parse_logic_item(cur: &mut Cur<'_>, depth: usize) -> Result<Condition, Fail> {
    for (prefix, negated, is_or) in [
        ("or", false, true),
        ("and", false, false),
        ("not.or", true, true),
        ("not.and", true, false),
    ] {
        // the word, then the group (spaces between allowed, as PostgREST)
        let after = cur.rest().strip_prefix(prefix).map(str::trim_start);
        if after.is_some_and(|a| a.starts_with('(')) {
            cur.pos += prefix.len();
            let items = parse_group(cur, depth + 1)?;
            return Ok(if is_or {
                Condition::Or { negated, items }
            } else {
                Condition::And { negated, items }
            });
        }
    }
    let start = cur.pos;
    match parse_logic_pred(cur) {
        Ok(p) => Ok(Condition::Pred(p)),
        Err(first) => {
            // Leniency: `not.col.op.value` for `col.not.op.value` (tried only when the standard
            // reading, a column named `not`, fails).
            cur.pos = start;
            if cur.eat_str("not.") {
                if let Ok(mut p) = parse_logic_pred(cur) {
                    p.negated = !p.negated;
                    return Ok(Condition::Pred(p));
                }
            }
            Err(first)
        }
    }
}

/// `col.[not.]op.value` inside a logic tree.
fn parse_logic_pred(cur: &mut Cur<'_>) -> Result<Predicate, Fail> {
    let column = parse_ident(cur)?;
    let path = parse_path(cur)?;
    cur.skip_ws();
    if !cur.eat('.') {
        return Err(match cur.peek() {
            None => Fail::at(
                cur.pos,
                "expected \".\" after the column name, found the end",
            ),
            Some(c) => Fail::at(
                cur.pos,
                format!(
                    "expected \".\" after the column name, found {}",
                    quote(c.encode_utf8(&mut [0; 4]))
                ),
            ),
        });
    }
    parse_op_value(cur, column, path, true)
}
