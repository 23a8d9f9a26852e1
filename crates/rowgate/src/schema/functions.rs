//! Database functions callable as RPC (`/{prefix}/rpc/{name}`): their parameters, what they
//! return and their volatility, read from PostgreSQL's `pg_proc` for the exposed schemas (SQLite
//! has no stored functions: there, custom resources declared with `function = …` take their
//! place, see [`crate::resources`]). Overloads are kept side by side; a call picks one by the
//! argument names it gives, as PostgREST does.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use tokio_postgres::Client;

use super::{Column, JsonKind, Table};

/// One function.
#[derive(Debug, Clone, Serialize)]
pub struct Function {
    /// Its schema (PostgreSQL).
    pub schema: String,
    /// Its name.
    pub name: String,
    /// Its input parameters, in order.
    pub params: Vec<FunctionParam>,
    /// What it returns.
    pub returns: Returns,
    /// `VOLATILE` (may write: POST only, in a write transaction); else `STABLE` or `IMMUTABLE`
    /// (GET too, in a read-only transaction).
    pub volatile: bool,
    /// Declared `ROWS 1`: a set that holds one row (a computed relationship to one row).
    pub single_row: bool,
}

/// One input parameter.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionParam {
    /// Its name; empty when unnamed (only a single unnamed parameter is callable: the body).
    pub name: String,
    /// Its type as PostgreSQL prints it (`integer`, `text[]`, `public.point3`).
    pub decl_type: String,
    /// Its OpenAPI/JSON type.
    pub json_type: &'static str,
    /// Whether it has a default (may be left out of a call).
    pub has_default: bool,
    /// `VARIADIC` (the last parameter, an array taking the rest of the arguments).
    pub variadic: bool,
}

/// What a function returns.
#[derive(Debug, Clone, Serialize)]
pub enum Returns {
    /// Nothing (`void`): 204.
    Void,
    /// A scalar (or an array, or JSON), or a set of them.
    Scalar {
        /// `SETOF`.
        set: bool,
        /// How the value is written to JSON.
        json_kind: JsonKind,
        /// Its OpenAPI/JSON type.
        json_type: &'static str,
        /// Its type as PostgreSQL prints it.
        decl_type: String,
        /// Whether it is `bytea` (or a domain over it): answered raw, the bytes themselves.
        bytes: bool,
    },
    /// Rows: of a table, a composite type, `OUT` parameters or `RETURNS TABLE`, one (an
    /// object) or a set (an array that takes filters, order, limits and `select`).
    Rows {
        /// `SETOF` (or `TABLE`).
        set: bool,
        /// The rows' columns as a table named after the function: the returned table's own
        /// (with its foreign keys, so its relationships embed) or the type's columns.
        table: Box<Table>,
    },
}

impl Function {
    /// Whether a parameter of this name exists.
    pub fn has_param(&self, name: &str) -> bool {
        self.params.iter().any(|p| p.name == name)
    }

    /// The signature as PostgREST words it in errors: `public.add_them(a, b)`.
    pub fn signature(&self) -> String {
        let names: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
        format!("{}.{}({})", self.schema, self.name, names.join(", "))
    }

    /// Whether it takes one unnamed parameter to which a request's whole body is given (JSON,
    /// text, bytes or XML), as PostgREST allows.
    pub fn takes_raw_body(&self) -> bool {
        matches!(self.params.as_slice(), [p] if p.name.is_empty()
            && matches!(p.decl_type.as_str(), "json" | "jsonb" | "text" | "bytea" | "xml"))
    }

    /// Whether it takes one JSON parameter, named or not (`Prefer: params=single-object`).
    pub fn takes_one_json(&self) -> bool {
        matches!(self.params.as_slice(), [p] if matches!(p.decl_type.as_str(), "json" | "jsonb"))
    }

    /// Whether a call naming exactly `given` fits: every name is a parameter and every
    /// parameter without a default is given.
    pub fn fits(&self, given: &[&str]) -> bool {
        given.iter().all(|g| self.has_param(g))
            && self
                .params
                .iter()
                .all(|p| p.has_default || given.contains(&p.name.as_str()))
    }
}

