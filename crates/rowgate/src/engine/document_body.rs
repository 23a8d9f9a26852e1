//! A duality document's body read by the view's shape ([`DocTable`]), never as a tree of
//! `serde_json::Value`s (32 bytes and often an allocation per element: a 10 MB array of `[]`
//! took 245 MB). Each member is read as what the document has at its place: a field's value as
//! a [`Member`] (a nested object or array as its compact text), a referred row as its object,
//! an array of rows as their objects, `_metadata` as its etag. What the document cannot hold
//! is refused as soon as it is read, before the rest of the body: a body that is not one
//! object, a member the document has no field for, a row that is not an object, and rows
//! beyond `limits.max_document_rows` (every array at every depth together).

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

use super::body::{self, BodyMedia, Member, MemberSeed};
use crate::duality::{DocTable, DualityView};
use crate::error::{ApiError, ErrorCode};

/// One object of a document: its members by name (the last of a repeated name kept).
pub type DocObject = BTreeMap<String, DocMember>;

/// A member of a document's object, read as what the document has at its place.
#[derive(Debug, Clone, PartialEq)]
pub enum DocMember {
    /// A field (of this table or of a table spread into it).
    Field(Member),
    /// A row the object refers to: its object, or none (`null`).
    Referred(Option<DocObject>),
    /// The rows of a nested array (`null`: none).
    Rows(Vec<DocObject>),
    /// `_metadata`: its `etag`, when it is a string.
    Metadata(Option<String>),
}

impl DocMember {
    /// The member as a field's value, when it is one.
    pub fn field(&self) -> Option<&Member> {
        match self {
            DocMember::Field(m) => Some(m),
            _ => None,
        }
    }
}

/// Reads a document of `view` from a request's body: JSON, or a URL-encoded form (one object of
/// strings); at most `max_rows` rows in its arrays.
pub fn read_document(
    view: &DualityView,
    content_type: Option<&str>,
    raw: &[u8],
    max_rows: usize,
) -> Result<DocObject, ApiError> {
    let reader = Reader {
        view: &view.name,
        max_rows,
        rows: Cell::new(0),
        refusal: RefCell::new(None),
    };
    match body::body_media(content_type, raw)? {
        BodyMedia::Json => {
            if raw.iter().all(u8::is_ascii_whitespace) {
                return Err(body::empty_json());
            }
            let mut d = serde_json::Deserializer::from_slice(raw);
            let read = ObjectSeed {
                reader: &reader,
                node: &view.root,
                place: Place::Root,
            }
            .deserialize(&mut d)
            .and_then(|object| d.end().map(|()| object));
            match (read, reader.refusal.into_inner()) {
                (_, Some(refusal)) => Err(refusal),
                (Ok(Some(object)), None) => Ok(object),
                (Ok(None), None) => Err(not_one_object(&view.name)),
                (Err(e), None) => Err(body::invalid_json(e)),
            }
        }
        BodyMedia::Form => {
            let mut object = DocObject::new();
            for (name, value) in body::form_pairs(raw)? {
                match kind_of(&view.root, &name) {
                    Some(Kind::Field) => {
                        object.insert(
                            name.into_owned(),
                            DocMember::Field(Member::Scalar(Json::String(value.into_owned()))),
                        );
                    }
                    Some(_) => {
                        return Err(ApiError::new(
                            ErrorCode::InvalidBody,
                            format!("'{name}' holds rows: send the document as JSON"),
                        ))
                    }
                    None => return Err(unknown_member(&view.root, &name)),
                }
            }
            Ok(object)
        }
        BodyMedia::Csv => Err(not_one_object(&view.name)),
    }
}

/// The refusal of a body that is not one object.
fn not_one_object(view: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidBody,
        format!("a document of '{view}' must be one JSON object"),
    )
}

/// The refusal of a member the document has no field for at `node`'s place.
fn unknown_member(node: &DocTable, name: &str) -> ApiError {
    fn known<'t>(node: &'t DocTable, out: &mut Vec<&'t str>) {
        out.extend(node.fields.iter().map(|f| f.name.as_str()));
        for n in &node.nested {
            match &n.member {
                Some(m) => out.push(m),
                None => known(n, out),
            }
        }
    }
    let mut names = Vec::new();
    known(node, &mut names);
    ApiError::new(
        ErrorCode::InvalidBody,
        format!("the document has no field '{name}' here"),
    )
    .hint(format!("the fields here: {}", names.join(", ")))
}

/// What a member name is at a table's place.
enum Kind<'t> {
    /// A field of the table or of a table spread into it.
    Field,
    /// A table the row refers to (an object).
    Referred(&'t DocTable),
    /// A table whose rows are nested (an array).
    Rows(&'t DocTable),
    /// `_metadata`.
    Metadata,
}

fn kind_of<'t>(node: &'t DocTable, name: &str) -> Option<Kind<'t>> {
    if name == "_metadata" {
        return Some(Kind::Metadata);
    }
    if node.fields.iter().any(|f| f.name == name) {
        return Some(Kind::Field);
    }
    node.nested.iter().find_map(|n| match &n.member {
        Some(m) if m == name => Some(if n.referred {
            Kind::Referred(n)
        } else {
            Kind::Rows(n)
        }),
        Some(_) => None,
        None => kind_of(n, name).filter(|k| !matches!(k, Kind::Metadata)),
    })
}

