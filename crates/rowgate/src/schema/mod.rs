//! The schema cache: tables, views, columns, types, nullability, defaults, primary and foreign
//! keys, introspected from SQLite (here) or PostgreSQL ([`postgres`]). Only what is in the cache is reachable through the API, and the
//! identifiers put into SQL are the cache's spellings, never the request's. The cache is swapped
//! atomically on reload (SIGUSR1, or when `PRAGMA schema_version` changes).

pub mod checks;
pub mod functions;
pub mod input;
pub mod media;
pub mod postgres;
pub mod privileges;
pub mod relationships;
pub mod volatile;

use std::collections::HashMap;

use rowgate_query::ast::QualifiedName;
use rusqlite::Connection;
use serde::Serialize;

/// How a column's values are written to JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JsonKind {
    /// As the stored value's own type (integer, real, text, null).
    Auto,
    /// Declared BOOLEAN/BOOL: 0/1 written as false/true.
    Bool,
    /// Declared JSON/JSONB: valid JSON text written as JSON, not as a string.
    Json,
}

/// One column.
#[derive(Debug, Clone, Serialize)]
pub struct Column {
    /// Name.
    pub name: String,
    /// Declared type as written in the DDL (may be empty).
    pub decl_type: String,
    /// OpenAPI/JSON type: `integer`, `number`, `string`, `boolean`, or empty for untyped.
    pub json_type: &'static str,
    /// How values are written to JSON.
    pub json_kind: JsonKind,
    /// Whether NULL is allowed.
    pub nullable: bool,
    /// Default expression, as SQL text.
    pub default: Option<String>,
    /// Position in the primary key (1-based), 0 when not part of it.
    pub pk_position: u32,
    /// Whether the value is generated (generated column).
    pub generated: bool,
    /// What the column accepts, checked before the database sees a value (PostgreSQL checks
    /// values itself: `Native`).
    pub input: input::InputType,
    /// Whether the column can never hold NULL: declared NOT NULL, or the rowid (a lone INTEGER
    /// PRIMARY KEY). Other SQLite primary-key columns may hold NULL.
    pub never_null: bool,
    /// The bounds its simple `CHECK` constraints set (described in OpenAPI).
    pub bounds: checks::Bounds,
    /// For a computed column (a function of the table's row, PostgreSQL): the function's
    /// schema. Such a column is read only when named (`*` leaves it out) and never written.
    #[serde(skip)]
    pub computed: Option<String>,
    /// Functions between its type (a PostgreSQL domain) and JSON or text, where the database
    /// declares them as implicit casts (PostgREST's domain representations).
    #[serde(skip)]
    pub representation: Option<Box<Representation>>,
    /// For a column of a PostgreSQL domain: the type the domain (or the domain it is over, …)
    /// stands for, as `format_type` spells it (`tsvector` for a domain over `tsvector`).
    #[serde(skip)]
    pub domain_base: Option<String>,
    /// SQLite: a text column whose index answers a `like` prefix as a range, where SQLite's own
    /// LIKE optimization would use it (TEXT affinity, BINARY collation, the first key of an
    /// index of BINARY collation). The planner marks such `like` filters
    /// ([`rowgate_query::Predicate::prefix_range`]).
    #[serde(skip)]
    pub prefix_indexed: bool,
    /// SQLite: a table's column that is a key of no index, so that no index can serve a
    /// `like` on it ([`rowgate_query::Predicate::unindexed`]).
    #[serde(skip)]
    pub unindexed: bool,
}

/// A domain's representation: the functions of its implicit casts to JSON (how it is read),
/// from JSON (how a body's value is written) and from text (how a filter's value is read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Representation {
    /// `f(domain) → json`.
    pub to_json: Option<QualifiedName>,
    /// `f(json) → domain`.
    pub from_json: Option<QualifiedName>,
    /// `f(text) → domain`.
    pub from_text: Option<QualifiedName>,
}

impl Column {
    /// Whether its values are of `type_name` (case aside), itself or as a domain's.
    pub fn is_of_type(&self, type_name: &str) -> bool {
        self.decl_type.eq_ignore_ascii_case(type_name)
            || self
                .domain_base
                .as_deref()
                .is_some_and(|base| base.eq_ignore_ascii_case(type_name))
    }

