//! The plan tree's embedded nodes (PostgREST's resource embedding): each `rel(…)` of `select=`
//! is resolved against the schema's relationships (400 `PGRST200` when none fits, 300
//! `PGRST201` when several do), authorized as a read of its own (the role's grant on the
//! related table: its columns and row filter apply inside the embed, as at the top level),
//! given its parameters (`rel.col=…`, `rel.or=…`, `rel.order=…`, `rel.limit=…`), and becomes an
//! [`EmbedStmt`] nested in its parent's statement: one statement for the whole tree.

use std::borrow::Cow;

use rowgate_query::stmt::{EmbedStmt, Junction, SelectStmt, ValueKind};
use rowgate_query::{Embed, Join, OrderTerm, Query, SelectItem};

use super::guard::Guard;
use super::plan::{self, embed_key, split_presence, Context, OutputShape, Pending};
use crate::auth::policy::Op;
use crate::error::{ApiError, ErrorCode};
use crate::schema::relationships::{self, Cardinality, NotFound, Relationship};
use crate::schema::{JsonKind, Table};

/// What resolving embeds needs: the plan stage's context, and the whole query (for the
/// embeds' own parameters).
pub struct Embedder<'a> {
    /// Schema, grants, who asks, dialect.
    pub cx: &'a Context<'a>,
    /// The request's query (its `embedded` parameters).
    pub query: &'a Query,
}

