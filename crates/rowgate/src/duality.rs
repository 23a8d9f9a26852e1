//! JSON-relational duality views (Oracle 23ai, served by ORDS): documents declared in the
//! configuration over a root table and the tables related to it, served like tables. A view's
//! document is a fixed `select=` over its root in PostgREST's embedding syntax (nested arrays
//! and objects follow foreign keys), its first field `_id` the root's primary key. Its
//! top-level fields can be filtered and ordered by their document names, and each document
//! carries `_metadata.etag`, a hash of its fields but those marked `nocheck`.
//!
//! Reads are planned as embedding reads of the root (`api::action_plan`), writes by
//! `api::document_write` over the view's tables as compiled here ([`DocTable`]: each table of
//! the document with its fields, how it links to its parent, and what a write may do to it, as
//! Oracle's `WITH INSERT UPDATE DELETE`, `NOUPDATE` and `NOCHECK` annotations say); this module
//! holds the compiled views and the document functions (the etag, the `_metadata` member).

use anyhow::{bail, Context as _};
use rowgate_query::parse::parse_select;
use rowgate_query::SelectItem;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::schema::relationships::{self, Cardinality};
use crate::schema::{SchemaCache, Table};

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
    /// Fields left out of the etag (`driver.points`), or whole tables (`team`): a change to
    /// them is not a conflict.
    #[serde(default)]
    pub nocheck: Vec<String>,
    /// Fields a write may not change (`laps`): a document changing one is refused.
    #[serde(default)]
    pub noupdate: Vec<String>,
    /// Tables whose rows a write may insert: the root by its table name, the others by their
    /// place in the document (`driver`, a spread by its relation: `race.race`). None by default:
    /// a view is read-only until given permissions, as in Oracle.
    #[serde(default)]
    pub insert: Vec<String>,
    /// Tables whose rows a write may update.
    #[serde(default)]
    pub update: Vec<String>,
    /// Tables whose rows a write may delete.
    #[serde(default)]
    pub delete: Vec<String>,
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
    /// The root table and, nested, the others: what writes work with.
    pub root: DocTable,
}

/// One table of a document as writes see it.
#[derive(Debug, Clone, PartialEq)]
pub struct DocTable {
    /// Its name in the permissions: the root's table name, else its place in the document.
    pub path: String,
    /// The document member holding its rows (an array or an object); `None` for the root and
    /// for a spread, whose fields are its parent's.
    pub member: Option<String>,
    /// The table.
    pub table: String,
    /// Its rows form an array (the table refers to the parent row), not one object.
    pub many: bool,
    /// Column pairs (parent column, own column) that are equal.
    pub link: Vec<(String, String)>,
    /// The parent row holds the foreign key (this row is referred to, to-one): a document
    /// names the row by its key and the parent's column follows it.
    pub referred: bool,
    /// Related through a junction table: read-only in writes.
    pub junction: bool,
    /// Its one-column primary key, when it has one.
    pub key: Option<String>,
    /// Its fields, in document order.
    pub fields: Vec<DocField>,
    /// The tables nested in it.
    pub nested: Vec<DocTable>,
    /// A write may insert its rows.
    pub insert: bool,
    /// A write may update its rows.
    pub update: bool,
    /// A write may delete its rows.
    pub delete: bool,
}

impl DocTable {
    /// Its field for `column`.
    pub fn field_of(&self, column: &str) -> Option<&DocField> {
        self.fields.iter().find(|f| f.column == column)
    }

    /// Whether a write may change anything in it or below.
    pub fn writable(&self) -> bool {
        self.insert || self.update || self.delete || self.nested.iter().any(DocTable::writable)
    }

    fn each<'t>(&'t self, out: &mut Vec<&'t DocTable>) {
        out.push(self);
        for n in &self.nested {
            n.each(out);
        }
    }
}

