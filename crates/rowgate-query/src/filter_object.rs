//! ORDS's filter objects (`q=` on an AutoREST resource) parsed into the same filter tree as the
//! PostgREST syntax: a JSON object whose members are ANDed — `{"ename":"KING"}` (equality),
//! `{"sal":{"$gt":1000,"$lt":3000}}` (operators), `{"$or":[{…},{…}]}` — with `$orderby`
//! (`{"$orderby":{"sal":"DESC","ename":"ASC"}}`, members in priority order).
//!
//! Operators: `$eq $ne $lt $lte $gt $gte` (a string, number or `{"$date":"…"}`), `$instr`
//! `$ninstr` (substring, case-sensitive: a `match` on the escaped text), `$like` (SQL `LIKE`,
//! `%` and `_`), `$null` `$notnull`, `$between` (`[low, high]`, either end `null` for open),
//! `$in` `$nin` (arrays), and `$and` `$or` (arrays of objects). Column names are kept as
//! written: the caller resolves them against the schema (ORDS matches them regardless of case).

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value as Json};

use crate::ast::{Condition, Direction, IsValue, Operand, Operator, OrderTerm, Predicate};
use crate::parse::{ParseError, ParseErrorKind};

/// A parsed `q=`: the conditions (ANDed) and the order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FilterObject {
    /// The conditions, ANDed.
    pub filters: Vec<Condition>,
    /// `$orderby`, in priority order.
    pub order: Vec<OrderTerm>,
}

/// Nesting deeper than this is refused (the PostgREST parser's limits apply after, too).
const MAX_DEPTH: usize = 32;

/// Parses a filter object's JSON text.
pub fn parse_filter_object(text: &str) -> Result<FilterObject, ParseError> {
    let members: Ordered =
        serde_json::from_str(text).map_err(|e| invalid(format!("q is not a JSON object: {e}")))?;
    let mut out = FilterObject::default();
    for (key, raw) in members.0 {
        if key.eq_ignore_ascii_case("$orderby") {
            let terms: Ordered = serde_json::from_str(raw.get())
                .map_err(|_| invalid("$orderby must be an object of column: \"ASC\"|\"DESC\""))?;
            for (column, direction) in terms.0 {
                out.order.push(order_term(column, raw_json(&direction)?)?);
            }
        } else if key.eq_ignore_ascii_case("$asof") {
            return Err(invalid(
                "$asof is not supported: the database keeps no history to read as of a time",
            ));
        } else {
            out.filters.extend(member(&key, &raw_json(&raw)?, 0)?);
        }
    }
    Ok(out)
}

/// A JSON object's members in the order written.
struct Ordered(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Members)
    }
}

fn raw_json(raw: &RawValue) -> Result<Json, ParseError> {
    serde_json::from_str(raw.get()).map_err(|e| invalid(e.to_string()))
}

fn invalid(message: impl Into<String>) -> ParseError {
    ParseError {
        kind: ParseErrorKind::Filter,
        message: message.into(),
        details: None,
        hint: Some(
            "q is a filter object: {\"col\":value}, {\"col\":{\"$gt\":1}}, {\"$or\":[…]}, {\"$orderby\":{\"col\":\"ASC\"}}"
                .into(),
        ),
    }
}

/// One member of a filter object: a column with its value or operators, or `$and`/`$or`.
fn member(key: &str, value: &Json, depth: usize) -> Result<Vec<Condition>, ParseError> {
    if depth > MAX_DEPTH {
        return Err(invalid("the filter object is nested too deeply"));
    }
    let lower = key.to_ascii_lowercase();
    match lower.as_str() {
        "$and" | "$or" => {
            let items = match value {
                Json::Array(items) => items
                    .iter()
                    .map(|item| object(item, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .map(and)
                    .collect(),
                Json::Object(_) => vec![and(object(value, depth + 1)?)],
                _ => return Err(invalid(format!("{key} takes an array of objects"))),
            };
            Ok(vec![group(lower == "$and", items)])
        }
        _ if key.starts_with('$') => Err(invalid(format!(
            "{key} is not an operator here: a filter object's members are columns, $and, $or and $orderby"
        ))),
        _ => column(key, value, depth),
    }
}

/// The conditions of an object's members, ANDed.
fn object(value: &Json, depth: usize) -> Result<Vec<Condition>, ParseError> {
    let Json::Object(map) = value else {
        return Err(invalid("a filter object was expected"));
    };
    let mut out = Vec::new();
    for (k, v) in map {
        out.extend(member(k, v, depth)?);
    }
    Ok(out)
}

/// `$and` (all) or `$or` of `items`.
fn group(all: bool, items: Vec<Condition>) -> Condition {
    if all {
        Condition::And {
            negated: false,
            items,
        }
    } else {
        Condition::Or {
            negated: false,
            items,
        }
    }
}

fn and(mut items: Vec<Condition>) -> Condition {
    if items.len() == 1 {
        items.remove(0)
    } else {
        group(true, items)
    }
}

/// The conditions on one column: a plain value is equality (`null`: is null), an object holds
/// operators (ANDed), an array holds operator objects (ANDed).
fn column(name: &str, value: &Json, depth: usize) -> Result<Vec<Condition>, ParseError> {
    match value {
        Json::Object(ops) if !is_date(ops) => {
            let mut out = Vec::with_capacity(ops.len());
            for (op, operand) in ops {
                out.push(operator(name, op, operand, depth)?);
            }
            if out.is_empty() {
                return Err(invalid(format!("{name}: an empty operator object")));
            }
            Ok(out)
        }
        Json::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(column(name, item, depth + 1)?);
            }
            Ok(out)
        }
        Json::Null => Ok(vec![is(name, IsValue::Null, false)]),
        scalar => Ok(vec![pred(
            name,
            Operator::Eq,
            false,
            Operand::Scalar(text(name, scalar)?),
        )]),
    }
}

