//! Stage 2, plan: a parsed [`ApiRequest`] resolved against the schema cache and the role's
//! grant into the [`Job`] to run and the [`Answer`] to give from its outcome (PostgREST's
//! `actionPlan`). The table and its columns are resolved here, the guard decides what the role
//! may do, and the statements are rendered per dialect; nothing runs.

use rowgate_query::ast::{QualifiedName, RowFunction};
use rowgate_query::render::{self, Dialect};
use rowgate_query::stmt::{EmbedStmt, OutputColumn, Relation, Sql};
use rowgate_query::{Condition, Direction, Nulls, Operand, Query, SelectItem};

use super::answer::Answer;
use super::body::{self, Wanted};
use super::document_write::{self, DocumentAction, DocumentRead};
use super::embed::Embedder;
use super::guard::{self, Guard};
pub use super::plan::Context;
use super::plan::{self, OutputShape};
use super::request::{Action, ApiRequest, Count, MediaType, Prefer, Resolution, Return};
use super::rows::RowSink;
use crate::auth::policy::Op;
use crate::db::sqlite_job::Format;
use crate::duality::DualityView;
use crate::error::{ApiError, ErrorCode};
use crate::job::{Access, Job, SortKey, Step};
use crate::schema::Table;

/// `count=estimated` counts exactly when the planner expects fewer rows than this.
const ESTIMATE_EXACT_BELOW: u64 = 1000;

/// What a request does: the job, and how its outcome is answered.
pub struct ActionPlan {
    /// The database work.
    pub job: Job,
    /// How the outcome becomes the answer.
    pub answer: Answer,
}

impl ActionPlan {
    /// A read's statement of its rows, taken out of the job with the count that goes with it
    /// (for a stage that answers something else of them: a handler's aggregate, a plan);
    /// `None`, the job untouched, when its last step reads no rows.
    pub fn take_rows(&mut self) -> Option<Sql> {
        if !matches!(self.job.steps.last(), Some(Step::Rows { .. })) {
            return None;
        }
        let Some(Step::Rows { sql, .. }) = self.job.steps.pop() else {
            return None;
        };
        self.job.steps.retain(|s| {
            !matches!(
                s,
                Step::Count(_) | Step::KeptCount { .. } | Step::Estimate { .. }
            )
        });
        Some(sql)
    }
}

/// Whether an exact count of `table`'s rows under `count`'s filters can be kept and brought up
/// to date by judging changed rows in memory (`db::kept_counts`, SQLite): a table (its rows are
/// what the change log holds), filters only on its plain columns, as stored (not booleans, JSON
/// or blobs, which the log writes in other forms), with operators the evaluator knows.
fn evaluable_count(d: &dyn Dialect, table: &Table, count: &rowgate_query::stmt::CountStmt) -> bool {
    fn plain(c: &Condition, table: &Table) -> bool {
        match c {
            Condition::Pred(p) => {
                p.path.is_empty()
                    && p.parse.is_none()
                    && p.written_row.is_none()
                    && !p.vectorize
                    && table.columns.iter().any(|column| {
                        column.name == p.column
                            && column.json_kind == crate::schema::JsonKind::Auto
                            && !column.decl_type.to_ascii_uppercase().contains("BLOB")
                    })
            }
            Condition::And { items, .. } | Condition::Or { items, .. } => {
                items.iter().all(|item| plain(item, table))
            }
        }
    }
    d.keeps_counts()
        && !table.is_view
        && count.table.computed.is_empty()
        && count.filters.iter().all(|c| plain(c, table))
        && rowgate_query::eval::eval_all(&count.filters, &|_| Some(rowgate_query::Value::Null))
            .is_ok()
}

/// The table of a request: whole (for writes and the role's row filter), as the role may read
/// it, and the role's guard.
struct Tables<'a> {
    full: &'a Table,
    view: &'a Table,
    guard: &'a Guard<'a>,
}

/// The table a request acts on, guarded for its operations: whole, as the role may read it
/// (only the columns it may read, filter and order by), and the role's guard.
struct Guarded<'a> {
    full: &'a Table,
    view: std::borrow::Cow<'a, Table>,
    guard: Guard<'a>,
}

impl<'a> Guarded<'a> {
    fn new(cx: &Context<'a>, table: &str, ops: &[Op]) -> Result<Guarded<'a>, ApiError> {
        let full = plan::table(cx.schema, table)?;
        let guard = Guard::new(cx.policy, cx.principal, full, ops, cx.dialect)?;
        Ok(Guarded {
            full,
            view: guard.grant.view(full),
            guard,
        })
    }

    fn tables(&self) -> Tables<'_> {
        Tables {
            full: self.full,
            view: &self.view,
            guard: &self.guard,
        }
    }

    /// The filters of the request's item URL, if it names one.
    fn item(&self, request: &ApiRequest<'_>) -> Result<Option<Vec<Condition>>, ApiError> {
        request
            .action
            .key()
            .map(|k| plan::item_filters(&self.view, k))
            .transpose()
    }
}

