//! What a column accepts, and the check of a value written to it or compared with it. PostgreSQL
//! checks values itself (its input functions answer 22P02, 22007, …). SQLite stores almost
//! anything anywhere (type affinity): there, a value is checked against the column's declared
//! type before the database sees it, and refused with PostgreSQL's code and wording, so that
//! both backends answer the same request the same way (`{"points":"abc"}` into an INTEGER
//! column, `?team_id=eq.abc`). Values that PostgreSQL would convert are converted (`"12"` into
//! an integer column, `"yes"` into a boolean one).

use rowgate_query::Value;

use crate::error::ApiError;

/// The values a column accepts, from its declared type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputType {
    /// The database checks values itself (PostgreSQL).
    Native,
    /// Any value (SQLite without a declared type, BLOB, TEXT, JSON).
    Any,
    /// A 64-bit integer (SQLite's INTEGER affinity).
    Integer,
    /// A floating-point number (REAL affinity).
    Real,
    /// A number, integer or decimal (NUMERIC affinity: NUMERIC, DECIMAL, …).
    Numeric,
    /// A boolean (declared BOOL/BOOLEAN, stored as 0/1).
    Boolean,
    /// A calendar date, `YYYY-MM-DD`.
    Date,
    /// A time of day, `HH:MM[:SS[.fraction]]`.
    Time,
    /// A date and time, ISO 8601 (`T` or a space between them, optional fraction and offset).
    Timestamp,
}

impl InputType {
    /// The type SQLite's declared type `decl` stands for, by SQLite's affinity rules (§3.1 of
    /// its datatype documentation) plus BOOLEAN, JSON and the date and time types, which SQLite
    /// stores as numbers and text.
    pub fn of_sqlite(decl: &str) -> InputType {
        let t = decl.to_ascii_uppercase();
        if t.starts_with("BOOL") {
            InputType::Boolean
        } else if t.starts_with("JSON") {
            InputType::Any
        } else if t.contains("INT") {
            InputType::Integer
        } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
            InputType::Any
        } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
            InputType::Real
        } else if t.is_empty() || t.contains("BLOB") {
            InputType::Any
        } else if t.contains("TIMESTAMP") || t.contains("DATETIME") {
            InputType::Timestamp
        } else if t.contains("DATE") {
            InputType::Date
        } else if t.contains("TIME") {
            InputType::Time
        } else {
            InputType::Numeric
        }
    }

    /// PostgreSQL's name of the type, for error messages.
    fn pg_name(self) -> &'static str {
        match self {
            InputType::Native | InputType::Any => "text",
            InputType::Integer => "bigint",
            InputType::Real => "double precision",
            InputType::Numeric => "numeric",
            InputType::Boolean => "boolean",
            InputType::Date => "date",
            InputType::Time => "time without time zone",
            InputType::Timestamp => "timestamp without time zone",
        }
    }

    /// A value written to a column of this type (a body's value), converted where PostgreSQL
    /// would convert it; 400 with PostgreSQL's code where it would refuse it.
    pub fn check_value(self, value: Value) -> Result<Value, ApiError> {
        match (self, value) {
            (InputType::Native | InputType::Any, v) | (_, v @ Value::Null) => Ok(v),
            (InputType::Integer, v @ Value::Int(_)) => Ok(v),
            (InputType::Real | InputType::Numeric, v @ (Value::Int(_) | Value::Real(_))) => Ok(v),
            (InputType::Boolean, v @ Value::Bool(_)) => Ok(v),
            (kind, Value::Text(text)) => kind.parse_text(&text).map(|parsed| match parsed {
                Some(v) => v,
                None => Value::Text(text),
            }),
            (kind, other) => {
                let text = match other {
                    Value::Int(i) => i.to_string(),
                    Value::Real(f) => f.to_string(),
                    Value::Bool(b) => b.to_string(),
                    Value::Text(t) => t,
                    Value::Null => String::new(),
                };
                kind.parse_text(&text)
                    .map(|parsed| parsed.unwrap_or(Value::Text(text)))
            }
        }
    }

    /// The check of a date or timestamp written to a PostgreSQL column declared `decl` (the
    /// column's input is [`InputType::Native`]): PostgreSQL reads far more than ISO 8601, some
    /// of it by its `DateStyle` setting (`01/02/2024`) and some of it garbage (`2024-01-02*`);
    /// a value written is held to ISO 8601, as on SQLite, or one of PostgreSQL's special words.
    pub fn postgres_temporal(decl: &str) -> Option<InputType> {
        let decl = decl.to_ascii_lowercase();
        if decl == "date" {
            Some(InputType::Date)
        } else if decl.starts_with("timestamp") {
            Some(InputType::Timestamp)
        } else {
            None
        }
    }

    /// `text` written to a PostgreSQL date or timestamp column (see
    /// [`InputType::postgres_temporal`]).
    pub fn check_postgres_temporal(self, text: &str) -> Result<(), ApiError> {
        const SPECIAL: [&str; 7] = [
            "infinity",
            "-infinity",
            "epoch",
            "now",
            "today",
            "tomorrow",
            "yesterday",
        ];
        if SPECIAL.iter().any(|w| text.trim().eq_ignore_ascii_case(w)) {
            return Ok(());
        }
        self.check_text(text)
    }

    /// A filter's value compared with a column of this type: refused where PostgreSQL would
    /// refuse to read it as the column's type.
    pub fn check_text(self, text: &str) -> Result<(), ApiError> {
        self.parse_text(text).map(|_| ())
    }

    /// Reads `text` as this type: `Ok(Some(v))` when it becomes another value (a number, a
    /// boolean), `Ok(None)` when the text stands as it is, `Err` when PostgreSQL would refuse
    /// it.
    fn parse_text(self, text: &str) -> Result<Option<Value>, ApiError> {
        let trimmed = text.trim();
        let refuse = |sqlstate: &str| {
            Err(ApiError::database(
                sqlstate,
                format!(
                    "invalid input syntax for type {}: \"{text}\"",
                    self.pg_name()
                ),
            ))
        };
        match self {
            InputType::Native | InputType::Any => Ok(None),
            InputType::Integer => match trimmed.parse::<i64>() {
                Ok(i) => Ok(Some(Value::Int(i))),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
                    ) =>
                {
                    Err(ApiError::database(
                        "22003",
                        format!("value \"{text}\" is out of range for type bigint"),
                    ))
                }
                Err(_) => refuse("22P02"),
            },
            InputType::Real => match parse_float(trimmed) {
                Some(f) => Ok(Some(Value::Real(f))),
                None => refuse("22P02"),
            },
            InputType::Numeric => match trimmed.parse::<i64>() {
                Ok(i) => Ok(Some(Value::Int(i))),
                Err(_) if parse_float(trimmed).is_some() => Ok(None),
                Err(_) => refuse("22P02"),
            },
            InputType::Boolean => match boolean(trimmed) {
                Some(b) => Ok(Some(Value::Bool(b))),
                None => refuse("22P02"),
            },
            InputType::Date => date(trimmed, &refuse),
            InputType::Time => {
                if time(trimmed).is_some() {
                    Ok(None)
                } else {
                    refuse("22007")
                }
            }
            InputType::Timestamp => timestamp(trimmed, &refuse),
        }
    }
}

