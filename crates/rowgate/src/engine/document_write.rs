//! Stage 2 for writes to a duality view's documents (Oracle 23ai / ORDS semantics): a POST,
//! PUT, PATCH (JSON Merge Patch) or DELETE of one document, planned as statements on the
//! view's tables ([`DocTable`]) in one job.
//!
//! The job checks the document first ([`Step::Document`]: it exists and, when the request
//! gives one, has the etag of `_metadata.etag` or `If-Match`; on PostgreSQL the root row is
//! locked first, so of two writers holding the same etag exactly one wins; SQLite's writer
//! holds the database). Then each table's rows are written as the view allows:
//! - a nested object or spread (a row the parent refers to) names its row by key; the
//!   parent's foreign key follows it, and its other fields update that row;
//! - an array is replaced: rows with a key are updated (moved to this parent if they were
//!   another's) or inserted, rows without one inserted, rows left out deleted;
//! - a change the view does not allow (a `noupdate` field, a table without the permission) is
//!   a `Forbid` step that fails the job with 400 naming it, or a plan error when the request
//!   alone shows it.
//!
//! The role's grants apply to every table written, as to a write of the table itself. The
//! document is read back at the end of the job for the answer.

use rowgate_query::render::{self, Dialect};
use rowgate_query::stmt::{
    DeleteStmt, InsertRows, InsertStmt, OnConflict, SelectStmt, Sql, UpdateStmt,
};
use rowgate_query::{Condition, Value};
use serde_json::Value as Json;

use super::body::Member;
use super::document_body::{DocMember, DocObject};
use super::guard::Guard;
use super::plan::{self, Context, OutputShape};
use crate::auth::policy::Op;
use crate::db::{DbError, DbErrorKind};
use crate::duality::{DocTable, DualityView};
use crate::error::{ApiError, ErrorCode};
use crate::job::Step;
use crate::schema::Table;

/// Column assignments of one row.
type Assignments = Vec<(String, Value)>;

/// What a request does to a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentAction {
    /// POST: a new document.
    Insert,
    /// PUT: the whole document replaced (a field left out becomes null, an array left out
    /// empty).
    Replace,
    /// PATCH: a JSON Merge Patch (fields left out stay; an array given replaces the array).
    Merge,
    /// DELETE: the root row, and the rows of nested tables the view may delete.
    Delete,
}

/// The read of the view's documents (no filter yet), as the GET of a document plans it, so
/// that a write checks and answers the same text a GET gives.
pub struct DocumentRead {
    /// The select over the root, the row filter in.
    pub select: SelectStmt,
    /// Its shape.
    pub shape: OutputShape,
}

/// A planned document write.
pub struct DocumentPlan {
    /// The job's steps: checks, writes, then (but for a DELETE) the document read back.
    pub steps: Vec<Step>,
    /// The document's `_id` as text, when the request names it (a POST without one takes the
    /// key the database gives, from the returned document).
    pub key: Option<String>,
}