/// Plans `request`.
pub fn plan(request: &ApiRequest<'_>, cx: &Context<'_>) -> Result<ActionPlan, ApiError> {
    let write = !matches!(request.action, Action::Read { .. });
    plan::aggregates_allowed(request.query.select.as_deref(), cx.rest, write)?;
    if let Some(view) = cx.duality.get(request.table) {
        return documents(request, cx, view);
    }
    let guarded = Guarded::new(cx, request.table, &operations(request))?;
    let tables = guarded.tables();
    let full = tables.full;
    let item = guarded.item(request)?;
    match request.action {
        Action::Read { .. } => read(request, &request.query, cx, &tables, item, None, None),
        Action::Insert => insert(request, cx, &tables),
        Action::Update { .. } | Action::Delete { .. } => modify(request, cx, &tables, item),
        Action::Upsert { key } => put(request, cx, &tables, key),
        Action::Unsupported { .. } => {
            let allow = plan::allowed_methods(full, item.is_some());
            let allow: Vec<&str> = allow.split(", ").collect();
            Err(ApiError::method_not_allowed(request.method, &allow))
        }
    }
}

/// A duality view's documents: a read of its root with the document as `select=`, the
/// request's filters and order on document fields turned into the root's columns, each
/// document answered with `_metadata.etag`; or a write of one document
/// ([`document_write`](super::document_write)).
fn documents(
    request: &ApiRequest<'_>,
    cx: &Context<'_>,
    view: &DualityView,
) -> Result<ActionPlan, ApiError> {
    if request.query.select.is_some() {
        return Err(ApiError::new(
            ErrorCode::QueryParse,
            format!(
                "the documents of '{}' have a fixed shape: select= does not apply",
                view.name
            ),
        ));
    }
    if request.media == MediaType::Csv {
        return Err(ApiError::new(
            ErrorCode::NotAcceptable,
            "duality view documents are JSON only",
        ));
    }
    let action = match request.action {
        Action::Read { .. } => None,
        Action::Insert => Some(DocumentAction::Insert),
        Action::Upsert { .. } => Some(DocumentAction::Replace),
        Action::Update { .. } => Some(DocumentAction::Merge),
        Action::Delete { .. } => Some(DocumentAction::Delete),
        Action::Unsupported { .. } => {
            return Err(ApiError::method_not_allowed(
                request.method,
                document_methods(view, request.action.key().is_some()),
            ))
        }
    };
    if let Some(action) = action {
        return document_write(request, cx, view, action);
    }
    let guarded = Guarded::new(cx, &view.table, &[Op::Select])?;
    let tables = guarded.tables();
    let item = guarded.item(request)?;
    let field = |name: &str| document_field(view, name);
    let mut query = request.query.clone();
    query.select = Some(view.document.clone());
    query.filters = query
        .filters
        .iter()
        .map(|c| c.try_map_columns(&field))
        .collect::<Result<_, _>>()?;
    for term in &mut query.order {
        if term.relation.is_none() {
            term.column = field(&term.column)?;
        }
    }
    let mut plan = read(
        request,
        &query,
        cx,
        &tables,
        item,
        Some(view.nocheck.clone()),
        None,
    )?;
    if let Answer::Read { table, .. } = &mut plan.answer {
        table.clone_from(&view.name);
    }
    Ok(plan)
}

/// The root column a top-level field of the view's documents names (an embedded member names
/// itself, for its `member.column=…` parameters).
fn document_field(view: &DualityView, name: &str) -> Result<String, ApiError> {
    let embedded = view
        .document
        .iter()
        .any(|i| matches!(i, SelectItem::Embed(e) if plan::embed_key(e) == name));
    match view.column(name) {
        Some(column) => Ok(column.to_string()),
        None if embedded => Ok(name.to_string()),
        None => Err(ApiError::new(
            ErrorCode::ColumnNotFound,
            format!("the documents of '{}' have no field '{name}'", view.name),
        )),
    }
}

/// The read of `view`'s documents as a plain GET of them plans it for the principal of `cx`
/// (its row filters at every level), narrowed by `filters` on the documents' top-level fields:
/// what a document write checks and answers, and what a realtime feed of the view sends.
pub fn document_read(
    cx: &Context<'_>,
    view: &DualityView,
    filters: &[Condition],
) -> Result<DocumentRead, ApiError> {
    let guarded = Guarded::new(cx, &view.table, &[Op::Select])?;
    let tables = guarded.tables();
    let field = |name: &str| document_field(view, name);
    let query = Query {
        select: Some(view.document.clone()),
        filters: filters
            .iter()
            .map(|c| c.try_map_columns(&field))
            .collect::<Result<_, _>>()?,
        ..Query::default()
    };
    let mut planned = plan::read(tables.view, &query, None, false, 0, None, cx.dialect)?;
    planned
        .select
        .filters
        .extend(tables.guard.row_filter.iter().cloned());
    planned.select.embeds = Embedder { cx, query: &query }.resolve(
        tables.view,
        &planned.pending,
        &[],
        &planned.presence,
        &mut planned.select.order,
        &mut planned.shape,
    )?;
    Ok(DocumentRead {
        select: planned.select,
        shape: planned.shape,
    })
}

/// The methods a view's documents (the collection, or an item) answer.
fn document_methods(view: &DualityView, item: bool) -> &'static [&'static str] {
    match (view.root.writable(), item) {
        (false, _) => &["GET", "HEAD"],
        (true, false) => &["GET", "HEAD", "POST"],
        (true, true) => &["GET", "HEAD", "PUT", "PATCH", "DELETE"],
    }
}