    /// Its representation's function for `pick` (to JSON, from JSON or from text), if any.
    pub fn represented(
        &self,
        pick: impl FnOnce(&Representation) -> &Option<QualifiedName>,
    ) -> Option<QualifiedName> {
        self.representation.as_deref().and_then(|r| pick(r).clone())
    }
}

impl Column {
    /// A result column (of a function, a custom resource's SQL, or a relation known only by
    /// its column names), with its JSON type and writing rule.
    pub fn of_result(
        name: String,
        decl_type: String,
        (json_type, json_kind): (&'static str, JsonKind),
    ) -> Column {
        Column {
            name,
            decl_type,
            json_type,
            json_kind,
            nullable: true,
            default: None,
            pk_position: 0,
            generated: false,
            never_null: false,
            bounds: checks::Bounds::default(),
            computed: None,
            representation: None,
            domain_base: None,
            input: input::InputType::Native,
            prefix_indexed: false,
            unindexed: false,
        }
    }

    /// The values an integer column holds: its type's range (PostgreSQL's `smallint`,
    /// `integer`, `bigint`; SQLite's integers are 64-bit); `None` for other columns.
    pub fn integer_range(&self) -> Option<(i64, i64)> {
        if self.json_type != "integer" {
            return None;
        }
        let decl = self.decl_type.to_ascii_lowercase();
        let postgres = self.input == input::InputType::Native;
        Some(
            if postgres && (decl.starts_with("smallint") || decl == "int2") {
                (i64::from(i16::MIN), i64::from(i16::MAX))
            } else if postgres && !(decl.starts_with("bigint") || decl == "int8") {
                (i64::from(i32::MIN), i64::from(i32::MAX))
            } else {
                (i64::MIN, i64::MAX)
            },
        )
    }
}

/// A foreign key from this table's columns to another table's.
#[derive(Debug, Clone, Serialize)]
pub struct ForeignKey {
    /// The constraint's name (PostgreSQL's own; on SQLite, which names none, PostgreSQL's
    /// default `{table}_{columns}_fkey`).
    pub name: String,
    /// Referencing columns (this table).
    pub columns: Vec<String>,
    /// Referenced table.
    pub ref_table: String,
    /// Referenced columns.
    pub ref_columns: Vec<String>,
}

/// The writes a relation takes: all of them for a table; for a view, those PostgreSQL passes
/// through to its base table (an auto-updatable view, or INSTEAD OF triggers or rules), as
/// `pg_relation_is_updatable` says. SQLite views take none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Writes {
    /// POST (and PUT's insert).
    pub insert: bool,
    /// PATCH (and PUT's or an upsert's update).
    pub update: bool,
    /// DELETE.
    pub delete: bool,
}

impl Writes {
    /// A table's: every write.
    pub const ALL: Writes = Writes {
        insert: true,
        update: true,
        delete: true,
    };
    /// A read-only view's.
    pub const NONE: Writes = Writes {
        insert: false,
        update: false,
        delete: false,
    };

    /// From `pg_relation_is_updatable`'s bit mask (`1 << CMD_UPDATE | 1 << CMD_INSERT | 1 <<
    /// CMD_DELETE`: 4, 8, 16).
    pub fn from_pg_mask(mask: i32) -> Writes {
        Writes {
            insert: mask & 8 != 0,
            update: mask & 4 != 0,
            delete: mask & 16 != 0,
        }
    }
}

/// A function of a table's row returning rows of another (PostgREST's computed relationship):
/// embedded by its name, the function called with each row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputedRelationship {
    /// The function's name (the embed's).
    pub name: String,
    /// The function's schema.
    pub schema: String,
    /// The table or view whose rows it returns.
    pub related: String,
    /// `SETOF` (without `ROWS 1`): any number of rows, else at most one.
    pub many: bool,
}

