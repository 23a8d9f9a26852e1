//! A [`Condition`] evaluated in memory against one row, with SQL three-valued logic (`None` is
//! unknown), matching what SQLite computes for the SQL that [`crate::render::Sqlite`] renders.
//!
//! A row is a function from a column name to its value (`None`: no such column, an error). The
//! type of a row value stands for the column's SQLite affinity: `Int`, `Real` and `Bool` values
//! behave as in a numeric (`INTEGER`/`REAL`) column, `Text` values as in a `TEXT` column. Filter
//! operands are text, as bound by the renderer, so:
//!
//! - a numeric value against a numeric-looking operand compares numerically (integers and reals
//!   exactly, as SQLite); against any other text it is smaller (SQLite sorts numbers before text),
//!   so `gt` is false, `lt` true, `neq` true;
//! - a text value compares with the operand as text, byte by byte;
//! - comparing NULL gives unknown; `isdistinct` and `is` never give unknown;
//! - `like` is case-sensitive, `%`/`*` match any run of characters and `_` one character, with no
//!   escape character; `ilike` folds ASCII letters only (SQLite's `lower()`); numbers are matched
//!   through their SQLite text form (see [`sqlite_text`]);
//! - `match`/`imatch` use the `regex` crate (`imatch` prefixes the pattern with `(?i)`);
//! - `is.true`/`is.false` test a value's truth as SQLite does (text by its numeric prefix).
//!
//! One SQLite quirk is not modelled: comparing an INTEGER column with text beyond the 64-bit range
//! turns the column's value into a REAL in place for the rest of that row's evaluation, so a later
//! `match`/`like` on the same column sees `-9.223372036854776e+18`. JSON paths and the
//! PostgreSQL-only operators cannot be evaluated here ([`EvalError::Unsupported`]).

use std::cmp::Ordering;

use thiserror::Error;

use crate::ast::{Condition, IsValue, Operand, Operator, Predicate, Quantifier, Value};

/// Why a condition could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EvalError {
    /// The row has no such column.
    #[error("unknown column \"{0}\"")]
    UnknownColumn(String),
    /// A `match`/`imatch` pattern is not a valid regular expression.
    #[error("invalid regular expression {pattern:?}: {message}")]
    InvalidRegex {
        /// The pattern as bound (with `(?i)` for `imatch`).
        pattern: String,
        /// The regex crate's error.
        message: String,
    },
    /// The condition uses what only the database can evaluate: a JSON path or a
    /// PostgreSQL-only operator (array, range, full-text).
    #[error("{0} cannot be evaluated in memory")]
    Unsupported(String),
}

/// Evaluate `c` against a row: `Some(true)`/`Some(false)`, or `None` for SQL's unknown (a row is
/// selected by a `WHERE` only when this is `Some(true)`). Every sub-condition is evaluated (no
/// short-circuit), so an unknown column is always reported.
pub fn eval(c: &Condition, row: &dyn Fn(&str) -> Option<Value>) -> Result<Option<bool>, EvalError> {
    match c {
        Condition::Pred(p) => {
            let v = predicate(p, row)?;
            Ok(if p.negated { v.map(|b| !b) } else { v })
        }
        Condition::And { negated, items } => {
            let mut results = Vec::with_capacity(items.len());
            for item in items {
                results.push(eval(item, row)?);
            }
            let v = and(results);
            Ok(if *negated { v.map(|b| !b) } else { v })
        }
        Condition::Or { negated, items } => {
            let mut results = Vec::with_capacity(items.len());
            for item in items {
                results.push(eval(item, row)?);
            }
            let v = or(results);
            Ok(if *negated { v.map(|b| !b) } else { v })
        }
    }
}

/// Evaluate a list of conditions ANDed together (a statement's filters).
pub fn eval_all(
    filters: &[Condition],
    row: &dyn Fn(&str) -> Option<Value>,
) -> Result<Option<bool>, EvalError> {
    let mut results = Vec::with_capacity(filters.len());
    for f in filters {
        results.push(eval(f, row)?);
    }
    Ok(and(results))
}

/// SQL AND: false if any is false, else unknown if any is unknown, else true (empty: true).
fn and(results: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut acc = Some(true);
    for r in results {
        match r {
            Some(false) => return Some(false),
            None => acc = None,
            Some(true) => {}
        }
    }
    acc
}

