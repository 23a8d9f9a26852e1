//! An insert's body read object by object: each object's values are handed to a [`RowSink`]
//! as one row of cells (one per key) and forgotten, so that no representation of the whole body
//! is built besides what the sink keeps (the planner keeps compact JSON rows). A
//! `serde_json::Value` costs hundreds of bytes for an object of a few bytes: a 10 MB array of
//! small objects took a worker past 1 GB.
//!
//! The keys are `columns=` when given (other keys are ignored), else the first object's keys;
//! without `columns=` every object must have exactly those keys (PostgREST's "All object keys
//! must match").

use std::borrow::Cow;
use std::fmt;

use rowgate_query::Value;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

use crate::error::{ApiError, ErrorCode};

/// One value of an object.
#[derive(Debug, Clone, PartialEq)]
pub enum BodyCell {
    /// A scalar (a number too large for an integer as its text).
    Value(Value),
    /// A nested object or array, as JSON text.
    Json(String),
}

/// Where the rows of a body go.
pub trait RowSink {
    /// The keys every row has a cell for, in order: `columns=` (before any row) when given,
    /// else the first object's keys.
    fn keys(&mut self, keys: &[String]) -> Result<(), ApiError>;

    /// One object's cells, one per key (`None`: the object lacks that key, only with
    /// `columns=`). The sink may take them.
    fn row(&mut self, cells: &mut [Option<BodyCell>]) -> Result<(), ApiError>;

    /// Whether [`RowSink::keys`] takes `key` (a column of the table): a reader keeps nothing
    /// of a key it does not, but the first (which the keys are then refused for).
    fn knows(&self, _key: &str) -> bool {
        true
    }
}

/// Reads a JSON body (an object or an array of objects) into `sink`; answers how many rows it
/// had.
pub fn read_rows(
    body: &[u8],
    columns: Option<&[String]>,
    sink: &mut dyn RowSink,
) -> Result<usize, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(
            ApiError::new(ErrorCode::InvalidBody, "Empty or invalid json")
                .hint("send a JSON object or an array of objects"),
        );
    }
    let mut reader = Reader {
        keys: columns.map(<[String]>::to_vec).unwrap_or_default(),
        named: columns.is_some(),
        cells: Vec::new(),
        count: 0,
        sink,
        failure: None,
    };
    if let Some(columns) = columns {
        reader.sink.keys(columns)?;
    }
    let mut json = serde_json::Deserializer::from_slice(body);
    let whole = Part {
        reader: &mut reader,
        whole: true,
    };
    let parsed = whole.deserialize(&mut json).and_then(|()| json.end());
    match (parsed, reader.failure) {
        (_, Some(refusal)) => Err(refusal),
        (Err(e), None) => Err(
            ApiError::new(ErrorCode::InvalidBody, "Empty or invalid json").details(e.to_string()),
        ),
        (Ok(()), None) => Ok(reader.count),
    }
}

/// A JSON value as a cell: scalars as themselves, objects and arrays as their JSON text.
pub fn body_cell(v: &Json) -> BodyCell {
    match v {
        Json::Object(_) | Json::Array(_) => BodyCell::Json(v.to_string()),
        scalar => BodyCell::Value(json_value(scalar)),
    }
}

/// The reading of one body: the keys, the current object's cells, what went wrong.
struct Reader<'s> {
    keys: Vec<String>,
    /// Whether `keys` came from `columns=` (unknown keys ignored, missing keys allowed).
    named: bool,
    cells: Vec<Option<BodyCell>>,
    count: usize,
    sink: &'s mut dyn RowSink,
    failure: Option<ApiError>,
}

impl Reader<'_> {
    /// Keeps `refusal` as the answer and stops the parse.
    fn refuse<E: de::Error>(&mut self, refusal: ApiError) -> E {
        let message = refusal.message.clone();
        self.failure = Some(refusal);
        E::custom(message)
    }

    /// Puts the current object's `key` into its cell.
    fn put(&mut self, key: &str, value: BodyCell) -> Result<(), ApiError> {
        match self.keys.iter().position(|k| k == key) {
            Some(i) => self.cells[i] = Some(value),
            None if self.named => {}
            None => return Err(keys_differ(self.count)),
        }
        Ok(())
    }

    /// Hands the current object to the sink: without `columns=`, every key must have been
    /// given.
    fn end_row(&mut self) -> Result<(), ApiError> {
        if !self.named && self.cells.iter().any(Option::is_none) {
            return Err(keys_differ(self.count));
        }
        self.sink.row(&mut self.cells)?;
        self.count += 1;
        Ok(())
    }
}