impl<'a> Embedder<'a> {
    /// The statements of the embeds of one level (`table`, reached by `path` of embed keys),
    /// with their keys put into the level's `shape` at their places. `presence` are the
    /// level's `rel=is.null` / `rel=not.is.null` filters (embed key, must exist), `order` its
    /// `order=` terms (those on an embed, `rel(col)`, are checked here).
    pub fn resolve(
        &self,
        table: &Table,
        pending: &[Pending<'_>],
        path: &[String],
        presence: &[(String, bool)],
        order: &mut [OrderTerm],
        shape: &mut OutputShape,
    ) -> Result<Vec<EmbedStmt>, ApiError> {
        // parameters of an embed that is not there (`driver.points=…` without `driver(…)`)
        if let Some(missing) = self.missing_embed(pending, path) {
            // the relation is embedded, under another name: the parameters take that name
            let aliased = pending
                .iter()
                .find(|p| p.embed.relation == missing)
                .and_then(|p| p.embed.alias.as_deref());
            return Err(match aliased {
                Some(alias) => ApiError {
                    details: Some(
                        "Target names are not allowed in filters if they have an alias".into(),
                    ),
                    hint: Some(format!(
                        "Change '{missing}' to '{alias}' in filters, orders or limits."
                    )),
                    ..not_embedded(&missing)
                },
                None => not_embedded(&missing),
            });
        }
        let mut out = Vec::with_capacity(pending.len());
        let mut shapes = Vec::with_capacity(pending.len());
        for p in pending {
            let (mut stmt, inner, view) = self.one(table, p, path)?;
            if let Some((_, exists)) = presence.iter().find(|(k, _)| *k == stmt.key) {
                stmt.required = Some(*exists);
            }
            // `order=rel(col)`: a column of this embed, which must be to-one
            for term in order
                .iter_mut()
                .filter(|t| t.relation.as_deref() == Some(&stmt.key))
            {
                if stmt.many {
                    return Err(ApiError::new(
                        ErrorCode::RelatedOrderNotToOne,
                        format!("A related order on '{}' is not possible", stmt.key),
                    )
                    .details(format!(
                        "'{}' and '{}' do not form a many-to-one or one-to-one relationship",
                        table.name, stmt.key
                    ))
                    .hint(format!("order its rows with {}.order=…", stmt.key)));
                }
                // a name the embed's select= gives a column (`rel(alias)`, as PostgREST reads
                // it of a spread) stands for that column
                if view.column(&term.column).is_none() && term.path.is_empty() {
                    if let Some(c) = stmt.select.columns.iter().find(|c| {
                        c.key == term.column && c.aggregate.is_none() && !c.column.is_empty()
                    }) {
                        term.column = c.column.clone();
                        term.path = c.path.clone();
                    }
                }
                let checked = plan::order(
                    &view,
                    &[OrderTerm {
                        relation: None,
                        ..term.clone()
                    }],
                    self.cx.dialect,
                )?;
                term.column = checked[0].column.clone();
            }
            out.push(stmt);
            shapes.push(inner);
        }
        if let Some(t) = order.iter().find(|t| {
            t.relation
                .as_ref()
                .is_some_and(|r| !out.iter().any(|e| e.key == *r))
        }) {
            return Err(not_embedded(t.relation.as_deref().unwrap_or_default()));
        }
        // the embeds' keys among the columns' (from the last, so that places stay right): one
        // JSON value each, or a spread embed's own keys
        for (e, inner) in out.iter().zip(shapes).rev().filter(|(e, _)| !e.hidden) {
            if e.spread {
                // a to-many spread's keys are arrays of the related rows' values
                for (key, kind) in inner.keys.into_iter().zip(inner.kinds).rev() {
                    shape.keys.insert(e.position, key);
                    shape
                        .kinds
                        .insert(e.position, if e.many { JsonKind::Json } else { kind });
                }
            } else {
                shape.keys.insert(e.position, e.key.clone());
                shape.kinds.insert(e.position, JsonKind::Json);
            }
        }
        Ok(out)
    }

    /// The first embed key, below the level at `path`, that the request's parameters name but
    /// the level does not embed.
    fn missing_embed(&self, pending: &[Pending<'_>], path: &[String]) -> Option<String> {
        self.query
            .embedded
            .iter()
            .filter(|e| e.path.len() > path.len() && e.path[..path.len()] == *path)
            .map(|e| &e.path[path.len()])
            .find(|key| !pending.iter().any(|p| embed_key(p.embed) == key.as_str()))
            .cloned()
    }

    /// One embed of `parent`, and its own output's keys and kinds (a spread's become the
    /// parent's).
    fn one(
        &self,
        parent: &Table,
        p: &Pending<'_>,
        path: &[String],
    ) -> Result<(EmbedStmt, OutputShape, Cow<'a, Table>), ApiError> {
        let e = p.embed;
        let rel = self.relationship(parent, e)?;
        // a to-one spread's aggregates aggregate its parent's groups; a to-many one's would
        // be arrays of aggregates, which PostgREST does not have either
        if e.spread && rel.is_many() && plan::has_aggregates(&e.select) {
            return Err(ApiError::new(
                ErrorCode::AggregateNotImplemented,
                "Feature not implemented",
            )
            .details("Aggregates are not implemented for one-to-many or many-to-many spreads."));
        }
        // its groups are its other items: an embedded resource (JSON, without equality)
        // cannot be one
        if e.spread
            && plan::has_aggregates(&e.select)
            && e.select
                .iter()
                .any(|i| matches!(i, SelectItem::Embed(n) if !n.spread))
        {
            return Err(ApiError::new(
                ErrorCode::AggregateNotImplemented,
                "Feature not implemented",
            )
            .details("A spread with aggregates cannot group by an embedded resource: spread it too, or aggregate without it."));
        }
        let full = plan::table(self.cx.schema, &rel.related)?;
        let guard = Guard::new(
            self.cx.policy,
            self.cx.principal,
            full,
            &[Op::Select],
            self.cx.dialect,
        )?;
        let key = embed_key(e).to_string();
        let mut here = path.to_vec();
        here.push(key.clone());
        let params = self.query.embedded(&here);
        let granted = guard.grant.view(full);
        let with_computed = match plan::with_computed(
            &granted,
            Some(&e.select),
            params.map_or(&[][..], |p| &p.filters[..]),
            params.map_or(&[][..], |p| &p.order[..]),
            |f| self.cx.may_call(f),
        ) {
            Cow::Owned(t) => Some(t),
            Cow::Borrowed(_) => None,
        };
        let view = with_computed.map_or(granted, Cow::Owned);
        let hidden = e.select.is_empty();
        let count = counted(&view, e);
        let select = if hidden || count.is_some() {
            None
        } else {
            Some(&e.select[..])
        };
        let mut selection = plan::output(&view, select, self.cx.dialect)?;
        if count.is_some() || hidden {
            selection.columns.clear();
            selection.shape.keys.clear();
            selection.shape.kinds.clear();
        }
        let (filters, presence) = split_presence(
            params.map_or(&[][..], |p| &p.filters[..]),
            &selection.embeds,
        );
        let mut filters = plan::conditions(&view, &filters, self.cx.dialect)?;
        filters.extend(guard.row_filter.iter().cloned());
        // how the columns are written into the embed's JSON (its own embeds are JSON already)
        let kinds = selection
            .shape
            .kinds
            .iter()
            .map(|kind| match kind {
                JsonKind::Bool => ValueKind::Bool,
                JsonKind::Json => ValueKind::Json,
                JsonKind::Auto => ValueKind::Plain,
            })
            .collect();
        let mut shape = selection.shape;
        let mut order = plan::order(
            &view,
            params.map_or(&[][..], |p| &p.order[..]),
            self.cx.dialect,
        )?;
        plan::grouped_order(&view, &selection.columns, &order)?;
        let embeds = self.resolve(
            &view,
            &selection.embeds,
            &here,
            &presence,
            &mut order,
            &mut shape,
        )?;
        // an embed of nothing but embeds of nothing (`a(b(c()))`) shows nothing either, as
        // PostgREST leaves it out
        let hidden = hidden
            || (count.is_none()
                && selection.columns.is_empty()
                && !embeds.is_empty()
                && embeds.iter().all(|n| n.hidden));
        // (inside a to-many spread, whose rows are read as an embed's, any spread is fine; a
        // to-one spread inside a to-one spread is read through both)
        if e.spread && !rel.is_many() && embeds.iter().any(|n| n.spread && n.many) {
            return Err(ApiError::new(
                ErrorCode::QueryParse,
                "a to-many spread embed inside a to-one spread embed is not supported",
            )
            .hint("spread the inner one into its parent's object instead"));
        }
        let (columns, through) = match &rel.cardinality {
            Cardinality::ManyToMany(j) => (
                Vec::new(),
                Some(Junction {
                    table: plan::table(self.cx.schema, &j.table)?.relation(),
                    to_parent: j.to_origin.1.clone(),
                    to_related: j.to_related.1.clone(),
                }),
            ),
            _ => (
                rel.columns
                    .iter()
                    .map(|(origin, related)| (related.clone(), origin.clone()))
                    .collect(),
                None,
            ),
        };
        let mut table = view.relation();
        if let Cardinality::Computed { schema, .. } = &rel.cardinality {
            // the rows come from the function called with the parent's row
            table.schema = Some(schema.clone());
            table.name = rel.constraint.clone();
            table.of_parent_row = true;
        }
        let stmt = EmbedStmt {
            key,
            position: p.position,
            many: rel.is_many(),
            select: SelectStmt {
                table,
                not_null: plan::never_null(&view),
                columns: selection.columns,
                filters,
                order,
                // (a function declared `ROWS 1` may still return more: the first counts)
                limit: match rel.cardinality {
                    Cardinality::Computed { many: false, .. } => Some(1),
                    // `rest.max_rows` bounds the related rows too, as PostgREST's at every level
                    _ if rel.is_many() && self.cx.rest.max_rows > 0 => {
                        let max = self.cx.rest.max_rows;
                        Some(params.and_then(|p| p.limit).map_or(max, |l| l.min(max)))
                    }
                    _ => params.and_then(|p| p.limit),
                },
                offset: params.and_then(|p| p.offset),
                embeds,
            },
            kinds,
            on: columns,
            through,
            required: (e.join == Some(Join::Inner)).then_some(true),
            hidden,
            spread: e.spread,
            count,
        };
        Ok((stmt, shape, view))
    }

    /// The first error of the relationships `select` embeds from `parent` (none, or more than
    /// one, fits), at its first level: PostgREST finds them before it looks at the columns,
    /// so a request naming both an unknown relation and an unknown column is answered the
    /// relation's `PGRST200`.
    pub fn relations_found(&self, parent: &Table, select: &[SelectItem]) -> Result<(), ApiError> {
        for item in select {
            if let SelectItem::Embed(e) = item {
                self.relationship(parent, e)?;
            }
        }
        Ok(())
    }

    /// The relationship `e` embeds from `parent`: a function of the row (granted to the
    /// role) first, then the foreign keys.
    fn relationship(&self, parent: &Table, e: &Embed) -> Result<Relationship, ApiError> {
        let computed = relationships::find_computed(parent, &e.relation)
            .filter(|r| e.hint.is_none() && self.cx.may_call(&r.constraint));
        match computed {
            Some(rel) => Ok(rel),
            None => relationships::find(self.cx.schema, parent, &e.relation, e.hint.as_deref())
                .map_err(|why| self.not_found(parent, e, why)),
        }
    }

    /// PostgREST's errors when no relationship, or more than one, fits.
    fn not_found(&self, parent: &Table, e: &Embed, why: NotFound) -> ApiError {
        match why {
            NotFound::Ambiguous(candidates) => ambiguous(parent, e, &candidates),
            NotFound::None => {
                let schema = parent.schema.as_deref().unwrap_or("main");
                let hint = e
                    .hint
                    .as_deref()
                    .map(|h| format!("' using the hint '{h}"))
                    .unwrap_or_default();
                let err = ApiError::new(
                    ErrorCode::RelationshipNotFound,
                    format!(
                        "Could not find a relationship between '{}' and '{}' in the schema cache",
                        parent.name, e.relation
                    ),
                )
                .details(format!(
                    "Searched for a foreign key relationship between '{}' and '{}{hint}' in the schema '{schema}', but no matches were found.",
                    parent.name, e.relation
                ));
                match self.similar_relation(parent, &e.relation) {
                    Some(name) => err.hint(format!(
                        "Perhaps you meant '{name}' instead of '{}'.",
                        e.relation
                    )),
                    None => err,
                }
            }
        }
    }

    /// The related table of `parent` whose name is most like `name` (not `name` itself).
    fn similar_relation(&self, parent: &Table, name: &str) -> Option<String> {
        relationships::of(self.cx.schema, parent)
            .into_iter()
            .map(|r| r.related)
            .filter(|r| r != name)
            .map(|r| (strsim::jaro_winkler(&r, name), r))
            .filter(|(score, _)| *score >= 0.8)
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, r)| r)
    }
}