/// Plans `action` on the document `key` (an item URL's; for POST, none) of `view`, with the
/// request's document (read by [`super::document_body`]) and `If-Match` tags.
pub fn plan(
    cx: &Context<'_>,
    view: &DualityView,
    action: DocumentAction,
    key: Option<&str>,
    object: Option<&DocObject>,
    if_match: Option<Vec<String>>,
    read: DocumentRead,
) -> Result<DocumentPlan, ApiError> {
    let mut writer = Writer {
        cx,
        view,
        steps: Vec::new(),
    };
    let root = &view.root;
    let body_tag = match object.and_then(|o| o.get("_metadata")) {
        Some(DocMember::Metadata(tag)) => tag.clone(),
        _ => None,
    };
    let tags = if_match
        .map(|tags| tags.iter().map(|t| bare_tag(t)).collect::<Vec<_>>())
        .or_else(|| body_tag.map(|t| vec![t]));
    let body_id = match object.and_then(|o| o.get("_id")).and_then(DocMember::field) {
        None => None,
        Some(v) if v.is_null() => None,
        Some(v) => Some(key_text(v, "_id")?),
    };
    let key = match (key, body_id) {
        (Some(url), Some(body)) if url != body => {
            return Err(ApiError::new(
                ErrorCode::PutKeyMismatch,
                "the document's _id does not match the URL",
            )
            .details(format!("_id is {url} in the URL and {body} in the body")))
        }
        (Some(url), _) => Some(url.to_string()),
        (None, body) => body,
    };
    let document = |key: &str| -> Result<Sql, ApiError> {
        let mut select = read.select.clone();
        select
            .filters
            .extend(plan::item_filters(writer_root_table(cx, view)?, key)?);
        Ok(render::select(cx.dialect, &select))
    };
    match action {
        DocumentAction::Insert => {
            let object = object.ok_or_else(no_body)?;
            let how = match &key {
                Some(k) => How::Insert(Some(writer.key_value(root, k)?)),
                None => How::Insert(None),
            };
            writer.row(root, object, Mode::Replace, Vec::new(), how)?;
            match &key {
                Some(k) => writer.steps.push(Step::Rows {
                    sql: document(k)?,
                    shape: Some(read.shape),
                }),
                None => writer.returning_document(&read)?,
            }
        }
        DocumentAction::Replace | DocumentAction::Merge => {
            let k = key.clone().ok_or_else(item_only)?;
            let object = object.ok_or_else(no_body)?;
            writer.check(&k, document(&k)?, &read.shape, tags)?;
            let mode = if action == DocumentAction::Merge {
                Mode::Merge
            } else {
                Mode::Replace
            };
            let key_value = writer.key_value(root, &k)?;
            writer.row(root, object, mode, Vec::new(), How::Update(key_value))?;
            writer.steps.push(Step::Rows {
                sql: document(&k)?,
                shape: Some(read.shape),
            });
        }
        DocumentAction::Delete => {
            let k = key.clone().ok_or_else(item_only)?;
            if !root.delete {
                return Err(not_allowed(root, "deleting"));
            }
            writer.check(&k, document(&k)?, &read.shape, tags)?;
            let key_value = writer.key_value(root, &k)?;
            writer.delete_document(root, &key_value)?;
        }
    }
    Ok(DocumentPlan {
        steps: writer.steps,
        key,
    })
}

fn writer_root_table<'s>(cx: &Context<'s>, view: &DualityView) -> Result<&'s Table, ApiError> {
    plan::table(cx.schema, &view.table)
}

/// How fields left out of an object are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// As null (arrays as empty): the object is the whole row.
    Replace,
    /// As they are.
    Merge,
}

/// What a row's statement does.
enum How {
    /// Update the row with this key (it exists: the document was checked, or the parent
    /// refers to it).
    Update(Value),
    /// Update the row with this key, or insert it.
    Upsert(Value),
    /// Insert a row, with this key or the one the database gives.
    Insert(Option<Value>),
}

/// The steps being planned.
struct Writer<'c, 'a> {
    cx: &'c Context<'a>,
    view: &'c DualityView,
    steps: Vec<Step>,
}

