//! The schema cache read from PostgreSQL's catalog (`pg_class`, `pg_attribute`, `pg_constraint`)
//! for the exposed schemas: tables (plain, partitioned, foreign), views and materialized views,
//! their columns with types, nullability, defaults, identity and generated columns, primary and
//! foreign keys, and where views' columns come from. Four catalog queries, whatever the number
//! of tables.

use std::collections::{BTreeMap, HashMap};

use tokio_postgres::Client;

use rowgate_query::ast::QualifiedName;

use super::{Column, ForeignKey, JsonKind, Representation, SchemaCache, Table, Writes};

/// Reads every table and view of `schemas` (names are unique across them: the first schema
/// listed wins, like a search path).
pub async fn introspect(
    client: &Client,
    schemas: &[String],
) -> Result<SchemaCache, tokio_postgres::Error> {
    let relations = client
        .query(
            "SELECT c.oid, c.relname, c.relkind IN ('v', 'm'), array_position($1::text[], n.nspname::text), n.nspname::text,
                    CASE WHEN c.relkind = 'v' THEN pg_relation_is_updatable(c.oid::regclass, true) ELSE 0 END
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname::text = ANY($1::text[]) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
               AND NOT c.relispartition
               -- Citus's own views of the cluster (citus_tables, citus_schemas in public)
               AND NOT EXISTS (SELECT 1 FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
                               WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                 AND d.deptype = 'e' AND e.extname = 'citus')
             ORDER BY 4, c.relname",
            &[&schemas],
        )
        .await?;
    let mut chosen: Vec<(u32, String, bool)> = Vec::new();
    let mut schema_of: HashMap<u32, String> = HashMap::new();
    let mut view_writes: HashMap<u32, Writes> = HashMap::new();
    for r in &relations {
        let name: String = r.get(1);
        if !chosen.iter().any(|(_, n, _)| *n == name) {
            chosen.push((r.get(0), name, r.get(2)));
            schema_of.insert(r.get(0), r.get(4));
            view_writes.insert(r.get(0), Writes::from_pg_mask(r.get(5)));
        }
    }
    let oids: Vec<u32> = chosen.iter().map(|(oid, _, _)| *oid).collect();

    let mut columns: HashMap<u32, Vec<(i16, Column)>> = HashMap::new();
    let mut domains: std::collections::HashSet<u32> = std::collections::HashSet::new();
    for r in client
        .query(
            "SELECT a.attrelid, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
                    a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attgenerated <> '',
                    a.attidentity <> '', t.typname, t.typcategory::text, t.oid, t.typtype = 'd',
                    CASE WHEN t.typtype = 'd' THEN (
                      WITH RECURSIVE under(oid, typtype, typbasetype) AS (
                        SELECT t.oid, t.typtype, t.typbasetype
                        UNION ALL
                        SELECT b.oid, b.typtype, b.typbasetype
                        FROM under JOIN pg_type b ON b.oid = under.typbasetype
                        WHERE under.typtype = 'd')
                      SELECT format_type(oid, NULL) FROM under WHERE typtype <> 'd')
                    END
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
        if r.get::<_, bool>(11) {
            domains.insert(r.get(10));
        }
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
                computed: None,
                representation: None,
                domain_base: r.get(12),
                input: super::input::InputType::Native,
                prefix_indexed: false,
                unindexed: false,
            },
        ));
    }

    let representations = representations(client, &domains.into_iter().collect::<Vec<_>>()).await?;
    if !representations.is_empty() {
        for (_, c) in columns.values_mut().flatten() {
            c.representation = representations.get(&c.decl_type).cloned().map(Box::new);
        }
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

    let mut keys = CatalogKeys::default();
    keys.read(client, &oids).await?;

    // where each view's columns come from: the `_RETURN` rule's own target list, as PostgREST
    // reads it (`resorigtbl`/`resorigcol` of each entry; PostgreSQL resolves them through the
    // subqueries of its FROM); the target lists of subqueries in its expressions (a
    // `(SELECT count(*) … WHERE author_id = authors.id)`) are theirs, not the view's
    let view_oids: Vec<u32> = chosen
        .iter()
        .filter(|(_, _, is_view)| *is_view)
        .map(|(oid, _, _)| *oid)
        .collect();
    let mut origins: HashMap<u32, Vec<(String, u32, i16)>> = HashMap::new();
    if !view_oids.is_empty() {
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
            origins.insert(view, view_column_origins(&tree));
        }
    }

    // a view over another view shows that view's base columns: follow the chain (a few levels)
    let inner_views = origins.clone();
    for list in origins.values_mut() {
        for (_, table, column) in list.iter_mut() {
            for _ in 0..8 {
                let Some(inner) = inner_views.get(table) else {
                    break;
                };
                let name = columns
                    .get(table)
                    .and_then(|cs| cs.iter().find(|(n, _)| n == column))
                    .map(|(_, c)| c.name.as_str());
                let Some(next) = name.and_then(|name| inner.iter().find(|(n, _, _)| n == name))
                else {
                    break;
                };
                (*table, *column) = (next.1, next.2);
            }
        }
    }

    // the primary keys of the tables views show (exposed or not): a view's key is the key
    // columns of every table it shows all of them of (a join's, both tables'), as PostgREST
    // takes it (Location, PUT, upserts); PostgREST also counts a key shown in part, which
    // would not name one row
    let base_oids: Vec<u32> = origins
        .values()
        .flatten()
        .map(|(_, table, _)| *table)
        .collect();
    let mut base_keys: HashMap<u32, Vec<i16>> = HashMap::new();
    if !base_oids.is_empty() {
        for r in client
            .query(
                "SELECT conrelid, conkey FROM pg_constraint WHERE contype = 'p' AND conrelid = ANY($1)",
                &[&base_oids],
            )
            .await?
        {
            base_keys.insert(r.get(0), r.get(1));
        }
    }
    let view_key = |view: u32| -> Vec<String> {
        let Some(list) = origins.get(&view) else {
            return Vec::new();
        };
        let mut bases: Vec<u32> = Vec::new();
        for (_, table, _) in list {
            if !bases.contains(table) {
                bases.push(*table);
            }
        }
        bases
            .iter()
            .filter_map(|base| {
                let key = base_keys.get(base)?;
                key.iter()
                    .map(|k| {
                        list.iter()
                            .find(|(_, t, c)| t == base && c == k)
                            .map(|(own, _, _)| own.clone())
                    })
                    .collect::<Option<Vec<String>>>()
            })
            .flatten()
            .collect()
    };

    // the tables views show from outside the exposed schemas (PostgREST's private schema
    // behind API views): their names, columns and keys, so that the views relate as theirs do
    let mut hidden_oids: Vec<u32> = Vec::new();
    for (_, table, _) in origins.values().flatten() {
        if !oids.contains(table) && !hidden_oids.contains(table) {
            hidden_oids.push(*table);
        }
    }
    let mut hidden_names: HashMap<u32, String> = HashMap::new();
    let mut hidden_columns: HashMap<u32, Vec<(i16, String)>> = HashMap::new();
    if !hidden_oids.is_empty() {
        for r in client
            .query(
                "SELECT c.oid, n.nspname::text || '.' || c.relname::text
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.oid = ANY($1) AND c.relkind IN ('r', 'p', 'f')",
                &[&hidden_oids],
            )
            .await?
        {
            hidden_names.insert(r.get(0), r.get(1));
        }
        hidden_oids.retain(|oid| hidden_names.contains_key(oid));
        for r in client
            .query(
                "SELECT attrelid, attnum, attname::text FROM pg_attribute
                 WHERE attrelid = ANY($1) AND attnum > 0 AND NOT attisdropped
                 ORDER BY attrelid, attnum",
                &[&hidden_oids],
            )
            .await?
        {
            hidden_columns
                .entry(r.get(0))
                .or_default()
                .push((r.get(1), r.get(2)));
        }
        keys.read(client, &hidden_oids).await?;
    }
    let CatalogKeys {
        primary,
        unique,
        foreign,
    } = keys;

    let name_of = |oid: u32| {
        chosen
            .iter()
            .find(|(o, _, _)| *o == oid)
            .map(|(_, n, _)| n.clone())
            .or_else(|| hidden_names.get(&oid).cloned())
    };
    let column_name = |oid: u32, attnum: i16| {
        columns
            .get(&oid)
            .and_then(|cs| cs.iter().find(|(n, _)| *n == attnum))
            .map(|(_, c)| c.name.clone())
            .or_else(|| {
                hidden_columns
                    .get(&oid)
                    .and_then(|cs| cs.iter().find(|(n, _)| *n == attnum))
                    .map(|(_, name)| name.clone())
            })
    };
    let foreign_keys_of = |oid: u32| -> Vec<ForeignKey> {
        foreign
            .get(&oid)
            .into_iter()
            .flatten()
            .filter_map(|(from, ref_oid, to, constraint)| {
                Some(ForeignKey {
                    name: constraint.clone(),
                    columns: from.iter().filter_map(|k| column_name(oid, *k)).collect(),
                    // A key to a table neither exposed nor shown by a view is not followed.
                    ref_table: name_of(*ref_oid)?,
                    ref_columns: to
                        .iter()
                        .filter_map(|k| column_name(*ref_oid, *k))
                        .collect(),
                })
            })
            .collect()
    };
    let unique_of = |oid: u32| -> Vec<Vec<String>> {
        unique
            .get(&oid)
            .into_iter()
            .flatten()
            .map(|keys| keys.iter().filter_map(|k| column_name(oid, *k)).collect())
            .collect()
    };
    let mut hidden = BTreeMap::new();
    for oid in &hidden_oids {
        let columns: Vec<Column> = hidden_columns
            .get(oid)
            .into_iter()
            .flatten()
            .map(|(_, name)| Column::of_result(name.clone(), String::new(), ("", JsonKind::Auto)))
            .collect();
        let primary_key = primary
            .get(oid)
            .into_iter()
            .flatten()
            .filter_map(|k| column_name(*oid, *k))
            .collect();
        let name = hidden_names[oid].clone();
        let mut table = Table::new(
            name.clone(),
            false,
            columns,
            primary_key,
            foreign_keys_of(*oid),
        );
        table.unique = unique_of(*oid);
        hidden.insert(name, table);
    }
    let mut tables = BTreeMap::new();
    for (oid, name, is_view) in &chosen {
        let mut cols: Vec<Column> = columns
            .get(oid)
            .map(|cs| cs.iter().map(|(_, c)| c.clone()).collect())
            .unwrap_or_default();
        let keys = primary.get(oid).cloned().unwrap_or_default();
        let primary_key: Vec<String> = if *is_view {
            view_key(*oid)
        } else {
            keys.iter().filter_map(|k| column_name(*oid, *k)).collect()
        };
        for (position, key) in (1u32..).zip(&primary_key) {
            if let Some(c) = cols.iter_mut().find(|c| c.name == *key) {
                c.pk_position = position;
            }
        }
        let foreign_keys = foreign_keys_of(*oid);
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
        if *is_view {
            table.writes = view_writes.get(oid).copied().unwrap_or(Writes::NONE);
        }
        table.unique = unique_of(*oid);
        tables.insert(name.clone(), table);
    }
    Ok(SchemaCache {
        tables,
        functions: Default::default(),
        version: 0,
        hidden,
        profiles: Vec::new(),
        others: Vec::new(),
        media_handlers: Vec::new(),
        volatile_views: Vec::new(),
        privileges: None,
    })
}