/// A float as PostgreSQL's `float8in` reads it: decimal notation, `NaN`, `Infinity`.
fn parse_float(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    match lower.trim_start_matches(['+', '-']) {
        "nan" | "infinity" | "inf" => lower.parse::<f64>().ok(),
        _ if text
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
        {
            text.parse::<f64>().ok()
        }
        _ => None,
    }
}

/// PostgreSQL's boolean spellings (`boolin`): `t`, `true`, `y`, `yes`, `on`, `1` and their
/// opposites, in any case (unique prefixes of the words too).
fn boolean(text: &str) -> Option<bool> {
    let t = text.to_ascii_lowercase();
    let prefix_of = |word: &str| !t.is_empty() && word.starts_with(&t);
    if t == "1" || prefix_of("true") || prefix_of("yes") || t == "on" {
        Some(true)
    } else if t == "0" || prefix_of("false") || prefix_of("no") || t == "off" || t == "of" {
        Some(false)
    } else {
        None
    }
}

/// `YYYY-MM-DD`: refused with 22007 when it is not that shape, 22008 when it is no real day.
fn date(
    text: &str,
    refuse: &dyn Fn(&str) -> Result<Option<Value>, ApiError>,
) -> Result<Option<Value>, ApiError> {
    match chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        Ok(_) => Ok(None),
        Err(e) if e.kind() == chrono::format::ParseErrorKind::OutOfRange => refuse("22008"),
        Err(_) => refuse("22007"),
    }
}

/// `HH:MM`, `HH:MM:SS`, `HH:MM:SS.fraction`.
fn time(text: &str) -> Option<chrono::NaiveTime> {
    ["%H:%M:%S%.f", "%H:%M"]
        .iter()
        .find_map(|f| chrono::NaiveTime::parse_from_str(text, f).ok())
}

