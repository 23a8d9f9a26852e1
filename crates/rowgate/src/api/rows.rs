//! An insert's body as rows: one cell per key of each object, parsed straight from the JSON
//! text. No per-object map is built: a `serde_json::Value` costs hundreds of bytes for an
//! object of a few bytes (a 10 MB array of small objects took a worker past 1 GB), a cell 32.
//!
//! The keys are `columns=` when given (other keys are ignored), else the first object's keys;
//! without `columns=` every object must have exactly those keys (PostgREST's "All object keys
//! must match").

use std::borrow::Cow;
use std::fmt;

use rowgate_query::Value;
use serde::de::{self, DeserializeSeed, Deserializer as _, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

use crate::error::{ApiError, ErrorCode};

/// The objects of an insert body, as rows of cells.
#[derive(Debug, Default)]
pub struct BodyRows {
    /// The keys, in order: one cell per key in every row.
    pub keys: Vec<String>,
    /// The cells, row after row (`None`: the object has no such key).
    cells: Vec<Option<Value>>,
    /// Whether `keys` came from `columns=` (unknown keys ignored, missing keys allowed).
    named: bool,
}

impl BodyRows {
    /// How many rows (objects) the body has.
    pub fn len(&self) -> usize {
        self.cells.len().checked_div(self.keys.len()).unwrap_or(0)
    }

    /// Whether the body has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows, each a slice of one cell per key, taken out (each row's cells once).
    pub fn into_rows(self) -> impl Iterator<Item = Vec<Option<Value>>> {
        let width = self.keys.len().max(1);
        let mut cells = self.cells.into_iter();
        std::iter::from_fn(move || {
            let row: Vec<Option<Value>> = cells.by_ref().take(width).collect();
            (!row.is_empty()).then_some(row)
        })
    }

    /// The rows of an already parsed body (a form's object, or JSON parsed elsewhere).
    pub fn from_json(body: &Json, columns: Option<&[String]>) -> Result<BodyRows, ApiError> {
        let mut rows = BodyRows::start(columns);
        let objects: Vec<&serde_json::Map<String, Json>> = match body {
            Json::Object(o) => vec![o],
            Json::Array(items) => items
                .iter()
                .map(|i| i.as_object().ok_or_else(not_objects))
                .collect::<Result<_, _>>()?,
            _ => return Err(not_objects()),
        };
        for object in objects {
            rows.begin_row(object.keys().map(String::as_str))?;
            for (k, v) in object {
                rows.put(k, json_value(v))?;
            }
            rows.end_row()?;
        }
        Ok(rows)
    }

    /// Parses a JSON body (an object or an array of objects).
    pub fn parse(body: &[u8], columns: Option<&[String]>) -> Result<BodyRows, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::new(ErrorCode::InvalidBody, "empty request body")
                .hint("send a JSON object or an array of objects"));
        }
        let mut rows = BodyRows::start(columns);
        let mut failure = None;
        let mut reader = serde_json::Deserializer::from_slice(body);
        let parsed = reader
            .deserialize_any(Top {
                rows: &mut rows,
                failure: &mut failure,
            })
            .and_then(|()| reader.end());
        match (parsed, failure) {
            (_, Some(refusal)) => Err(refusal),
            (Err(e), None) => Err(ApiError::new(
                ErrorCode::InvalidBody,
                "the request body is not valid JSON",
            )
            .details(e.to_string())),
            (Ok(()), None) => Ok(rows),
        }
    }

    fn start(columns: Option<&[String]>) -> BodyRows {
        BodyRows {
            keys: columns.map(<[String]>::to_vec).unwrap_or_default(),
            cells: Vec::new(),
            named: columns.is_some(),
        }
    }

    /// Opens a row; the first object of a body without `columns=` names the keys (its own,
    /// given in `first_keys` when known up front).
    fn begin_row<'k>(&mut self, first_keys: impl Iterator<Item = &'k str>) -> Result<(), ApiError> {
        if !self.named && self.cells.is_empty() && self.keys.is_empty() {
            self.keys = first_keys.map(str::to_string).collect();
        }
        self.cells
            .extend(std::iter::repeat_with(|| None).take(self.keys.len()));
        Ok(())
    }

    /// The current row's value for `key`.
    fn put(&mut self, key: &str, value: Value) -> Result<(), ApiError> {
        let row = self.cells.len() - self.keys.len();
        match self.keys.iter().position(|k| k == key) {
            Some(i) => self.cells[row + i] = Some(value),
            None if self.named => {}
            None => return Err(keys_differ(self.len().saturating_sub(1))),
        }
        Ok(())
    }

    /// Closes the current row: without `columns=`, every key must have been given.
    fn end_row(&mut self) -> Result<(), ApiError> {
        let row = self.cells.len() - self.keys.len();
        if !self.named && self.cells[row..].iter().any(Option::is_none) {
            return Err(keys_differ(self.len().saturating_sub(1)));
        }
        Ok(())
    }
}