/// A write of one document: the document's read planned as a GET plans it (for its check and
/// the answer), then the statements on its tables.
fn document_write(
    request: &ApiRequest<'_>,
    cx: &Context<'_>,
    view: &DualityView,
    action: DocumentAction,
) -> Result<ActionPlan, ApiError> {
    let key = request.action.key();
    let allowed = document_methods(view, key.is_some());
    if !allowed.contains(&request.method) {
        let err = ApiError::method_not_allowed(request.method, allowed);
        return Err(if view.root.writable() {
            err
        } else {
            err.hint("the view allows no writes: give it insert, update or delete permissions")
        });
    }
    let read = document_read(cx, view, &[])?;
    let body = match action {
        DocumentAction::Delete => None,
        _ => Some(super::document_body::read_document(
            view,
            request.content_type,
            &request.body,
            cx.limits.max_document_rows,
        )?),
    };
    let written = document_write::plan(
        cx,
        view,
        action,
        key,
        body.as_ref(),
        request.if_match.clone(),
        read,
    )?;
    let mut job = Job::new(Access::Write, written.steps);
    job.format = Format::Json;
    Ok(ActionPlan {
        job,
        answer: Answer::Document {
            created: action == DocumentAction::Insert,
            location: format!("{}/{}/", cx.rest.prefix, view.name),
            nocheck: (action != DocumentAction::Delete).then(|| view.nocheck.clone()),
        },
    })
}

/// The operations the role needs on the table: the action's, and `select` when a write
/// returns rows.
fn operations(request: &ApiRequest<'_>) -> Vec<Op> {
    let merge = request.prefer.resolution == Some(Resolution::Merge);
    let post = request.method_is("POST");
    let mut ops = match request.action {
        Action::Insert if merge => vec![Op::Insert, Op::Update],
        Action::Insert => vec![Op::Insert],
        Action::Update { .. } => vec![Op::Update],
        Action::Delete { .. } => vec![Op::Delete],
        Action::Upsert { .. } => vec![Op::Insert, Op::Update],
        // a POST to an item URL is refused (405) once the role may insert
        Action::Unsupported { .. } if post && merge => vec![Op::Insert, Op::Update],
        Action::Unsupported { .. } if post => vec![Op::Insert],
        Action::Read { .. } | Action::Unsupported { .. } => vec![Op::Select],
    };
    if ops[0] != Op::Select && request.prefer.return_ == Return::Representation {
        ops.push(Op::Select);
    }
    ops
}

fn format_of(media: MediaType) -> Format {
    if media == MediaType::Csv {
        Format::Csv
    } else {
        Format::Json
    }
}

/// A read of `query` (the request's own, or a duality view's document over its root, whose
/// `nocheck` fields `documents` then holds).
fn read(
    request: &ApiRequest<'_>,
    query: &Query,
    cx: &Context<'_>,
    tables: &Tables<'_>,
    item: Option<Vec<Condition>>,
    documents: Option<Vec<Vec<String>>>,
    from: Option<&Sql>,
) -> Result<ActionPlan, ApiError> {
    read_from(
        request,
        query,
        cx,
        tables.view,
        &tables.guard.row_filter,
        item,
        documents,
        from,
    )
}

/// The rows a function call returns, read as a table's are: `from` (a `WITH "_rpc" AS (…) `
/// prelude holding the call) names them `_rpc`, `table` describes them (its relationships
/// embed). `count=exact` counts them with a second call, so a caller counts only calls
/// that do not write.
pub fn call_read(
    request: &ApiRequest<'_>,
    cx: &Context<'_>,
    table: &Table,
    from: &Sql,
) -> Result<ActionPlan, ApiError> {
    plan::aggregates_allowed(request.query.select.as_deref(), cx.rest, false)?;
    read_from(
        request,
        &request.query,
        cx,
        table,
        &[],
        None,
        None,
        Some(from),
    )
}

/// The name a function call's rows have in the statement reading them.
pub const CALL_ROWS: &str = "_rpc";