/// One `pg_proc` row as read: name, schema, volatility, set, default count, argument names,
/// modes and types (formatted, `typname:category:typtype`), return type and its kind.
struct CatalogFunction {
    name: String,
    schema: String,
    volatile: bool,
    set: bool,
    defaults: usize,
    in_types: Vec<(String, String)>,
    all_names: Vec<String>,
    all_modes: Vec<String>,
    all_types: Vec<(String, String)>,
    returns: (String, String, String, u32),
    rows: f32,
    returns_bytes: bool,
}

/// Reads the functions of `schemas` (plain functions, not procedures, aggregates or window
/// functions; none with a pseudo-type parameter or returning a trigger; none whose name starts
/// with `_rowgate`), keyed by name. `tables` gives the columns and keys of a returned table.
pub async fn introspect(
    client: &Client,
    schemas: &[String],
    tables: &BTreeMap<String, Table>,
) -> Result<BTreeMap<String, Vec<Function>>, tokio_postgres::Error> {
    let types = "array(SELECT format_type(x.t, NULL) || chr(1) || ty.typname::text || ':' || ty.typcategory::text || ':' || ty.typtype::text
                       FROM unnest(TYPES) WITH ORDINALITY AS x(t, i) JOIN pg_type ty ON ty.oid = x.t ORDER BY x.i)";
    let query = format!(
        "SELECT p.proname::text, n.nspname::text, p.provolatile = 'v', p.proretset,
                p.pronargdefaults::int4, {}, coalesce(p.proargnames, '{{}}'::text[]),
                coalesce(p.proargmodes::text[], '{{}}'::text[]), {},
                format_type(p.prorettype, NULL), rt.typname::text || ':' || rt.typcategory::text,
                -- a domain over a composite type returns rows of that type
                CASE WHEN rt.typtype = 'd' AND bt.typtype = 'c' THEN 'c' ELSE rt.typtype::text END,
                CASE WHEN rt.typtype = 'd' AND bt.typtype = 'c' THEN bt.typrelid ELSE rt.typrelid END,
                p.prorows,
                coalesce(CASE WHEN rt.typtype = 'd' THEN bt.typname ELSE rt.typname END = 'bytea', false)
         FROM pg_proc p
         JOIN pg_namespace n ON n.oid = p.pronamespace
         JOIN pg_type rt ON rt.oid = p.prorettype
         LEFT JOIN pg_type bt ON bt.oid = rt.typbasetype
         WHERE n.nspname::text = ANY($1::text[]) AND p.prokind = 'f'
           AND rt.typname NOT IN ('trigger', 'event_trigger') AND p.proname NOT LIKE '\\_rowgate%'
         ORDER BY array_position($1::text[], n.nspname::text), p.proname, p.oid",
        types.replace("TYPES", "p.proargtypes::oid[]"),
        types.replace("TYPES", "coalesce(p.proallargtypes, p.proargtypes::oid[])"),
    );
    let split = |v: Vec<String>| -> Vec<(String, String)> {
        v.into_iter()
            .map(|t| match t.split_once('\u{1}') {
                Some((formatted, kind)) => (formatted.to_string(), kind.to_string()),
                None => (t, String::new()),
            })
            .collect()
    };
    let mut found = Vec::new();
    for r in client.query(&query, &[&schemas]).await? {
        found.push(CatalogFunction {
            name: r.get(0),
            schema: r.get(1),
            volatile: r.get(2),
            set: r.get(3),
            defaults: usize::try_from(r.get::<_, i32>(4)).unwrap_or(0),
            in_types: split(r.get(5)),
            all_names: r.get(6),
            all_modes: r.get(7),
            all_types: split(r.get(8)),
            returns: (r.get(9), r.get(10), r.get(11), r.get(12)),
            rows: r.get(13),
            returns_bytes: r.get(14),
        });
    }
    // the columns of returned composite types that are not exposed tables
    let type_oids: Vec<u32> = found
        .iter()
        .filter(|f| f.returns.2 == "c")
        .map(|f| f.returns.3)
        .collect();
    let mut composite: HashMap<u32, (String, Vec<Column>)> = HashMap::new();
    for r in client
        .query(
            "SELECT a.attrelid, c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod),
                    t.typname::text, t.typcategory::text
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
             JOIN pg_type t ON t.oid = a.atttypid
             WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attrelid, a.attnum",
            &[&type_oids],
        )
        .await?
    {
        let entry = composite
            .entry(r.get(0))
            .or_insert_with(|| (r.get(1), Vec::new()));
        let kind = format!("{}:{}", r.get::<_, String>(4), r.get::<_, String>(5));
        entry
            .1
            .push(Column::of_result(r.get(2), r.get(3), classify(&kind)));
    }
    let mut out: BTreeMap<String, Vec<Function>> = BTreeMap::new();
    for f in found {
        if let Some(function) = resolve(f, tables, &composite) {
            out.entry(function.name.clone()).or_default().push(function);
        }
    }
    Ok(out)
}

