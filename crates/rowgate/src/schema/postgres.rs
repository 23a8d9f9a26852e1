//! The schema cache read from PostgreSQL's catalog (`pg_class`, `pg_attribute`, `pg_constraint`)
//! for the exposed schemas: tables (plain, partitioned, foreign), views and materialized views,
//! their columns with types, nullability, defaults, identity and generated columns, primary and
//! foreign keys, and where views' columns come from. Four catalog queries, whatever the number
//! of tables.

use std::collections::{BTreeMap, HashMap};

use tokio_postgres::Client;

use super::{Column, ForeignKey, JsonKind, SchemaCache, Table};

/// Reads every table and view of `schemas` (names are unique across them: the first schema
/// listed wins, like a search path).
pub async fn introspect(
    client: &Client,
    schemas: &[String],
) -> Result<SchemaCache, tokio_postgres::Error> {
    let relations = client
        .query(
            "SELECT c.oid, c.relname, c.relkind IN ('v', 'm'), array_position($1::text[], n.nspname::text), n.nspname::text
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname::text = ANY($1::text[]) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
             ORDER BY 4, c.relname",
            &[&schemas],
        )
        .await?;
    let mut chosen: Vec<(u32, String, bool)> = Vec::new();
    let mut schema_of: HashMap<u32, String> = HashMap::new();
    for r in &relations {
        let name: String = r.get(1);
        if !chosen.iter().any(|(_, n, _)| *n == name) {
            chosen.push((r.get(0), name, r.get(2)));
            schema_of.insert(r.get(0), r.get(4));
        }
    }
    let oids: Vec<u32> = chosen.iter().map(|(oid, _, _)| *oid).collect();

    let mut columns: HashMap<u32, Vec<(i16, Column)>> = HashMap::new();
    for r in client
        .query(
            "SELECT a.attrelid, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
                    a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attgenerated <> '',
                    a.attidentity <> '', t.typname, t.typcategory::text
             FROM pg_attribute a
             JOIN pg_type t ON t.oid = a.atttypid
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attrelid, a.attnum",
            &[&oids],
        )
        .await?
    {
        let (json_type, json_kind) = classify(r.get(8), r.get(9));
        let generated: bool = r.get(6);
        let identity: bool = r.get(7);
        let not_null: bool = r.get(4);
        let default: Option<String> = r.get(5);
        columns.entry(r.get(0)).or_default().push((
            r.get(1),
            Column {
                name: r.get(2),
                decl_type: r.get(3),
                json_type,
                json_kind,
                nullable: !not_null,
                default: default.or_else(|| identity.then(|| "generated as identity".to_string())),
                pk_position: 0,
                generated,
                never_null: not_null,
                bounds: super::checks::Bounds::default(),
                input: super::input::InputType::Native,
            },
        ));
    }

    // simple CHECK constraints' bounds, per table's column
    for r in client
        .query(
            "SELECT conrelid, pg_get_constraintdef(oid) FROM pg_constraint
             WHERE conrelid = ANY($1) AND contype = 'c'",
            &[&oids],
        )
        .await?
    {
        let definition: String = r.get(1);
        for (_, c) in columns.get_mut(&r.get::<_, u32>(0)).into_iter().flatten() {
            let found = super::checks::bounds(&definition, &c.name);
            c.bounds.minimum = found.minimum.or(c.bounds.minimum);
            c.bounds.maximum = found.maximum.or(c.bounds.maximum);
        }
    }

    let mut primary: HashMap<u32, Vec<i16>> = HashMap::new();
    let mut unique: HashMap<u32, Vec<Vec<i16>>> = HashMap::new();
    let mut foreign: HashMap<u32, Vec<CatalogForeignKey>> = HashMap::new();
    for r in client
        .query(
            "SELECT conrelid, contype::text, conkey, confrelid, confkey, conname::text
             FROM pg_constraint
             WHERE conrelid = ANY($1) AND contype IN ('p', 'u', 'f')
             ORDER BY conrelid, conname",
            &[&oids],
        )
        .await?
    {
        let table: u32 = r.get(0);
        let kind: String = r.get(1);
        let keys: Vec<i16> = r.get(2);
        if kind == "p" {
            primary.insert(table, keys);
        } else if kind == "u" {
            unique.entry(table).or_default().push(keys);
        } else {
            foreign.entry(table).or_default().push((
                keys,
                r.get(3),
                r.get::<_, Option<Vec<i16>>>(4).unwrap_or_default(),
                r.get(5),
            ));
        }
    }

    // where each view's columns come from: the `_RETURN` rule's target list, as PostgREST reads
    // it (`resorigtbl`/`resorigcol` of each entry; the last entry of a name is the view's own,
    // subqueries' lists coming first)
    let view_oids: Vec<u32> = chosen
        .iter()
        .filter(|(_, _, is_view)| *is_view)
        .map(|(oid, _, _)| *oid)
        .collect();
    let mut origins: HashMap<u32, Vec<(String, u32, i16)>> = HashMap::new();
    if !view_oids.is_empty() {
        let entry = regex::Regex::new(
            r":resname (\S+) :ressortgroupref \d+ :resorigtbl (\d+) :resorigcol (\d+)",
        )
        .expect("a valid regex");
        for r in client
            .query(
                "SELECT ev_class, ev_action::text FROM pg_rewrite
                 WHERE ev_class = ANY($1) AND rulename = '_RETURN'",
                &[&view_oids],
            )
            .await?
        {
            let view: u32 = r.get(0);
            let tree: String = r.get(1);
            let list = origins.entry(view).or_default();
            for m in entry.captures_iter(&tree) {
                let (Ok(table), Ok(column)) = (m[2].parse::<u32>(), m[3].parse::<i16>()) else {
                    continue;
                };
                let name = m[1].to_string();
                list.retain(|(n, _, _)| *n != name);
                if table != 0 {
                    list.push((name, table, column));
                }
            }
        }
    }

    let name_of = |oid: u32| {
        chosen
            .iter()
            .find(|(o, _, _)| *o == oid)
            .map(|(_, n, _)| n.clone())
    };
    let column_name = |oid: u32, attnum: i16| {
        columns
            .get(&oid)
            .and_then(|cs| cs.iter().find(|(n, _)| *n == attnum))
            .map(|(_, c)| c.name.clone())
    };
    let mut tables = BTreeMap::new();
    for (oid, name, is_view) in &chosen {
        let mut cols: Vec<Column> = columns
            .get(oid)
            .map(|cs| cs.iter().map(|(_, c)| c.clone()).collect())
            .unwrap_or_default();
        let keys = primary.get(oid).cloned().unwrap_or_default();
        let primary_key: Vec<String> = keys.iter().filter_map(|k| column_name(*oid, *k)).collect();
        for (position, key) in (1u32..).zip(&primary_key) {
            if let Some(c) = cols.iter_mut().find(|c| c.name == *key) {
                c.pk_position = position;
            }
        }
        let foreign_keys = foreign
            .get(oid)
            .into_iter()
            .flatten()
            .filter_map(|(from, ref_oid, to, constraint)| {
                Some(ForeignKey {
                    name: constraint.clone(),
                    columns: from.iter().filter_map(|k| column_name(*oid, *k)).collect(),
                    // A key to a table outside the exposed schemas is not followed.
                    ref_table: name_of(*ref_oid)?,
                    ref_columns: to
                        .iter()
                        .filter_map(|k| column_name(*ref_oid, *k))
                        .collect(),
                })
            })
            .collect();
        cols.shrink_to_fit();
        let sources = origins
            .get(oid)
            .into_iter()
            .flatten()
            .filter(|(own, _, _)| cols.iter().any(|c| c.name == *own))
            .filter_map(|(own, table, column)| {
                Some((own.clone(), name_of(*table)?, column_name(*table, *column)?))
            })
            .collect();
        let mut table = Table::new(name.clone(), *is_view, cols, primary_key, foreign_keys)
            .in_schema(schema_of.get(oid).cloned().unwrap_or_default());
        table.sources = sources;
        table.unique = unique
            .get(oid)
            .into_iter()
            .flatten()
            .map(|keys| keys.iter().filter_map(|k| column_name(*oid, *k)).collect())
            .collect();
        tables.insert(name.clone(), table);
    }
    Ok(SchemaCache {
        tables,
        functions: Default::default(),
        version: 0,
    })
}

/// A foreign key as the catalog has it: column numbers, referenced table, its column numbers,
/// the constraint's name.
type CatalogForeignKey = (Vec<i16>, u32, Vec<i16>, String);

/// A PostgreSQL type (its name and category) as a JSON type and writing rule.
pub(crate) fn classify(type_name: &str, category: &str) -> (&'static str, JsonKind) {
    match (type_name, category) {
        ("bool", _) => ("boolean", JsonKind::Bool),
        ("json" | "jsonb", _) => ("", JsonKind::Json),
        ("int2" | "int4" | "int8" | "oid", _) => ("integer", JsonKind::Auto),
        (_, "N") => ("number", JsonKind::Auto),
        (_, "A") => ("array", JsonKind::Auto),
        _ => ("string", JsonKind::Auto),
    }
}
