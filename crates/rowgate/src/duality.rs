//! JSON-relational duality views (Oracle 23ai, served by ORDS): documents declared in the
//! configuration over a root table and the tables related to it, served like tables. A view's
//! document is a fixed `select=` over its root in PostgREST's embedding syntax (nested arrays
//! and objects follow foreign keys), its first field `_id` the root's primary key. Its
//! top-level fields can be filtered and ordered by their document names, and each document
//! carries `_metadata.etag`, a hash of its fields but those marked `nocheck`.
//!
//! Reads are planned as embedding reads of the root (`api::action_plan`); this module holds
//! the compiled views and the document functions (the etag, the `_metadata` member).

use anyhow::{bail, Context as _};
use rowgate_query::parse::parse_select;
use rowgate_query::SelectItem;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use crate::schema::SchemaCache;

/// `[[duality_views]]`: one view as configured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DualityViewConfig {
    /// Its name, served at `/{prefix}/{name}` like a table.
    pub name: String,
    /// The root table: one document per row.
    pub table: String,
    /// The document's fields, in `select=` syntax, `_id` first:
    /// `_id:team_id,name,points,driver(driverId:driver_id,name,points)`.
    pub document: String,
    /// Fields left out of the etag (`driver.points`): a change to them is not a conflict.
    #[serde(default)]
    pub nocheck: Vec<String>,
}

/// A compiled view.
#[derive(Debug, Clone)]
pub struct DualityView {
    /// Its name.
    pub name: String,
    /// The root table.
    pub table: String,
    /// The document as a `select=` list over the root.
    pub document: Vec<SelectItem>,
    /// Its top-level scalar fields: (document name, root column).
    pub fields: Vec<(String, String)>,
    /// Paths of the fields left out of the etag.
    pub nocheck: Vec<Vec<String>>,
}

impl DualityView {
    /// The root column a top-level document field names.
    pub fn column(&self, field: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, c)| c.as_str())
    }
}

/// Every configured view, by name.
#[derive(Debug, Clone, Default)]
pub struct DualityViews {
    views: Vec<DualityView>,
}

impl DualityViews {
    /// The view named `name`.
    pub fn get(&self, name: &str) -> Option<&DualityView> {
        self.views.iter().find(|v| v.name == name)
    }

    /// Every view.
    pub fn views(&self) -> impl Iterator<Item = &DualityView> {
        self.views.iter()
    }
}

/// Compiles `[[duality_views]]` against the schema: every view names a root table with a
/// one-column primary key, a document that parses, begins with `_id` (that key) and names
/// columns of the root at its top level, and a name no table or view has.
pub fn compile(
    configs: &[DualityViewConfig],
    schema: &SchemaCache,
) -> anyhow::Result<DualityViews> {
    let mut views = Vec::with_capacity(configs.len());
    for (i, c) in configs.iter().enumerate() {
        let at = format!("duality_views[{i}] ({:?})", c.name);
        if c.name.trim().is_empty() {
            bail!("{at}: name is empty");
        }
        if schema.table(&c.name).is_some() {
            bail!("{at}: a table or view of the database has this name");
        }
        if views.iter().any(|v: &DualityView| v.name == c.name) {
            bail!("{at}: declared twice");
        }
        let root = schema
            .table(&c.table)
            .with_context(|| format!("{at}: no table {:?} in the database", c.table))?;
        let [key] = root.primary_key.as_slice() else {
            bail!(
                "{at}: the root table {:?} needs a one-column primary key for the documents' _id",
                c.table
            );
        };
        let document =
            parse_select(&c.document).map_err(|e| anyhow::anyhow!("{at}: document: {e}"))?;
        let mut fields = Vec::new();
        for item in &document {
            match item {
                SelectItem::Column {
                    name, alias, path, ..
                } if path.is_empty() => {
                    if root.column(name).is_none() {
                        bail!("{at}: document: {:?} has no column {name:?}", c.table);
                    }
                    fields.push((alias.clone().unwrap_or_else(|| name.clone()), name.clone()));
                }
                SelectItem::Embed(_) => {}
                _ => bail!("{at}: document: use named columns (no *, no JSON paths)"),
            }
        }
        match fields.first() {
            Some((id, column)) if id == "_id" && column == key => {}
            _ => bail!("{at}: document: the first field must be _id, the primary key: _id:{key}"),
        }
        views.push(DualityView {
            name: c.name.clone(),
            table: c.table.clone(),
            document,
            fields,
            nocheck: c
                .nocheck
                .iter()
                .map(|p| p.split('.').map(str::to_string).collect())
                .collect(),
        });
    }
    Ok(DualityViews { views })
}

/// A document's etag when some fields are not checked: 32 uppercase hex digits of a SHA-256
/// over its JSON (keys sorted, so stable), `_metadata` and the `nocheck` fields left out. A
/// view that checks every field hashes each document's text as the database wrote it
/// ([`with_metadata`]).
pub fn etag(mut document: Json, nocheck: &[Vec<String>]) -> String {
    if let Json::Object(map) = &mut document {
        map.remove("_metadata");
    }
    for path in nocheck {
        remove_path(&mut document, path);
    }
    hex_digest(&serde_json::to_vec(&document).unwrap_or_default())
}