/// A catalog row as a callable function; `None` when it cannot be called (a pseudo-type
/// parameter such as `anyelement` or `internal`, or a pseudo-type result but `void` and
/// `record` with `OUT` parameters).
fn resolve(
    f: CatalogFunction,
    tables: &BTreeMap<String, Table>,
    composite: &HashMap<u32, (String, Vec<Column>)>,
) -> Option<Function> {
    let is_pseudo = |kind: &str| kind.ends_with(":p");
    if f.in_types.iter().any(|(_, kind)| is_pseudo(kind)) {
        return None;
    }
    // argument names of the IN parameters (all of them when there are no modes)
    let in_names: Vec<String> = if f.all_modes.is_empty() {
        (0..f.in_types.len())
            .map(|i| f.all_names.get(i).cloned().unwrap_or_default())
            .collect()
    } else {
        f.all_modes
            .iter()
            .enumerate()
            .filter(|(_, m)| matches!(m.as_str(), "i" | "b" | "v"))
            .map(|(i, _)| f.all_names.get(i).cloned().unwrap_or_default())
            .collect()
    };
    let first_default = f.in_types.len().saturating_sub(f.defaults);
    let variadic_last = f.all_modes.last().is_some_and(|m| m == "v");
    let params = f
        .in_types
        .iter()
        .enumerate()
        .map(|(i, (decl_type, kind))| FunctionParam {
            name: in_names.get(i).cloned().unwrap_or_default(),
            decl_type: decl_type.clone(),
            json_type: classify(kind).0,
            has_default: i >= first_default,
            variadic: variadic_last && i + 1 == f.in_types.len(),
        })
        .collect();
    let outs: Vec<Column> = f
        .all_modes
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.as_str(), "o" | "b" | "t"))
        .filter_map(|(i, _)| {
            let (decl, kind) = f.all_types.get(i)?;
            Some(Column::of_result(
                f.all_names.get(i)?.clone(),
                decl.clone(),
                classify(kind),
            ))
        })
        .collect();
    let (ret_decl, ret_kind, ret_typtype, ret_relid) = &f.returns;
    let rows = |table: Table| Returns::Rows {
        set: f.set,
        table: Box::new(table),
    };
    // OUT parameters and `RETURNS TABLE` columns are rows, as PostgREST answers them: one
    // OUT parameter too (`{"num_plus_one": 6}`), though PostgreSQL returns it as a scalar
    let returns = if !outs.is_empty() {
        rows(Table::new(
            f.name.clone(),
            true,
            outs,
            Vec::new(),
            Vec::new(),
        ))
    } else if ret_typtype == "c" {
        let (type_name, columns) = composite.get(ret_relid)?;
        match tables.get(type_name) {
            // a table's rows keep its keys, so that its relationships embed
            Some(table) if table.columns.len() == columns.len() => rows(table.clone()),
            _ => rows(Table::new(
                type_name.clone(),
                true,
                columns.clone(),
                Vec::new(),
                Vec::new(),
            )),
        }
    } else if ret_decl == "void" {
        Returns::Void
    } else if ret_typtype == "p" && ret_decl == "record" {
        // an anonymous record (`RETURNS record` / `SETOF record` without OUT parameters):
        // each one as the JSON object of the row it holds, as PostgREST answers it
        Returns::Scalar {
            set: f.set,
            json_kind: JsonKind::Json,
            json_type: "object",
            decl_type: ret_decl.clone(),
            bytes: false,
        }
    } else if ret_typtype == "p" {
        return None;
    } else {
        let (json_type, json_kind) = classify(ret_kind);
        Returns::Scalar {
            set: f.set,
            json_kind,
            json_type,
            decl_type: ret_decl.clone(),
            bytes: f.returns_bytes,
        }
    };
    Some(Function {
        schema: f.schema,
        name: f.name,
        params,
        returns,
        volatile: f.volatile,
        single_row: f.set && f.rows == 1.0,
    })
}