/// A table or a view.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// Name.
    pub name: String,
    /// The schema the table lives in where the backend has several (PostgreSQL); SQL names it
    /// qualified by it. `None` on SQLite.
    pub schema: Option<String>,
    /// True for views.
    pub is_view: bool,
    /// The writes it takes (a view's may be none).
    pub writes: Writes,
    /// Columns in declaration order.
    pub columns: Vec<Column>,
    /// Primary-key columns in key order (empty for keyless tables; a PostgreSQL view's is its
    /// base table's key, where the view shows all of it).
    pub primary_key: Vec<String>,
    /// Foreign keys.
    pub foreign_keys: Vec<ForeignKey>,
    /// For a view, where its columns come from: (view column, base table, base column), for
    /// the columns that are a base table's column as they are (embedding follows the base
    /// tables' foreign keys through them).
    #[serde(skip)]
    pub sources: Vec<(String, String, String)>,
    /// The columns of each unique constraint (besides the primary key): a foreign key on them
    /// makes a one-to-one relationship.
    #[serde(skip)]
    pub unique: Vec<Vec<String>>,
    /// Its computed columns (PostgreSQL functions taking its row and returning a value), read
    /// when a request names them.
    #[serde(skip)]
    pub computed: Vec<Column>,
    /// Its computed relationships (functions taking its row and returning rows of a table).
    #[serde(skip)]
    pub computed_rels: Vec<ComputedRelationship>,
    #[serde(skip)]
    by_name: HashMap<String, usize>,
}

impl Table {
    /// A table from its parts.
    pub fn new(
        name: String,
        is_view: bool,
        columns: Vec<Column>,
        primary_key: Vec<String>,
        foreign_keys: Vec<ForeignKey>,
    ) -> Table {
        let by_name = columns
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        Table {
            name,
            schema: None,
            is_view,
            writes: if is_view { Writes::NONE } else { Writes::ALL },
            columns,
            primary_key,
            foreign_keys,
            sources: Vec::new(),
            unique: Vec::new(),
            computed: Vec::new(),
            computed_rels: Vec::new(),
            by_name,
        }
    }

    /// The same table, in `schema`.
    pub fn in_schema(mut self, schema: String) -> Table {
        self.schema = Some(schema);
        self
    }

    /// How SQL names the table: schema-qualified where it has a schema.
    pub fn relation(&self) -> rowgate_query::stmt::Relation {
        rowgate_query::stmt::Relation {
            schema: self.schema.clone(),
            name: self.name.clone(),
            computed: self
                .columns
                .iter()
                .filter_map(|c| {
                    Some(rowgate_query::stmt::Computed {
                        name: c.name.clone(),
                        schema: Some(c.computed.clone()?),
                    })
                })
                .collect(),
            of_parent_row: false,
            json_inputs: self
                .columns
                .iter()
                .filter_map(|c| Some((c.name.clone(), c.represented(|r| &r.from_json)?)))
                .collect(),
            row_type: None,
            parent_row_type: None,
        }
    }

    /// The table with those of its computed columns that `names` name added to its columns
    /// (borrowed as it is when it needs none): what a read of them plans against.
    pub fn with_computed<'n>(
        &self,
        names: impl IntoIterator<Item = &'n str>,
    ) -> std::borrow::Cow<'_, Table> {
        let mut extra: Vec<Column> = Vec::new();
        for name in names {
            if self.column(name).is_none() && !extra.iter().any(|c| c.name == name) {
                if let Some(c) = self.computed.iter().find(|c| c.name == name) {
                    extra.push(c.clone());
                }
            }
        }
        if extra.is_empty() {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut table = self.clone();
        for c in extra {
            table.by_name.insert(c.name.clone(), table.columns.len());
            table.columns.push(c);
        }
        std::borrow::Cow::Owned(table)
    }

    /// The column with this exact name.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.by_name.get(name).map(|&i| &self.columns[i])
    }
}

