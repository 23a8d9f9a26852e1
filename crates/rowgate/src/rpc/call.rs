//! A call resolved and planned: which function the name and the arguments pick ([`resolve`]),
//! and the one job that calls it with its arguments bound and reads what it returns
//! ([`plan`]), with how the outcome answers ([`CallAnswer`]).
//!
//! On PostgreSQL the arguments travel as one JSON parameter that `json_to_record` turns into
//! the parameters' own types (arrays and composites included), and the function is called by
//! parameter name, so defaults fill what the call leaves out. A set of rows is read as a
//! table's: `WITH "_rpc" AS (SELECT … FROM the call)` then the planner's own `SELECT` over it.

use bytes::Bytes;
use http::StatusCode;
use rowgate_query::render;
use rowgate_query::stmt::Sql;
use rowgate_query::Value;
use serde_json::Value as Json;

use super::{Arguments, CallRequest};
use crate::api::request::{ApiRequest, MediaType};
use crate::api::respond::{self, Answer, Reply};
use crate::auth::policy::Subject;
use crate::config::resources::{Shape, Source};
use crate::engine::action_plan::{self, Context, CALL_ROWS};
use crate::engine::body::{Member, MemberSeed};
use crate::error::{ApiError, ErrorCode};
use crate::job::{self, Access, Job, Output, Step};
use crate::resources::{serve, Resource, Resources};
use crate::schema::functions::{Function, Returns};
use crate::schema::{SchemaCache, Table};

/// What a call reaches.
pub enum Callee<'a> {
    /// A database function (PostgreSQL).
    Function(&'a Function),
    /// A custom resource declared with `function = …`.
    Resource(&'a Resource),
}

impl Callee<'_> {
    /// Whether its one value is bytes (`bytea`, or a domain over it): answered raw, they are
    /// sent as they are, not as the hex PostgreSQL writes them in.
    pub fn returns_bytes(&self) -> bool {
        matches!(self, Callee::Function(f) if matches!(f.returns, Returns::Scalar { bytes: true, .. }))
    }

    /// The media type its one value may be answered in raw (PostgREST's media type handlers
    /// of scalars): a domain named after one (`CREATE DOMAIN "text/plain" AS text`), `xml` as
    /// `text/xml`, `bytea` as `application/octet-stream`; `None` for the rest.
    pub fn raw_media(&self) -> Option<String> {
        let Callee::Function(f) = self else {
            return None;
        };
        let Returns::Scalar {
            set: false,
            decl_type,
            ..
        } = &f.returns
        else {
            return None;
        };
        // the type as PostgreSQL prints it: `"text/plain"`, or schema-qualified
        // (`other."text/plain"`, a domain of another schema)
        let name = decl_type.rsplit(".\"").next().unwrap_or(decl_type);
        let name = name.trim_matches('"');
        match name {
            "xml" => Some("text/xml".into()),
            "bytea" => Some("application/octet-stream".into()),
            n if n.contains('/') => Some(n.to_string()),
            _ => None,
        }
    }

    /// What calling it asks of the policy.
    pub fn subject(&self) -> Subject<'_> {
        match self {
            Callee::Function(f) => Subject::Function { name: &f.name },
            Callee::Resource(r) => r.subject(),
        }
    }

    /// The names its arguments may have.
    pub fn param_names(&self) -> Vec<&str> {
        match self {
            Callee::Function(f) => f.params.iter().map(|p| p.name.as_str()).collect(),
            Callee::Resource(r) => r
                .params
                .iter()
                .filter(|p| p.source == Source::Body)
                .map(|p| p.name.as_str())
                .collect(),
        }
    }

    /// Whether the call's whole body is its one argument.
    pub fn takes_whole_body(&self, call: &CallRequest<'_>) -> bool {
        match self {
            Callee::Function(f) if !call.read_only => {
                (call.prefer.single_object && f.takes_one_json()) || f.takes_raw_body()
            }
            _ => false,
        }
    }

    /// Whether it may write (POST only, in a write transaction).
    fn writes(&self) -> bool {
        match self {
            Callee::Function(f) => f.volatile,
            Callee::Resource(r) => r.writes,
        }
    }
}

