//! A custom resource's parameter values: checks a raw value (text from the path or query string,
//! JSON from the body or a configured default) against the declared [`ParamType`] and turns it
//! into the value bound to the statement.

use rowgate_query::Value;

use crate::config::resources::ParamType;

/// A value as it arrived.
#[derive(Debug, Clone, Copy)]
pub enum Raw<'a> {
    /// From the path or the query string.
    Text(&'a str),
    /// From a JSON body or a configured default.
    Json(&'a serde_json::Value),
    /// An object or array of a JSON body, as its compact text.
    Nested(&'a str),
}

/// The values a number parameter takes (`min`, `max`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Range {
    /// The least.
    pub min: Option<f64>,
    /// The greatest.
    pub max: Option<f64>,
}

impl Range {
    /// Whether `value` lies within; the error says where it should.
    pub fn admit(&self, value: &Value) -> Result<(), String> {
        let n = match value {
            Value::Int(i) => *i as f64,
            Value::Real(f) => *f,
            _ => return Ok(()),
        };
        let below = self.min.filter(|min| n < *min);
        let above = self.max.filter(|max| n > *max);
        match (below, above) {
            (None, None) => Ok(()),
            _ => Err(format!("{n} is out of range: {}", self.describe())),
        }
    }

    /// `at least 0 and at most 100`.
    pub fn describe(&self) -> String {
        match (self.min, self.max) {
            (Some(min), Some(max)) => format!("at least {min} and at most {max}"),
            (Some(min), None) => format!("at least {min}"),
            (None, Some(max)) => format!("at most {max}"),
            (None, None) => "any number".into(),
        }
    }
}

/// Checks `raw` against `kind`; the error says what was expected.
pub fn coerce(kind: ParamType, raw: Raw<'_>) -> Result<Value, String> {
    let text = match raw {
        Raw::Text(t) => t,
        Raw::Json(serde_json::Value::Null) => return Ok(Value::Null),
        Raw::Json(serde_json::Value::String(s)) if kind != ParamType::Json => s.as_str(),
        Raw::Json(j) => return coerce_json(kind, j),
        Raw::Nested(text) if kind == ParamType::Json => return Ok(Value::Text(text.to_string())),
        Raw::Nested(text) => {
            return Err(format!(
                "expected {}, got {}",
                expectation(kind),
                shorten(text)
            ))
        }
    };
    let bad = || format!("expected {}, got {}", expectation(kind), shorten(text));
    match kind {
        ParamType::Int => text
            .trim()
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|_| bad()),
        ParamType::Float => match text.trim().parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Real(f)),
            _ => Err(bad()),
        },
        ParamType::Text => Ok(Value::Text(text.to_string())),
        ParamType::Bool => bool_word(text).map(Value::Bool).ok_or_else(bad),
        ParamType::Date => is_date(text)
            .then(|| Value::Text(text.to_string()))
            .ok_or_else(bad),
        ParamType::Timestamp => is_timestamp(text)
            .then(|| Value::Text(text.to_string()))
            .ok_or_else(bad),
        ParamType::Json => serde_json::from_str::<serde_json::Value>(text)
            .map(|j| Value::Text(j.to_string()))
            .map_err(|_| bad()),
    }
}

fn coerce_json(kind: ParamType, j: &serde_json::Value) -> Result<Value, String> {
    let bad = || {
        format!(
            "expected {}, got {}",
            expectation(kind),
            shorten(&j.to_string())
        )
    };
    match (kind, j) {
        (ParamType::Json, _) => Ok(Value::Text(j.to_string())),
        (ParamType::Int, serde_json::Value::Number(n)) => n
            .as_i64()
            // an integral number written with a fraction (3.0) is an integer, as JSON Schema
            // says
            .or_else(|| n.as_f64().and_then(crate::engine::rows::integral))
            .map(Value::Int)
            .ok_or_else(bad),
        (ParamType::Float, serde_json::Value::Number(n)) => {
            n.as_f64().map(Value::Real).ok_or_else(bad)
        }
        (ParamType::Bool, serde_json::Value::Bool(b)) => Ok(Value::Bool(*b)),
        (ParamType::Text, serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => {
            Ok(Value::Text(j.to_string()))
        }
        _ => Err(bad()),
    }
}

/// What a type expects, for error messages.
pub fn expectation(kind: ParamType) -> &'static str {
    match kind {
        ParamType::Int => "an integer",
        ParamType::Float => "a number",
        ParamType::Text => "text",
        ParamType::Bool => "true or false",
        ParamType::Date => "a date YYYY-MM-DD",
        ParamType::Timestamp => "a timestamp YYYY-MM-DDTHH:MM:SS[.frac][Z|+HH:MM]",
        ParamType::Json => "JSON",
    }
}

fn shorten(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        format!("{s:?}")
    } else {
        let cut: String = s.chars().take(MAX).collect();
        format!("{cut:?}…")
    }
}

