//! A write's body read by its media type (JSON, a URL-encoded form, CSV) without building a
//! representation of it whole: an insert's rows handed to a [`RowSink`] one by one, the one
//! object of a PATCH or PUT with only the members the table can take. A `serde_json::Value` of a
//! body costs up to 30 times its size (an element of a few bytes becomes 32 bytes and an
//! allocation); a form of millions of fields was millions of pairs, then a map of them.
//!
//! What is kept of a body whose keys the table lacks is only what the answer needs: the
//! refusal names the first unknown key in the order the planner reads the keys (a form's and
//! CSV's in key order, a JSON object's as written), so that key is kept, the others are not.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::rows::{BodyCell, RowSink};
use crate::error::{ApiError, ErrorCode};
use rowgate_query::Value;

/// How a write's body is read, by its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMedia {
    /// JSON (`application/json`, `application/merge-patch+json`, none), or JSON sent labelled
    /// as a form (`curl -d '{…}'`), taken for what it is.
    Json,
    /// A URL-encoded form: one object of strings.
    Form,
    /// CSV: a header line naming the columns, then one line per row.
    Csv,
}

/// How `body` is read under its declared `content_type` (absent: JSON; 415 for a type it
/// cannot be).
pub fn body_media(content_type: Option<&str>, body: &[u8]) -> Result<BodyMedia, ApiError> {
    let content_type = content_type.unwrap_or("application/json");
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "application/json" | "application/merge-patch+json" | "" => Ok(BodyMedia::Json),
        "application/x-www-form-urlencoded" => {
            // `curl -d '{…}'` sends JSON labelled as a form: take it for what it is (checked
            // without building it)
            let trimmed = body.trim_ascii_start();
            let json = (trimmed.starts_with(b"{") || trimmed.starts_with(b"["))
                && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
            Ok(if json {
                BodyMedia::Json
            } else {
                BodyMedia::Form
            })
        }
        "text/csv" => Ok(BodyMedia::Csv),
        _ => Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!("unsupported Content-Type {content_type:?}"),
        )
        .hint("send application/json, application/x-www-form-urlencoded or text/csv")),
    }
}

/// The refusal of a body of nothing but whitespace.
pub fn empty_json() -> ApiError {
    ApiError::new(ErrorCode::InvalidBody, "Empty or invalid json")
        .hint("send a JSON object or an array of objects")
}

/// The refusal of a body that is not JSON.
pub fn invalid_json(e: serde_json::Error) -> ApiError {
    ApiError::new(ErrorCode::InvalidBody, "Empty or invalid json").details(e.to_string())
}

/// A CSV body's reader (a header line, then records).
pub fn csv_reader(body: &[u8]) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new().from_reader(body)
}

/// The refusal of a CSV body that cannot be read.
pub fn invalid_csv(e: csv::Error) -> ApiError {
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths { .. } => "All lines must have same number of fields",
        _ => "Empty or invalid csv",
    };
    ApiError::new(ErrorCode::InvalidBody, message).details(e.to_string())
}

/// A CSV field as a JSON body's value: `NULL` is null, as PostgREST reads it.
pub fn csv_field(field: &str) -> Option<&str> {
    (field != "NULL").then_some(field)
}

/// An insert body as rows (see [`super::rows`]), each read straight into them: JSON, a form,
/// CSV.
pub fn read_rows(
    content_type: Option<&str>,
    body: &[u8],
    columns: Option<&[String]>,
    sink: &mut dyn RowSink,
) -> Result<usize, ApiError> {
    match body_media(content_type, body)? {
        BodyMedia::Json => super::rows::read_rows(body, columns, sink),
        BodyMedia::Form => read_form_rows(body, columns, sink),
        BodyMedia::Csv => read_csv_rows(body, columns, sink),
    }
}

/// What a key of a body is to a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// A column it writes.
    Kept,
    /// Left out (`columns=` does not name it).
    Ignored,
    /// A key the table lacks: refused.
    Unknown,
}

/// Whether `sink` takes `key`, under `columns=`.
fn wanted_by(sink: &dyn RowSink, columns: Option<&[String]>, key: &str) -> Wanted {
    match columns {
        Some(columns) if columns.iter().any(|c| c == key) => Wanted::Kept,
        Some(_) => Wanted::Ignored,
        None if sink.knows(key) => Wanted::Kept,
        None => Wanted::Unknown,
    }
}

/// A form body as one row of strings, its pairs read one by one.
fn read_form_rows(
    body: &[u8],
    columns: Option<&[String]>,
    sink: &mut dyn RowSink,
) -> Result<usize, ApiError> {
    let members = {
        let wanted = |key: &str| wanted_by(&*sink, columns, key);
        let mut row = Gathering::new(&wanted);
        for (key, value) in form_pairs(body)? {
            row.add(&key, || {
                Ok::<_, ApiError>(Member::Scalar(Json::String(value.into_owned())))
            })?;
        }
        row.finish()
    };
    let (keys, cells): (Vec<String>, Vec<Option<BodyCell>>) = members
        .into_iter()
        .map(|(k, m)| (k, Some(m.into_cell())))
        .unzip();
    hand_row(sink, columns, keys, cells)?;
    Ok(1)
}

