//! Authorization of one AutoREST request: the role's grant on the table (every operation the
//! method needs), the columns it may write, its row filter (resolved against the whole table and
//! added to reads, updates and deletes), and the checks that keep writes inside that filter —
//! an inserted or updated row must satisfy it, and an upsert may not take over a row outside it.
//! The checks are `Forbid` steps run in the write's own transaction, before the write.

use rowgate_query::render::{self, Dialect};
use rowgate_query::stmt::{Constant, InsertStmt, OnConflict, Sql, UpdateStmt};
use rowgate_query::{Condition, Operand, Operator, Value};

use super::plan;
use crate::auth::policy::{columns_of, denied, Grant, Op, Permit, Subject};
use crate::auth::Principal;
use crate::db::{DbError, DbErrorKind};
use crate::error::{ApiError, ErrorCode};
use crate::job::Step;
use crate::schema::Table;

/// What the principal may do with one table in this request.
pub struct Guard<'a> {
    /// The grant.
    pub grant: &'a Grant,
    /// Who asks.
    pub principal: &'a Principal,
    /// The row filter, resolved against the whole table (empty: every row).
    pub row_filter: Vec<Condition>,
}

impl<'a> Guard<'a> {
    /// Checks that `principal` may do each of `ops` to `table`.
    pub fn new(
        policy: &'a crate::auth::policy::Policy,
        principal: &'a Principal,
        table: &Table,
        ops: &[Op],
        d: &dyn Dialect,
    ) -> Result<Guard<'a>, ApiError> {
        let mut grant = None;
        for &op in ops {
            let subject = Subject::Table {
                name: &table.name,
                op,
            };
            if let Permit::Table(g) = policy.authorize(principal, subject)? {
                grant = Some(g);
            }
        }
        let grant = grant.ok_or_else(|| denied(principal))?;
        let row_filter = plan::conditions(table, &grant.row_filter(principal)?, d)?;
        Ok(Guard {
            grant,
            principal,
            row_filter,
        })
    }

    /// Refuses columns the role may not write.
    pub fn check_writable<'c>(
        &self,
        columns: impl IntoIterator<Item = &'c String>,
    ) -> Result<(), ApiError> {
        for c in columns {
            if !self.grant.writable(c) {
                return Err(denied(self.principal).details(format!(
                    "role {:?} may not write column {c:?}",
                    self.principal.role
                )));
            }
        }
        Ok(())
    }

    /// For an insert under a row filter: columns the filter sets with a top-level `eq` and the
    /// body leaves out are filled in (`owner=eq.@sub` makes `owner` the caller's); then a check
    /// that every row satisfies the filter and, for an upsert that updates, that no existing row
    /// it would overwrite is outside it.
    pub fn insert_checks(
        &self,
        d: &dyn Dialect,
        table: &Table,
        stmt: &mut InsertStmt,
    ) -> Result<Vec<Step>, ApiError> {
        if self.row_filter.is_empty() {
            return Ok(Vec::new());
        }
        for (column, value) in fixed_columns(&self.row_filter) {
            if !stmt.all_columns().any(|c| *c == column) {
                stmt.constants.push(Constant {
                    cast: plain_type(table, &column),
                    column,
                    value: Value::Text(value),
                });
            }
        }
        let mut needed = Vec::new();
        for c in self.row_filter.iter().flat_map(columns_of) {
            if !stmt.all_columns().any(|given| given == c) && !needed.contains(c) {
                needed.push(c.clone());
            }
        }
        if !needed.is_empty() {
            return Err(ApiError::new(
                ErrorCode::InvalidBody,
                format!(
                    "the row filter of role {:?} depends on {}: give them in every row",
                    self.principal.role,
                    needed.join(", ")
                ),
            ));
        }
        let mut steps = Vec::new();
        let typed = |column: &str, cell: String| typed(table, column, &cell);
        let columns: Vec<String> = stmt.all_columns().cloned().collect();
        if stmt.columns.is_empty() || stmt.rows.count() > 0 {
            let mut sql = Sql::default();
            sql.text.push_str("SELECT count(*) FROM (");
            render::rows_select(d, stmt, &columns, &typed, &mut sql);
            sql.text.push_str(") AS ");
            sql.text.push_str(&d.quote_ident(&table.name));
            self.violations(d, &mut sql);
            steps.push(self.forbid(sql, "a row would be outside the role's row filter"));
        }
        if let Some(OnConflict::Merge { target, .. }) = &stmt.on_conflict {
            steps.extend(self.takeover_check(d, table, stmt, target, &typed));
        }
        Ok(steps)
    }

    /// For an update under a row filter: a check that no updated row leaves the filter (the new
    /// values, put in place of the old ones, must satisfy it).
    pub fn update_check(&self, d: &dyn Dialect, table: &Table, stmt: &UpdateStmt) -> Option<Step> {
        if self.row_filter.is_empty() {
            return None;
        }
        let mut sql = Sql::default();
        sql.text.push_str("SELECT count(*) FROM (SELECT ");
        for (i, c) in table.columns.iter().enumerate() {
            if i > 0 {
                sql.text.push_str(", ");
            }
            let q = d.quote_ident(&c.name);
            match stmt.set.iter().find(|(name, _)| *name == c.name) {
                Some((_, v)) => {
                    let ph = render::bind(d, &mut sql, v.clone());
                    sql.text.push_str(&typed(table, &c.name, &ph));
                    sql.text.push_str(" AS ");
                    sql.text.push_str(&q);
                }
                None => sql.text.push_str(&q),
            }
        }
        sql.text.push_str(" FROM ");
        render::push_relation(d, &table.relation(), &mut sql.text);
        for (i, f) in stmt.filters.iter().enumerate() {
            sql.text.push_str(if i == 0 { " WHERE " } else { " AND " });
            render::condition(d, f, &mut sql);
        }
        sql.text.push_str(") AS ");
        sql.text.push_str(&d.quote_ident(&table.name));
        self.violations(d, &mut sql);
        Some(self.forbid(sql, "an updated row would leave the role's row filter"))
    }

    /// For an upsert that updates (POST with merge-duplicates, PUT): no existing row with one of
    /// the conflict keys may be outside the filter.
    fn takeover_check(
        &self,
        d: &dyn Dialect,
        table: &Table,
        stmt: &InsertStmt,
        target: &[String],
        typed: &dyn Fn(&str, String) -> String,
    ) -> Option<Step> {
        let mut sql = taken_over(d, table, stmt, target, typed)?;
        sql.text.push_str(" AND NOT COALESCE((");
        self.render_filter(d, &mut sql);
        sql.text.push_str("), FALSE)");
        Some(self.forbid(
            sql,
            "an existing row outside the role's row filter has this key",
        ))
    }

    /// ` WHERE NOT COALESCE((filter), FALSE)`.
    fn violations(&self, d: &dyn Dialect, sql: &mut Sql) {
        sql.text.push_str(" WHERE NOT COALESCE((");
        self.render_filter(d, sql);
        sql.text.push_str("), FALSE)");
    }

    fn render_filter(&self, d: &dyn Dialect, sql: &mut Sql) {
        for (i, f) in self.row_filter.iter().enumerate() {
            if i > 0 {
                sql.text.push_str(" AND ");
            }
            render::condition(d, f, sql);
        }
    }

    fn forbid(&self, sql: Sql, why: &str) -> Step {
        // the same refusal as a grant's, raised by the database step
        let refusal = denied(self.principal);
        let error = DbError::new(
            DbErrorKind::Refused {
                anonymous: self.principal.anonymous,
            },
            refusal.message,
        )
        .detail(why);
        Step::Forbid {
            sql,
            error: DbError {
                hint: refusal.hint,
                ..error
            },
        }
    }
}