#[allow(clippy::too_many_arguments)]
fn read_from(
    request: &ApiRequest<'_>,
    query: &Query,
    cx: &Context<'_>,
    table: &Table,
    row_filter: &[Condition],
    item: Option<Vec<Condition>>,
    documents: Option<Vec<Vec<String>>>,
    from: Option<&Sql>,
) -> Result<ActionPlan, ApiError> {
    let d = cx.dialect;
    let prefer = &request.prefer;
    let is_item = item.is_some();
    let table = &*plan::with_computed(
        table,
        query.select.as_deref(),
        &query.filters,
        &query.order,
        |f| cx.may_call(f),
    );
    let embedder = Embedder { cx, query };
    let mut plan = match plan::read(
        table,
        query,
        request.range,
        prefer.count.is_some(),
        cx.rest.max_rows,
        item,
        d,
    ) {
        // an embed of nothing is the error, before an unknown column (PostgREST's order)
        Err(e) if e.code == ErrorCode::ColumnNotFound => {
            embedder.relations_found(table, query.select.as_deref().unwrap_or_default())?;
            return Err(e);
        }
        planned => planned?,
    };
    plan.select.filters.extend(row_filter.iter().cloned());
    plan.select.embeds = embedder.resolve(
        table,
        &plan.pending,
        &[],
        &plan.presence,
        &mut plan.select.order,
        &mut plan.shape,
    )?;
    if let Some(count) = &mut plan.count {
        count.filters.extend(row_filter.iter().cloned());
        // the embeds whose presence filters the rows: required ones, and those a logic tree
        // tests
        let tested = related_keys(&count.filters);
        count.embeds = plan
            .select
            .embeds
            .iter()
            .filter(|e| e.required.is_some() || tested.contains(&e.key.as_str()))
            .cloned()
            .collect();
    }
    if from.is_some() {
        // a function's rows: named by the call's CTE, their row type (a table's) given where
        // a computed column or relationship takes the row
        let row_type = table.schema.as_ref().map(|schema| QualifiedName {
            schema: Some(schema.clone()),
            name: table.name.clone(),
        });
        let rows = |table: &mut Relation, embeds: &mut [EmbedStmt]| {
            *table = Relation {
                computed: std::mem::take(&mut table.computed),
                row_type: row_type.clone(),
                ..CALL_ROWS.into()
            };
            for e in embeds.iter_mut().filter(|e| e.select.table.of_parent_row) {
                e.select.table.parent_row_type.clone_from(&row_type);
            }
        };
        rows(&mut plan.select.table, &mut plan.select.embeds);
        if let Some(count) = &mut plan.count {
            rows(&mut count.table, &mut count.embeds);
        }
    }
    let prelude = || from.cloned().unwrap_or_default();
    let mut steps = Vec::with_capacity(2);
    if let Some(count) = &plan.count {
        let exact = render::count_after(d, prelude(), count);
        steps.push(match prefer.count {
            Some(Count::Planned) => Step::Estimate {
                rows: render::matching_rows_after(d, prelude(), count),
                count: exact,
                exact_below: None,
            },
            Some(Count::Estimated) => Step::Estimate {
                rows: render::matching_rows_after(d, prelude(), count),
                count: exact,
                exact_below: Some(ESTIMATE_EXACT_BELOW),
            },
            _ if from.is_none() && count.embeds.is_empty() && evaluable_count(d, table, count) => {
                Step::KeptCount {
                    sql: exact,
                    table: table.name.clone(),
                    filters: count.filters.clone(),
                }
            }
            _ => Step::Count(exact),
        });
    }
    steps.push(Step::Rows {
        sql: render::select_after(d, prelude(), &plan.select),
        shape: Some(plan.shape),
    });
    let mut job = Job::new(Access::Read, steps);
    job.format = format_of(request.media);
    Ok(ActionPlan {
        job,
        answer: Answer::Read {
            documents,
            item: is_item,
            table: table.name.clone(),
            offset: plan.select.offset.unwrap_or(0),
        },
    })
}

/// The embeds a logic tree tests the presence of ([`rowgate_query::Predicate::related`]).
fn related_keys(filters: &[Condition]) -> Vec<&str> {
    fn walk<'c>(c: &'c Condition, out: &mut Vec<&'c str>) {
        match c {
            Condition::Pred(p) if p.related => out.push(&p.column),
            Condition::Pred(_) => {}
            Condition::And { items, .. } | Condition::Or { items, .. } => {
                items.iter().for_each(|i| walk(i, out))
            }
        }
    }
    let mut out = Vec::new();
    filters.iter().for_each(|c| walk(c, &mut out));
    out
}

/// What a write gives back: its columns and, when it embeds related rows, those too.
struct Returning {
    columns: Vec<OutputColumn>,
    shape: OutputShape,
    embeds: Vec<EmbedStmt>,
}

impl Returning {
    /// Nothing.
    fn none() -> Returning {
        Returning {
            columns: Vec::new(),
            shape: OutputShape {
                keys: Vec::new(),
                kinds: Vec::new(),
                sort: Vec::new(),
            },
            embeds: Vec::new(),
        }
    }

    /// The columns for the statement's own `RETURNING`: none when there are embeds, which are
    /// rendered with them, in output order, by [`Returning::finish`].
    fn statement_columns(&mut self) -> Vec<OutputColumn> {
        if self.embeds.is_empty() {
            std::mem::take(&mut self.columns)
        } else {
            Vec::new()
        }
    }

    /// Adds the `RETURNING` with embeds to a rendered write of `table`.
    fn finish(&self, d: &dyn Dialect, table: &Table, sql: &mut Sql) {
        if !self.embeds.is_empty() {
            render::returning_with_embeds(d, &self.columns, &self.embeds, &table.name, sql);
        }
    }
}