/// SQL OR: true if any is true, else unknown if any is unknown, else false (empty: false).
fn or(results: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut acc = Some(false);
    for r in results {
        match r {
            Some(true) => return Some(true),
            None => acc = None,
            Some(false) => {}
        }
    }
    acc
}

fn predicate(
    p: &Predicate,
    row: &dyn Fn(&str) -> Option<Value>,
) -> Result<Option<bool>, EvalError> {
    if !p.path.is_empty() {
        return Err(EvalError::Unsupported(format!(
            "the JSON path on \"{}\"",
            p.column
        )));
    }
    if p.op.postgres_only() {
        return Err(EvalError::Unsupported(format!("operator {:?}", p.op)));
    }
    let lhs = row(&p.column).ok_or_else(|| EvalError::UnknownColumn(p.column.clone()))?;
    match &p.operand {
        Operand::Is(v) => Ok(Some(is(&lhs, *v))),
        Operand::List(items) if p.op == Operator::In => {
            if items.is_empty() {
                return Ok(Some(false));
            }
            let mut results = Vec::with_capacity(items.len());
            for v in items {
                results.push(binary(&lhs, Operator::Eq, v)?);
            }
            Ok(or(results))
        }
        Operand::List(items) => {
            let mut results = Vec::with_capacity(items.len());
            for v in items {
                results.push(binary(&lhs, p.op, v)?);
            }
            Ok(match p.quantifier.unwrap_or(Quantifier::Any) {
                Quantifier::Any => or(results),
                Quantifier::All => and(results),
            })
        }
        Operand::Scalar(v) => binary(&lhs, p.op, v),
    }
}

/// `lhs IS NULL` / `IS NOT NULL` / `IS TRUE` / `IS FALSE`.
fn is(lhs: &Value, v: IsValue) -> bool {
    match v {
        IsValue::Null | IsValue::Unknown => matches!(lhs, Value::Null),
        IsValue::NotNull => !matches!(lhs, Value::Null),
        IsValue::True => truth(lhs) == Some(true),
        IsValue::False => truth(lhs) == Some(false),
    }
}

/// SQLite's truth value of a value (`None` for NULL).
fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Null => None,
        Value::Int(i) => Some(*i != 0),
        Value::Real(r) => Some(*r != 0.0),
        Value::Bool(b) => Some(*b),
        Value::Text(s) => Some(numeric_prefix(s) != 0.0),
    }
}

/// `lhs op operand` for one text operand.
fn binary(lhs: &Value, op: Operator, operand: &str) -> Result<Option<bool>, EvalError> {
    if matches!(op, Operator::IsDistinct | Operator::Is) {
        let distinct = match lhs {
            Value::Null => true,
            _ => compare(lhs, operand) != Some(Ordering::Equal),
        };
        return Ok(Some(if op == Operator::Is {
            !distinct
        } else {
            distinct
        }));
    }
    if matches!(lhs, Value::Null) {
        return Ok(None);
    }
    let ord = |f: fn(Ordering) -> bool| compare(lhs, operand).map(f);
    Ok(match op {
        Operator::Eq | Operator::In => ord(Ordering::is_eq),
        Operator::Neq => ord(Ordering::is_ne),
        Operator::Gt => ord(Ordering::is_gt),
        Operator::Gte => ord(Ordering::is_ge),
        Operator::Lt => ord(Ordering::is_lt),
        Operator::Lte => ord(Ordering::is_le),
        Operator::Like | Operator::Ilike => {
            let text = sqlite_text(lhs).unwrap_or_default();
            let pattern = operand.replace('*', "%");
            Some(if op == Operator::Ilike {
                like(&pattern.to_ascii_lowercase(), &text.to_ascii_lowercase())
            } else {
                like(&pattern, &text)
            })
        }
        Operator::Match | Operator::Imatch => {
            let text = sqlite_text(lhs).unwrap_or_default();
            let pattern = if op == Operator::Imatch {
                format!("(?i){operand}")
            } else {
                operand.to_owned()
            };
            let re = regex::Regex::new(&pattern).map_err(|e| EvalError::InvalidRegex {
                pattern: pattern.clone(),
                message: e.to_string(),
            })?;
            Some(re.is_match(&text))
        }
        Operator::IsDistinct | Operator::Is => None, // handled above
        _ => None,                                   // PostgreSQL-only: rejected in `predicate`
    })
}