/// Every exposed table and view.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SchemaCache {
    /// Tables and views by name, sorted.
    pub tables: std::collections::BTreeMap<String, Table>,
    /// Functions callable as RPC by name, overloads side by side (PostgreSQL's; SQLite has none).
    pub functions: std::collections::BTreeMap<String, Vec<functions::Function>>,
    /// The schema's version when the cache was read: SQLite's `PRAGMA schema_version`, on
    /// PostgreSQL a digest of the exposed relations and columns. It changes when they do.
    pub version: i64,
    /// Tables outside the exposed schemas that exposed views show (PostgreSQL), keyed
    /// `schema.name`: their keys relate the views as PostgREST relates them. Never served.
    #[serde(skip)]
    pub hidden: std::collections::BTreeMap<String, Table>,
    /// The exposed schemas, the default (this cache's) first, when there are several to
    /// choose from (PostgreSQL's `db.schemas`); empty on SQLite.
    #[serde(skip)]
    pub profiles: Vec<String>,
    /// The other schemas' caches, by name (the default cache holds them).
    #[serde(skip)]
    pub others: Vec<(String, std::sync::Arc<SchemaCache>)>,
    /// Its media type handlers (PostgreSQL's aggregates returning a media type's domain).
    #[serde(skip)]
    pub media_handlers: Vec<media::MediaHandler>,
    /// Views whose rows can change without a commit (they read the time or randomness:
    /// [`volatile`]); answers that read them are not cached. SQLite's; empty on PostgreSQL,
    /// whose answers are not cached.
    #[serde(skip)]
    pub volatile_views: Vec<String>,
    /// What each database role may do here (PostgreSQL, when requests run as their role):
    /// what describes the API to a role shows it.
    #[serde(skip)]
    pub privileges: Option<std::sync::Arc<privileges::Privileges>>,
}

impl SchemaCache {
    /// The schema it serves, as errors name it (PostgREST's `'test.items'`): PostgreSQL's
    /// exposed schema, or `main` (SQLite's, and a PostgreSQL schema with nothing in it).
    pub fn name(&self) -> &str {
        self.tables
            .values()
            .find_map(|t| t.schema.as_deref())
            .or_else(|| {
                self.functions
                    .values()
                    .flatten()
                    .map(|f| f.schema.as_str())
                    .next()
            })
            .unwrap_or("main")
    }

    /// The table or view with this exact name.
    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.get(name)
    }

    /// The cache of the schema a request names (`Accept-Profile` for reads, `Content-Profile`
    /// for writes; none: the default), or PostgREST's 406 `PGRST106` naming the exposed ones.
    /// Where there is only one schema (SQLite, or one on PostgreSQL) a profile naming another
    /// is refused too, but SQLite takes any (it has one namespace).
    pub fn profile(&self, name: Option<&str>) -> Result<&SchemaCache, crate::error::ApiError> {
        let Some(name) = name else {
            return Ok(self);
        };
        if self.profiles.is_empty() || self.profiles.first().is_some_and(|p| p == name) {
            return Ok(self);
        }
        match self.others.iter().find(|(n, _)| n == name) {
            Some((_, cache)) => Ok(cache),
            None => Err(crate::error::ApiError::new(
                crate::error::ErrorCode::InvalidProfile,
                format!("Invalid schema: {name}"),
            )
            .hint(format!(
                "Only the following schemas are exposed: {}",
                self.profiles.join(", ")
            ))),
        }
    }

    /// A base table of relationships: an exposed one, or a hidden one a view shows.
    pub fn base_table(&self, name: &str) -> Option<&Table> {
        self.tables.get(name).or_else(|| self.hidden.get(name))
    }

    /// Reads the schema of the `main` database through `conn`.
    pub fn introspect(conn: &Connection) -> rusqlite::Result<SchemaCache> {
        let version: i64 = conn.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
        let mut objects = conn.prepare(
            "SELECT name, type FROM sqlite_schema WHERE type IN ('table', 'view') \
             AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             AND name NOT LIKE '\\_rowgate\\_%' ESCAPE '\\' ORDER BY name",
        )?;
        let objects: Vec<(String, String)> = objects
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut tables = std::collections::BTreeMap::new();
        for (name, kind) in objects {
            let mut table = introspect_table(conn, &name, kind == "view")?;
            if table.is_view {
                table.sources = view_sources(conn, &name)?;
            }
            tables.insert(name, table);
        }
        // a view showing all of a table's key columns has that key (as on PostgreSQL)
        let keys: Vec<(String, Vec<String>)> = tables
            .values()
            .filter(|t| t.is_view)
            .map(|v| (v.name.clone(), view_key(v, &tables)))
            .collect();
        for (name, key) in keys {
            if let Some(view) = tables.get_mut(&name) {
                for (position, column) in (1u32..).zip(&key) {
                    if let Some(c) = view.columns.iter_mut().find(|c| c.name == *column) {
                        c.pk_position = position;
                    }
                }
                view.primary_key = key;
            }
        }
        Ok(SchemaCache {
            tables,
            functions: Default::default(),
            version,
            hidden: Default::default(),
            profiles: Vec::new(),
            others: Vec::new(),
            media_handlers: Vec::new(),
            volatile_views: volatile::volatile_views(&volatile::views_sql(conn)?),
            privileges: None,
        })
    }

    /// Whether statements read a view of [`SchemaCache::volatile_views`]: one of them names
    /// one (quoted by `dialect`, as every rendered identifier is).
    pub fn reads_volatile<'a>(
        &self,
        mut statements: impl Iterator<Item = &'a str>,
        dialect: &dyn rowgate_query::render::Dialect,
    ) -> bool {
        if self.volatile_views.is_empty() {
            return false;
        }
        let quoted: Vec<String> = self
            .volatile_views
            .iter()
            .map(|view| dialect.quote_ident(view))
            .collect();
        statements.any(|sql| quoted.iter().any(|q| sql.contains(q.as_str())))
    }
}

