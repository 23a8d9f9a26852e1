//! Relationships between tables, read off their foreign keys as PostgREST reads them for
//! resource embedding: many-to-one (this table's key to another), one-to-many (another table's
//! key to this one), one-to-one (either, when the key's columns are the referencing table's
//! primary key or a unique constraint of it), and many-to-many (through a junction table whose primary key holds foreign
//! keys to both). [`find`] picks the one a request names, or says why none or several fit.

use super::{ForeignKey, SchemaCache, Table};

/// How many rows of the related table one row relates to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cardinality {
    /// This table's foreign key: at most one related row.
    ManyToOne,
    /// The related table's foreign key to this one: any number of related rows.
    OneToMany,
    /// A foreign key whose columns are the referencing table's primary key or a unique
    /// constraint of it: at most one, both ways.
    OneToOne,
    /// Rows of a junction table link the two: any number of related rows.
    ManyToMany(Junction),
    /// A function of the origin's row returns the related rows (PostgREST's computed
    /// relationship; `constraint` is its name).
    Computed {
        /// The function's schema.
        schema: String,
        /// Any number of rows (`SETOF`), else at most one.
        many: bool,
    },
}

/// The junction of a many-to-many relationship.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Junction {
    /// The junction table.
    pub table: String,
    /// Its foreign key to the origin table, and the column pairs (junction, origin).
    pub to_origin: (String, Vec<(String, String)>),
    /// Its foreign key to the related table, and the column pairs (junction, related).
    pub to_related: (String, Vec<(String, String)>),
}

/// One relationship from an origin table to a related one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relationship {
    /// The origin (the table being read).
    pub origin: String,
    /// The related table.
    pub related: String,
    /// The foreign key's constraint name (many-to-many: the junction's name).
    pub constraint: String,
    /// Column pairs (origin column, related column) that are equal (empty for many-to-many).
    pub columns: Vec<(String, String)>,
    /// Cardinality.
    pub cardinality: Cardinality,
}

impl Relationship {
    /// Whether a row relates to any number of rows (an array), not at most one (an object).
    pub fn is_many(&self) -> bool {
        matches!(
            self.cardinality,
            Cardinality::OneToMany
                | Cardinality::ManyToMany(_)
                | Cardinality::Computed { many: true, .. }
        )
    }

    /// PostgREST's description of the relationship in an ambiguity error's `details`.
    pub fn describe(&self) -> serde_json::Value {
        let list = |cols: &mut dyn Iterator<Item = &String>| {
            format!(
                "({})",
                cols.map(String::as_str).collect::<Vec<_>>().join(", ")
            )
        };
        let (cardinality, relationship) = match &self.cardinality {
            Cardinality::ManyToMany(j) => (
                "many-to-many",
                format!(
                    "{} using {}{} and {}{}",
                    j.table,
                    j.to_origin.0,
                    list(&mut j.to_origin.1.iter().map(|(c, _)| c)),
                    j.to_related.0,
                    list(&mut j.to_related.1.iter().map(|(c, _)| c)),
                ),
            ),
            other => (
                match other {
                    Cardinality::ManyToOne | Cardinality::Computed { many: false, .. } => {
                        "many-to-one"
                    }
                    Cardinality::OneToOne => "one-to-one",
                    _ => "one-to-many",
                },
                format!(
                    "{} using {}{} and {}{}",
                    self.constraint,
                    self.origin,
                    list(&mut self.columns.iter().map(|(o, _)| o)),
                    self.related,
                    list(&mut self.columns.iter().map(|(_, r)| r)),
                ),
            ),
        };
        serde_json::json!({
            "cardinality": cardinality,
            "embedding": format!("{} with {}", self.origin, self.related),
            "relationship": relationship,
        })
    }

    /// How a request names this relationship to pick it among several: `related!hint`.
    pub fn hint(&self) -> String {
        match &self.cardinality {
            Cardinality::ManyToMany(j) => format!("'{}!{}'", self.related, j.table),
            _ => format!("'{}!{}'", self.related, self.constraint),
        }
    }
}

/// Why no single relationship fits.
#[derive(Debug)]
pub enum NotFound {
    /// None does.
    None,
    /// Several do.
    Ambiguous(Vec<Relationship>),
}

/// The referenced columns of `fk`, the referenced table's primary key when the key names none
/// (SQLite's `REFERENCES t`).
fn referenced<'a>(fk: &'a ForeignKey, referenced: &'a Table) -> &'a [String] {
    if fk.ref_columns.is_empty() {
        &referenced.primary_key
    } else {
        &fk.ref_columns
    }
}