/// A JSON value from a body as a bound value (objects and arrays as JSON text).
pub fn json_value(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => n
            .as_i64()
            .map(Value::Int)
            .or_else(|| n.as_f64().map(Value::Real))
            .unwrap_or_else(|| Value::Text(n.to_string())),
        Json::String(s) => Value::Text(s.clone()),
        other => Value::Text(other.to_string()),
    }
}

fn not_objects() -> ApiError {
    ApiError::new(
        ErrorCode::InvalidBody,
        "the body must be a JSON object or an array of objects",
    )
}

fn keys_differ(index: usize) -> ApiError {
    ApiError::new(ErrorCode::InvalidBody, "All object keys must match")
        .details(format!("object {index} has different keys than object 0"))
        .hint("give every object the same keys, or name the columns with columns=")
}

/// The body: one object, or an array of objects.
struct Top<'a> {
    rows: &'a mut BodyRows,
    failure: &'a mut Option<ApiError>,
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object or an array of objects")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        Row {
            rows: self.rows,
            failure: self.failure,
        }
        .visit_map(map)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.not_objects()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.not_objects()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.not_objects()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.not_objects()
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.not_objects()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.not_objects()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(Row {
                rows: &mut *self.rows,
                failure: &mut *self.failure,
            })?
            .is_some()
        {}
        Ok(())
    }
}

impl Top<'_> {
    fn not_objects<E: de::Error>(self) -> Result<(), E> {
        *self.failure = Some(not_objects());
        Err(E::custom("not an object"))
    }
}

/// One object of the body, put into the next row.
struct Row<'a> {
    rows: &'a mut BodyRows,
    failure: &'a mut Option<ApiError>,
}

impl Row<'_> {
    fn refuse<E: de::Error>(&mut self, refusal: ApiError) -> E {
        let message = refusal.message.clone();
        *self.failure = Some(refusal);
        E::custom(message)
    }
}