/// 32 uppercase hex digits of the SHA-256 of `bytes`.
fn hex_digest(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut tag = String::with_capacity(32);
    for byte in &digest[..16] {
        tag.push(char::from(HEX[usize::from(byte >> 4)]));
        tag.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    tag
}

/// Upper-case hexadecimal digits.
const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Removes the field at `path`, through arrays (`driver.points`: each driver's points).
fn remove_path(value: &mut Json, path: &[String]) {
    match (value, path) {
        (Json::Array(items), _) => items.iter_mut().for_each(|v| remove_path(v, path)),
        (Json::Object(map), [last]) => {
            map.remove(last);
        }
        (Json::Object(map), [first, rest @ ..]) => {
            if let Some(v) = map.get_mut(first) {
                remove_path(v, rest);
            }
        }
        _ => {}
    }
}

/// The documents of a read (a JSON array of objects, each beginning with `_id`) with
/// `"_metadata":{"etag":…}` after each `_id`, the fields kept in their order; and the etags.
pub fn with_metadata(
    body: &[u8],
    nocheck: &[Vec<String>],
) -> anyhow::Result<(Vec<u8>, Vec<String>)> {
    let documents: Vec<&serde_json::value::RawValue> =
        serde_json::from_slice(body).context("the documents are not a JSON array")?;
    let mut out = Vec::with_capacity(body.len() + documents.len() * 64);
    let mut tags = Vec::with_capacity(documents.len());
    out.push(b'[');
    for (i, raw) in documents.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let text = raw.get();
        // every field checked: the document's own text, as the database wrote it, is hashed
        // (no parse); otherwise the fields not checked are taken out first
        let tag = if nocheck.is_empty() {
            hex_digest(text.as_bytes())
        } else {
            etag(serde_json::from_str(text)?, nocheck)
        };
        // `{"_id":<value>` then the rest: the metadata goes between
        let after_key = text
            .strip_prefix("{\"_id\":")
            .context("a document does not begin with _id")?;
        let mut values =
            serde_json::Deserializer::from_str(after_key).into_iter::<serde::de::IgnoredAny>();
        values.next().context("a document's _id has no value")??;
        let split = text.len() - after_key.len() + values.byte_offset();
        out.extend_from_slice(&text.as_bytes()[..split]);
        out.extend_from_slice(format!(",\"_metadata\":{{\"etag\":\"{tag}\"}}").as_bytes());
        out.extend_from_slice(&text.as_bytes()[split..]);
        tags.push(tag);
    }
    out.push(b']');
    Ok((out, tags))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mistakes in `[[duality_views]]` stop the server at start, naming the view.
    #[test]
    fn bad_views_are_refused_at_load() {
        let conn = rusqlite::Connection::open_in_memory().expect("sqlite");
        conn.execute_batch(
            "CREATE TABLE team (team_id INTEGER PRIMARY KEY, name TEXT);
             CREATE TABLE pair (a INTEGER, b INTEGER, PRIMARY KEY (a, b));",
        )
        .expect("schema");
        let schema = SchemaCache::introspect(&conn).expect("schema");
        let view = |name: &str, table: &str, document: &str| DualityViewConfig {
            name: name.into(),
            table: table.into(),
            document: document.into(),
            nocheck: Vec::new(),
        };
        assert!(compile(&[view("team_dv", "team", "_id:team_id,name")], &schema).is_ok());
        for (config, needle) in [
            (view("team", "team", "_id:team_id"), "has this name"),
            (view("dv", "nope", "_id:team_id"), "no table"),
            (view("dv", "pair", "_id:a"), "one-column primary key"),
            (
                view("dv", "team", "name,_id:team_id"),
                "first field must be _id",
            ),
            (view("dv", "team", "_id:team_id,nope"), "no column"),
            (view("dv", "team", "_id:team_id,*"), "named columns"),
            (view("dv", "team", "_id:team_id,"), "document"),
        ] {
            let err = compile(&[config], &schema).expect_err(needle).to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    /// A view that checks every field hashes each document's text: the same text, the same
    /// etag; any change, another.
    #[test]
    fn fully_checked_documents_hash_their_text() {
        let a = br#"[{"_id":1,"name":"Ferrari","driver":[{"points":1}]}]"#;
        let b = br#"[{"_id":1,"name":"Ferrari","driver":[{"points":2}]}]"#;
        let (_, first) = with_metadata(a, &[]).expect("a");
        let (_, again) = with_metadata(a, &[]).expect("a again");
        let (_, other) = with_metadata(b, &[]).expect("b");
        assert_eq!(first, again);
        assert_ne!(first, other);
        assert_eq!(first[0], hex_digest(&a[1..a.len() - 1]));
    }

    /// `_metadata` goes right after `_id`, the fields keep their order, and the etag ignores
    /// `nocheck` fields and `_metadata` itself.
    #[test]
    fn metadata_follows_the_id_and_etags_ignore_nocheck_fields() {
        let body = br#"[{"_id":"a,b","name":"Ferrari","driver":[{"name":"C","points":1}]}]"#;
        let nocheck = vec![vec!["driver".to_string(), "points".to_string()]];
        let (out, tags) = with_metadata(body, &nocheck).expect("documents");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(
            text,
            format!(
                r#"[{{"_id":"a,b","_metadata":{{"etag":"{}"}},"name":"Ferrari","driver":[{{"name":"C","points":1}}]}}]"#,
                tags[0]
            )
        );
        assert_eq!(tags[0].len(), 32);
        let moved: Json = serde_json::from_str(
            r#"{"_id":"a,b","name":"Ferrari","driver":[{"name":"C","points":99}]}"#,
        )
        .expect("json");
        assert_eq!(etag(moved, &nocheck), tags[0], "points are not checked");
        let renamed: Json = serde_json::from_str(
            r#"{"_id":"a,b","name":"Ferrari","driver":[{"name":"D","points":1}]}"#,
        )
        .expect("json");
        assert_ne!(etag(renamed, &nocheck), tags[0]);
    }
}