/// Whether `decl_type` (a parameter's type as PostgreSQL prints it) is `table`'s row type.
fn is_row_of(decl_type: &str, table: &Table) -> bool {
    let quoted = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let name_forms = [table.name.clone(), quoted(&table.name)];
    name_forms.iter().any(|n| decl_type == n)
        || table.schema.as_deref().is_some_and(|schema| {
            [schema.to_string(), quoted(schema)]
                .iter()
                .any(|s| name_forms.iter().any(|n| decl_type == format!("{s}.{n}")))
        })
}

/// Gives each table its computed columns (the functions taking only its row and returning one
/// value: PostgREST's computed fields, read as columns when a request names them) and its
/// computed relationships (those returning rows of an exposed table or view, embedded by the
/// function's name).
///
/// A function returning a table's rows then returns them with the same computed columns and
/// relationships (`/rpc/f?select=*,computed_rel(*)`).
pub fn attach_computed(
    tables: &mut BTreeMap<String, Table>,
    functions: &mut BTreeMap<String, Vec<Function>>,
) {
    attach_to_tables(tables, functions);
    for f in functions.values_mut().flatten() {
        if let Returns::Rows { table: rows, .. } = &mut f.returns {
            if let Some(table) = tables.get(&rows.name) {
                if rows.schema == table.schema {
                    rows.computed.clone_from(&table.computed);
                    rows.computed_rels.clone_from(&table.computed_rels);
                }
            }
        }
    }
}

fn attach_to_tables(
    tables: &mut BTreeMap<String, Table>,
    functions: &BTreeMap<String, Vec<Function>>,
) {
    for f in functions.values().flatten() {
        let [param] = f.params.as_slice() else {
            continue;
        };
        if let Returns::Rows { set, table: rows } = &f.returns {
            if !tables.contains_key(&rows.name) {
                continue;
            }
            for table in tables.values_mut() {
                if is_row_of(&param.decl_type, table) {
                    table.computed_rels.push(super::ComputedRelationship {
                        name: f.name.clone(),
                        schema: f.schema.clone(),
                        related: rows.name.clone(),
                        many: *set && !f.single_row,
                    });
                }
            }
            continue;
        }
        let Returns::Scalar {
            set: false,
            json_kind,
            json_type,
            decl_type,
            ..
        } = &f.returns
        else {
            continue;
        };
        for table in tables.values_mut() {
            if is_row_of(&param.decl_type, table) && table.column(&f.name).is_none() {
                let mut column =
                    Column::of_result(f.name.clone(), decl_type.clone(), (json_type, *json_kind));
                column.computed = Some(f.schema.clone());
                table.computed.push(column);
            }
        }
    }
}

/// A type given as `typname:category[:typtype]` as a JSON type and writing rule.
fn classify(kind: &str) -> (&'static str, JsonKind) {
    let mut parts = kind.split(':');
    let name = parts.next().unwrap_or_default();
    let category = parts.next().unwrap_or_default();
    super::postgres::classify(name, category)
}