/// One scalar field of a document.
#[derive(Debug, Clone, PartialEq)]
pub struct DocField {
    /// Its name in the document.
    pub name: String,
    /// Its column.
    pub column: String,
    /// Its path in the document (`driver.points`; a spread's fields are its parent's).
    pub path: Vec<String>,
    /// A write may not change it.
    pub noupdate: bool,
    /// Left out of the etag.
    pub nocheck: bool,
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

impl DualityView {
    /// Every table of the document, the root first.
    pub fn tables(&self) -> Vec<&DocTable> {
        let mut out = Vec::new();
        self.root.each(&mut out);
        out
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
        let mut root = doc_table(schema, root, &document, DocPlace::root(&c.table))
            .map_err(|e| anyhow::anyhow!("{at}: document: {e:#}"))?;
        let fields: Vec<(String, String)> = root
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.column.clone()))
            .collect();
        let id_first = matches!(document.first(), Some(SelectItem::Column { .. }));
        match fields.first() {
            Some((id, column)) if id_first && id == "_id" && column == key => {}
            _ => bail!("{at}: document: the first field must be _id, the primary key: _id:{key}"),
        }
        let nocheck = annotate(&mut root, c).map_err(|e| anyhow::anyhow!("{at}: {e:#}"))?;
        views.push(DualityView {
            name: c.name.clone(),
            table: c.table.clone(),
            document,
            fields,
            nocheck,
            root,
        });
    }
    Ok(DualityViews { views })
}

/// Where a table sits in a document.
struct DocPlace {
    /// Its permissions name.
    path: String,
    /// The document path of its fields' object.
    doc: Vec<String>,
    /// The member holding it.
    member: Option<String>,
    /// The root: its nested tables are named by their members alone.
    root: bool,
}

impl DocPlace {
    fn root(table: &str) -> DocPlace {
        DocPlace {
            path: table.to_string(),
            doc: Vec::new(),
            member: None,
            root: true,
        }
    }
}

/// The document's tables from its `select=` list over `table`, relationships resolved as
/// embedding resolves them.
fn doc_table(
    schema: &SchemaCache,
    table: &Table,
    select: &[SelectItem],
    place: DocPlace,
) -> anyhow::Result<DocTable> {
    let mut node = DocTable {
        path: place.path.clone(),
        member: place.member,
        table: table.name.clone(),
        many: false,
        link: Vec::new(),
        referred: false,
        junction: false,
        key: match table.primary_key.as_slice() {
            [key] => Some(key.clone()),
            _ => None,
        },
        fields: Vec::new(),
        nested: Vec::new(),
        insert: false,
        update: false,
        delete: false,
    };
    let nested_path = |key: &str| {
        if place.root {
            key.to_string()
        } else {
            format!("{}.{key}", place.path)
        }
    };
    for item in select {
        match item {
            SelectItem::Column {
                name,
                alias,
                path,
                aggregate: None,
                ..
            } if path.is_empty() => {
                if table.column(name).is_none() {
                    bail!("{:?} has no column {name:?}", table.name);
                }
                let field = alias.clone().unwrap_or_else(|| name.clone());
                let mut doc = place.doc.clone();
                doc.push(field.clone());
                node.fields.push(DocField {
                    name: field,
                    column: name.clone(),
                    path: doc,
                    noupdate: false,
                    nocheck: false,
                });
            }
            SelectItem::Embed(e) => {
                let rel = relationships::find(schema, table, &e.relation, e.hint.as_deref())
                    .map_err(|_| {
                        anyhow::anyhow!(
                            "no single relationship between {:?} and {:?} (a !hint picks one)",
                            table.name,
                            e.relation
                        )
                    })?;
                let related = schema
                    .table(&rel.related)
                    .with_context(|| format!("no table {:?}", rel.related))?;
                let key = e.alias.clone().unwrap_or_else(|| e.relation.clone());
                let path = nested_path(&key);
                let (doc, member) = if e.spread {
                    (place.doc.clone(), None)
                } else {
                    let mut doc = place.doc.clone();
                    doc.push(key.clone());
                    (doc, Some(key))
                };
                let mut child = doc_table(
                    schema,
                    related,
                    &e.select,
                    DocPlace {
                        path,
                        doc,
                        member,
                        root: false,
                    },
                )?;
                child.many = rel.is_many();
                child.junction = matches!(rel.cardinality, Cardinality::ManyToMany(_));
                child.link = rel.columns.clone();
                child.referred = match rel.cardinality {
                    Cardinality::ManyToOne => true,
                    Cardinality::OneToOne => table
                        .foreign_keys
                        .iter()
                        .any(|fk| fk.name == rel.constraint && fk.ref_table == rel.related),
                    _ => false,
                };
                node.nested.push(child);
            }
            _ => bail!("use named columns (no *, JSON paths or aggregates)"),
        }
    }
    Ok(node)
}