/// The integer a float written with a zero fraction stands for (`456.0`: JSON Schema counts it
/// an integer), within the range a double holds exactly.
pub fn integral(f: f64) -> Option<i64> {
    (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

pub use crate::job::json_value;

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

/// A part of the body: the whole (one object, or an array of objects) or one element of the
/// array (an object), each object handed to the sink as a row.
struct Part<'r, 's> {
    reader: &'r mut Reader<'s>,
    whole: bool,
}

impl<'de> DeserializeSeed<'de> for Part<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Part<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object or an array of objects")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let reader = self.reader;
        // The first object of a body without columns= names the keys: gather it whole.
        // Past a key the sink does not know, the object is only read through: the keys are
        // refused for that one.
        if !reader.named && reader.count == 0 && reader.keys.is_empty() {
            let mut values = Vec::new();
            let mut unknown = false;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if unknown || !reader.sink.knows(&key) {
                    map.next_value::<de::IgnoredAny>()?;
                    if !unknown {
                        values.push(None);
                        reader.keys.push(key.into_owned());
                    }
                    unknown = true;
                    continue;
                }
                values.push(Some(map.next_value_seed(CellSeed)?));
                reader.keys.push(key.into_owned());
            }
            reader.cells = values;
            if let Err(e) = reader.sink.keys(&reader.keys) {
                return Err(reader.refuse(e));
            }
        } else {
            reader.cells.clear();
            reader.cells.resize_with(reader.keys.len(), || None);
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let value = map.next_value_seed(CellSeed)?;
                if let Err(e) = reader.put(&key, value) {
                    return Err(reader.refuse(e));
                }
            }
        }
        match reader.end_row() {
            Ok(()) => Ok(()),
            Err(e) => Err(reader.refuse(e)),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if !self.whole {
            return Err(self.reader.refuse(not_objects()));
        }
        while seq
            .next_element_seed(Part {
                reader: &mut *self.reader,
                whole: false,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(self.reader.refuse(not_objects()))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(self.reader.refuse(not_objects()))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(self.reader.refuse(not_objects()))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(self.reader.refuse(not_objects()))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(self.reader.refuse(not_objects()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(self.reader.refuse(not_objects()))
    }
}

/// One value of an object: scalars as themselves, nested objects and arrays as their JSON text.
struct CellSeed;

impl<'de> DeserializeSeed<'de> for CellSeed {
    type Value = BodyCell;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<BodyCell, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CellSeed {
    type Value = BodyCell;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<BodyCell, E> {
        Ok(BodyCell::Value(Value::Null))
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<BodyCell, E> {
        Ok(BodyCell::Value(Value::Bool(b)))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<BodyCell, E> {
        Ok(BodyCell::Value(Value::Int(i)))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<BodyCell, E> {
        Ok(BodyCell::Value(
            i64::try_from(u).map_or_else(|_| Value::Text(u.to_string()), Value::Int),
        ))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<BodyCell, E> {
        Ok(BodyCell::Value(Value::Real(f)))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<BodyCell, E> {
        Ok(BodyCell::Value(Value::Text(s.to_string())))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<BodyCell, E> {
        Ok(BodyCell::Value(Value::Text(s)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<BodyCell, A::Error> {
        let mut text = Vec::new();
        super::compact::write_map(map, &mut text)?;
        Ok(BodyCell::Json(json_text(text)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<BodyCell, A::Error> {
        let mut text = Vec::new();
        super::compact::write_seq(seq, &mut text)?;
        Ok(BodyCell::Json(json_text(text)))
    }
}

/// Text written by [`super::compact`]: JSON, so UTF-8.
fn json_text(text: Vec<u8>) -> String {
    String::from_utf8(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink keeping everything, for the tests.
    #[derive(Default)]
    struct Kept {
        keys: Vec<String>,
        rows: Vec<Vec<Option<BodyCell>>>,
    }

    impl RowSink for Kept {
        fn keys(&mut self, keys: &[String]) -> Result<(), ApiError> {
            self.keys = keys.to_vec();
            Ok(())
        }

        fn row(&mut self, cells: &mut [Option<BodyCell>]) -> Result<(), ApiError> {
            self.rows.push(cells.iter_mut().map(Option::take).collect());
            Ok(())
        }
    }

    fn rows(body: &str, columns: Option<&[String]>) -> Result<Kept, String> {
        let mut kept = Kept::default();
        let count = read_rows(body.as_bytes(), columns, &mut kept).map_err(|e| e.message)?;
        assert_eq!(count, kept.rows.len());
        Ok(kept)
    }

    fn int(i: i64) -> Option<BodyCell> {
        Some(BodyCell::Value(Value::Int(i)))
    }

    #[test]
    fn objects_become_rows_of_cells() {
        let all = rows(r#"[{"a":1,"b":"x"},{"b":"y","a":2.5}]"#, None).expect("rows");
        assert_eq!(all.keys, vec!["a", "b"]);
        assert_eq!(
            all.rows,
            vec![
                vec![int(1), Some(BodyCell::Value(Value::Text("x".into())))],
                vec![
                    Some(BodyCell::Value(Value::Real(2.5))),
                    Some(BodyCell::Value(Value::Text("y".into())))
                ],
            ]
        );
        let one = rows(r#"{"a":{"n":[1,2]},"b":null}"#, None).expect("rows");
        assert_eq!(
            one.rows[0][0],
            Some(BodyCell::Json(r#"{"n":[1,2]}"#.into()))
        );
        assert_eq!(one.rows[0][1], Some(BodyCell::Value(Value::Null)));
        // columns=: other keys ignored, missing ones absent
        let named = ["b".to_string(), "c".to_string()];
        let all = rows(r#"[{"a":1,"b":2},{"c":3}]"#, Some(&named)).expect("rows");
        assert_eq!(all.keys, named.to_vec());
        assert_eq!(all.rows[1], vec![None, int(3)]);
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
            (r#"{"a":1} x"#, "Empty or invalid json"),
            ("  ", "Empty or invalid json"),
        ] {
            assert_eq!(rows(body, None).err().as_deref(), Some(message), "{body}");
        }
        assert!(rows("[]", None).expect("empty array").rows.is_empty());
    }
}