/// What a write returns, from `Prefer: return=` and `select=` (embeds included: the written
/// rows with their related rows, as PostgREST answers `insert().select('*, team(name)')`).
fn returning(
    cx: &Context<'_>,
    table: &Table,
    query: &Query,
    prefer: &Prefer,
) -> Result<Returning, ApiError> {
    let d = cx.dialect;
    let table = &*plan::with_computed(table, query.select.as_deref(), &[], &[], |f| cx.may_call(f));
    let key: Vec<SelectItem>;
    let mut selection = match prefer.return_ {
        Return::Representation => plan::output(table, query.select.as_deref(), d)?,
        Return::HeadersOnly if !table.primary_key.is_empty() => {
            key = table
                .primary_key
                .iter()
                .map(|c| SelectItem::Column {
                    name: c.clone(),
                    path: Vec::new(),
                    alias: None,
                    cast: None,
                    aggregate: None,
                })
                .collect();
            plan::output(table, Some(&key), d)?
        }
        _ => return Ok(Returning::none()),
    };
    for c in &mut selection.columns {
        c.written_row = written_row(table, &c.column);
    }
    let mut shape = selection.shape;
    let embedder = Embedder { cx, query };
    let mut embeds = embedder.resolve(table, &selection.embeds, &[], &[], &mut [], &mut shape)?;
    // the rows written are answered whatever relates to them
    for e in &mut embeds {
        e.required = None;
    }
    let mut columns = selection.columns;
    if prefer.return_ == Return::Representation {
        sort_keys(table, query, d, &mut columns, &mut shape)?;
    }
    Ok(Returning {
        columns,
        shape,
        embeds,
    })
}

/// `order=` of a write's representation: a write's statement returns its rows in no order
/// (PostgreSQL's and SQLite's `RETURNING` alike), so each term becomes a hidden column after
/// the output's, by which the rows are ordered as they are answered ([`SortKey`]).
fn sort_keys(
    table: &Table,
    query: &Query,
    d: &dyn Dialect,
    columns: &mut Vec<OutputColumn>,
    shape: &mut OutputShape,
) -> Result<(), ApiError> {
    if query.order.iter().any(|t| t.relation.is_some()) {
        return Err(ApiError::new(
            ErrorCode::QueryParse,
            "a write's representation cannot be ordered by an embedded resource's column",
        )
        .hint("order by the written table's own columns"));
    }
    for (n, term) in plan::order(table, &query.order, d)?.into_iter().enumerate() {
        let descending = term.direction == Some(Direction::Desc);
        shape.sort.push(SortKey {
            descending,
            nulls_first: term.nulls.map_or(descending, |n| n == Nulls::First),
        });
        columns.push(OutputColumn {
            written_row: written_row(table, &term.column),
            path: term.path,
            key: format!("_rg_sort_{n}"),
            ..OutputColumn::plain(&term.column)
        });
    }
    Ok(())
}

/// For a computed column of `table` (PostgreSQL), its function, which a write's statement
/// calls with the written row (`"test"."always_true"("items")`); `None` for a stored column.
fn written_row(table: &Table, column: &str) -> Option<Box<RowFunction>> {
    let schema = table.column(column)?.computed.clone()?;
    Some(Box::new(RowFunction {
        function: QualifiedName {
            schema: Some(schema),
            name: column.to_string(),
        },
        row: table.name.clone(),
    }))
}

/// `filters` reading a written row's computed columns as functions of it ([`written_row`]).
fn of_written_row(table: &Table, filters: &mut [Condition]) {
    for c in filters {
        match c {
            Condition::Pred(p) => p.written_row = written_row(table, &p.column),
            Condition::And { items, .. } | Condition::Or { items, .. } => {
                of_written_row(table, items)
            }
        }
    }
}

/// What a PATCH, DELETE or PUT gives back: its representation, or nothing (unlike an insert,
/// `headers-only` returns no key).
fn representation(
    cx: &Context<'_>,
    table: &Table,
    query: &Query,
    prefer: &Prefer,
) -> Result<Returning, ApiError> {
    if prefer.return_ == Return::Representation {
        returning(cx, table, query, prefer)
    } else {
        // a select= or order= naming what the table has not is refused even when nothing is
        // returned
        let table = plan::with_computed(table, query.select.as_deref(), &[], &query.order, |f| {
            cx.may_call(f)
        });
        if let Some(select) = query.select.as_deref() {
            plan::output(&table, Some(select), cx.dialect)?;
        }
        for term in query.order.iter().filter(|t| t.relation.is_none()) {
            plan::column(&table, &term.column)?;
        }
        Ok(Returning::none())
    }
}

/// A write's job, with its checks: `max-affected` under `handling=strict`, and exactly one row
/// for a singular-object answer.
fn write_job(steps: Vec<Step>, prefer: &Prefer, media: MediaType) -> Job {
    let mut job = Job::new(Access::Write, steps);
    job.format = format_of(media);
    job.max_affected = prefer.max_affected.filter(|_| prefer.strict);
    job.exactly_one = media == MediaType::SingleObject;
    job.rollback = prefer.rollback;
    job
}

/// The statement's step: its rows when they are returned, else run for its count.
fn write_step(sql: Sql, shape: Option<OutputShape>) -> Step {
    match shape {
        Some(shape) => Step::Rows {
            sql,
            shape: Some(shape),
        },
        None => Step::Execute(sql),
    }
}