/// A view's key: the key of the first table it shows every key column of (by `sources`).
fn view_key(view: &Table, tables: &std::collections::BTreeMap<String, Table>) -> Vec<String> {
    let mut bases: Vec<&str> = Vec::new();
    for (_, base, _) in &view.sources {
        if !bases.contains(&base.as_str()) {
            bases.push(base);
        }
    }
    bases
        .iter()
        .filter_map(|base| {
            let key = &tables.get(*base)?.primary_key;
            if key.is_empty() {
                return None;
            }
            key.iter()
                .map(|k| {
                    view.sources
                        .iter()
                        .find(|(_, b, c)| b == base && c == k)
                        .map(|(own, _, _)| own.clone())
                })
                .collect::<Option<Vec<String>>>()
        })
        .next()
        .unwrap_or_default()
}

/// Where a view's columns come from, as SQLite's column metadata says (the columns that are a
/// table's column as they are; computed ones have no origin).
fn view_sources(conn: &Connection, view: &str) -> rusqlite::Result<Vec<(String, String, String)>> {
    let quoted = format!("\"{}\"", view.replace('"', "\"\""));
    let stmt = conn.prepare(&format!("SELECT * FROM {quoted}"))?;
    Ok(stmt
        .columns_with_metadata()
        .iter()
        .filter_map(|c| {
            Some((
                c.name().to_string(),
                c.table_name()?.to_string(),
                c.origin_name()?.to_string(),
            ))
        })
        .collect())
}