/// Whether `columns` are exactly `table`'s primary key or one of its unique constraints (in
/// any order): a foreign key on them relates at most one row each way.
fn is_unique(table: &Table, columns: &[String]) -> bool {
    let same = |key: &[String]| {
        !key.is_empty() && columns.len() == key.len() && columns.iter().all(|c| key.contains(c))
    };
    same(&table.primary_key) || table.unique.iter().any(|u| same(u))
}

/// How a table or view shows a base table's columns: pairs of (base column, its column).
/// A table shows itself; a view the base columns it carries as they are.
fn shown(table: &Table, base: &str) -> Vec<(String, String)> {
    if !table.is_view {
        if table.name != base {
            return Vec::new();
        }
        return table
            .columns
            .iter()
            .map(|c| (c.name.clone(), c.name.clone()))
            .collect();
    }
    table
        .sources
        .iter()
        .filter(|(_, t, _)| t == base)
        .map(|(own, _, base_col)| (base_col.clone(), own.clone()))
        .collect()
}

/// `columns` of `base` as `table` names them, when it shows every one: each way it does (a
/// view showing a base column twice, under two names, relates through either, as PostgREST
/// relates it), at most [`MAX_WAYS`] of them.
fn mapped(shows: &[(String, String)], columns: &[String]) -> Vec<Vec<String>> {
    fn names_of<'s>(
        shows: &'s [(String, String)],
        c: &'s String,
    ) -> impl Iterator<Item = &'s (String, String)> {
        shows.iter().filter(move |(b, _)| b == c)
    }
    // the common case, each column shown once: one way, found as cheaply as ever (this runs
    // for every table at every embed's resolution)
    let Some(first) = columns
        .iter()
        .map(|c| names_of(shows, c).next().map(|(_, own)| own.clone()))
        .collect::<Option<Vec<String>>>()
    else {
        return Vec::new();
    };
    if columns.iter().all(|c| names_of(shows, c).nth(1).is_none()) {
        return vec![first];
    }
    let mut ways: Vec<Vec<String>> = vec![Vec::new()];
    for c in columns {
        let names: Vec<&String> = shows
            .iter()
            .filter(|(b, _)| b == c)
            .map(|(_, own)| own)
            .collect();
        ways = ways
            .iter()
            .flat_map(|way| {
                names.iter().map(move |name| {
                    let mut longer = way.clone();
                    longer.push((*name).clone());
                    longer
                })
            })
            .take(MAX_WAYS)
            .collect();
    }
    ways
}

/// The most ways [`mapped`] gives one foreign key through one view.
const MAX_WAYS: usize = 16;