fn insert(
    request: &ApiRequest<'_>,
    cx: &Context<'_>,
    tables: &Tables<'_>,
) -> Result<ActionPlan, ApiError> {
    let d = cx.dialect;
    let table = tables.full;
    let (query, prefer) = (&request.query, &request.prefer);
    let mut answer = returning(cx, tables.view, query, prefer)?;
    let cols = answer.statement_columns();
    let shape = answer.shape.clone();
    let read = |sink: &mut dyn RowSink| {
        body::read_rows(
            request.content_type,
            &request.body,
            query.columns.as_deref(),
            sink,
        )
    };
    // a body of one object is one row: bound as values where the database binds small bodies
    // so (a large value is then copied the fewest times, not also as JSON rows)
    let one_row = request.body.trim_ascii_start().first() == Some(&b'{')
        || body::body_media(request.content_type, &request.body)? == body::BodyMedia::Form;
    let plan = plan::insert(
        d,
        table,
        query,
        (if one_row { 0 } else { request.body.len() }, read),
        prefer,
        cols,
        shape,
    )?;
    let returns_rows = !plan.shape.keys.is_empty();
    let mut steps = Vec::with_capacity(plan.stmts.len() * 2);
    let merge = prefer.resolution == Some(Resolution::Merge);
    let mut merged = 0;
    for mut stmt in plan.stmts {
        tables.guard.check_writable(&stmt.columns)?;
        steps.extend(tables.guard.insert_checks(d, table, &mut stmt)?);
        if merge {
            // (rows of defaults name no key, and were never counted: their upsert answers 200)
            if !stmt.columns.is_empty() {
                merged += stmt.rows.count() as u64;
            }
            steps.extend(guard::existing_step(d, table, &stmt));
        }
        // the rows move into the statement's parameters: a large body is held once more
        let mut sql = render::insert(d, stmt);
        answer.finish(d, table, &mut sql);
        steps.push(write_step(sql, returns_rows.then(|| plan.shape.clone())));
    }
    Ok(ActionPlan {
        job: write_job(steps, prefer, request.media),
        answer: Answer::Insert {
            location: format!("{}/{}?", cx.rest.prefix, table.name),
            key: table.primary_key.clone(),
            merged: merge.then_some(merged),
        },
    })
}

/// The statement that reads an item's default representation (for `If-Match`), with the tags.
fn if_match_step(
    request: &ApiRequest<'_>,
    cx: &Context<'_>,
    tables: &Tables<'_>,
    key: Vec<Condition>,
) -> Result<Vec<Step>, ApiError> {
    let mut steps = Vec::with_capacity(2);
    if let Some(tags) = request.if_match.clone() {
        let d = cx.dialect;
        let whole = Query::default();
        let mut plan = plan::read(tables.view, &whole, None, false, 0, Some(key), d)?;
        plan.select
            .filters
            .extend(tables.guard.row_filter.iter().cloned());
        steps.push(Step::IfMatch {
            sql: render::select(d, &plan.select),
            shape: plan.shape,
            tags,
        });
    }
    Ok(steps)
}

fn modify(
    request: &ApiRequest<'_>,
    cx: &Context<'_>,
    tables: &Tables<'_>,
    item: Option<Vec<Condition>>,
) -> Result<ActionPlan, ApiError> {
    let d = cx.dialect;
    let table = tables.full;
    // a view answers 405 before anything about the request is judged
    let op = if matches!(request.action, Action::Update { .. }) {
        Op::Update
    } else {
        Op::Delete
    };
    plan::writable(table, op)?;
    let (query, prefer) = (&request.query, &request.prefer);
    let returns_rows = prefer.return_ == Return::Representation;
    let mut answer = representation(cx, tables.view, query, prefer)?;
    let cols = answer.statement_columns();
    if query.filters.is_empty() && item.is_none() && cx.rest.refuse_unfiltered_writes {
        // pg-safeupdate's words, as PostgREST users meet them
        let statement = if request.method_is("DELETE") {
            "DELETE"
        } else {
            "UPDATE"
        };
        return Err(ApiError::new(
            ErrorCode::SafeUpdate,
            format!("{statement} requires a WHERE clause"),
        )
        .hint("add a filter (to change every row: ?id=not.is.null), or set rest.refuse_unfiltered_writes = false"));
    }
    // computed columns filter as functions of the written row
    let view = plan::with_computed(tables.view, None, &query.filters, &[], |f| cx.may_call(f));
    let mut filters = plan::conditions(&view, &query.filters, d)?;
    of_written_row(&view, &mut filters);
    let mut steps = match &item {
        Some(key) => if_match_step(request, cx, tables, key.clone())?,
        None => Vec::with_capacity(1),
    };
    if let Some(key) = item {
        filters.extend(key);
    }
    filters.extend(tables.guard.row_filter.iter().cloned());
    if query.limit.is_some() || query.offset.is_some() {
        return Err(ApiError::new(
            ErrorCode::QueryParse,
            "limit and offset are not supported on PATCH and DELETE",
        )
        .hint("select the rows with filters instead"));
    }
    let sql = if matches!(request.action, Action::Update { .. }) {
        let named = query.columns.as_deref();
        let wanted = |key: &str| match named {
            Some(named) if !named.iter().any(|c| c == key) => Wanted::Ignored,
            _ if table.column(key).is_some() => Wanted::Kept,
            _ => Wanted::Unknown,
        };
        let object = body::read_one_object(request.content_type, &request.body, &wanted)?
            .one_object("PATCH")?;
        let columns = (named, prefer.missing_default);
        match plan::update(table, filters, object.as_ref(), cols, columns)? {
            Some(stmt) => {
                tables
                    .guard
                    .check_writable(stmt.set.iter().map(|(c, _)| c))?;
                steps.extend(tables.guard.update_check(d, table, &stmt));
                Some(render::update(d, &stmt))
            }
            None => None,
        }
    } else {
        Some(render::delete(d, &plan::delete(table, filters, cols)?))
    };
    if let Some(mut sql) = sql {
        answer.finish(d, table, &mut sql);
        steps.push(write_step(sql, returns_rows.then_some(answer.shape)));
    }
    Ok(ActionPlan {
        job: write_job(steps, prefer, request.media),
        answer: Answer::Modify,
    })
}