/// Hands one gathered row to `sink`: under `columns=` its cells in their order (absent keys
/// absent), else its own keys.
fn hand_row(
    sink: &mut dyn RowSink,
    columns: Option<&[String]>,
    keys: Vec<String>,
    mut cells: Vec<Option<BodyCell>>,
) -> Result<(), ApiError> {
    match columns {
        Some(columns) => sink.row(&mut in_order(columns, &keys, &mut cells)),
        None => {
            sink.keys(&keys)?;
            sink.row(&mut cells)
        }
    }
}

/// The cells of `keys` in the order of `columns=` (a column no key gives: absent).
fn in_order(
    columns: &[String],
    keys: &[String],
    cells: &mut [Option<BodyCell>],
) -> Vec<Option<BodyCell>> {
    columns
        .iter()
        .map(|c| {
            keys.iter()
                .position(|k| k == c)
                .and_then(|i| cells[i].take())
        })
        .collect()
}

/// A CSV body's rows, read record by record (once through first, so that a malformed line is
/// refused before any row is judged, as when the rows were read whole). The columns are the
/// header's names in key order, a repeated one taking its last field.
fn read_csv_rows(
    body: &[u8],
    columns: Option<&[String]>,
    sink: &mut dyn RowSink,
) -> Result<usize, ApiError> {
    let records = check_csv(body)?;
    if let Some(columns) = columns {
        sink.keys(columns)?;
    }
    let mut reader = csv_reader(body);
    let names = reader.headers().map_err(invalid_csv)?.clone();
    // each key's field: the last of its name (the first unknown key's: none)
    let mut fields: BTreeMap<&str, Option<usize>> = BTreeMap::new();
    let mut first_unknown: Option<&str> = None;
    for (i, name) in names.iter().enumerate() {
        match wanted_by(sink, columns, name) {
            Wanted::Kept => {
                fields.insert(name, Some(i));
            }
            Wanted::Ignored => {}
            Wanted::Unknown => {
                if first_unknown.is_none_or(|u| name < u) {
                    first_unknown = Some(name);
                }
            }
        }
    }
    if let Some(unknown) = first_unknown {
        fields.insert(unknown, None);
    }
    let keys: Vec<String> = fields.keys().map(|k| k.to_string()).collect();
    let index: Vec<Option<usize>> = fields.into_values().collect();
    let mut record = csv::StringRecord::new();
    let mut cells: Vec<Option<BodyCell>> = Vec::with_capacity(keys.len());
    let mut count = 0;
    while reader.read_record(&mut record).map_err(invalid_csv)? {
        if count == 0 && columns.is_none() {
            sink.keys(&keys)?;
        }
        cells.clear();
        cells.extend(index.iter().map(|i| {
            i.and_then(|i| record.get(i)).map(|field| {
                BodyCell::Value(csv_field(field).map_or(Value::Null, |t| Value::Text(t.into())))
            })
        }));
        match columns {
            Some(columns) => sink.row(&mut in_order(columns, &keys, &mut cells))?,
            None => sink.row(&mut cells)?,
        }
        count += 1;
    }
    debug_assert_eq!(count, records);
    Ok(count)
}

/// Reads a CSV body through once: its number of records, or the refusal of its first
/// malformed line.
fn check_csv(body: &[u8]) -> Result<usize, ApiError> {
    let mut reader = csv_reader(body);
    reader.headers().map_err(invalid_csv)?;
    let mut record = csv::ByteRecord::new();
    let mut count = 0;
    while reader.read_byte_record(&mut record).map_err(invalid_csv)? {
        count += 1;
    }
    Ok(count)
}

/// A decoded name and value of a URL-encoded form.
pub type FormPair<'a> = (Cow<'a, str>, Cow<'a, str>);