impl<'c, 'a> Writer<'c, 'a> {
    fn d(&self) -> &'c dyn Dialect {
        self.cx.dialect
    }

    fn table(&self, node: &DocTable) -> Result<&'a Table, ApiError> {
        plan::table(self.cx.schema, &node.table)
    }

    /// The role's guard on `node`'s table for `op` (the role reads the document back, so it
    /// needs `select` too).
    fn guard(&self, node: &DocTable, op: Op) -> Result<Guard<'a>, ApiError> {
        Guard::new(
            self.cx.policy,
            self.cx.principal,
            self.table(node)?,
            &[op, Op::Select],
            self.d(),
        )
    }

    /// The key of `node` given as text, as its column takes it.
    fn key_value(&self, node: &DocTable, text: &str) -> Result<Value, ApiError> {
        let table = self.table(node)?;
        let column = writable_key(node)?;
        plan::column_value(table, column, &Json::String(text.to_string()))
    }

    /// The document's check: the root row locked (PostgreSQL), the document there, its etag
    /// one of `tags`.
    fn check(
        &mut self,
        key: &str,
        sql: Sql,
        shape: &OutputShape,
        tags: Option<Vec<String>>,
    ) -> Result<(), ApiError> {
        if let Some(lock) = self.d().row_lock() {
            let root = &self.view.root;
            let table = self.table(root)?;
            let mut sql = Sql::default();
            sql.text.push_str("SELECT 1 FROM ");
            render::push_relation(self.d(), &table.relation(), &mut sql.text);
            let value = self.key_value(root, key)?;
            push_key(self.d(), writable_key(root)?, value, &mut sql);
            sql.text.push_str(lock);
            self.steps.push(Step::Execute(sql));
        }
        self.steps.push(Step::Document {
            sql,
            shape: shape.clone(),
            nocheck: self.view.nocheck.clone(),
            tags,
        });
        Ok(())
    }

    /// Writes the row of `node` whose fields are in `object` (and those of the tables spread
    /// into it), `fixed` its columns set by its parent, then the arrays nested in it.
    fn row(
        &mut self,
        node: &DocTable,
        object: &DocObject,
        mode: Mode,
        fixed: Vec<(String, Value)>,
        how: How,
    ) -> Result<(), ApiError> {
        let table = self.table(node)?;
        let mut set = fixed;
        // the rows this one refers to first: its foreign keys follow them
        for child in node.nested.iter().filter(|n| n.referred) {
            self.referred(node, child, object, mode, &mut set)?;
        }
        let key_column = node.key.as_deref();
        // a replacement sets what it leaves out to null, but for what it may not change
        // (noupdate) and, in a new row, for what has a default
        let inserting = matches!(how, How::Insert(_));
        let null = Member::Scalar(Json::Null);
        for field in &node.fields {
            let given = object.get(&field.name).and_then(DocMember::field);
            let value = match given {
                Some(v) => v,
                None if mode == Mode::Replace && !field.noupdate && !inserting => &null,
                None => continue,
            };
            if Some(field.column.as_str()) == key_column {
                continue;
            }
            // a null given for a column that takes none is wrong even where the field is not
            // written (a NOCHECK field of a table the view does not update)
            if let Some(given) = given {
                plan::refuse_null(table, &field.column, given.is_null(), || {
                    format!("'{}'", field.name)
                })?;
            }
            set.push((
                field.column.clone(),
                plan::member_value(table, &field.column, value)?,
            ));
        }
        let key = match &how {
            How::Update(k) | How::Upsert(k) => Some(k.clone()),
            How::Insert(Some(k)) => Some(k.clone()),
            How::Insert(None) => match key_column.and_then(|c| {
                let given = node.field_of(c).and_then(|f| object.get(&f.name));
                given
                    .and_then(DocMember::field)
                    .filter(|v| !v.is_null())
                    .map(|v| (c, v))
            }) {
                Some((c, v)) => Some(plan::member_value(table, c, v)?),
                None => None,
            },
        };
        match how {
            How::Update(k) => self.update(node, table, &k, &set)?,
            How::Upsert(k) => self.upsert(node, table, &k, &set)?,
            How::Insert(_) => self.insert(node, table, key.clone(), &set)?,
        }
        let arrays: Vec<&DocTable> = node
            .nested
            .iter()
            .filter(|n| !n.referred && n.member.is_some())
            .collect();
        for child in arrays {
            let member = child.member.as_deref().unwrap_or_default();
            let items = match object.get(member) {
                Some(DocMember::Rows(items)) => items.as_slice(),
                None if mode == Mode::Replace => &[],
                None => continue,
                Some(_) => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidBody,
                        format!("'{member}' must be an array of objects"),
                    ))
                }
            };
            if child.junction {
                if items.is_empty() && mode == Mode::Merge {
                    continue;
                }
                return Err(not_allowed(child, "writing (a many-to-many relationship)"));
            }
            let Some(key) = &key else {
                if items.is_empty() {
                    continue;
                }
                return Err(ApiError::new(
                    ErrorCode::InvalidBody,
                    format!(
                        "rows nested in a new '{}' row need its key: give '{}'",
                        node.path,
                        key_column
                            .and_then(|c| node.field_of(c))
                            .map_or("_id", |f| f.name.as_str())
                    ),
                ));
            };
            self.array(node, child, key, &set, items)?;
        }
        Ok(())
    }

    /// A table the row refers to (a nested object or a spread): the row's foreign key takes
    /// the key the document gives it, and the referred row's other fields are written to it.
    fn referred(
        &mut self,
        parent: &DocTable,
        child: &DocTable,
        object: &DocObject,
        mode: Mode,
        set: &mut Vec<(String, Value)>,
    ) -> Result<(), ApiError> {
        let inner = match &child.member {
            None => Some(object),
            Some(member) => match object.get(member) {
                Some(DocMember::Referred(o)) => o.as_ref(),
                None if mode == Mode::Replace => None,
                None => return Ok(()),
                Some(_) => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidBody,
                        format!("'{member}' must be an object or null"),
                    ))
                }
            },
        };
        let parent_table = self.table(parent)?;
        let child_table = self.table(child)?;
        let Some(inner) = inner else {
            // no related row: the foreign key becomes null
            for (parent_column, _) in &child.link {
                set.push((parent_column.clone(), Value::Null));
            }
            return Ok(());
        };
        // the key of the referred row, from its fields
        let mut key = None;
        for (parent_column, own_column) in &child.link {
            let field = child.field_of(own_column).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidBody,
                    format!(
                        "'{}' cannot be written: the document does not show its column '{own_column}'",
                        child.path
                    ),
                )
            })?;
            match inner.get(&field.name).and_then(DocMember::field) {
                Some(v) => {
                    set.push((
                        parent_column.clone(),
                        plan::member_value(parent_table, parent_column, v)?,
                    ));
                    if Some(own_column.as_str()) == child.key.as_deref() && !v.is_null() {
                        key = Some(plan::member_value(child_table, own_column, v)?);
                    }
                }
                None if mode == Mode::Merge => {}
                None => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidBody,
                        format!(
                            "'{}' needs '{}', the key of its row",
                            child.path, field.name
                        ),
                    ))
                }
            }
        }
        let own: Vec<&str> = child.link.iter().map(|(_, own)| own.as_str()).collect();
        let given_fields = child
            .fields
            .iter()
            .any(|f| !own.contains(&f.column.as_str()) && inner.contains_key(&f.name));
        match key {
            Some(key) => {
                // its fields, but the key, as given; its own foreign keys as it names them
                let mut only = DocObject::new();
                for f in &child.fields {
                    if let Some(v) = inner.get(&f.name) {
                        only.insert(f.name.clone(), v.clone());
                    }
                }
                for n in &child.nested {
                    if let Some(m) = &n.member {
                        if let Some(v) = inner.get(m) {
                            only.insert(m.clone(), v.clone());
                        }
                    }
                }
                self.row(child, &only, Mode::Merge, Vec::new(), How::Update(key))
            }
            None if given_fields => Err(ApiError::new(
                ErrorCode::InvalidBody,
                format!("'{}' has fields but no key to name its row", child.path),
            )),
            None => Ok(()),
        }
    }

    /// The rows of `child` nested in the row of `parent` whose key is `key`: replaced by
    /// `items`.
    fn array(
        &mut self,
        parent: &DocTable,
        child: &DocTable,
        key: &Value,
        set: &[(String, Value)],
        items: &[DocObject],
    ) -> Result<(), ApiError> {
        let child_table = self.table(child)?;
        let child_key = writable_key(child)?.to_string();
        let key_field = child.field_of(&child_key).map(|f| f.name.clone());
        // the child's columns that name its parent, with the parent's values
        let mut fixed = Vec::with_capacity(child.link.len());
        for (parent_column, own_column) in &child.link {
            let value = if Some(parent_column.as_str()) == parent.key.as_deref() {
                key.clone()
            } else {
                match set.iter().find(|(c, _)| c == parent_column) {
                    Some((_, v)) => v.clone(),
                    None => return Err(not_allowed(
                        child,
                        "writing (it relates to its parent by a column the document does not give)",
                    )),
                }
            };
            fixed.push((own_column.clone(), value));
        }
        let mut kept = Vec::new();
        let mut rows = Vec::with_capacity(items.len());
        for o in items {
            let k = match key_field
                .as_ref()
                .and_then(|f| o.get(f))
                .and_then(DocMember::field)
            {
                Some(v) if !v.is_null() => {
                    let value = plan::member_value(child_table, &child_key, v)?;
                    kept.push(value.clone());
                    Some(value)
                }
                _ => None,
            };
            rows.push((o, k));
        }
        // the rows left out go first: a row inserted below has no key to keep it
        self.left_out(child, child_table, &fixed, &child_key, kept)?;
        for (o, k) in rows {
            let how = match k {
                Some(k) => How::Upsert(k),
                None => How::Insert(None),
            };
            self.row(child, o, Mode::Replace, fixed.clone(), how)?;
        }
        Ok(())
    }

    /// The rows of `child` under the parent (`fixed`) whose keys are not `kept`: deleted when
    /// the view allows it, else a refusal if there are any.
    fn left_out(
        &mut self,
        child: &DocTable,
        table: &Table,
        fixed: &[(String, Value)],
        key: &str,
        kept: Vec<Value>,
    ) -> Result<(), ApiError> {
        let mut sql = Sql::default();
        sql.text.push_str(if child.delete {
            "DELETE FROM "
        } else {
            "SELECT count(*) FROM "
        });
        render::push_relation(self.d(), &table.relation(), &mut sql.text);
        let d = self.d();
        for (i, (column, value)) in fixed.iter().enumerate() {
            sql.text.push_str(if i == 0 { " WHERE " } else { " AND " });
            sql.text.push_str(&d.quote_ident(column));
            sql.text.push_str(" = ");
            let ph = render::bind(d, &mut sql, value.clone());
            sql.text.push_str(&ph);
        }
        if !kept.is_empty() {
            sql.text.push_str(" AND ");
            sql.text.push_str(&d.quote_ident(key));
            sql.text.push_str(" NOT IN (");
            for (i, v) in kept.into_iter().enumerate() {
                if i > 0 {
                    sql.text.push_str(", ");
                }
                let ph = render::bind(d, &mut sql, v);
                sql.text.push_str(&ph);
            }
            sql.text.push(')');
        }
        if child.delete {
            let guard = self.guard(child, Op::Delete)?;
            push_row_filter(d, &guard, &mut sql);
            self.steps.push(Step::Execute(sql));
        } else {
            self.steps.push(rejected(
                sql,
                format!(
                    "the view does not allow deleting '{}' rows: the document leaves out rows it has",
                    child.path
                ),
            ));
        }
        Ok(())
    }

    /// The row of `node` with key `key` takes `set`, as the view allows.
    fn update(
        &mut self,
        node: &DocTable,
        table: &Table,
        key: &Value,
        set: &[(String, Value)],
    ) -> Result<(), ApiError> {
        if set.is_empty() {
            return Ok(());
        }
        let key_column = writable_key(node)?;
        if !node.update {
            // nothing may change but the fields not checked
            let checked = checked(node, set);
            if let Some(step) = self.differs(node, table, key_column, key, &checked, "updating") {
                self.steps.push(step);
            }
            return Ok(());
        }
        let (frozen, free) = split_noupdate(node, set);
        if let Some(step) = self.differs(node, table, key_column, key, &frozen, "noupdate") {
            self.steps.push(step);
        }
        if free.is_empty() {
            return Ok(());
        }
        let guard = self.guard(node, Op::Update)?;
        guard.check_writable(free.iter().map(|(c, _)| c))?;
        let mut filters = vec![key_condition(key_column, key)];
        filters.extend(guard.row_filter.iter().cloned());
        let stmt = UpdateStmt {
            table: table.relation(),
            set: free,
            defaults: Vec::new(),
            filters,
            returning: Vec::new(),
        };
        self.steps
            .extend(guard.update_check(self.d(), table, &stmt));
        self.steps
            .push(Step::Execute(render::update(self.d(), &stmt)));
        Ok(())
    }

    /// The row of `node` with key `key`: updated with `set` if it exists, else inserted, as
    /// the view allows.
    fn upsert(
        &mut self,
        node: &DocTable,
        table: &Table,
        key: &Value,
        set: &[(String, Value)],
    ) -> Result<(), ApiError> {
        let key_column = writable_key(node)?.to_string();
        if !node.insert {
            // it must exist
            let mut sql = Sql::default();
            sql.text.push_str(
                "SELECT count(*) FROM (SELECT 1 AS one) AS given WHERE NOT EXISTS (SELECT 1 FROM ",
            );
            render::push_relation(self.d(), &table.relation(), &mut sql.text);
            push_key(self.d(), &key_column, key.clone(), &mut sql);
            sql.text.push(')');
            self.steps.push(rejected(
                sql,
                format!(
                    "the view does not allow inserting '{}' rows: no row has the key given",
                    node.path
                ),
            ));
            return self.update(node, table, key, set);
        }
        if !node.update {
            // an existing row may not change
            let checked = checked(node, set);
            if let Some(step) = self.differs(node, table, &key_column, key, &checked, "updating") {
                self.steps.push(step);
            }
            return self.insert_row(node, table, Some(key.clone()), set, Existing::Keep);
        }
        let (frozen, _) = split_noupdate(node, set);
        if let Some(step) = self.differs(node, table, &key_column, key, &frozen, "noupdate") {
            self.steps.push(step);
        }
        self.insert_row(node, table, Some(key.clone()), set, Existing::Merge)
    }

    /// A new row of `node`.
    fn insert(
        &mut self,
        node: &DocTable,
        table: &Table,
        key: Option<Value>,
        set: &[(String, Value)],
    ) -> Result<(), ApiError> {
        if !node.insert {
            return Err(not_allowed(node, "inserting"));
        }
        // a new document's root row: one with its key already there is a conflict (409),
        // never taken over by the new document's nested rows
        let existing = if std::ptr::eq(node, &self.view.root) {
            Existing::Fail
        } else {
            Existing::Keep
        };
        self.insert_row(node, table, key, set, existing)
    }

    /// `INSERT` of one row; a row with its key already there is kept as it is, updated (but
    /// the `noupdate` columns) or a conflict, as `existing` says.
    fn insert_row(
        &mut self,
        node: &DocTable,
        table: &Table,
        key: Option<Value>,
        set: &[(String, Value)],
        existing: Existing,
    ) -> Result<(), ApiError> {
        let merge = existing == Existing::Merge;
        let key_column = node.key.clone();
        let mut columns = Vec::with_capacity(set.len() + 1);
        let mut row = Vec::with_capacity(set.len() + 1);
        if let (Some(c), Some(k)) = (&key_column, &key) {
            columns.push(c.clone());
            row.push(k.clone());
        }
        for (c, v) in set {
            if !columns.contains(c) {
                columns.push(c.clone());
                row.push(v.clone());
            }
        }
        let guard = if merge {
            Guard::new(
                self.cx.policy,
                self.cx.principal,
                table,
                &[Op::Insert, Op::Update, Op::Select],
                self.d(),
            )?
        } else {
            self.guard(node, Op::Insert)?
        };
        guard.check_writable(&columns)?;
        let on_conflict = match (&key_column, &key) {
            (Some(c), Some(_)) if merge => Some(OnConflict::Merge {
                target: vec![c.clone()],
                update: columns
                    .iter()
                    .filter(|col| *col != c && node.field_of(col).is_none_or(|f| !f.noupdate))
                    .cloned()
                    .collect(),
            }),
            (Some(c), Some(_)) if existing == Existing::Keep => Some(OnConflict::Ignore {
                target: vec![c.clone()],
            }),
            _ => None,
        };
        let mut stmt = InsertStmt {
            table: table.relation(),
            columns,
            rows: InsertRows::Values(vec![row]),
            constants: Vec::new(),
            on_conflict,
            returning: Vec::new(),
        };
        if matches!(&stmt.on_conflict, Some(OnConflict::Merge { update, .. }) if update.is_empty())
        {
            stmt.on_conflict = Some(OnConflict::Ignore {
                target: key_column.into_iter().collect(),
            });
        }
        self.steps
            .extend(guard.insert_checks(self.d(), table, &mut stmt)?);
        self.steps
            .push(Step::Execute(render::insert(self.d(), stmt)));
        Ok(())
    }

    /// A refusal when the row of `table` with `key` has a value other than `set`'s.
    fn differs(
        &self,
        node: &DocTable,
        table: &Table,
        key_column: &str,
        key: &Value,
        set: &[(String, Value)],
        why: &str,
    ) -> Option<Step> {
        if set.is_empty() {
            return None;
        }
        let d = self.d();
        let mut sql = count_sql(d, table);
        push_key(d, key_column, key.clone(), &mut sql);
        sql.text.push_str(" AND (");
        for (i, (column, value)) in set.iter().enumerate() {
            if i > 0 {
                sql.text.push_str(" OR ");
            }
            sql.text.push_str(&d.quote_ident(column));
            sql.text.push_str(" IS DISTINCT FROM ");
            let ph = render::bind(d, &mut sql, value.clone());
            sql.text.push_str(&ph);
        }
        sql.text.push(')');
        let names: Vec<String> = set
            .iter()
            .map(|(c, _)| {
                node.field_of(c)
                    .map_or_else(|| c.clone(), |f| f.path.join("."))
            })
            .collect();
        let message = if why == "noupdate" {
            format!(
                "the view does not allow changing {}: noupdate",
                quoted_list(&names)
            )
        } else {
            format!(
                "the view does not allow {why} '{}' rows: the document changes {}",
                node.path,
                quoted_list(&names)
            )
        };
        Some(rejected(sql, message))
    }

    /// A POST without `_id`: the root's insert gives back the document.
    fn returning_document(&mut self, read: &DocumentRead) -> Result<(), ApiError> {
        let Some(Step::Execute(insert)) = self.steps.pop() else {
            return Err(ApiError::internal(
                "a document insert without its statement",
            ));
        };
        let mut sql = insert;
        render::returning_with_embeds(
            self.d(),
            &read.select.columns,
            &read.select.embeds,
            &self.view.table,
            &mut sql,
        );
        self.steps.push(Step::Rows {
            sql,
            shape: Some(read.shape.clone()),
        });
        Ok(())
    }

    /// A DELETE of the document: the nested arrays' rows the view may delete, deepest first,
    /// then the root row.
    fn delete_document(&mut self, root: &DocTable, key: &Value) -> Result<(), ApiError> {
        let table = self.table(root)?;
        let key_column = writable_key(root)?;
        for child in root
            .nested
            .iter()
            .filter(|n| n.delete && n.many && !n.junction)
        {
            if child.link.iter().all(|(parent, _)| parent == key_column) {
                let fixed: Vec<(String, Value)> = child
                    .link
                    .iter()
                    .map(|(_, own)| (own.clone(), key.clone()))
                    .collect();
                let child_table = self.table(child)?;
                self.left_out(child, child_table, &fixed, "", Vec::new())?;
            }
        }
        let guard = self.guard(root, Op::Delete)?;
        let mut filters = vec![key_condition(key_column, key)];
        filters.extend(guard.row_filter.iter().cloned());
        let stmt = DeleteStmt {
            table: table.relation(),
            filters,
            returning: Vec::new(),
        };
        self.steps
            .push(Step::Execute(render::delete(self.d(), &stmt)));
        Ok(())
    }
}