fn put(
    request: &ApiRequest<'_>,
    cx: &Context<'_>,
    tables: &Tables<'_>,
    key: Option<&str>,
) -> Result<ActionPlan, ApiError> {
    let d = cx.dialect;
    let table = tables.full;
    // a view answers 405 before anything about the request is judged
    plan::writable(table, Op::Insert)?;
    plan::writable(table, Op::Update)?;
    let (query, prefer) = (&request.query, &request.prefer);
    let key_values: Vec<(String, String)> = match key {
        Some(k) => {
            if !query.filters.is_empty() {
                return Err(ApiError::new(
                    ErrorCode::InvalidPut,
                    "filters are not allowed on a PUT to an item URL",
                ));
            }
            let filters = plan::item_filters(table, k)?;
            table
                .primary_key
                .iter()
                .cloned()
                .zip(filters.iter().map(|f| match f {
                    Condition::Pred(p) => match &p.operand {
                        Operand::Scalar(s) => s.clone(),
                        _ => String::new(),
                    },
                    _ => String::new(),
                }))
                .collect()
        }
        None => plan::put_key(table, query)?,
    };
    let mut steps = if_match_step(request, cx, tables, plan::key_filters(&key_values))?;
    let wanted = |key: &str| match table.column(key) {
        Some(_) => Wanted::Kept,
        None => Wanted::Unknown,
    };
    let shape = body::read_one_object(request.content_type, &request.body, &wanted)?;
    let returns_rows = prefer.return_ == Return::Representation;
    let mut answer = representation(cx, tables.view, query, prefer)?;
    let cols = answer.statement_columns();
    let mut stmt = plan::put(d, table, &key_values, shape, cols)?;
    tables.guard.check_writable(&stmt.columns)?;
    steps.extend(tables.guard.insert_checks(d, table, &mut stmt)?);
    steps.extend(guard::existing_step(d, table, &stmt));
    let mut sql = render::insert(d, stmt);
    answer.finish(d, table, &mut sql);
    steps.push(write_step(sql, returns_rows.then_some(answer.shape)));
    Ok(ActionPlan {
        job: write_job(steps, prefer, request.media),
        answer: Answer::Upsert {
            item: key.is_some(),
        },
    })
}

#[cfg(test)]
mod tests {
    //! The plan stage without a server: a request over an in-memory SQLite schema, a policy and
    //! a principal in, the job's SQL and the refusals out.

    use std::sync::Arc;

    use bytes::Bytes;
    use rowgate_query::render::Sqlite;

    use super::*;
    use crate::auth::policy::Policy;
    use crate::auth::Principal;
    use crate::config::{GrantConfig, LimitsConfig, RestConfig};
    use crate::schema::SchemaCache;

    const SCHEMA: &str = "
        CREATE TABLE team (team_id INTEGER PRIMARY KEY, name TEXT NOT NULL, owner TEXT);
        CREATE TABLE driver (driver_id INTEGER PRIMARY KEY, name TEXT,
                             team_id INTEGER REFERENCES team(team_id));
        CREATE TABLE secret (id INTEGER PRIMARY KEY);
        CREATE TABLE pit (id INTEGER PRIMARY KEY, driver_id INTEGER REFERENCES driver(driver_id));
    ";

    fn schema() -> SchemaCache {
        let conn = rusqlite::Connection::open_in_memory().expect("sqlite");
        conn.execute_batch(SCHEMA).expect("schema");
        SchemaCache::introspect(&conn).expect("introspect")
    }

    /// `writer` may read and update its own teams (owner = its `sub`) and read drivers.
    fn policy() -> Policy {
        let grant = |tables: &[&str], ops: &[&str], filter: Option<&str>| GrantConfig {
            role: "writer".into(),
            tables: tables.iter().map(|t| t.to_string()).collect(),
            ops: ops.iter().map(|o| o.to_string()).collect(),
            read_columns: None,
            write_columns: None,
            filter: filter.map(str::to_string),
            functions: Vec::new(),
        };
        Policy::compile(&[
            grant(&["team"], &["select", "update"], Some("owner=eq.@sub")),
            grant(&["driver"], &["select"], None),
        ])
        .expect("policy")
    }

    fn writer() -> Principal {
        let mut claims = serde_json::Map::new();
        claims.insert("sub".into(), "ann".into());
        Principal {
            role: "writer".into(),
            claims: Arc::new(claims),
            anonymous: false,
            standing: None,
        }
    }