fn bool_word(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "t" | "yes" | "y" | "on" | "1" => Some(true),
        "false" | "f" | "no" | "n" | "off" | "0" => Some(false),
        _ => None,
    }
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// `YYYY-MM-DD`, a real calendar day.
fn is_date(s: &str) -> bool {
    let mut parts = s.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (Some(y), Some(m), Some(d)) = (digits(y, 4), digits(m, 2), digits(d, 2)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// A date, `T` (or a space), `HH:MM[:SS[.frac]]`, and an optional `Z` or `±HH:MM` offset.
fn is_timestamp(s: &str) -> bool {
    if s.len() < 16 || !s.is_char_boundary(10) || !is_date(&s[..10]) {
        return false;
    }
    if !matches!(s.as_bytes()[10], b'T' | b't' | b' ') {
        return false;
    }
    let rest = &s[11..];
    let (time, offset) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let offset_ok = match offset {
        "" | "Z" | "z" => true,
        o => {
            let hm = &o[1..];
            hm.len() == 5
                && hm.as_bytes()[2] == b':'
                && digits(&hm[..2], 2).is_some_and(|h| h <= 23)
                && digits(&hm[3..], 2).is_some_and(|m| m <= 59)
        }
    };
    let (hms, frac) = match time.split_once('.') {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (time, None),
    };
    let frac_ok = frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()));
    let mut fields = hms.split(':');
    let h = fields.next().and_then(|x| digits(x, 2));
    let m = fields.next().and_then(|x| digits(x, 2));
    let sec = fields.next().map(|x| digits(x, 2));
    let time_ok = h.is_some_and(|h| h <= 23)
        && m.is_some_and(|m| m <= 59)
        && match sec {
            None => frac.is_none(),
            Some(s) => s.is_some_and(|s| s <= 60),
        }
        && fields.next().is_none();
    offset_ok && frac_ok && time_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(kind: ParamType, s: &str) -> Result<Value, String> {
        coerce(kind, Raw::Text(s))
    }

    #[test]
    fn each_type_accepts_its_values() {
        assert_eq!(text(ParamType::Int, "42"), Ok(Value::Int(42)));
        assert_eq!(text(ParamType::Int, "-7"), Ok(Value::Int(-7)));
        assert_eq!(text(ParamType::Float, "2.5"), Ok(Value::Real(2.5)));
        assert_eq!(text(ParamType::Bool, "TRUE"), Ok(Value::Bool(true)));
        assert_eq!(text(ParamType::Bool, "0"), Ok(Value::Bool(false)));
        assert_eq!(
            text(ParamType::Date, "2024-02-29"),
            Ok(Value::Text("2024-02-29".into()))
        );
        for ts in [
            "2024-02-29T12:30:00Z",
            "2024-02-29 12:30",
            "2024-02-29T12:30:00.123+02:00",
            "2024-02-29T23:59:60-05:30",
        ] {
            assert!(text(ParamType::Timestamp, ts).is_ok(), "{ts}");
        }
        assert_eq!(
            text(ParamType::Json, "{\"a\": [1, 2]}"),
            Ok(Value::Text("{\"a\":[1,2]}".into()))
        );
        let j = serde_json::json!({"k": 1});
        assert_eq!(
            coerce(ParamType::Json, Raw::Json(&j)),
            Ok(Value::Text("{\"k\":1}".into()))
        );
        assert_eq!(
            coerce(ParamType::Int, Raw::Json(&serde_json::json!(5))),
            Ok(Value::Int(5))
        );
        assert_eq!(
            coerce(ParamType::Int, Raw::Json(&serde_json::json!("5"))),
            Ok(Value::Int(5))
        );
        assert_eq!(
            coerce(ParamType::Text, Raw::Json(&serde_json::json!(5))),
            Ok(Value::Text("5".into()))
        );
        assert_eq!(
            coerce(ParamType::Int, Raw::Json(&serde_json::Value::Null)),
            Ok(Value::Null)
        );
    }

    #[test]
    fn each_type_rejects_what_is_not_it() {
        for (kind, s) in [
            (ParamType::Int, "4.2"),
            (ParamType::Int, "99999999999999999999"),
            (ParamType::Int, "abc"),
            (ParamType::Float, "NaN"),
            (ParamType::Float, "inf"),
            (ParamType::Bool, "maybe"),
            (ParamType::Date, "2023-02-29"),
            (ParamType::Date, "2024-13-01"),
            (ParamType::Date, "24-01-01"),
            (ParamType::Timestamp, "2024-01-01"),
            (ParamType::Timestamp, "2024-01-01T25:00:00"),
            (ParamType::Timestamp, "2024-01-01T10:00:00+2"),
            (ParamType::Timestamp, "2024-01-01T10:00.5"),
            (ParamType::Json, "{nope"),
        ] {
            let err = text(kind, s).expect_err(s);
            assert!(err.starts_with("expected"), "{err}");
        }
        let err = coerce(ParamType::Int, Raw::Json(&serde_json::json!(1.5))).expect_err("float");
        assert!(err.contains("1.5"), "{err}");
        assert!(coerce(ParamType::Bool, Raw::Json(&serde_json::json!([1]))).is_err());
    }
}