/// 400 `PGRST108`, as PostgREST words it: a parameter names an embed `select=` does not have.
fn not_embedded(name: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotEmbedded,
        format!("'{name}' is not an embedded resource in this request"),
    )
    .hint(format!(
        "Verify that '{name}' is included in the 'select' query parameter."
    ))
}

/// `rel(count)` (or `rel(n:count)`) on a table without a `count` column: the embed is the
/// number of related rows, under that key.
fn counted(view: &Table, e: &Embed) -> Option<String> {
    match &e.select[..] {
        [SelectItem::Column {
            name,
            path,
            alias,
            cast: None,
            aggregate: None,
        }] if name == "count" && path.is_empty() && view.column("count").is_none() => {
            Some(alias.clone().unwrap_or_else(|| name.clone()))
        }
        _ => None,
    }
}

/// 300 `PGRST201`: the candidates in `details`, the hints that pick each in `hint`.
fn ambiguous(parent: &Table, e: &Embed, candidates: &[Relationship]) -> ApiError {
    let hints: Vec<String> = candidates.iter().map(Relationship::hint).collect();
    let mut err = ApiError::new(
        ErrorCode::AmbiguousRelationship,
        format!(
            "Could not embed because more than one relationship was found for '{}' and '{}'",
            parent.name, e.relation
        ),
    )
    .hint(format!(
        "Try changing '{}' to one of the following: {}. Find the desired relationship in the 'details' key.",
        e.relation,
        hints.join(", ")
    ));
    err.more = Some(Box::new(crate::error::More::DetailsJson(
        serde_json::Value::Array(candidates.iter().map(Relationship::describe).collect()),
    )));
    err
}