/// The function `call` names, fitting the arguments it gives: a custom resource declared as
/// that function first, else the PostgreSQL function (of its overloads, the one whose
/// parameters take every argument given, every parameter without a default given; of several,
/// the one taking exactly those, else 300 `PGRST203`). 404 `PGRST202` otherwise, with the
/// closest signature as a hint.
pub fn resolve<'a>(
    call: &CallRequest<'_>,
    schema: &'a SchemaCache,
    resources: &'a Resources,
) -> Result<Callee<'a>, ApiError> {
    let given = call.given_names()?;
    let given: Vec<&str> = given.iter().map(String::as_str).collect();
    // more names than a function takes: none fits (but as a whole body)
    let too_many = call.names_too_many()?;
    if let Some(resource) = resources.function(call.name) {
        let callee = Callee::Resource(resource);
        let params = callee.param_names();
        if call.read_only && resource.writes {
            return Err(writes_by_get(
                call,
                format!("function {} writes", call.name),
            ));
        }
        if call.read_only || (!too_many && given.iter().all(|g| params.contains(g))) {
            return Ok(callee);
        }
        return Err(not_found(call, &given, "public", &[params.join(", ")]));
    }
    let overloads = schema.functions.get(call.name);
    let candidates = overloads.map(Vec::as_slice).unwrap_or_default();
    if let Some(ty) = call.raw_body_type() {
        let raw = |f: &&Function| matches!(f.params.as_slice(), [p] if p.name.is_empty() && p.decl_type == ty);
        return match candidates.iter().find(raw) {
            Some(f) => Ok(Callee::Function(f)),
            None => {
                let schema_name = candidates
                    .first()
                    .map_or(functions_schema(schema), |f| f.schema.as_str());
                let name = call.name;
                Err(ApiError::new(
                    ErrorCode::FunctionNotFound,
                    format!("Could not find the function {schema_name}.{name} in the schema cache"),
                )
                .details(format!(
                    "Searched for the function {schema_name}.{name} with a single unnamed {ty} parameter, but no matches were found in the schema cache."
                )))
            }
        };
    }
    let whole =
        !call.read_only && (call.prefer.single_object || call.body_is_not_named().unwrap_or(true));
    // the whole body goes to a function of one unnamed json (or jsonb) parameter when it is
    // JSON (a form's or CSV's rows name arguments; text, XML and bytes were sent above)
    let json_body = !call.read_only && call.body_is(&["application/json"]);
    let takes_json_body = |f: &Function| f.takes_raw_body() && f.takes_one_json();
    let fitting = candidates.iter().filter(|f| {
        if call.prefer.single_object && !call.read_only {
            return f.takes_one_json();
        }
        if whole || (takes_json_body(f) && json_body) {
            return takes_json_body(f);
        }
        !too_many && f.fits(&given)
    });
    let fitting: Vec<&Function> = fitting.collect();
    // of several overloads that fit, the one taking exactly the arguments given; else the
    // call is ambiguous (300 `PGRST203`), as PostgREST resolves it
    let chosen = match fitting.as_slice() {
        [] => None,
        [one] => Some(*one),
        several => {
            let exact: Vec<&&Function> = several
                .iter()
                .filter(|f| f.params.len() == given.len())
                .collect();
            match exact.as_slice() {
                [one] if !whole => Some(**one),
                _ => return Err(ambiguous(several)),
            }
        }
    };
    match chosen {
        // A GET may call a VOLATILE function, as PostgREST: reads run in a read-only
        // transaction, so one that writes fails there (405 `25006`) and nothing is written.
        Some(f) => Ok(Callee::Function(f)),
        None => {
            let schema_name = candidates
                .first()
                .map_or(functions_schema(schema), |f| f.schema.as_str());
            // the overloads a call by name could mean (not those of unnamed parameters, which
            // take a whole body): their signatures are the hint; without any, a function of a
            // name like it
            let named: Vec<&Function> = candidates
                .iter()
                .filter(|f| f.params.iter().all(|p| !p.name.is_empty()))
                .collect();
            let signatures: Vec<String> = named
                .iter()
                .map(|f| {
                    f.params
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .collect();
            let mut err = not_found(call, &given, schema_name, &signatures);
            if named.is_empty() {
                let names = schema
                    .functions
                    .keys()
                    .map(String::as_str)
                    .chain(resources.list.iter().filter_map(|r| r.function.as_deref()))
                    .filter(|n| *n != call.name);
                if let Some(similar) = closest(call.name, names) {
                    err = err.hint(format!(
                        "Perhaps you meant to call the function {schema_name}.{similar}"
                    ));
                }
            }
            Err(err)
        }
    }
}

/// The schema errors name a function in: the exposed schema on PostgreSQL, `public` where
/// functions are custom resources only (SQLite).
fn functions_schema(schema: &SchemaCache) -> &str {
    if schema.functions.is_empty() && schema.tables.values().all(|t| t.schema.is_none()) {
        "public"
    } else {
        schema.name()
    }
}

/// The 405 of a GET calling a function that may write.
fn writes_by_get(call: &CallRequest<'_>, why: String) -> ApiError {
    ApiError::method_not_allowed(call.method, &["POST"])
        .details(format!("{why}: call it with POST"))
}

/// PostgREST's `PGRST202` for `call`, with the signatures of the function's overloads (if
/// any) as the hint.
fn not_found(
    call: &CallRequest<'_>,
    given: &[&str],
    schema: &str,
    signatures: &[String],
) -> ApiError {
    let mut sorted = given.to_vec();
    sorted.sort_unstable();
    let mut list = sorted.join(", ");
    let name = call.name;
    if call.names_too_many().unwrap_or(false) {
        // the names beyond the first hundred were not kept
        list.push_str(", …");
        return ApiError::new(
            ErrorCode::FunctionNotFound,
            format!("Could not find the function {schema}.{name}({list}) in the schema cache"),
        )
        .details(format!(
            "The call names more than {} arguments, and a function takes at most that many.",
            super::MAX_ARGUMENTS
        ));
    }
    let called = if list.is_empty() {
        format!("{schema}.{name} without parameters")
    } else {
        format!("{schema}.{name}({list})")
    };
    let err = ApiError::new(
        ErrorCode::FunctionNotFound,
        format!("Could not find the function {called} in the schema cache"),
    )
    .details(format!(
        "Searched for the function {schema}.{name}{}{}, but no matches were found in the schema cache.",
        match sorted.len() {
            0 => " without parameters".to_string(),
            1 => format!(" with parameter {list}"),
            _ => format!(" with parameters {list}"),
        },
        // a POST of JSON might also have meant the whole body for one parameter
        if !call.read_only && call.body_is(&["application/json"]) {
            " or with a single unnamed json/jsonb parameter"
        } else {
            ""
        }
    ));
    // the signature most like the call's, as PostgREST's fuzzy search picks it
    let wanted = format!("({list})");
    let closest = signatures
        .iter()
        .map(|signature| {
            let mut names: Vec<&str> = signature.split(", ").filter(|n| !n.is_empty()).collect();
            names.sort_unstable();
            let text = format!("({})", names.join(", "));
            (strsim::normalized_levenshtein(&text, &wanted), signature)
        })
        .filter(|(score, _)| *score >= 0.33)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match closest {
        Some((_, signature)) => err.hint(format!(
            "Perhaps you meant to call the function {schema}.{name}({signature})"
        )),
        None => err,
    }
}

/// 300 `PGRST203`: several overloads fit the call, as PostgREST words it.
fn ambiguous(candidates: &[&Function]) -> ApiError {
    let list: Vec<String> = candidates
        .iter()
        .map(|f| {
            let params: Vec<String> = f
                .params
                .iter()
                .map(|p| format!("{} => {}", p.name, p.decl_type))
                .collect();
            format!("{}.{}({})", f.schema, f.name, params.join(", "))
        })
        .collect();
    ApiError::new(
        ErrorCode::AmbiguousFunction,
        format!(
            "Could not choose the best candidate function between: {}",
            list.join(", ")
        ),
    )
    .hint("Try renaming the parameters or the function itself in the database so function overloading can be resolved")
}

/// The name most like `name` (Jaro-Winkler ≥ 0.8), if any.
fn closest<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    names
        .map(|n| (strsim::jaro_winkler(n, name), n))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n)
}