/// The base tables a table or view stands for: itself, or the tables its columns come from.
fn bases(table: &Table) -> Vec<String> {
    if !table.is_view {
        return vec![table.name.clone()];
    }
    let mut out: Vec<String> = Vec::new();
    for (_, t, _) in &table.sources {
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

/// Every relationship of `origin` (a table, or a view through the base columns it carries), in
/// a stable order. A foreign key between two base tables relates every table or view showing
/// its columns on either side.
pub fn of(schema: &SchemaCache, origin: &Table) -> Vec<Relationship> {
    of_to(schema, origin, None)
}

/// [`of`], of the many-to-many relationships only those to `target` when it is given (a
/// many-to-many relationship is named by its related table alone).
fn of_to(schema: &SchemaCache, origin: &Table, target: Option<&str>) -> Vec<Relationship> {
    let mut out = Vec::new();
    for base_name in bases(origin) {
        let Some(base) = schema.base_table(&base_name) else {
            continue;
        };
        let origin_shows = shown(origin, &base_name);
        // the base table's foreign keys: to-one
        for fk in &base.foreign_keys {
            let Some(referenced_table) = schema.base_table(&fk.ref_table) else {
                continue;
            };
            let cardinality = if is_unique(base, &fk.columns) {
                Cardinality::OneToOne
            } else {
                Cardinality::ManyToOne
            };
            let to = referenced(fk, referenced_table);
            for own in mapped(&origin_shows, &fk.columns) {
                out.extend(showing(
                    schema,
                    origin,
                    fk,
                    &own,
                    &fk.ref_table,
                    to,
                    &cardinality,
                ));
            }
        }
        // other tables' foreign keys to the base table: to-many
        let tables = schema.tables.values().filter(|t| !t.is_view);
        for other in tables.chain(schema.hidden.values()) {
            for fk in other
                .foreign_keys
                .iter()
                .filter(|fk| fk.ref_table == base_name)
            {
                let cardinality = if is_unique(other, &fk.columns) {
                    Cardinality::OneToOne
                } else {
                    Cardinality::OneToMany
                };
                for own in mapped(&origin_shows, referenced(fk, base)) {
                    out.extend(showing(
                        schema,
                        origin,
                        fk,
                        &own,
                        &other.name,
                        &fk.columns,
                        &cardinality,
                    ));
                }
            }
        }
    }
    for junction in schema.tables.values() {
        out.extend(through(schema, origin, junction, target));
    }
    out
}

/// The relationships `fk` makes from `origin` (its columns `own` on the origin's side) to
/// every table or view that shows `columns` of the `far` base table.
fn showing<'s>(
    schema: &'s SchemaCache,
    origin: &'s Table,
    fk: &'s ForeignKey,
    own: &'s [String],
    far: &'s str,
    columns: &'s [String],
    cardinality: &'s Cardinality,
) -> impl Iterator<Item = Relationship> + 's {
    schema.tables.values().flat_map(move |related| {
        mapped(&shown(related, far), columns)
            .into_iter()
            .map(move |theirs| Relationship {
                origin: origin.name.clone(),
                related: related.name.clone(),
                constraint: fk.name.clone(),
                columns: own.iter().cloned().zip(theirs).collect(),
                cardinality: cardinality.clone(),
            })
    })
}