/// What an `eq` with a text operand can be equal to, as a hashable key: a row value is `eq`
/// to the operand (as [`eval`] compares them) exactly when [`EqKey::of_value`] is one of
/// [`EqKey::of_operand`]. Lets a caller holding many equality filters (realtime's
/// subscriptions) find the ones a row can pass by lookup instead of evaluating each.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EqKey {
    /// A text value, byte for byte.
    Text(String),
    /// A number: an integer, or a real with an exact integer value, as that integer.
    Int(i64),
    /// Any other real, by its bits (never NaN, never -0).
    Real(u64),
}

impl EqKey {
    /// The keys a row value equal to `operand` may have: its text, and its number when the
    /// operand looks numeric. `None` when the operand equals values no key describes (a
    /// number that is NaN): such a filter cannot be looked up.
    pub fn of_operand(operand: &str) -> Option<Vec<EqKey>> {
        let mut keys = vec![EqKey::Text(operand.to_string())];
        match numeric_affinity(operand) {
            None => {}
            Some(Num::Int(i)) => keys.push(EqKey::Int(i)),
            Some(Num::Real(r)) if r.is_nan() => return None,
            Some(Num::Real(r)) => keys.push(EqKey::real(r)),
        }
        Some(keys)
    }

    /// The key of a row value (`None` for NULL, which is never `eq` to anything).
    pub fn of_value(value: &Value) -> Option<EqKey> {
        Some(match value {
            Value::Null => return None,
            Value::Text(s) => EqKey::Text(s.clone()),
            Value::Int(i) => EqKey::Int(*i),
            Value::Bool(b) => EqKey::Int(i64::from(*b)),
            Value::Real(r) if r.is_nan() => return None,
            Value::Real(r) => EqKey::real(*r),
        })
    }

    /// A real's key: an integral real in the 64-bit range compares equal to that integer
    /// (`int_float_cmp`), so it is keyed as one.
    fn real(r: f64) -> EqKey {
        const TWO_63: f64 = 9_223_372_036_854_775_808.0;
        if r.fract() == 0.0 && (-TWO_63..TWO_63).contains(&r) {
            #[allow(clippy::cast_possible_truncation)]
            return EqKey::Int(r as i64);
        }
        EqKey::Real(r.to_bits())
    }
}

/// A number after SQLite's numeric affinity.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Real(f64),
}

/// Compare a non-NULL value with a text operand as SQLite does for a column of the value's
/// affinity; `None` only for a NULL value.
fn compare(lhs: &Value, operand: &str) -> Option<Ordering> {
    let lnum = match lhs {
        Value::Null => return None,
        Value::Text(s) => return Some(s.as_bytes().cmp(operand.as_bytes())),
        Value::Int(i) => Num::Int(*i),
        Value::Bool(b) => Num::Int(i64::from(*b)),
        Value::Real(r) => Num::Real(*r),
    };
    Some(match numeric_affinity(operand) {
        Some(rnum) => compare_num(lnum, rnum),
        // numbers sort before text
        None => Ordering::Less,
    })
}

fn compare_num(a: Num, b: Num) -> Ordering {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x.cmp(&y),
        (Num::Real(x), Num::Real(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Num::Int(i), Num::Real(r)) => int_float_cmp(i, r),
        (Num::Real(r), Num::Int(i)) => int_float_cmp(i, r).reverse(),
    }
}

/// Exact comparison of an integer with a float (SQLite's `sqlite3IntFloatCompare`).
fn int_float_cmp(i: i64, r: f64) -> Ordering {
    if r.is_nan() {
        return Ordering::Greater;
    }
    if r < -9_223_372_036_854_775_808.0 {
        return Ordering::Greater;
    }
    if r >= 9_223_372_036_854_775_808.0 {
        return Ordering::Less;
    }
    let y = r as i64; // truncation toward zero, in range
    match i.cmp(&y) {
        Ordering::Equal => {}
        o => return o,
    }
    let s = i as f64;
    s.partial_cmp(&r).unwrap_or(Ordering::Equal)
}