/// A planned call: its job and how its outcome answers.
pub struct PlannedCall {
    /// The database work.
    pub job: Job,
    /// How the outcome answers.
    pub answer: CallAnswer,
}

/// How a call's outcome answers.
pub enum CallAnswer {
    /// The value of a scalar, as JSON: one row of one (its `Content-Range` says so).
    Value,
    /// An array of scalars (a function returning a set of them), as JSON.
    Values,
    /// 204: it returns nothing.
    Void,
    /// One row as an object (`null` when none).
    Object,
    /// The rows as they came (a resource that writes).
    Array,
    /// A set of rows, answered as a table read's (range, count, singular object, CSV).
    Rows(Answer),
}

impl CallAnswer {
    /// The answer to `request` from the job's `outcome`.
    pub fn respond(self, request: &ApiRequest<'_>, outcome: Output) -> Result<Reply, ApiError> {
        let json = |body: Vec<u8>| {
            Ok(Reply::raw(
                StatusCode::OK,
                "application/json; charset=utf-8",
                Bytes::from(body),
            ))
        };
        match self {
            CallAnswer::Void => Ok(Reply::empty(StatusCode::NO_CONTENT)),
            CallAnswer::Value => Ok(one_of_one(
                request,
                json(outcome.value.unwrap_or_else(|| b"null".to_vec()))?,
            )),
            CallAnswer::Values => json(outcome.value.unwrap_or_else(|| b"[]".to_vec())),
            CallAnswer::Array => json(outcome.rows),
            CallAnswer::Object => match outcome.row_count {
                0 => json(b"null".to_vec()),
                _ => Ok(one_of_one(
                    request,
                    json(job::unwrap_single(&outcome.rows).to_vec())?,
                )),
            },
            CallAnswer::Rows(answer) => respond::answer(request, answer, outcome),
        }
    }
}