/// A tag from `If-Match` without its quotes (a weak one's `W/` too).
fn bare_tag(tag: &str) -> String {
    tag.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

/// A key given in a document (a string or a number) as text.
fn key_text(v: &Member, name: &str) -> Result<String, ApiError> {
    let Member::Scalar(v) = v else {
        return Err(must_be_key(name));
    };
    match v {
        Json::String(s) => Ok(s.clone()),
        // an integer written with a fraction (999.0) is that integer
        Json::Number(n) => Ok(
            match n
                .as_f64()
                .filter(|_| n.is_f64())
                .and_then(super::rows::integral)
            {
                Some(i) => i.to_string(),
                None => n.to_string(),
            },
        ),
        _ => Err(must_be_key(name)),
    }
}

/// The refusal of a key that is neither a string nor a number.
fn must_be_key(name: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidBody,
        format!("'{name}' must be a string or a number"),
    )
}

/// A bound value as a filter's text.
fn value_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Int(i) => i.to_string(),
        Value::Real(f) => f.to_string(),
        Value::Text(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
    }
}

fn no_body() -> ApiError {
    ApiError::new(
        ErrorCode::InvalidBody,
        "the request needs a document as its body",
    )
}

fn item_only() -> ApiError {
    ApiError::new(
        ErrorCode::InvalidBody,
        "a document is written at its item URL: /{view}/{_id}",
    )
}