    /// Plans `method uri` (body `body`) on `table` for the writer.
    fn plan_of(method: &str, uri: &str, table: &str, body: &str) -> Result<ActionPlan, ApiError> {
        let (_, query) = uri.split_once('?').unwrap_or((uri, ""));
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let query =
            rowgate_query::parse::parse_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let action = match method {
            "GET" => Action::Read { key: None },
            "POST" => Action::Insert,
            "PATCH" => Action::Update { key: None },
            "DELETE" => Action::Delete { key: None },
            "PUT" => Action::Upsert { key: None },
            _ => Action::Unsupported { key: None },
        };
        let limits = LimitsConfig::default();
        let request = ApiRequest {
            action,
            table,
            query,
            prefer: Prefer::default(),
            media: MediaType::Json,
            nulls_stripped: false,
            range: None,
            method,
            content_type: Some("application/json"),
            if_match: None,
            if_none_match: Vec::new(),
            body: Bytes::from(body.to_string()),
        };
        let (schema, policy, principal) = (schema(), policy(), writer());
        let cx = Context {
            schema: &schema,
            policy: &policy,
            principal: &principal,
            dialect: &Sqlite,
            rest: &RestConfig::default(),
            limits: &limits,
            duality: &crate::duality::DualityViews::default(),
            app_settings: &Default::default(),
            pre_request: None,
        };
        plan(&request, &cx)
    }

    fn sql_of(plan: &ActionPlan) -> Vec<String> {
        plan.job
            .steps
            .iter()
            .map(|s| match s {
                Step::Rows { sql, .. }
                | Step::Execute(sql)
                | Step::Setting(sql)
                | Step::Count(sql)
                | Step::KeptCount { sql, .. }
                | Step::Existing(sql)
                | Step::Value(sql)
                | Step::Explain(sql)
                | Step::Forbid { sql, .. } => sql.text.clone(),
                Step::IfMatch { sql, .. } => format!("if-match {}", sql.text),
                Step::ResponseSettings => "response settings".to_string(),
                Step::Document { sql, .. } => format!("document {}", sql.text),
                Step::Estimate { count, .. } => count.text.clone(),
            })
            .collect()
    }

    /// A read is one statement carrying the role's row filter, its claim bound as a value.
    #[test]
    fn reads_carry_the_row_filter() {
        let plan = plan_of("GET", "/team?select=name&name=like.F*", "team", "").expect("plan");
        let sql = sql_of(&plan);
        assert_eq!(sql.len(), 1, "{sql:?}");
        assert!(sql[0].contains("\"owner\" = "), "{}", sql[0]);
        let Step::Rows { sql, .. } = &plan.job.steps[0] else {
            panic!("rows step");
        };
        assert!(
            sql.params
                .iter()
                .any(|p| *p == rowgate_query::Value::Text("ann".into())),
            "{:?}",
            sql.params
        );
        assert_eq!(plan.job.access, Access::Read);
    }

    /// An update under a row filter checks the new values with a `Forbid` step before it
    /// writes, in the same job.
    #[test]
    fn writes_under_a_row_filter_are_checked_in_the_job() {
        let plan =
            plan_of("PATCH", "/team?team_id=eq.1", "team", r#"{"owner": "bob"}"#).expect("plan");
        assert_eq!(plan.job.access, Access::Write);
        assert!(
            plan.job
                .steps
                .iter()
                .any(|s| matches!(s, Step::Forbid { .. })),
            "{:?}",
            sql_of(&plan)
        );
    }

    /// What the role was not granted is refused at plan time: an operation, a table, an
    /// embedded table.
    #[test]
    fn the_guard_refuses_what_was_not_granted() {
        let refused = |method, uri, table, body| match plan_of(method, uri, table, body) {
            Err(e) => e.code,
            Ok(_) => panic!("{method} {uri} was planned"),
        };
        assert_eq!(
            refused("DELETE", "/team?team_id=eq.1", "team", ""),
            ErrorCode::PermissionDenied
        );
        assert_eq!(
            refused("POST", "/driver", "driver", r#"{"name": "x"}"#),
            ErrorCode::PermissionDenied
        );
        assert_eq!(
            refused("GET", "/secret", "secret", ""),
            ErrorCode::PermissionDenied
        );
        assert_eq!(
            refused("GET", "/driver?select=name,pit(id)", "driver", ""),
            ErrorCode::PermissionDenied
        );
        assert_eq!(
            refused("GET", "/driver?select=name,secret(id)", "driver", ""),
            ErrorCode::RelationshipNotFound
        );
    }

    /// An embed is part of the one statement, under the related table's own grant.
    #[test]
    fn embeds_are_planned_into_one_statement() {
        let plan = plan_of("GET", "/driver?select=name,team(name)", "driver", "").expect("plan");
        let sql = sql_of(&plan);
        assert_eq!(sql.len(), 1, "{sql:?}");
        assert!(sql[0].contains("json_object("), "{}", sql[0]);
        assert!(
            sql[0].contains("\"owner\" = "),
            "the team's row filter applies inside the embed: {}",
            sql[0]
        );
        let plan = plan_of("GET", "/team?select=name,driver(name)", "team", "").expect("plan");
        assert!(sql_of(&plan)[0].contains("json_group_array("));
    }
}