/// Marks the tables and fields the view's permissions and annotations name; answers the
/// document paths left out of the etag. A name that fits nothing is refused.
fn annotate(root: &mut DocTable, c: &DualityViewConfig) -> anyhow::Result<Vec<Vec<String>>> {
    let paths: Vec<String> = {
        let mut all = Vec::new();
        root.each(&mut all);
        all.iter().map(|t| t.path.clone()).collect()
    };
    if paths.iter().skip(1).any(|p| *p == root.path) {
        bail!(
            "a member of the document is named {:?} like the root table: permissions could not tell them apart",
            root.path
        );
    }
    for (list, what) in [
        (&c.insert, "insert"),
        (&c.update, "update"),
        (&c.delete, "delete"),
    ] {
        for name in list {
            if !paths.contains(name) {
                bail!(
                    "{what}: no table of the document is named {name:?} (the root by its table name, the others by their place: {})",
                    paths.join(", ")
                );
            }
        }
    }
    mark(root, c);
    let mut nocheck = Vec::new();
    for name in &c.nocheck {
        let path: Vec<String> = name.split('.').map(str::to_string).collect();
        // a table's name first (all its fields), then a field's
        if let Some(table) = find_table(root, name) {
            let fields: Vec<Vec<String>> = table.fields.iter().map(|f| f.path.clone()).collect();
            for p in fields {
                mark_field(root, &p, |f| f.nocheck = true);
                nocheck.push(p);
            }
        } else if mark_field(root, &path, |f| f.nocheck = true) {
            nocheck.push(path);
        } else {
            bail!("nocheck: the document has no field or table {name:?}");
        }
    }
    for name in &c.noupdate {
        let path: Vec<String> = name.split('.').map(str::to_string).collect();
        if !mark_field(root, &path, |f| f.noupdate = true) {
            bail!("noupdate: the document has no field {name:?}");
        }
    }
    Ok(nocheck)
}

fn mark(table: &mut DocTable, c: &DualityViewConfig) {
    table.insert = c.insert.contains(&table.path);
    table.update = c.update.contains(&table.path);
    table.delete = c.delete.contains(&table.path);
    for n in &mut table.nested {
        mark(n, c);
    }
}

fn mark_field(table: &mut DocTable, path: &[String], set: impl Fn(&mut DocField) + Copy) -> bool {
    let mut found = false;
    for f in table.fields.iter_mut().filter(|f| f.path == path) {
        set(f);
        found = true;
    }
    for n in &mut table.nested {
        found |= mark_field(n, path, set);
    }
    found
}

fn find_table<'t>(table: &'t DocTable, path: &str) -> Option<&'t DocTable> {
    if table.path == path {
        return Some(table);
    }
    table.nested.iter().find_map(|n| find_table(n, path))
}