/// `SELECT count(*) FROM table WHERE (target) IN (…)`: the existing rows an upsert's rows name
/// by their conflict keys, which it will overwrite; `None` when its rows do not give them all.
fn taken_over(
    d: &dyn Dialect,
    table: &Table,
    stmt: &InsertStmt,
    target: &[String],
    typed: &dyn Fn(&str, String) -> String,
) -> Option<Sql> {
    if target.is_empty() || !target.iter().all(|t| stmt.all_columns().any(|c| c == t)) {
        return None;
    }
    let mut sql = Sql::default();
    sql.text.push_str("SELECT count(*) FROM ");
    render::push_relation(d, &table.relation(), &mut sql.text);
    sql.text.push_str(" WHERE (");
    push_idents(d, target, &mut sql.text);
    sql.text.push_str(") IN (");
    render::rows_select(d, stmt, target, typed, &mut sql);
    sql.text.push(')');
    Some(sql)
}

/// For an upsert (`ON CONFLICT`): the step counting the rows it will overwrite, so that one
/// inserting nothing answers 200 rather than 201, as PostgREST does.
pub fn existing_step(d: &dyn Dialect, table: &Table, stmt: &InsertStmt) -> Option<Step> {
    let target = match stmt.on_conflict.as_ref()? {
        OnConflict::Merge { target, .. } | OnConflict::Ignore { target } => target,
    };
    let typed = |column: &str, cell: String| typed(table, column, &cell);
    taken_over(d, table, stmt, target, &typed).map(Step::Existing)
}

/// A bound value as the column's type (so comparisons in the filter behave as on the column).
fn typed(table: &Table, column: &str, placeholder: &str) -> String {
    match plain_type(table, column) {
        Some(t) => format!("CAST({placeholder} AS {t})"),
        None => placeholder.to_string(),
    }
}

/// The column's declared type when it is a plain type name, to cast a bound value to (so that
/// comparisons in the filter behave as on the column).
fn plain_type(table: &Table, column: &str) -> Option<String> {
    let plain = |t: &str| {
        t.chars()
            .all(|c| c.is_ascii_alphanumeric() || " _(),[]".contains(c))
    };
    match table.column(column).map(|c| c.decl_type.trim()) {
        Some(t) if !t.is_empty() && plain(t) => Some(t.to_string()),
        _ => None,
    }
}

fn push_idents(d: &dyn Dialect, ids: &[String], text: &mut String) {
    for (i, c) in ids.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(&d.quote_ident(c));
    }
}

/// Columns a filter pins with a top-level `col=eq.value` (no path, not negated).
fn fixed_columns(filters: &[Condition]) -> Vec<(String, String)> {
    filters
        .iter()
        .filter_map(|c| match c {
            Condition::Pred(p)
                if p.op == Operator::Eq
                    && !p.negated
                    && p.path.is_empty()
                    && p.quantifier.is_none() =>
            {
                match &p.operand {
                    Operand::Scalar(v) => Some((p.column.clone(), v.clone())),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect()
}