/// 400: the view does not allow `what` on `node`'s rows.
fn not_allowed(node: &DocTable, what: &str) -> ApiError {
    ApiError::new(
        ErrorCode::DocumentRejected,
        format!("the view does not allow {what} '{}' rows", node.path),
    )
    .hint("the view's insert, update and delete lists say which tables a write may change")
}

/// The one-column key a written table needs.
fn writable_key(node: &DocTable) -> Result<&str, ApiError> {
    node.key
        .as_deref()
        .ok_or_else(|| not_allowed(node, "writing (it has no one-column primary key)"))
}

/// What an insert does with a row whose key is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Existing {
    /// Leave it as it is (a nested row named by its key).
    Keep,
    /// Update it, but its `noupdate` columns (a PUT's upsert).
    Merge,
    /// Fail: a conflict (a POST's new document).
    Fail,
}

/// A refusal of the document, unless `sql` counts no row.
fn rejected(sql: Sql, message: String) -> Step {
    Step::Forbid {
        sql,
        error: DbError::new(DbErrorKind::Rejected, message),
    }
}

/// `SELECT count(*) FROM table`.
fn count_sql(d: &dyn Dialect, table: &Table) -> Sql {
    let mut sql = Sql::default();
    sql.text.push_str("SELECT count(*) FROM ");
    render::push_relation(d, &table.relation(), &mut sql.text);
    sql
}