/// A foreign key as the catalog has it: column numbers, referenced table, its column numbers,
/// the constraint's name.
type CatalogForeignKey = (Vec<i16>, u32, Vec<i16>, String);

/// The keys of relations as the catalog has them, by relation: primary, unique, foreign.
#[derive(Default)]
struct CatalogKeys {
    primary: HashMap<u32, Vec<i16>>,
    unique: HashMap<u32, Vec<Vec<i16>>>,
    foreign: HashMap<u32, Vec<CatalogForeignKey>>,
}

impl CatalogKeys {
    /// Adds the keys of the relations `oids`.
    async fn read(&mut self, client: &Client, oids: &[u32]) -> Result<(), tokio_postgres::Error> {
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
            let keys: Vec<i16> = r.get(2);
            match r.get::<_, String>(1).as_str() {
                "p" => {
                    self.primary.insert(table, keys);
                }
                "u" => self.unique.entry(table).or_default().push(keys),
                _ => self.foreign.entry(table).or_default().push((
                    keys,
                    r.get(3),
                    r.get::<_, Option<Vec<i16>>>(4).unwrap_or_default(),
                    r.get(5),
                )),
            }
        }
        Ok(())
    }
}

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

/// The representations of `domains` (PostgREST's domain representations): the functions of
/// their implicit casts to `json`, from `json` and from `text`, keyed by the domain's name as
/// `format_type` spells it (a column's `decl_type`).
async fn representations(
    client: &Client,
    domains: &[u32],
) -> Result<HashMap<String, Representation>, tokio_postgres::Error> {
    let mut found: HashMap<String, Representation> = HashMap::new();
    if domains.is_empty() {
        return Ok(found);
    }
    for r in client
        .query(
            "SELECT format_type(CASE WHEN c.castsource = ANY($1) THEN c.castsource ELSE c.casttarget END, NULL),
                    c.castsource = ANY($1), c.castsource = 'json'::regtype, n.nspname::text, p.proname::text
             FROM pg_cast c
             JOIN pg_proc p ON p.oid = c.castfunc
             JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE c.castcontext = 'i' AND c.castmethod = 'f'
               AND ((c.castsource = ANY($1) AND c.casttarget = 'json'::regtype)
                 OR (c.casttarget = ANY($1) AND c.castsource IN ('json'::regtype, 'text'::regtype)))",
            &[&domains],
        )
        .await?
    {
        let function = Some(QualifiedName {
            schema: Some(r.get(3)),
            name: r.get(4),
        });
        let entry = found.entry(r.get(0)).or_default();
        match (r.get::<_, bool>(1), r.get::<_, bool>(2)) {
            (true, _) => entry.to_json = function,
            (false, true) => entry.from_json = function,
            (false, false) => entry.from_text = function,
        }
    }
    Ok(found)
}