/// A document's etag when some fields are not checked: 32 uppercase hex digits of a SHA-256
/// over its JSON text, `_metadata` and the `nocheck` fields left out (the rest in the
/// document's own order). A view that checks every field hashes each document's text as the
/// database wrote it ([`with_metadata`]).
pub fn etag(document: &str, nocheck: &[Vec<String>]) -> anyhow::Result<String> {
    let mut checked = Vec::with_capacity(document.len());
    let mut path = Vec::new();
    let mut de = serde_json::Deserializer::from_str(document);
    serde::de::DeserializeSeed::deserialize(
        Checked {
            out: &mut checked,
            nocheck,
            path: &mut path,
        },
        &mut de,
    )?;
    de.end()?;
    Ok(hex_digest(&checked))
}

/// A document's JSON written to `out` without the fields at the `nocheck` paths (nor the root's
/// `_metadata`), parsed once: a member no `nocheck` path goes into is copied as it stands.
struct Checked<'a, 'p> {
    out: &'a mut Vec<u8>,
    nocheck: &'p [Vec<String>],
    path: &'a mut Vec<String>,
}

impl Checked<'_, '_> {
    /// Whether the member `key` at the current path is left out, and whether a `nocheck` path
    /// goes below it.
    fn member(&self, key: &str) -> (bool, bool) {
        let depth = self.path.len();
        let here =
            |p: &Vec<String>| p.len() > depth && p[..depth] == self.path[..] && p[depth] == key;
        let skipped = (depth == 0 && key == "_metadata")
            || self.nocheck.iter().any(|p| here(p) && p.len() == depth + 1);
        let below = self.nocheck.iter().any(|p| here(p) && p.len() > depth + 1);
        (skipped, below)
    }