/// `{"$date":"…"}`
fn is_date(map: &Map<String, Json>) -> bool {
    map.len() == 1 && map.contains_key("$date")
}

/// One operator on a column.
fn operator(name: &str, op: &str, operand: &Json, depth: usize) -> Result<Condition, ParseError> {
    let scalar = |operator: Operator, negated: bool| -> Result<Condition, ParseError> {
        Ok(pred(
            name,
            operator,
            negated,
            Operand::Scalar(text(name, operand)?),
        ))
    };
    match op.to_ascii_lowercase().as_str() {
        "$eq" if operand.is_null() => Ok(is(name, IsValue::Null, false)),
        "$ne" if operand.is_null() => Ok(is(name, IsValue::Null, true)),
        "$eq" => scalar(Operator::Eq, false),
        "$ne" => scalar(Operator::Neq, false),
        "$lt" => scalar(Operator::Lt, false),
        "$lte" => scalar(Operator::Lte, false),
        "$gt" => scalar(Operator::Gt, false),
        "$gte" => scalar(Operator::Gte, false),
        "$like" => scalar(Operator::Like, false),
        "$instr" | "$ninstr" => {
            let needle = regex::escape(&text(name, operand)?);
            Ok(pred(
                name,
                Operator::Match,
                op.eq_ignore_ascii_case("$ninstr"),
                Operand::Scalar(needle),
            ))
        }
        "$null" => Ok(is(name, IsValue::Null, false)),
        "$notnull" => Ok(is(name, IsValue::Null, true)),
        "$between" => {
            let Json::Array(ends) = operand else {
                return Err(invalid(format!("{name}: $between takes [low, high]")));
            };
            let [low, high] = ends.as_slice() else {
                return Err(invalid(format!("{name}: $between takes [low, high]")));
            };
            let mut items = Vec::with_capacity(2);
            if !low.is_null() {
                items.push(pred(
                    name,
                    Operator::Gte,
                    false,
                    Operand::Scalar(text(name, low)?),
                ));
            }
            if !high.is_null() {
                items.push(pred(
                    name,
                    Operator::Lte,
                    false,
                    Operand::Scalar(text(name, high)?),
                ));
            }
            if items.is_empty() {
                return Err(invalid(format!("{name}: $between needs at least one end")));
            }
            Ok(and(items))
        }
        "$in" | "$nin" => {
            let Json::Array(values) = operand else {
                return Err(invalid(format!("{name}: {op} takes an array of values")));
            };
            let list = values
                .iter()
                .map(|v| text(name, v))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(pred(
                name,
                Operator::In,
                op.eq_ignore_ascii_case("$nin"),
                Operand::List(list),
            ))
        }
        "$and" | "$or" => {
            // `{"sal":{"$or":[{"$lt":1000},{"$gt":3000}]}}`: operator objects on this column
            let Json::Array(items) = operand else {
                return Err(invalid(format!(
                    "{name}: {op} takes an array of operator objects"
                )));
            };
            let items = items
                .iter()
                .map(|item| column(name, item, depth + 1).map(and))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(group(op.eq_ignore_ascii_case("$and"), items))
        }
        _ => Err(invalid(format!("{name}: unknown operator {op}"))),
    }
}

/// A value as the filter's text: strings as they are, numbers and booleans as JSON writes them,
/// `{"$date":"…"}` as its text.
fn text(name: &str, value: &Json) -> Result<String, ParseError> {
    match value {
        Json::String(s) => Ok(s.clone()),
        Json::Number(n) => Ok(n.to_string()),
        Json::Bool(b) => Ok(b.to_string()),
        Json::Object(map) if is_date(map) => match &map["$date"] {
            Json::String(s) => Ok(s.clone()),
            _ => Err(invalid(format!("{name}: $date takes an ISO 8601 string"))),
        },
        _ => Err(invalid(format!(
            "{name}: a string, number or {{\"$date\":\"…\"}} was expected"
        ))),
    }
}

fn pred(column: &str, op: Operator, negated: bool, operand: Operand) -> Condition {
    Condition::Pred(Predicate {
        negated,
        ..Predicate::new(column, op, operand)
    })
}

fn is(column: &str, value: IsValue, negated: bool) -> Condition {
    pred(column, Operator::Is, negated, Operand::Is(value))
}