/// A URL-encoded form (a body or a query string) as its name/value pairs. Names and values
/// must decode to UTF-8: a byte sequence that does not (`name=%ff`) is refused (400) rather than
/// taken as U+FFFD. `form_urlencoded` decodes lossily, so only a pair holding U+FFFD is decoded
/// again strictly, to tell a replacement from a U+FFFD the client sent.
/// The pairs are decoded as they are iterated (a form of millions of fields is not held as
/// millions of pairs); the check reads them once before.
pub fn form_pairs(raw: &[u8]) -> Result<form_urlencoded::Parse<'_>, ApiError> {
    let pairs = form_urlencoded::parse(raw);
    let lossy = |s: &str| s.contains(char::REPLACEMENT_CHARACTER);
    if pairs.clone().any(|(k, v)| lossy(&k) || lossy(&v)) {
        for part in raw.split(|&b| matches!(b, b'&' | b'=')) {
            let spaced: Vec<u8> = part
                .iter()
                .map(|&b| if b == b'+' { b' ' } else { b })
                .collect();
            if let Err(e) = percent_encoding::percent_decode(&spaced).decode_utf8() {
                return Err(ApiError::new(
                    ErrorCode::InvalidBody,
                    "a form or query string value is not valid UTF-8 once decoded",
                )
                .details(e.to_string())
                .hint("percent-encode text as UTF-8"));
            }
        }
    }
    Ok(pairs)
}

/// A member of a PATCH or PUT body's object: a scalar as JSON, a nested object or array as its
/// compact text ([`super::compact`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Member {
    /// A string, number, boolean or null.
    Scalar(Json),
    /// An object or array, as the compact text a `serde_json::Value` of it prints.
    Nested(String),
}

impl Member {
    /// The member as an insert's cell.
    pub fn into_cell(self) -> BodyCell {
        match self {
            Member::Scalar(v) => super::rows::body_cell(&v),
            Member::Nested(text) => BodyCell::Json(text),
        }
    }

    /// Whether it is null.
    pub fn is_null(&self) -> bool {
        matches!(self, Member::Scalar(Json::Null))
    }
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Member::Scalar(v) => v.fmt(f),
            Member::Nested(text) => f.write_str(text),
        }
    }
}

/// The members of a PATCH or PUT body's object that a write takes, by key (the last of a
/// repeated key kept), with the first key the table lacks (as null).
pub type Members = BTreeMap<String, Member>;

/// A PATCH or PUT body's shape ([`Shape::one_object`] takes its one object): an object, or an
/// array whose first element is read (a form is one object, CSV an array of its lines). Only
/// the members `wanted` keeps are read, and the first key in key order it says is unknown. The
/// whole body is read: a malformed one is refused as such, whatever its shape.
pub fn read_one_object(
    content_type: Option<&str>,
    body: &[u8],
    wanted: &dyn Fn(&str) -> Wanted,
) -> Result<Shape, ApiError> {
    let shape = match body_media(content_type, body)? {
        BodyMedia::Json => {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Err(empty_json());
            }
            let mut json = serde_json::Deserializer::from_slice(body);
            let shape = serde::de::DeserializeSeed::deserialize(ShapeSeed { wanted }, &mut json)
                .and_then(|shape| json.end().map(|()| shape))
                .map_err(invalid_json)?;
            shape
        }
        BodyMedia::Form => {
            let mut object = Gathering::new(wanted);
            for (key, value) in form_pairs(body)? {
                object.add(&key, || {
                    Ok::<_, ApiError>(Member::Scalar(Json::String(value.into())))
                })?;
            }
            Shape::Object(object.finish())
        }
        BodyMedia::Csv => {
            let records = check_csv(body)?;
            let mut reader = csv_reader(body);
            let names = reader.headers().map_err(invalid_csv)?.clone();
            let mut record = csv::StringRecord::new();
            let first = if reader.read_record(&mut record).map_err(invalid_csv)? {
                let mut object = Gathering::new(wanted);
                for (name, field) in names.iter().zip(record.iter()) {
                    object.add(name, || {
                        Ok::<_, ApiError>(Member::Scalar(
                            csv_field(field).map_or(Json::Null, |t| Json::String(t.into())),
                        ))
                    })?;
                }
                Some(Some(object.finish()))
            } else {
                None
            };
            Shape::Array {
                first,
                len: records,
                all_objects: true,
            }
        }
    };
    Ok(shape)
}

impl Shape {
    /// The one object, `None` for `[]`; refused for any other shape.
    pub fn one_object(self, method: &str) -> Result<Option<Members>, ApiError> {
        let refusal = || {
            ApiError::new(
                ErrorCode::InvalidBody,
                format!("the {method} body must be one JSON object, or an array of one"),
            )
        };
        match self {
            Shape::Object(members) => Ok(Some(members)),
            Shape::Array { len: 0, .. } => Ok(None),
            Shape::Array {
                first: Some(Some(members)),
                len: 1,
                ..
            } => Ok(Some(members)),
            Shape::Array { len, .. } => {
                Err(refusal().details(format!("an array of {len} elements")))
            }
            Shape::Other => Err(refusal()),
        }
    }
}

/// What a PATCH or PUT body is, read by [`read_one_object`].
pub enum Shape {
    /// An object's members.
    Object(Members),
    /// An array: its first element (`Some(None)`: not an object) and its length.
    Array {
        /// Its first element's members (`Some(None)`: not an object).
        first: Option<Option<Members>>,
        /// Its number of elements.
        len: usize,
        /// Whether every element is an object (rows).
        all_objects: bool,
    },
    /// A string, number, boolean or null.
    Other,
}