fn is_sqlite_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn trim_sqlite_space(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii() && is_sqlite_space(c as u8))
}

/// SQLite's numeric affinity applied to text: a well-formed integer that fits in 64 bits becomes
/// an integer, another well-formed number a real, anything else stays text (`None`). Surrounding
/// whitespace is allowed; hexadecimal, `inf` and `nan` are not numbers.
fn numeric_affinity(s: &str) -> Option<Num> {
    let t = trim_sqlite_space(s);
    let b = t.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let int_start = i;
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    let mut digits = i - int_start;
    let mut is_int = true;
    if b.get(i) == Some(&b'.') {
        is_int = false;
        i += 1;
        let frac_start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        digits += i - frac_start;
    }
    if digits == 0 {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        is_int = false;
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == exp_start {
            return None;
        }
    }
    if i != b.len() {
        return None;
    }
    if is_int {
        if let Ok(n) = t.parse::<i64>() {
            return Some(Num::Int(n));
        }
    }
    t.parse::<f64>().ok().map(Num::Real)
}

/// The value of the longest numeric prefix of `s` (after leading whitespace), 0 when there is
/// none: SQLite's conversion of text to a real.
fn numeric_prefix(s: &str) -> f64 {
    let b = s.as_bytes();
    let mut i = 0;
    while b.get(i).is_some_and(|&c| is_sqlite_space(c)) {
        i += 1;
    }
    let mut num = String::new();
    if let Some(&c @ (b'+' | b'-')) = b.get(i) {
        num.push(c as char);
        i += 1;
    }
    let mut digits = 0;
    let mut int_part = String::new();
    while let Some(&c) = b.get(i).filter(|c| c.is_ascii_digit()) {
        int_part.push(c as char);
        i += 1;
        digits += 1;
    }
    let mut frac = String::new();
    if b.get(i) == Some(&b'.') {
        i += 1;
        while let Some(&c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            frac.push(c as char);
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return 0.0;
    }
    num.push_str(if int_part.is_empty() { "0" } else { &int_part });
    num.push('.');
    num.push_str(if frac.is_empty() { "0" } else { &frac });
    if let Some(b'e' | b'E') = b.get(i) {
        let mut j = i + 1;
        let mut exp = String::from("e");
        if let Some(&c @ (b'+' | b'-')) = b.get(j) {
            exp.push(c as char);
            j += 1;
        }
        let exp_digits = j;
        while let Some(&c) = b.get(j).filter(|c| c.is_ascii_digit()) {
            exp.push(c as char);
            j += 1;
        }
        if j > exp_digits {
            num.push_str(&exp);
        }
    }
    num.parse::<f64>().unwrap_or(0.0)
}

/// A value's text as SQLite converts it (for `LIKE`, `lower()` and the `regexp` function):
/// integers in decimal, reals as `printf("%!.15g")` (`1.0`, `0.1`, `1.0e+20`), booleans as `1`/`0`;
/// `None` for NULL.
pub fn sqlite_text(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null => return None,
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => i64::from(*b).to_string(),
        Value::Text(s) => s.clone(),
        Value::Real(r) => real_text(*r),
    })
}

/// `printf("%!.15g", r)` as SQLite does it.
fn real_text(r: f64) -> String {
    if r.is_nan() {
        return "NaN".to_owned();
    }
    if r.is_infinite() {
        return if r > 0.0 { "Inf" } else { "-Inf" }.to_owned();
    }
    if r == 0.0 {
        return "0.0".to_owned();
    }
    let sign = if r < 0.0 { "-" } else { "" };
    // 15 significant digits, correctly rounded: "d.dddddddddddddde±x"
    let sci = format!("{:.14e}", r.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    if !(-4..15).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}.{rest}e{esign}{:02}", exp.abs());
    }
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        let zeros = "0".repeat(int_len - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int, frac) = digits.split_at(int_len);
        format!("{sign}{int}.{frac}")
    }
}