fn introspect_table(conn: &Connection, name: &str, is_view: bool) -> rusqlite::Result<Table> {
    let mut stmt = conn.prepare(
        "SELECT name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?1)",
    )?;
    let mut columns = Vec::new();
    let mut rows = stmt.query([name])?;
    while let Some(row) = rows.next()? {
        let hidden: i64 = row.get(5)?;
        if hidden == 1 {
            continue; // hidden columns of virtual tables
        }
        let decl_type: String = row.get::<_, Option<String>>(1)?.unwrap_or_default();
        let (json_type, json_kind) = classify(&decl_type);
        let pk_position: i64 = row.get(4)?;
        let notnull: i64 = row.get(2)?;
        columns.push(Column {
            name: row.get(0)?,
            input: input::InputType::of_sqlite(&decl_type),
            decl_type,
            json_type,
            json_kind,
            nullable: notnull == 0 && pk_position == 0,
            default: row.get(3)?,
            pk_position: u32::try_from(pk_position).unwrap_or(0),
            generated: hidden == 2 || hidden == 3,
            never_null: notnull == 1,
            bounds: checks::Bounds::default(),
            computed: None,
            representation: None,
            domain_base: None,
            prefix_indexed: false,
            unindexed: false,
        });
    }
    if !is_view {
        mark_prefix_indexed(conn, name, &mut columns)?;
        let ddl: Option<String> = conn
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap_or(None);
        if let Some(ddl) = ddl.filter(|d| d.to_ascii_uppercase().contains("CHECK")) {
            for c in &mut columns {
                c.bounds = checks::bounds(&ddl, &c.name);
            }
        }
    }
    let mut keys = columns.iter_mut().filter(|c| c.pk_position > 0);
    if let (Some(only), None) = (keys.next(), keys.next()) {
        if only.decl_type.eq_ignore_ascii_case("INTEGER") && !is_view {
            only.never_null = true;
        }
    }
    // An INTEGER PRIMARY KEY is never NULL (it is the rowid) but it may be omitted on insert.
    let mut pk: Vec<&Column> = columns.iter().filter(|c| c.pk_position > 0).collect();
    pk.sort_by_key(|c| c.pk_position);
    let primary_key = pk.iter().map(|c| c.name.clone()).collect();
    let mut foreign_keys: Vec<ForeignKey> = Vec::new();
    if !is_view {
        let mut fk = conn.prepare(
            "SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
        )?;
        let mut rows = fk.query([name])?;
        let mut last_id = -1i64;
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            let ref_table: String = row.get(1)?;
            let from: String = row.get(2)?;
            let to: Option<String> = row.get(3)?;
            if id != last_id {
                foreign_keys.push(ForeignKey {
                    name: String::new(),
                    columns: Vec::new(),
                    ref_table,
                    ref_columns: Vec::new(),
                });
                last_id = id;
            }
            if let Some(fk) = foreign_keys.last_mut() {
                fk.columns.push(from);
                fk.ref_columns.extend(to);
            }
        }
        for fk in &mut foreign_keys {
            fk.name = format!("{name}_{}_fkey", fk.columns.join("_"));
        }
    }
    // unique constraints (`UNIQUE` in the table's definition, origin 'u'), as PostgreSQL's
    let mut unique = Vec::new();
    if !is_view {
        let mut indexes = conn
            .prepare("SELECT name FROM pragma_index_list(?1) WHERE \"unique\" AND origin = 'u'")?;
        let names: Vec<String> = indexes
            .query_map([name], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut info = conn.prepare("SELECT name FROM pragma_index_info(?1) ORDER BY seqno")?;
        for index in names {
            let columns: Vec<String> = info
                .query_map([&index], |r| r.get::<_, Option<String>>(0))?
                .filter_map(|c| c.transpose())
                .collect::<Result<_, _>>()?;
            unique.push(columns);
        }
    }
    let mut table = Table::new(
        name.to_string(),
        is_view,
        columns,
        primary_key,
        foreign_keys,
    );
    table.unique = unique;
    Ok(table)
}