/// A single value or row answered as PostgREST answers one: the first of one row, counted
/// when `Prefer: count=…` asks.
fn one_of_one(request: &ApiRequest<'_>, reply: Reply) -> Reply {
    let range = match request.prefer.count {
        Some(_) => "0-0/1",
        None => "0-0/*",
    };
    reply.header(http::header::CONTENT_RANGE, range)
}

/// Plans `callee` called with `arguments`, reading what it returns as `request` asks.
pub fn plan(
    callee: &Callee<'_>,
    call: &CallRequest<'_>,
    request: &ApiRequest<'_>,
    arguments: Arguments,
    cx: &Context<'_>,
) -> Result<PlannedCall, ApiError> {
    let mut planned = match callee {
        Callee::Function(f) => plan_function(f, request, arguments, cx)?,
        Callee::Resource(r) => plan_resource(r, request, arguments, cx)?,
    };
    if callee.writes() && !call.read_only {
        planned.job.access = Access::Write;
        planned.job.rollback = call.prefer.rollback;
        // a singular answer of a call that writes: unless it returns exactly one row, 406 and
        // its writes rolled back, as a table write's
        planned.job.exactly_one = request.media == MediaType::SingleObject
            && matches!(planned.answer, CallAnswer::Rows(_));
        // max-affected counts the rows a call returns, as PostgREST: it needs a set of them
        if let Some(max) = call.prefer.max_affected.filter(|_| call.prefer.strict) {
            match planned.answer {
                CallAnswer::Rows(_) | CallAnswer::Array => planned.job.max_affected = Some(max),
                _ => {
                    return Err(ApiError::new(
                        ErrorCode::MaxAffectedNeedsRows,
                        "Function must return SETOF or TABLE when max-affected preference is used with handling=strict",
                    ))
                }
            }
        }
    }
    Ok(planned)
}

/// Refuses result modifiers where the result is not rows.
fn no_modifiers(request: &ApiRequest<'_>, name: &str) -> Result<(), ApiError> {
    let q = &request.query;
    if q.select.is_none()
        && q.filters.is_empty()
        && q.order.is_empty()
        && q.limit.is_none()
        && q.offset.is_none()
    {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::QueryParse,
            format!("the function {name} does not return rows: select, filters, order, limit and offset do not apply"),
        ))
    }
}