/// `"col": "ASC" | "DESC" | 1 | -1 | "1" | "-1"`.
fn order_term(column: String, direction: Json) -> Result<OrderTerm, ParseError> {
    let direction = match &direction {
        Json::String(s) if s.eq_ignore_ascii_case("asc") || s == "1" => Direction::Asc,
        Json::String(s) if s.eq_ignore_ascii_case("desc") || s == "-1" => Direction::Desc,
        Json::Number(n) if n.as_i64() == Some(1) => Direction::Asc,
        Json::Number(n) if n.as_i64() == Some(-1) => Direction::Desc,
        _ => {
            return Err(invalid(format!(
                "$orderby: {column} must be \"ASC\" or \"DESC\" (or 1, -1)"
            )))
        }
    };
    Ok(OrderTerm {
        relation: None,
        column,
        path: Vec::new(),
        direction: Some(direction),
        nulls: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filters(text: &str) -> String {
        let parsed = parse_filter_object(text).expect(text);
        parsed
            .filters
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join("&")
    }

    /// Each form of ORDS's grammar becomes the PostgREST condition it means.
    #[test]
    fn filter_objects_become_conditions() {
        for (q, expected) in [
            (r#"{"ename":"KING"}"#, "ename.eq.KING"),
            (r#"{"sal":1000}"#, "sal.eq.1000"),
            (r#"{"comm":null}"#, "comm.is.null"),
            (
                r#"{"sal":{"$gt":1000,"$lte":3000}}"#,
                "sal.gt.1000&sal.lte.3000",
            ),
            (r#"{"ename":{"$ne":"KING"}}"#, "ename.neq.KING"),
            (r#"{"ename":{"$like":"S%"}}"#, "ename.like.S%"),
            (r#"{"ename":{"$instr":"a.b"}}"#, r#"ename.match."a\\.b""#),
            (r#"{"ename":{"$ninstr":"x"}}"#, "ename.not.match.x"),
            (r#"{"comm":{"$null":null}}"#, "comm.is.null"),
            (r#"{"comm":{"$notnull":null}}"#, "comm.not.is.null"),
            (
                r#"{"sal":{"$between":[1000,2000]}}"#,
                "and(sal.gte.1000,sal.lte.2000)",
            ),
            (r#"{"sal":{"$between":[null,2000]}}"#, "sal.lte.2000"),
            (r#"{"deptno":{"$in":[10,20]}}"#, "deptno.in.(10,20)"),
            (r#"{"deptno":{"$nin":[10]}}"#, "deptno.not.in.(10)"),
            (
                r#"{"hiredate":{"$gt":{"$date":"1981-06-01T00:00:00Z"}}}"#,
                "hiredate.gt.1981-06-01T00:00:00Z",
            ),
            (
                r#"{"$or":[{"ename":"KING"},{"sal":{"$gte":3000}}]}"#,
                "or(ename.eq.KING,sal.gte.3000)",
            ),
            (
                r#"{"$and":[{"job":"CLERK"},{"$or":[{"deptno":10},{"deptno":20}]}]}"#,
                "and(job.eq.CLERK,or(deptno.eq.10,deptno.eq.20))",
            ),
            (
                r#"{"sal":{"$or":[{"$lt":1000},{"$gt":3000}]}}"#,
                "or(sal.lt.1000,sal.gt.3000)",
            ),
        ] {
            assert_eq!(filters(q), expected, "{q}");
        }
    }

    /// `$orderby` keeps its members' order.
    #[test]
    fn orderby_keeps_priority() {
        let parsed =
            parse_filter_object(r#"{"$orderby":{"sal":"DESC","ename":1},"deptno":10}"#).expect("q");
        let order: Vec<(String, Option<Direction>)> = parsed
            .order
            .iter()
            .map(|t| (t.column.clone(), t.direction))
            .collect();
        assert_eq!(
            order,
            vec![
                ("sal".to_string(), Some(Direction::Desc)),
                ("ename".to_string(), Some(Direction::Asc))
            ]
        );
        assert_eq!(parsed.filters.len(), 1);
    }

    /// Malformed filter objects are refused with a message saying what is wrong.
    #[test]
    fn malformed_filter_objects_are_refused() {
        for (q, needle) in [
            ("", "not a JSON object"),
            ("[1]", "not a JSON object"),
            (r#"{"sal":{"$gtt":1}}"#, "unknown operator"),
            (r#"{"$nope":1}"#, "not an operator here"),
            (r#"{"sal":{"$between":[1]}}"#, "[low, high]"),
            (r#"{"sal":{"$in":1}}"#, "array of values"),
            (r#"{"sal":{"$gt":[1]}}"#, "a string, number"),
            (r#"{"$orderby":{"sal":"up"}}"#, "ASC"),
            (r#"{"$or":3}"#, "array of objects"),
            (r#"{"sal":{}}"#, "empty operator object"),
            (r#"{"$asof":"2020"}"#, "not supported"),
        ] {
            let err = parse_filter_object(q).expect_err(q);
            assert!(err.message.contains(needle), "{q}: {}", err.message);
        }
        let deep = format!("{}{}", r#"{"$or":["#.repeat(40), "]}".repeat(40));
        assert!(parse_filter_object(&deep).is_err());
    }
}