/// An object's members as they are read: those wanted, and the first unknown key.
struct Gathering<'w> {
    wanted: &'w dyn Fn(&str) -> Wanted,
    members: Members,
    first_unknown: Option<String>,
}

impl<'w> Gathering<'w> {
    fn new(wanted: &'w dyn Fn(&str) -> Wanted) -> Gathering<'w> {
        Gathering {
            wanted,
            members: Members::new(),
            first_unknown: None,
        }
    }

    /// The member `key`: its value read by `value` when it is wanted.
    fn add<E>(&mut self, key: &str, value: impl FnOnce() -> Result<Member, E>) -> Result<bool, E> {
        match (self.wanted)(key) {
            Wanted::Kept => {
                let value = value()?;
                self.members.insert(key.to_string(), value);
                Ok(true)
            }
            Wanted::Ignored => Ok(false),
            Wanted::Unknown => {
                if self.first_unknown.as_deref().is_none_or(|u| key < u) {
                    self.first_unknown = Some(key.to_string());
                }
                Ok(false)
            }
        }
    }

    fn finish(mut self) -> Members {
        if let Some(unknown) = self.first_unknown {
            self.members.insert(unknown, Member::Scalar(Json::Null));
        }
        self.members
    }
}

/// Reads a JSON body's shape, its object (or its array's first object) gathered.
struct ShapeSeed<'w> {
    wanted: &'w dyn Fn(&str) -> Wanted,
}

impl<'de> serde::de::DeserializeSeed<'de> for ShapeSeed<'_> {
    type Value = Shape;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Shape, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ShapeSeed<'_> {
    type Value = Shape;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Shape, A::Error> {
        gather(map, self.wanted).map(Shape::Object)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let Some(first) = seq.next_element_seed(ElementSeed {
            wanted: self.wanted,
        })?
        else {
            return Ok(Shape::Array {
                first: None,
                len: 0,
                all_objects: true,
            });
        };
        let mut len = 1;
        let mut all_objects = first.is_some();
        while let Some(object) = seq.next_element_seed(IsObject)? {
            all_objects = all_objects && object;
            len += 1;
        }
        Ok(Shape::Array {
            first: Some(first),
            len,
            all_objects,
        })
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Other)
    }
}

/// An array's first element: its object gathered, anything else read through (`None`).
struct ElementSeed<'w> {
    wanted: &'w dyn Fn(&str) -> Wanted,
}

impl<'de> serde::de::DeserializeSeed<'de> for ElementSeed<'_> {
    type Value = Option<Members>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<Members>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ElementSeed<'_> {
    type Value = Option<Members>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        gather(map, self.wanted).map(Some)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A JSON object's members, gathered: the others are read through.
fn gather<'de, A: serde::de::MapAccess<'de>>(
    mut map: A,
    wanted: &dyn Fn(&str) -> Wanted,
) -> Result<Members, A::Error> {
    let mut object = Gathering::new(wanted);
    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
        let taken = object.add(&key, || map.next_value_seed(MemberSeed))?;
        if !taken {
            map.next_value::<serde::de::IgnoredAny>()?;
        }
    }
    Ok(object.finish())
}

/// Whether a JSON value is an object, read through.
struct IsObject;

impl<'de> serde::de::DeserializeSeed<'de> for IsObject {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for IsObject {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(true)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// One member's value: a scalar as JSON, an object or array as compact text.
pub struct MemberSeed;

impl<'de> serde::de::DeserializeSeed<'de> for MemberSeed {
    type Value = Member;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Member, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for MemberSeed {
    type Value = Member;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Member, A::Error> {
        let mut text = Vec::new();
        super::compact::write_map(map, &mut text)?;
        Ok(Member::Nested(String::from_utf8(text).unwrap_or_default()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Member, A::Error> {
        let mut text = Vec::new();
        super::compact::write_seq(seq, &mut text)?;
        Ok(Member::Nested(String::from_utf8(text).unwrap_or_default()))
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Member, E> {
        Ok(Member::Scalar(Json::Bool(b)))
    }

    fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<Member, E> {
        Ok(Member::Scalar(Json::from(i)))
    }

    fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<Member, E> {
        Ok(Member::Scalar(Json::from(u)))
    }

    fn visit_f64<E: serde::de::Error>(self, f: f64) -> Result<Member, E> {
        Ok(Member::Scalar(Json::from(f)))
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Member, E> {
        Ok(Member::Scalar(Json::String(s.to_string())))
    }

    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Member, E> {
        Ok(Member::Scalar(Json::String(s)))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Member, E> {
        Ok(Member::Scalar(Json::Null))
    }
}