/// What one read shares: the rows counted so far, and the refusal that stopped it.
struct Reader<'v> {
    view: &'v str,
    max_rows: usize,
    rows: Cell<usize>,
    refusal: RefCell<Option<ApiError>>,
}

impl Reader<'_> {
    /// Stops the read with `refusal` (the first one given is the answer).
    fn refuse<E: de::Error>(&self, refusal: ApiError) -> E {
        self.refusal.borrow_mut().get_or_insert(refusal);
        E::custom("refused")
    }
}

/// Where an object is read, for the refusal of something else there.
#[derive(Clone, Copy)]
enum Place<'t> {
    /// The document itself.
    Root,
    /// A referred row's member (`null` is none).
    Referred(&'t str),
    /// A row of an array.
    Row(&'t DocTable),
}

/// An object of `node`'s table at `place`: `None` for `null` where that is allowed.
struct ObjectSeed<'r, 't> {
    reader: &'r Reader<'r>,
    node: &'t DocTable,
    place: Place<'t>,
}

impl ObjectSeed<'_, '_> {
    fn wrong<E: de::Error>(&self) -> E {
        self.reader.refuse(match self.place {
            Place::Root => not_one_object(self.reader.view),
            Place::Referred(member) => ApiError::new(
                ErrorCode::InvalidBody,
                format!("'{member}' must be an object or null"),
            ),
            Place::Row(node) => ApiError::new(
                ErrorCode::InvalidBody,
                format!("the rows of '{}' must be objects", node.path),
            ),
        })
    }
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = Option<DocObject>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// The visits of anything but the one a seed wants: each a refusal by `$wrong`.
macro_rules! refuse_other_values {
    ($wrong:ident, $value:ty) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$value, E> {
            Err(self.$wrong())
        }

        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$value, E> {
            Err(self.$wrong())
        }

        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$value, E> {
            Err(self.$wrong())
        }

        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$value, E> {
            Err(self.$wrong())
        }

        fn visit_str<E: de::Error>(self, _: &str) -> Result<$value, E> {
            Err(self.$wrong())
        }
    };
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = Option<DocObject>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    refuse_other_values!(wrong, Option<DocObject>);

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        match self.place {
            Place::Referred(_) => Ok(None),
            Place::Root | Place::Row(_) => Err(self.wrong()),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(self.wrong())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let reader = self.reader;
        let mut object = DocObject::new();
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            let member = match kind_of(self.node, &name) {
                None => return Err(reader.refuse(unknown_member(self.node, &name))),
                Some(Kind::Field) => DocMember::Field(map.next_value_seed(MemberSeed)?),
                Some(Kind::Metadata) => DocMember::Metadata(map.next_value_seed(EtagSeed)?),
                Some(Kind::Referred(child)) => {
                    DocMember::Referred(map.next_value_seed(ObjectSeed {
                        reader,
                        node: child,
                        place: Place::Referred(&name),
                    })?)
                }
                Some(Kind::Rows(child)) => DocMember::Rows(map.next_value_seed(RowsSeed {
                    reader,
                    node: child,
                    member: &name,
                })?),
            };
            object.insert(name.into_owned(), member);
        }
        Ok(Some(object))
    }
}

/// The rows of `node`'s table, an array member of its parent (`null`: none).
struct RowsSeed<'r, 't> {
    reader: &'r Reader<'r>,
    node: &'t DocTable,
    member: &'t str,
}

impl RowsSeed<'_, '_> {
    fn wrong<E: de::Error>(&self) -> E {
        self.reader.refuse(ApiError::new(
            ErrorCode::InvalidBody,
            format!("'{}' must be an array of objects", self.member),
        ))
    }
}

impl<'de> DeserializeSeed<'de> for RowsSeed<'_, '_> {
    type Value = Vec<DocObject>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RowsSeed<'_, '_> {
    type Value = Vec<DocObject>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of objects")
    }

    refuse_other_values!(wrong, Vec<DocObject>);

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(self.wrong())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let reader = self.reader;
        let mut rows = Vec::new();
        loop {
            let row = ObjectSeed {
                reader,
                node: self.node,
                place: Place::Row(self.node),
            };
            let Some(object) = seq.next_element_seed(row)? else {
                return Ok(rows);
            };
            let counted = reader.rows.get() + 1;
            if counted > reader.max_rows {
                return Err(reader.refuse(
                    ApiError::new(
                        ErrorCode::LimitExceeded,
                        format!(
                            "the document nests more than {} rows; the limit is {}",
                            reader.max_rows, reader.max_rows
                        ),
                    )
                    .hint("write the rows in several requests, or raise limits.max_document_rows"),
                ));
            }
            reader.rows.set(counted);
            // (a row is an object: `null` is refused by its seed)
            rows.extend(object);
        }
    }
}

/// `_metadata`'s `etag`, when it is an object holding a string there; anything else is read
/// through and ignored.
struct EtagSeed;

impl<'de> DeserializeSeed<'de> for EtagSeed {
    type Value = Option<String>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EtagSeed {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut etag = None;
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            if name == "etag" {
                etag = match map.next_value::<MemberOrNothing>()? {
                    MemberOrNothing(Some(text)) => Some(text),
                    MemberOrNothing(None) => None,
                };
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(etag)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A string, or nothing for any other value (read through).
struct MemberOrNothing(Option<String>);

impl<'de> serde::Deserialize<'de> for MemberOrNothing {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(MemberOrNothing(match MemberSeed.deserialize(d)? {
            Member::Scalar(Json::String(s)) => Some(s),
            _ => None,
        }))
    }
}