/// SQLite's case-sensitive `LIKE` without an escape character: `%` any run, `_` one character.
fn like(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('%') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '_' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '%')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_text_matches_sqlite_printf() {
        assert_eq!(real_text(1.0), "1.0");
        assert_eq!(real_text(-2.5), "-2.5");
        assert_eq!(real_text(100.0), "100.0");
        assert_eq!(real_text(0.1), "0.1");
        assert_eq!(real_text(1e20), "1.0e+20");
        assert_eq!(real_text(1.5e-5), "1.5e-05");
        assert_eq!(real_text(0.0001), "0.0001");
        assert_eq!(real_text(1.0 / 3.0), "0.333333333333333");
        assert_eq!(real_text(123456789012345.0), "123456789012345.0");
        assert_eq!(real_text(1234567890123456.0), "1.23456789012346e+15");
    }

    /// A value is `eq` to an operand exactly when its key is among the operand's keys: the
    /// lookup realtime's index does finds exactly the filters the evaluator passes.
    #[test]
    fn eq_keys_find_exactly_what_eq_passes() {
        use proptest::prelude::*;
        let operand = prop_oneof![
            "[ +-]?[0-9]{0,3}(\\.[0-9]{0,2})?(e[+-]?[0-9])? ?",
            "-?0(\\.0)?",
            Just("9223372036854775807".to_string()),
            Just("9223372036854775808".to_string()),
            Just("-9223372036854775808".to_string()),
            Just("1e999".to_string()),
            "[a-c1]{0,3}",
        ];
        let value = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-20i64..20).prop_map(Value::Int),
            prop_oneof![Just(i64::MAX), Just(i64::MIN)].prop_map(Value::Int),
            prop_oneof![
                (-40i32..40).prop_map(|n| f64::from(n) / 4.0),
                Just(-0.0),
                Just(9_223_372_036_854_775_808.0),
                Just(-9_223_372_036_854_775_808.0),
                Just(f64::INFINITY),
                Just(1e300),
            ]
            .prop_map(Value::Real),
            "[ +-]?[0-9a-c.]{0,4}".prop_map(Value::Text),
        ];
        proptest!(ProptestConfig::with_cases(4000), |(v in value, op in operand)| {
            let passes = binary(&v, Operator::Eq, &op).expect("eq") == Some(true);
            let found = match (EqKey::of_value(&v), EqKey::of_operand(&op)) {
                (Some(key), Some(keys)) => keys.contains(&key),
                (_, None) => passes, // not indexable: the caller evaluates it
                (None, Some(_)) => false,
            };
            prop_assert_eq!(passes, found, "{:?} eq {:?}", v, op);
        });
    }

    #[test]
    fn numeric_affinity_forms() {
        assert!(matches!(numeric_affinity(" 12 "), Some(Num::Int(12))));
        assert!(matches!(numeric_affinity("+5"), Some(Num::Int(5))));
        assert!(matches!(numeric_affinity("1."), Some(Num::Real(r)) if r == 1.0));
        assert!(matches!(numeric_affinity(".5"), Some(Num::Real(r)) if r == 0.5));
        assert!(matches!(numeric_affinity("1e3"), Some(Num::Real(r)) if r == 1000.0));
        assert!(matches!(
            numeric_affinity("9223372036854775808"),
            Some(Num::Real(_))
        ));
        for s in ["", " ", ".", "1e", "0x10", "inf", "nan", "1a", "- 1", "1 2"] {
            assert!(numeric_affinity(s).is_none(), "{s:?}");
        }
    }

    #[test]
    fn numeric_prefix_forms() {
        assert_eq!(numeric_prefix("12abc"), 12.0);
        assert_eq!(numeric_prefix("  -1.5e1x"), -15.0);
        assert_eq!(numeric_prefix("1e"), 1.0);
        assert_eq!(numeric_prefix("abc"), 0.0);
        assert_eq!(numeric_prefix(".5"), 0.5);
    }

    #[test]
    fn like_matching() {
        assert!(like("a%c", "abc"));
        assert!(like("a%c", "ac"));
        assert!(like("a_c", "abc"));
        assert!(!like("a_c", "ac"));
        assert!(like("%", ""));
        assert!(like("é_", "éx"));
        assert!(!like("A%", "abc"));
        assert!(like("%b%b%", "abcb"));
        assert!(!like("%b%b%", "abc"));
    }
}