/// ` WHERE column = ?`.
fn push_key(d: &dyn Dialect, column: &str, value: Value, sql: &mut Sql) {
    sql.text.push_str(" WHERE ");
    sql.text.push_str(&d.quote_ident(column));
    sql.text.push_str(" = ");
    let ph = render::bind(d, sql, value);
    sql.text.push_str(&ph);
}

/// ` AND (filter)` for the guard's row filter.
fn push_row_filter(d: &dyn Dialect, guard: &Guard<'_>, sql: &mut Sql) {
    for c in &guard.row_filter {
        sql.text.push_str(" AND (");
        render::condition(d, c, sql);
        sql.text.push(')');
    }
}

/// `column=eq.key`.
fn key_condition(column: &str, key: &Value) -> Condition {
    let mut filters = plan::key_filters(&[(column.to_string(), value_text(key))]);
    filters.remove(0)
}

/// The assignments to fields the etag checks (a table the view may not update may take only
/// these unchanged; the others are ignored).
fn checked(node: &DocTable, set: &[(String, Value)]) -> Assignments {
    set.iter()
        .filter(|(c, _)| node.field_of(c).is_none_or(|f| !f.nocheck))
        .cloned()
        .collect()
}

/// The assignments to `noupdate` columns, and the others.
fn split_noupdate(node: &DocTable, set: &[(String, Value)]) -> (Assignments, Assignments) {
    set.iter()
        .cloned()
        .partition(|(c, _)| node.field_of(c).is_some_and(|f| f.noupdate))
}

fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}