/// A parameter's type as an argument is read into it: `character` and `bit` without their
/// length (as PostgreSQL prints a parameter's type, they would mean a length of 1 in a column
/// definition; a function's parameter takes any length), as PostgREST passes them.
fn unbounded(decl_type: &str) -> std::borrow::Cow<'_, str> {
    let (base, array) = match decl_type.strip_suffix("[]") {
        Some(base) => (base, "[]"),
        None => (decl_type, ""),
    };
    match base {
        "character" => format!("bpchar{array}").into(),
        "bit" => format!("varbit{array}").into(),
        _ => decl_type.into(),
    }
}

/// A PostgreSQL function's call.
fn plan_function(
    f: &Function,
    request: &ApiRequest<'_>,
    arguments: Arguments,
    cx: &Context<'_>,
) -> Result<PlannedCall, ApiError> {
    let d = cx.dialect;
    let mut call = Sql::default();
    let alias = d.quote_ident(&f.name);
    call.text.push_str("SELECT ");
    call.text.push_str(&alias);
    call.text.push_str(".* FROM ");
    let mut function = d.quote_ident(&f.schema);
    function.push('.');
    function.push_str(&d.quote_ident(&f.name));
    // an anonymous record has no columns to read it by: it is called in a select list, its
    // one column the record
    let record = matches!(&f.returns, Returns::Scalar { decl_type, .. } if decl_type == "record");
    let invoke = |call: String| {
        if record {
            format!("LATERAL (SELECT {call} AS {alias}) AS {alias}")
        } else {
            format!("{call} AS {alias}")
        }
    };
    match arguments {
        Arguments::Whole(body) if f.params[0].decl_type == "bytea" => {
            // bytes, bound as their hex (no parameter type of this server's carries bytes)
            let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
            let placeholder = render::bind(d, &mut call, Value::Text(hex));
            call.text
                .push_str(&invoke(format!("{function}(decode({placeholder}, 'hex'))")));
        }
        Arguments::Whole(body) => {
            let text = String::from_utf8(body.to_vec()).map_err(|_| {
                ApiError::new(
                    ErrorCode::InvalidBody,
                    "the request body is not valid UTF-8",
                )
            })?;
            let placeholder = render::bind(d, &mut call, Value::Text(text));
            let ty = &f.params[0].decl_type;
            call.text
                .push_str(&invoke(format!("{function}(CAST({placeholder} AS {ty}))")));
        }
        Arguments::Named(map) => {
            let given: Vec<_> = f
                .params
                .iter()
                .filter(|p| map.contains_key(&p.name))
                .collect();
            if given.is_empty() {
                call.text.push_str(&invoke(format!("{function}()")));
            } else {
                // a query string's repeated argument is its last value, but for a VARIADIC
                // parameter, which takes them all (one alone, too, as an array)
                // (name-value pairs: a query string's, or a form's)
                let by_get = matches!(request.method, "GET" | "HEAD")
                    || request.content_type.is_some_and(|t| {
                        t.split(';')
                            .next()
                            .unwrap_or("")
                            .trim()
                            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
                    });
                // the object's text, as a `serde_json::Value`'s (members in key order)
                let mut record = String::from("{");
                for (k, v) in map.into_iter().filter(|(k, _)| f.has_param(k)) {
                    let variadic = f.params.iter().any(|p| p.name == k && p.variadic);
                    let array = matches!(&v, Member::Nested(text) if text.starts_with('['));
                    let v = match v {
                        Member::Nested(text) if array && by_get && !variadic => last_element(&text),
                        one if variadic && !array => Member::Nested(format!("[{one}]")),
                        other => other,
                    };
                    if record.len() > 1 {
                        record.push(',');
                    }
                    record.push_str(&Json::from(k).to_string());
                    record.push(':');
                    record.push_str(&v.to_string());
                }
                record.push('}');
                let placeholder = render::bind(d, &mut call, Value::Text(record));
                let columns: Vec<String> = given
                    .iter()
                    .map(|p| format!("{} {}", d.quote_ident(&p.name), unbounded(&p.decl_type)))
                    .collect();
                let args: Vec<String> = given
                    .iter()
                    .map(|p| {
                        let name = d.quote_ident(&p.name);
                        let variadic = if p.variadic { "VARIADIC " } else { "" };
                        format!("{variadic}{name} := \"_args\".{name}")
                    })
                    .collect();
                call.text.push_str(&format!(
                    "json_to_record(CAST({placeholder} AS json)) AS \"_args\"({}), {}",
                    columns.join(", "),
                    invoke(format!("{function}({})", args.join(", ")))
                ));
            }
        }
    }
    match &f.returns {
        Returns::Void => {
            no_modifiers(request, &f.name)?;
            Ok(step(Step::Execute(call), CallAnswer::Void))
        }
        Returns::Scalar { set: false, .. } => {
            no_modifiers(request, &f.name)?;
            Ok(step(Step::Value(call), CallAnswer::Value))
        }
        Returns::Scalar { set: true, .. } => {
            no_modifiers(request, &f.name)?;
            let mut sql = prelude(call);
            let column = d.quote_ident(&f.name);
            sql.text.push_str(&format!(
                "SELECT coalesce(json_agg({column}), '[]') FROM {}",
                d.quote_ident(CALL_ROWS)
            ));
            Ok(step(Step::Value(sql), CallAnswer::Values))
        }
        Returns::Rows { set, table } => rows(request, cx, table, &prelude(call), *set),
    }
}