/// Marks the columns of `table` no index has as a key ([`Column::unindexed`]), and those a
/// `like` prefix can be looked up by ([`Column::prefix_indexed`]):
/// the first key of a full (not partial) index of BINARY collation, of TEXT affinity (SQLite's
/// rules: the declared type names no `INT` and one of `CHAR`, `CLOB`, `TEXT`) and declared with
/// BINARY collation.
fn mark_prefix_indexed(
    conn: &Connection,
    table: &str,
    columns: &mut [Column],
) -> rusqlite::Result<()> {
    let mut leading = conn.prepare(
        "SELECT x.name, x.coll FROM pragma_index_list(?1) AS l, pragma_index_xinfo(l.name) AS x
         WHERE NOT l.partial AND x.seqno = 0 AND x.name IS NOT NULL",
    )?;
    let keys: Vec<(String, String)> = leading
        .query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut any_key = conn.prepare(
        "SELECT DISTINCT x.name FROM pragma_index_list(?1) AS l, pragma_index_xinfo(l.name) AS x
         WHERE x.key AND x.name IS NOT NULL",
    )?;
    let indexed: std::collections::HashSet<String> = any_key
        .query_map([table], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for column in columns.iter_mut() {
        column.unindexed = !indexed.contains(&column.name);
        let t = column.decl_type.to_ascii_uppercase();
        let text_affinity =
            !t.contains("INT") && (t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT"));
        let indexed = keys
            .iter()
            .any(|(name, coll)| *name == column.name && coll.eq_ignore_ascii_case("BINARY"));
        if text_affinity && indexed {
            let (_, collation, ..) =
                conn.column_metadata(None::<&str>, table, column.name.as_str())?;
            column.prefix_indexed =
                collation.is_none_or(|c| c.to_bytes().eq_ignore_ascii_case(b"BINARY"));
        }
    }
    Ok(())
}

/// Maps a declared type to its JSON type, following SQLite's affinity rules (§3.1 of the
/// datatype docs) plus BOOLEAN and JSON, which SQLite stores as integers and text.
pub(crate) fn classify(decl_type: &str) -> (&'static str, JsonKind) {
    let t = decl_type.to_ascii_uppercase();
    if t.starts_with("BOOL") {
        ("boolean", JsonKind::Bool)
    } else if t.starts_with("JSON") {
        ("", JsonKind::Json)
    } else if t.contains("INT") {
        ("integer", JsonKind::Auto)
    } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
        ("string", JsonKind::Auto)
    } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
        ("number", JsonKind::Auto)
    } else if t.is_empty() || t.contains("BLOB") {
        ("", JsonKind::Auto)
    } else if t.contains("DATE") || t.contains("TIME") {
        ("string", JsonKind::Auto)
    } else {
        ("number", JsonKind::Auto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_columns_leading_a_binary_index_take_like_prefixes_as_ranges() {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, title VARCHAR(40),
                nocase TEXT COLLATE NOCASE, folded TEXT, code INTEGER, point TEXT, loose,
                second TEXT, part TEXT, plain TEXT, stamp DATETIME);
             CREATE INDEX t_name ON t (name);
             CREATE UNIQUE INDEX t_title ON t (title, second);
             CREATE INDEX t_nocase ON t (nocase);
             CREATE INDEX t_folded ON t (folded COLLATE NOCASE);
             CREATE INDEX t_code ON t (code);
             CREATE INDEX t_point ON t (point, loose);
             CREATE INDEX t_loose ON t (loose);
             CREATE INDEX t_part ON t (part) WHERE part IS NOT NULL;
             CREATE INDEX t_upper ON t (upper(plain));
             CREATE INDEX t_stamp ON t (stamp);",
        )
        .expect("ddl");
        let cache = SchemaCache::introspect(&conn).expect("introspect");
        let t = cache.table("t").expect("t");
        let marked = |flag: fn(&Column) -> bool| -> Vec<&str> {
            t.columns
                .iter()
                .filter(|c| flag(c))
                .map(|c| c.name.as_str())
                .collect()
        };
        // not: NOCASE (the column's or the index's), integer, untyped and DATETIME (not TEXT
        // affinity), an index's second key, a partial index, an expression index, no index
        assert_eq!(marked(|c| c.prefix_indexed), ["name", "title", "point"]);
        // the rowid (`id`) is a key of no index either; `upper(plain)` is an expression
        assert_eq!(marked(|c| c.unindexed), ["id", "plain"]);
    }

    #[test]
    fn introspects_keys_types_and_views() {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch(
            "CREATE TABLE team (team_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, points INT DEFAULT 0);
             CREATE TABLE driver (driver_id INTEGER PRIMARY KEY, name TEXT, ok BOOLEAN, data JSON,
                team_id INTEGER REFERENCES team(team_id));
             CREATE TABLE pair (a TEXT, b TEXT, PRIMARY KEY (b, a));
             CREATE VIEW v AS SELECT name FROM team;",
        )
        .expect("ddl");
        let cache = SchemaCache::introspect(&conn).expect("introspect");
        let team = cache.table("team").expect("team");
        assert_eq!(team.primary_key, vec!["team_id"]);
        assert!(!team.column("name").expect("name").nullable);
        assert_eq!(
            team.column("points").expect("points").default.as_deref(),
            Some("0")
        );
        let driver = cache.table("driver").expect("driver");
        assert_eq!(driver.foreign_keys[0].ref_table, "team");
        assert_eq!(driver.column("ok").expect("ok").json_kind, JsonKind::Bool);
        assert_eq!(
            driver.column("data").expect("data").json_kind,
            JsonKind::Json
        );
        assert_eq!(
            cache.table("pair").expect("pair").primary_key,
            vec!["b", "a"]
        );
        assert!(cache.table("v").expect("v").is_view);
        assert!(cache.table("sqlite_schema").is_none());
    }
}