/// A date, or a date and a time with `T` or a space between them, an optional fraction and
/// an optional offset (`Z`, `+02:00`, `+0200`, `+02`).
fn timestamp(
    text: &str,
    refuse: &dyn Fn(&str) -> Result<Option<Value>, ApiError>,
) -> Result<Option<Value>, ApiError> {
    let Some((day, rest)) = text.split_at_checked(10.min(text.len())) else {
        return refuse("22007");
    };
    if rest.is_empty() {
        return date(day, refuse);
    }
    date(day, refuse)?;
    let Some(clock) = rest.strip_prefix(['T', 't', ' ']) else {
        return refuse("22007");
    };
    // the offset starts at the first Z, + or - after the time
    let split = clock.find(['Z', 'z', '+', '-']).unwrap_or(clock.len());
    let (clock, offset) = clock.split_at(split);
    let offset_ok =
        offset.is_empty() || offset.eq_ignore_ascii_case("z") || offset_seconds(offset).is_some();
    if time(clock).is_some() && offset_ok {
        Ok(None)
    } else {
        refuse("22007")
    }
}

/// `+HH`, `+HH:MM`, `+HHMM` (or `-`) in seconds.
fn offset_seconds(offset: &str) -> Option<i32> {
    let sign = match offset.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits: String = offset[1..].chars().filter(|c| *c != ':').collect();
    if !(digits.len() == 2 || digits.len() == 4) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = if digits.len() == 4 {
        digits[2..].parse().ok()?
    } else {
        0
    };
    (hours <= 15 && minutes < 60).then_some(sign * (hours * 3600 + minutes * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<Value, ApiError>) -> String {
        r.map_or_else(|e| e.code_text().to_string(), |v| format!("{v:?}"))
    }

    #[test]
    fn declared_types_follow_sqlite_affinity() {
        for (decl, kind) in [
            ("INTEGER", InputType::Integer),
            ("BIGINT", InputType::Integer),
            ("TEXT", InputType::Any),
            ("VARCHAR(20)", InputType::Any),
            ("", InputType::Any),
            ("REAL", InputType::Real),
            ("DOUBLE PRECISION", InputType::Real),
            ("NUMERIC(10,2)", InputType::Numeric),
            ("BOOLEAN", InputType::Boolean),
            ("DATE", InputType::Date),
            ("DATETIME", InputType::Timestamp),
            ("TIMESTAMP", InputType::Timestamp),
            ("TIME", InputType::Time),
            ("JSON", InputType::Any),
        ] {
            assert_eq!(InputType::of_sqlite(decl), kind, "{decl}");
        }
    }

    #[test]
    fn values_are_checked_and_converted_as_postgresql_would() {
        use InputType::*;
        let text = |s: &str| Value::Text(s.into());
        for (kind, value, expected) in [
            (Integer, text("12"), "Int(12)"),
            (Integer, text(" 12 "), "Int(12)"),
            (Integer, text("abc"), "22P02"),
            (Integer, text("1.5"), "22P02"),
            (Integer, Value::Real(1.5), "22P02"),
            (Integer, Value::Bool(true), "22P02"),
            (Integer, text("99999999999999999999"), "22003"),
            (Real, text("2.5"), "Real(2.5)"),
            (Real, text("NaN"), "Real(NaN)"),
            (Real, text("x"), "22P02"),
            (Numeric, text("2.50"), "Text(\"2.50\")"),
            (Numeric, text("two"), "22P02"),
            (Boolean, text("yes"), "Bool(true)"),
            (Boolean, text("F"), "Bool(false)"),
            (Boolean, Value::Int(1), "Bool(true)"),
            (Boolean, text("maybe"), "22P02"),
            (Date, text("2024-02-29"), "Text(\"2024-02-29\")"),
            (Date, text("2023-02-29"), "22008"),
            (Date, text("yesterday"), "22007"),
            (
                Timestamp,
                text("2024-01-01T10:00:00"),
                "Text(\"2024-01-01T10:00:00\")",
            ),
            (
                Timestamp,
                text("2024-01-01 10:00:00.123+02:00"),
                "Text(\"2024-01-01 10:00:00.123+02:00\")",
            ),
            (
                Timestamp,
                text("2024-01-01T10:00Z"),
                "Text(\"2024-01-01T10:00Z\")",
            ),
            (Timestamp, text("2024-01-01"), "Text(\"2024-01-01\")"),
            (Timestamp, text("2024-01-01T25:00"), "22007"),
            (Timestamp, text("now-ish"), "22007"),
            (Time, text("10:30"), "Text(\"10:30\")"),
            (Time, text("noon"), "22007"),
            (Any, text("anything"), "Text(\"anything\")"),
            (Native, text("abc"), "Text(\"abc\")"),
            (Integer, Value::Null, "Null"),
        ] {
            assert_eq!(
                code(kind.check_value(value.clone())),
                expected,
                "{kind:?} {value:?}"
            );
        }
    }
}