impl<'de> DeserializeSeed<'de> for Row<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Row<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        // The first object of a body without columns= names the keys: gather it whole.
        let naming = !self.rows.named && self.rows.cells.is_empty() && self.rows.keys.is_empty();
        if naming {
            let mut entries: Vec<(String, Value)> = Vec::new();
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let value = map.next_value_seed(Cell)?;
                entries.push((key.into_owned(), value));
            }
            if let Err(e) = self.rows.begin_row(entries.iter().map(|(k, _)| k.as_str())) {
                return Err(self.refuse(e));
            }
            for (k, v) in entries {
                if let Err(e) = self.rows.put(&k, v) {
                    return Err(self.refuse(e));
                }
            }
        } else {
            if let Err(e) = self.rows.begin_row(std::iter::empty()) {
                return Err(self.refuse(e));
            }
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let value = map.next_value_seed(Cell)?;
                if let Err(e) = self.rows.put(&key, value) {
                    return Err(self.refuse(e));
                }
            }
        }
        if let Err(e) = self.rows.end_row() {
            return Err(self.refuse(e));
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, _: A) -> Result<(), A::Error> {
        Err(self.refuse(not_objects()))
    }

    fn visit_str<E: de::Error>(mut self, _: &str) -> Result<(), E> {
        Err(self.refuse(not_objects()))
    }

    fn visit_i64<E: de::Error>(mut self, _: i64) -> Result<(), E> {
        Err(self.refuse(not_objects()))
    }

    fn visit_u64<E: de::Error>(mut self, _: u64) -> Result<(), E> {
        Err(self.refuse(not_objects()))
    }

    fn visit_f64<E: de::Error>(mut self, _: f64) -> Result<(), E> {
        Err(self.refuse(not_objects()))
    }

    fn visit_bool<E: de::Error>(mut self, _: bool) -> Result<(), E> {
        Err(self.refuse(not_objects()))
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        Err(self.refuse(not_objects()))
    }
}

/// One value of an object, as a bound parameter: scalars as themselves, nested objects and
/// arrays as their JSON text (as `plan::json_value` does).
struct Cell;

impl<'de> DeserializeSeed<'de> for Cell {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Cell {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Value, E> {
        Ok(Value::Int(i))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Value, E> {
        Ok(i64::try_from(u).map_or_else(|_| Value::Text(u.to_string()), Value::Int))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        Ok(Value::Real(f))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        Ok(Value::Text(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        Ok(Value::Text(s))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        let nested: Json =
            serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Value::Text(nested.to_string()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        let nested: Json =
            serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Value::Text(nested.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = (Vec<String>, Vec<Vec<Option<Value>>>);

    fn rows(body: &str, columns: Option<&[String]>) -> Result<Parsed, String> {
        BodyRows::parse(body.as_bytes(), columns)
            .map(|r| (r.keys.clone(), r.into_rows().collect()))
            .map_err(|e| e.message)
    }

    #[test]
    fn objects_become_rows_of_cells() {
        let (keys, all) = rows(r#"[{"a":1,"b":"x"},{"b":"y","a":2.5}]"#, None).expect("rows");
        assert_eq!(keys, vec!["a", "b"]);
        assert_eq!(
            all,
            vec![
                vec![Some(Value::Int(1)), Some(Value::Text("x".into()))],
                vec![Some(Value::Real(2.5)), Some(Value::Text("y".into()))],
            ]
        );
        let (_, one) = rows(r#"{"a":{"n":[1,2]},"b":null}"#, None).expect("rows");
        assert_eq!(one[0][0], Some(Value::Text(r#"{"n":[1,2]}"#.into())));
        assert_eq!(one[0][1], Some(Value::Null));
        // columns=: other keys ignored, missing ones absent
        let named = ["b".to_string(), "c".to_string()];
        let (keys, all) = rows(r#"[{"a":1,"b":2},{"c":3}]"#, Some(&named)).expect("rows");
        assert_eq!(keys, named.to_vec());
        assert_eq!(all[1], vec![None, Some(Value::Int(3))]);
    }

    #[test]
    fn bad_bodies_are_refused() {
        for (body, message) in [
            (r#"[{"a":1},{"b":2}]"#, "All object keys must match"),
            (r#"[{"a":1},{"a":1,"b":2}]"#, "All object keys must match"),
            (r#"[{"a":1},{}]"#, "All object keys must match"),
            (
                r#"[1]"#,
                "the body must be a JSON object or an array of objects",
            ),
            (
                r#""x""#,
                "the body must be a JSON object or an array of objects",
            ),
            (r#"{"a":1} x"#, "the request body is not valid JSON"),
            ("  ", "empty request body"),
        ] {
            assert_eq!(rows(body, None).err().as_deref(), Some(message), "{body}");
        }
        let (_, none) = rows("[]", None).expect("empty array");
        assert!(none.is_empty());
    }
}