/// The many-to-many relationships from `origin` through `junction` (each a table, or a view
/// through the base columns it carries, as PostgREST relates them): a pair of the foreign keys
/// of the junction's base tables, each shown whole by the junction within its primary key,
/// one referencing columns `origin` shows, the other columns another table or view shows
/// (`target` when given).
fn through(
    schema: &SchemaCache,
    origin: &Table,
    junction: &Table,
    target: Option<&str>,
) -> Vec<Relationship> {
    // the junction's foreign keys, as its own columns, within its key (most tables have
    // fewer than two: nothing to do)
    let in_key =
        |own: &[String]| !own.is_empty() && own.iter().all(|c| junction.primary_key.contains(c));
    let mut keys: Vec<(&ForeignKey, Vec<String>)> = Vec::new();
    if junction.primary_key.len() < 2 || (!junction.is_view && junction.foreign_keys.len() < 2) {
        return Vec::new();
    }
    if junction.is_view {
        for base_name in bases(junction) {
            let Some(base) = schema.base_table(&base_name) else {
                continue;
            };
            if base.foreign_keys.is_empty() {
                continue;
            }
            let shows = shown(junction, &base_name);
            for fk in &base.foreign_keys {
                for own in mapped(&shows, &fk.columns) {
                    if in_key(&own) {
                        keys.push((fk, own));
                    }
                }
            }
        }
    } else {
        keys.extend(
            junction
                .foreign_keys
                .iter()
                .filter(|fk| in_key(&fk.columns))
                .map(|fk| (fk, fk.columns.clone())),
        );
    }
    if keys.len() < 2 {
        return Vec::new();
    }
    let pairs = |own: &[String], theirs: Vec<String>| -> Vec<(String, String)> {
        own.iter().cloned().zip(theirs).collect()
    };
    let mut out = Vec::new();
    let origin_bases = bases(origin);
    for (to_origin, own_origin) in &keys {
        if !origin_bases.contains(&to_origin.ref_table) {
            continue;
        }
        let Some(origin_base) = schema.base_table(&to_origin.ref_table) else {
            continue;
        };
        let origin_sides = mapped(
            &shown(origin, &to_origin.ref_table),
            referenced(to_origin, origin_base),
        );
        for origin_side in origin_sides {
            for (to_related, own_related) in &keys {
                if own_related == own_origin {
                    continue;
                }
                let Some(related_base) = schema.base_table(&to_related.ref_table) else {
                    continue;
                };
                let candidates: Vec<&Table> = match target {
                    Some(name) => schema.table(name).into_iter().collect(),
                    None => schema.tables.values().collect(),
                };
                for related in candidates {
                    for related_side in mapped(
                        &shown(related, &to_related.ref_table),
                        referenced(to_related, related_base),
                    ) {
                        out.push(Relationship {
                            origin: origin.name.clone(),
                            related: related.name.clone(),
                            constraint: junction.name.clone(),
                            columns: Vec::new(),
                            cardinality: Cardinality::ManyToMany(Junction {
                                table: junction.name.clone(),
                                to_origin: (
                                    to_origin.name.clone(),
                                    pairs(own_origin, origin_side.clone()),
                                ),
                                to_related: (
                                    to_related.name.clone(),
                                    pairs(own_related, related_side),
                                ),
                            }),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The computed relationship of `origin` that `target` names (its function's name): it comes
/// before any a foreign key makes, as in PostgREST, where it is how a relationship is chosen.
pub fn find_computed(origin: &Table, target: &str) -> Option<Relationship> {
    let c = origin.computed_rels.iter().find(|c| c.name == target)?;
    Some(Relationship {
        origin: origin.name.clone(),
        related: c.related.clone(),
        constraint: c.name.clone(),
        columns: Vec::new(),
        cardinality: Cardinality::Computed {
            schema: c.schema.clone(),
            many: c.many,
        },
    })
}

/// The one relationship of `origin` that `target` names (a related table, a foreign-key column
/// of the origin, or a constraint), narrowed by `hint` (a constraint, a column of either side,
/// or a junction table), as PostgREST's `findRel`.
pub fn find(
    schema: &SchemaCache,
    origin: &Table,
    target: &str,
    hint: Option<&str>,
) -> Result<Relationship, NotFound> {
    let single_column = |r: &Relationship, name: &str, side: fn(&(String, String)) -> &String| {
        r.columns.len() == 1 && side(&r.columns[0]) == name
    };
    let origin_column = |r: &Relationship, name: &str| {
        matches!(
            r.cardinality,
            Cardinality::ManyToOne | Cardinality::OneToOne
        ) && single_column(r, name, |p| &p.0)
    };
    let constraint = |r: &Relationship, name: &str| {
        !matches!(r.cardinality, Cardinality::ManyToMany(_)) && r.constraint == name
    };
    let mut found: Vec<Relationship> = of_to(schema, origin, Some(target))
        .into_iter()
        .filter(|r| {
            // a column or constraint names the relationship to the table itself, not to views
            // over it; to a view only when its table is not exposed (an API view over a
            // private table stands for it)
            let to_table = schema.table(&r.related).is_some_and(|t| {
                !t.is_view
                    || bases(t)
                        .iter()
                        .all(|b| schema.table(b).is_none_or(|base| base.is_view))
            });
            r.related == target || to_table && (origin_column(r, target) || constraint(r, target))
        })
        .filter(|r| match hint {
            None => true,
            Some(h) => {
                constraint(r, h)
                    || single_column(r, h, |p| &p.0)
                    || single_column(r, h, |p| &p.1)
                    || matches!(&r.cardinality, Cardinality::ManyToMany(j) if j.table == h)
            }
        })
        .collect();
    // a table naming itself means its children (PostgREST's recursive one-to-many): its
    // parent is named by the foreign key's column or constraint
    if found.len() > 1 && target == origin.name {
        found.retain(|r| !(r.related == origin.name && r.cardinality == Cardinality::ManyToOne));
    }
    // a column naming its own relation's parent (`parent(*)` on a view over a table that
    // references itself) means the relation itself, not another view over the same table
    // (PostgREST's self-relationship)
    let parent_of_itself =
        |r: &Relationship| r.related == origin.name && r.cardinality == Cardinality::ManyToOne;
    if found.len() > 1 && target != origin.name && found.iter().any(parent_of_itself) {
        found.retain(|r| r.related == target || parent_of_itself(r));
    }
    match found.len() {
        0 => Err(NotFound::None),
        1 => Ok(found.remove(0)),
        _ => {
            // the same order on every backend, PostgREST's: to-many, then to-one, then through
            // a junction (by the junction's name)
            let rank = |r: &Relationship| match r.cardinality {
                Cardinality::OneToMany => 0,
                Cardinality::OneToOne => 1,
                Cardinality::ManyToOne => 2,
                Cardinality::ManyToMany(_) => 3,
                Cardinality::Computed { .. } => 4,
            };
            found.sort_by(|a, b| {
                (rank(a), &a.related, &a.constraint).cmp(&(rank(b), &b.related, &b.constraint))
            });
            Err(NotFound::Ambiguous(found))
        }
    }
}