/// The columns a view's `_RETURN` rule (`pg_rewrite.ev_action` as text) shows and where each
/// comes from: `(name, table oid, column number)` of its own target list's entries with an
/// origin — those of the rule's query, at the first depth of braces an entry sits at, not of
/// subqueries nested in its expressions or its range table.
fn view_column_origins(tree: &str) -> Vec<(String, u32, i16)> {
    // a field's value: up to an unescaped space (`\ ` is a space of a name)
    let field = |at: &str, name: &str| -> Option<String> {
        let rest = at[at.find(name)? + name.len()..].trim_start();
        let mut value = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                ' ' | ')' | '}' => break,
                c => value.push(c),
            }
        }
        Some(value)
    };
    let bytes = tree.as_bytes();
    // the brace depth of every `{TARGETENTRY`, and where its own fields are
    let mut entries: Vec<(usize, usize, usize)> = Vec::new(); // (depth, start, end)
    let mut open: Vec<(usize, bool)> = Vec::new(); // (start, is a target entry)
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1, // an escaped character of a name
            b'{' => open.push((i, tree[i + 1..].starts_with("TARGETENTRY"))),
            b'}' => {
                if let Some((start, true)) = open.pop() {
                    entries.push((open.len() + 1, start, i));
                }
            }
            _ => {}
        }
        i += 1;
    }
    let Some(top) = entries.iter().map(|(depth, _, _)| *depth).min() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (_, start, end) in entries.iter().filter(|(depth, _, _)| *depth == top) {
        let entry = &tree[*start..*end];
        // its own fields follow its expression's nodes: read them after the last nested brace
        let own = &entry[entry.rfind('}').unwrap_or(0)..];
        let (Some(name), Some(table), Some(column)) = (
            field(own, ":resname"),
            field(own, ":resorigtbl").and_then(|t| t.parse::<u32>().ok()),
            field(own, ":resorigcol").and_then(|c| c.parse::<i16>().ok()),
        ) else {
            continue;
        };
        if table != 0 {
            out.push((name, table, column));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_views_columns_come_from_its_own_target_list() {
        // a subquery of the range table, then the view's entries: a column, a scalar
        // subquery's (whose own `id` is not the view's), a name with a space
        let tree = "({QUERY :commandType 1 :rtable ({RANGETBLENTRY :subquery {QUERY :targetList \
            ({TARGETENTRY :expr {VAR :varno 1} :resno 1 :resname id :ressortgroupref 0 \
            :resorigtbl 99 :resorigcol 1 :resjunk false})}}) :targetList ({TARGETENTRY :expr \
            {VAR :varno 1} :resno 1 :resname id :ressortgroupref 0 :resorigtbl 10 :resorigcol 1 \
            :resjunk false} {TARGETENTRY :expr {SUBLINK :subselect {QUERY :targetList \
            ({TARGETENTRY :expr {VAR :varno 2} :resno 1 :resname id :ressortgroupref 0 \
            :resorigtbl 20 :resorigcol 1 :resjunk false})}} :resno 2 :resname n \
            :ressortgroupref 0 :resorigtbl 0 :resorigcol 0 :resjunk false} {TARGETENTRY :expr \
            {VAR :varno 1} :resno 3 :resname full\\ name :ressortgroupref 0 :resorigtbl 10 \
            :resorigcol 2 :resjunk false})})";
        assert_eq!(
            view_column_origins(tree),
            [("id".to_string(), 10, 1), ("full name".to_string(), 10, 2)]
        );
        assert!(view_column_origins("").is_empty());
    }
}