    fn scalar<E: serde::de::Error>(self, value: impl Serialize) -> Result<(), E> {
        serde_json::to_writer(&mut *self.out, &value).map_err(E::custom)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Checked<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Checked<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON document")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.out.push(b'{');
        let mut first = true;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let (skipped, below) = self.member(&key);
            if skipped {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            if !first {
                self.out.push(b',');
            }
            first = false;
            serde_json::to_writer(&mut *self.out, &*key).map_err(serde::de::Error::custom)?;
            self.out.push(b':');
            if below {
                self.path.push(key.into_owned());
                map.next_value_seed(Checked {
                    out: &mut *self.out,
                    nocheck: self.nocheck,
                    path: &mut *self.path,
                })?;
                self.path.pop();
            } else {
                let raw: &serde_json::value::RawValue = map.next_value()?;
                self.out.extend_from_slice(raw.get().as_bytes());
            }
        }
        self.out.push(b'}');
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut first = true;
        loop {
            let mark = self.out.len();
            if !first {
                self.out.push(b',');
            }
            let seed = Checked {
                out: &mut *self.out,
                nocheck: self.nocheck,
                path: &mut *self.path,
            };
            if seq.next_element_seed(seed)?.is_none() {
                self.out.truncate(mark);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(v)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(v)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(v)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(v)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
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

/// The documents of a read (a JSON array of objects, each beginning with `_id`) with
/// `"_metadata":{"etag":…}` after each `_id`, the fields kept in their order; and the etags.
pub fn with_metadata(
    body: &[u8],
    nocheck: &[Vec<String>],
) -> anyhow::Result<(Vec<u8>, Vec<String>)> {
    with_metadata_as_of(body, nocheck, None)
}

/// As [`with_metadata`], with `"asof":…` after the etag when given (ORDS's `_metadata.asof`).
pub fn with_metadata_as_of(
    body: &[u8],
    nocheck: &[Vec<String>],
    asof: Option<&str>,
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
            etag(text, nocheck)?
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
        match asof {
            Some(asof) => out.extend_from_slice(
                format!(",\"_metadata\":{{\"etag\":\"{tag}\",\"asof\":\"{asof}\"}}").as_bytes(),
            ),
            None => {
                out.extend_from_slice(format!(",\"_metadata\":{{\"etag\":\"{tag}\"}}").as_bytes())
            }
        }
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
            noupdate: Vec::new(),
            insert: Vec::new(),
            update: Vec::new(),
            delete: Vec::new(),
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

    /// The permissions and annotations name tables and fields of the document: the root by its
    /// table, the others by their place; a name that fits nothing is refused at load.
    #[test]
    fn permissions_name_the_documents_tables() {
        let conn = rusqlite::Connection::open_in_memory().expect("sqlite");
        conn.execute_batch(
            "CREATE TABLE team (team_id INTEGER PRIMARY KEY, name TEXT);
             CREATE TABLE driver (driver_id INTEGER PRIMARY KEY, name TEXT, points INTEGER,
                                  team_id INTEGER REFERENCES team(team_id));",
        )
        .expect("schema");
        let schema = SchemaCache::introspect(&conn).expect("schema");
        let view = |insert: &[&str], nocheck: &[&str], noupdate: &[&str]| DualityViewConfig {
            name: "team_dv".into(),
            table: "team".into(),
            document: "_id:team_id,name,driver(driverId:driver_id,name,points)".into(),
            nocheck: nocheck.iter().map(|s| s.to_string()).collect(),
            noupdate: noupdate.iter().map(|s| s.to_string()).collect(),
            insert: insert.iter().map(|s| s.to_string()).collect(),
            update: Vec::new(),
            delete: Vec::new(),
        };
        let views = compile(
            &[view(&["team", "driver"], &["driver"], &["name"])],
            &schema,
        )
        .expect("compiles");
        let dv = views.get("team_dv").expect("view");
        let driver = &dv.root.nested[0];
        assert!(dv.root.insert && driver.insert && !driver.update);
        assert_eq!(
            (driver.member.as_deref(), driver.many, driver.referred),
            (Some("driver"), true, false)
        );
        assert_eq!(
            driver.link,
            vec![("team_id".to_string(), "team_id".to_string())]
        );
        // a whole table left out of the etag: all its fields
        assert_eq!(dv.nocheck.len(), 3);
        assert!(driver.fields.iter().all(|f| f.nocheck));
        assert!(dv.root.fields[1].noupdate, "name is noupdate");
        for (config, needle) in [
            (view(&["teams"], &[], &[]), "insert: no table"),
            (
                view(&[], &["driver.nope"], &[]),
                "nocheck: the document has no field",
            ),
            (
                view(&[], &[], &["nope"]),
                "noupdate: the document has no field",
            ),
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
        let moved = r#"{"_id":"a,b","name":"Ferrari","driver":[{"name":"C","points":99}]}"#;
        assert_eq!(
            etag(moved, &nocheck).expect("etag"),
            tags[0],
            "points are not checked"
        );
        let renamed = r#"{"_id":"a,b","name":"Ferrari","driver":[{"name":"D","points":1}]}"#;
        assert_ne!(etag(renamed, &nocheck).expect("etag"), tags[0]);
        // what is hashed: the document without _metadata and the nocheck fields
        let mut checked = Vec::new();
        let mut path = Vec::new();
        let mut de = serde_json::Deserializer::from_str(
            r#"{"_id":1,"_metadata":{"etag":"X"},"a":{"b":[1,{"c":2,"d":null}],"e":"\u00e9"},"driver":[{"name":"C","points":1},{"points":2}],"f":[]}"#,
        );
        let nocheck = vec![
            vec!["driver".to_string(), "points".to_string()],
            vec!["a".to_string(), "b".to_string(), "c".to_string()],
        ];
        serde::de::DeserializeSeed::deserialize(
            Checked {
                out: &mut checked,
                nocheck: &nocheck,
                path: &mut path,
            },
            &mut de,
        )
        .expect("checked");
        assert_eq!(
            String::from_utf8(checked).expect("utf8"),
            r#"{"_id":1,"a":{"b":[1,{"d":null}],"e":"\u00e9"},"driver":[{"name":"C"},{}],"f":[]}"#
        );
    }
}