/// The last element of an array's compact text (a repeated name's last value), `null` for
/// none; read as the text is parsed, one element at a time.
fn last_element(text: &str) -> Member {
    struct Last;
    impl<'de> serde::de::Visitor<'de> for Last {
        type Value = Option<Member>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Option<Member>, A::Error> {
            let mut last = None;
            while let Some(member) = seq.next_element_seed(MemberSeed)? {
                last = Some(member);
            }
            Ok(last)
        }
    }
    let mut json = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_seq(&mut json, Last)
        .ok()
        .flatten()
        .unwrap_or(Member::Scalar(Json::Null))
}

/// A custom resource's call: its statements with the arguments bound; a `rows` answer of a
/// resource that only reads is read as a table's (filters, order, `select`, counts).
fn plan_resource(
    r: &Resource,
    request: &ApiRequest<'_>,
    arguments: Arguments,
    cx: &Context<'_>,
) -> Result<PlannedCall, ApiError> {
    let Arguments::Named(map) = arguments else {
        return Err(ApiError::internal(
            "a resource function takes named arguments",
        ));
    };
    let values = serve::bind(r, &[], None, &map, cx.principal)?;
    // (its values are in `values` now: a large argument is not kept twice)
    drop(map);
    let name = r.function.as_deref().unwrap_or_default();
    match r.shape {
        Shape::Rows | Shape::Row if !r.writes => {
            let mut statements = r.bound(values);
            let last = statements.pop().unwrap_or_default();
            let table = Table::new(
                name.to_string(),
                true,
                r.columns.clone(),
                Vec::new(),
                Vec::new(),
            );
            let mut planned = rows(request, cx, &table, &prelude(last), r.shape == Shape::Rows)?;
            let before = statements.into_iter().map(Step::Execute);
            planned.job.steps.splice(0..0, before);
            Ok(planned)
        }
        shape => {
            no_modifiers(request, name)?;
            let answer = match shape {
                Shape::None => CallAnswer::Void,
                Shape::Value => CallAnswer::Value,
                Shape::Row => CallAnswer::Object,
                _ => CallAnswer::Array,
            };
            Ok(PlannedCall {
                job: serve::job(r, values),
                answer,
            })
        }
    }
}

/// `WITH "_rpc" AS (call) `: the call's rows named for the read over them.
fn prelude(call: Sql) -> Sql {
    Sql {
        text: format!("WITH \"{CALL_ROWS}\" AS ({}) ", call.text),
        params: call.params,
    }
}

/// The read of a call's rows (`from` names them): an array when `set`, else one object.
fn rows(
    request: &ApiRequest<'_>,
    cx: &Context<'_>,
    table: &Table,
    from: &Sql,
    set: bool,
) -> Result<PlannedCall, ApiError> {
    let planned = action_plan::call_read(request, cx, table, from)?;
    Ok(PlannedCall {
        job: planned.job,
        answer: if set {
            CallAnswer::Rows(planned.answer)
        } else {
            CallAnswer::Object
        },
    })
}

/// A one-step read job.
fn step(step: Step, answer: CallAnswer) -> PlannedCall {
    PlannedCall {
        job: Job::new(Access::Read, vec![step]),
        answer,
    }
}
