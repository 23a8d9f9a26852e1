//! Functions as RPC, PostgREST's `/{prefix}/rpc/{name}`, as a chain of stages: `parse`
//! ([`CallRequest`]: the arguments from the JSON body or the query string, the rest of the query
//! string as filters, order, limits and `select`) → `resolve` ([`call::Callee`]: the function
//! the name and the argument names pick, a PostgreSQL function from the schema cache or a custom
//! resource declared with `function = …`; 404 `PGRST202` otherwise) → `authorize` (a grant's
//! `functions`, or the resource's `roles`) → `plan` ([`call::plan`]: one job, and how its
//! outcome answers) → `db` → `respond`.
//!
//! What answers: a scalar as its JSON value, `void` as 204, one row as an object, a set of rows
//! as an array that filters, orders, pages, counts and embeds as a table's rows do.

pub mod call;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use bytes::Bytes;
use http::{request::Parts, Method};

use crate::api::explain::PlanRequest;
use serde_json::Value as Json;

use crate::api::request::{self, ApiRequest, ItemRange, MediaType, Prefer, RequestBody};
use crate::app::App;
use crate::auth::Principal;
use crate::engine::body::{self, Member, Members, Shape, Wanted};
use crate::engine::timing::Timing;
use crate::engine::{Executed, Planned, Planning};
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;

/// The query-string keys that are never arguments (they shape the result), as PostgREST
/// reserves them: these, and those ending in [`RESERVED_EMBEDDABLE`] (`tasks.order`).
const RESERVED: &[&str] = &["select", "columns", "on_conflict"];

/// The last words of keys that shape the result or an embedded resource's.
const RESERVED_EMBEDDABLE: &[&str] = &["order", "limit", "offset", "and", "or"];

/// Whether the query-string pair `key=value` of a GET call is an argument, as PostgREST reads
/// it: a key that is not reserved, with a value that is not a filter (`id=5` is an argument,
/// `id=gt.2` a filter of the rows the function returns).
fn is_argument(key: &str, value: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    !RESERVED.contains(&key)
        && !RESERVED_EMBEDDABLE.contains(&last)
        && rowgate_query::parse::parse_query([(key, value)]).is_err()
}

/// The most arguments a call names: a PostgreSQL function takes at most 100 (`FUNC_MAX_ARGS`),
/// so a call naming more fits none. Only that many names of a body are kept (a form of a
/// million names would be a million of them), with a note that there were more.
pub const MAX_ARGUMENTS: usize = 100;

/// Name-value pairs as named arguments: a repeated name gives an array of its values (a
/// `VARIADIC` parameter's), as PostgREST reads a query string or a form. The array is kept as
/// its JSON text, written as the values come (not a string and its allocation per value).
fn merged<K: AsRef<str>, V: AsRef<str>>(pairs: impl Iterator<Item = (K, V)>) -> Members {
    let mut values = Members::new();
    for (k, v) in pairs {
        let v = v.as_ref();
        match values.get_mut(k.as_ref()) {
            None => {
                values.insert(
                    k.as_ref().to_string(),
                    Member::Scalar(Json::String(v.to_string())),
                );
            }
            Some(member) => {
                // `[` and the values so far, the closing `]` dropped while more may come
                let mut text = match std::mem::replace(member, Member::Scalar(Json::Null)) {
                    Member::Scalar(first) => format!("[{first}"),
                    Member::Nested(mut text) => {
                        text.pop();
                        text
                    }
                };
                text.push(',');
                text.push_str(&Json::from(v).to_string());
                text.push(']');
                *member = Member::Nested(text);
            }
        }
    }
    values
}

/// The arguments of a call, as sent.
#[derive(Debug)]
pub enum Arguments {
    /// By name: the body's object (POST) or the query string's pairs that name parameters
    /// (GET, as strings; a repeated name gives an array), a nested value as its compact text.
    Named(Members),
    /// The whole body, to a function of one unnamed parameter (`json`, `jsonb`, `text`,
    /// `bytea`, `xml`) or, with `Prefer: params=single-object`, of one JSON parameter.
    Whole(Bytes),
}

/// A call parsed once: the function's name, the method, what the query string holds, the
/// body, the preferences and what the head asks of the answer. It holds no HTTP type: what the
/// plan stage reads of the head is read here, its refusals kept for the stage that raises them
/// (after the function is found, as PostgREST orders them).
pub struct CallRequest<'a> {
    /// The function's name, as the URL gives it.
    pub name: &'a str,
    /// GET (read-only) or POST.
    pub read_only: bool,
    /// The query string's pairs, decoded.
    pub pairs: Vec<(String, String)>,
    /// The body (POST).
    pub body: Bytes,
    /// `Prefer`.
    pub prefer: Prefer,
    /// The method, as sent (`GET`, `HEAD`, `POST`).
    pub method: &'a str,
    /// The body's `Content-Type`, as sent.
    pub content_type: Option<&'a str>,
    /// `Accept`, as sent.
    pub accept: Option<&'a str>,
    /// The rows asked for by `Range` (a GET's).
    pub range: Result<Option<ItemRange>, ApiError>,
    /// An execution plan asked for by `Accept` instead of the answer, where allowed.
    pub explain: Result<Option<PlanRequest>, ApiError>,
    /// `If-None-Match`'s values.
    pub if_none_match: Vec<&'a str>,
    /// The body's arguments, read once (see [`CallRequest::body_arguments`]).
    pub read: std::sync::OnceLock<Result<BodyArguments, ApiError>>,
}

/// A POST's body as arguments, read once without building a tree of it.
#[derive(Debug, Clone)]
pub struct BodyArguments {
    /// The named arguments (under `columns=`, those it names); `None` for JSON of another
    /// shape than an object or rows.
    named: Option<Members>,
    /// Whether the body is JSON that names no arguments (a scalar, an array that is not rows):
    /// it can only be a whole argument.
    whole: bool,
    /// Whether it names more than [`MAX_ARGUMENTS`] arguments (those beyond are not kept): no
    /// function takes them.
    more: bool,
}

impl<'a> CallRequest<'a> {
    /// The names of the arguments the call gives: the body object's keys, or the query
    /// string's keys whose pairs are arguments ([`is_argument`]), each once.
    fn given_names(&self) -> Result<Vec<String>, ApiError> {
        if self.raw_body_type().is_some() {
            return Ok(Vec::new());
        }
        if self.read_only {
            let mut names: Vec<String> = Vec::new();
            for (k, _) in self.argument_pairs() {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
            return Ok(names);
        }
        Ok(self
            .body_arguments()?
            .named
            .as_ref()
            .map(|map| map.keys().cloned().collect())
            .unwrap_or_default())
    }

    /// The named arguments of a POST's body, as PostgREST reads them: a JSON object, the first
    /// of a JSON array of objects (or of CSV's rows), a form's pairs (a repeated name gives an
    /// array); of these only the keys `columns=` names, when it names some. `None` for JSON
    /// of another shape. The body is read once, as it is parsed: a nested value is kept as its
    /// compact text ([`crate::engine::compact`]), not as a tree of `serde_json::Value`s (30 bytes
    /// and an allocation per element).
    fn body_arguments(&self) -> Result<&BodyArguments, ApiError> {
        self.read
            .get_or_init(|| self.read_body_arguments())
            .as_ref()
            .map_err(Clone::clone)
    }

    fn read_body_arguments(&self) -> Result<BodyArguments, ApiError> {
        let columns = match self.pairs.iter().find(|(k, _)| k == "columns") {
            Some((_, columns)) => Some(rowgate_query::parse::parse_columns(columns)?),
            None => None,
        };
        // the first MAX_ARGUMENTS names are kept; one more says there are too many
        let kept: RefCell<BTreeSet<String>> = RefCell::default();
        let more = Cell::new(false);
        let wanted = |key: &str| match &columns {
            Some(columns) if !columns.iter().any(|c| c == key) => Wanted::Ignored,
            _ => {
                let mut kept = kept.borrow_mut();
                if kept.contains(key) {
                    Wanted::Kept
                } else if kept.len() < MAX_ARGUMENTS {
                    kept.insert(key.to_string());
                    Wanted::Kept
                } else {
                    more.set(true);
                    Wanted::Ignored
                }
            }
        };
        let form = self.body_is(&["application/x-www-form-urlencoded"])
            && !matches!(self.body.trim_ascii_start().first(), Some(b'{' | b'['));
        let (named, whole) = if form {
            let pairs = request::form_pairs(&self.body)?.filter(|(k, _)| wanted(k) == Wanted::Kept);
            (Some(merged(pairs)), false)
        } else if self.body.iter().all(u8::is_ascii_whitespace) {
            (Some(Members::new()), false)
        } else {
            match body::read_one_object(self.content_type, &self.body, &wanted)? {
                Shape::Object(members) => (Some(members), false),
                Shape::Array {
                    first: Some(Some(first)),
                    all_objects: true,
                    ..
                } => (Some(first), false),
                Shape::Array { .. } | Shape::Other => (None, true),
            }
        };
        Ok(BodyArguments {
            named,
            whole,
            more: more.get(),
        })
    }

    /// Whether a POST's body names more arguments than a function takes ([`MAX_ARGUMENTS`]).
    pub fn names_too_many(&self) -> Result<bool, ApiError> {
        if self.read_only || self.raw_body_type().is_some() {
            return Ok(false);
        }
        Ok(self.body_arguments()?.more)
    }

    /// Whether the body is JSON that names no arguments (a scalar, an array that is not rows).
    fn body_is_not_named(&self) -> Result<bool, ApiError> {
        Ok(self.body_arguments()?.whole)
    }

    /// A GET's query-string pairs that are arguments.
    fn argument_pairs(&self) -> impl Iterator<Item = &(String, String)> {
        self.pairs
            .iter()
            .filter(|(k, v)| self.read_only && is_argument(k, v))
    }

    /// Whether the body's `Content-Type` is one of `media` (absent counts as JSON).
    pub fn body_is(&self, media: &[&str]) -> bool {
        let sent = self.content_type.map_or("application/json", |t| {
            t.split(';').next().unwrap_or("").trim()
        });
        media.iter().any(|m| sent.eq_ignore_ascii_case(m))
    }

    /// For a POST whose body is text (`text/plain`), XML (`text/xml`) or bytes
    /// (`application/octet-stream`): the type of the one unnamed parameter the body is given
    /// to as it is, as PostgREST calls it.
    pub fn raw_body_type(&self) -> Option<&'static str> {
        if self.read_only {
            return None;
        }
        let media = self.content_type?.split(';').next()?.trim();
        if media.eq_ignore_ascii_case("text/plain") {
            Some("text")
        } else if media.eq_ignore_ascii_case("text/xml") {
            Some("xml")
        } else if media.eq_ignore_ascii_case("application/octet-stream") {
            Some("bytea")
        } else {
            None
        }
    }

    /// The arguments for `params` (the callee's parameter names): by name, or the whole body.
    fn arguments(&self, whole: bool, params: &[&str]) -> Result<Arguments, ApiError> {
        if whole {
            return Ok(Arguments::Whole(self.body.clone()));
        }
        if self.read_only {
            let given = self
                .argument_pairs()
                .filter(|(k, _)| params.contains(&k.as_str()))
                .map(|(k, v)| (k.as_str(), v.as_str()));
            return Ok(Arguments::Named(merged(given)));
        }
        match &self.body_arguments()?.named {
            Some(map) => Ok(Arguments::Named(
                map.iter()
                    .filter(|(k, _)| params.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )),
            None => Err(ApiError::new(
                ErrorCode::InvalidBody,
                "the arguments must be a JSON object",
            )
            .hint("send {\"name\": value, …}, or Prefer: params=single-object to pass the body as one JSON argument")),
        }
    }

    /// The query string without the arguments: what shapes the result.
    fn modifiers(&self, params: &[&str]) -> Result<rowgate_query::Query, ApiError> {
        let rest: Vec<(&str, &str)> = self
            .pairs
            .iter()
            .filter(|(k, v)| !(self.read_only && is_argument(k, v) && params.contains(&k.as_str())))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Ok(rowgate_query::parse::parse_query(rest)?)
    }
}

/// Serves `POST|GET /{prefix}/rpc/{name}` for `principal`.
pub async fn handle(
    app: &App,
    parts: &Parts,
    body: impl RequestBody,
    name: &str,
    principal: &Principal,
    timing: &mut Timing,
) -> Result<Reply, ApiError> {
    let read_only = match parts.method {
        Method::GET | Method::HEAD => true,
        Method::POST => false,
        _ => {
            // PostgREST's words, with the methods that do call it
            let method = &parts.method;
            return Err(ApiError {
                allow: Some("GET, HEAD, POST".into()),
                ..ApiError::new(
                    ErrorCode::RpcMethod,
                    format!("Cannot use the {method} method on RPC"),
                )
            });
        }
    };
    let body = if read_only {
        Bytes::new()
    } else {
        app.read_body(parts, body).await?.bytes
    };
    let accept = request::accept(&parts.headers);
    let pairs = request::form_pairs(parts.uri.query().unwrap_or("").as_bytes())?
        .into_iter()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let call = CallRequest {
        name,
        read_only,
        pairs,
        body,
        prefer: {
            let mut prefer = Prefer::parse(&parts.headers)?;
            prefer.settle_tx(app.config.rest.tx_end);
            prefer
        },
        method: parts.method.as_str(),
        content_type: request::content_type(&parts.headers),
        accept,
        range: request::parse_range(&parts.method, &parts.headers),
        explain: crate::api::explain::allowed(app.config.rest.plan, accept, app.db.dialect()),
        if_none_match: request::if_none_match_values(&parts.headers),
        read: std::sync::OnceLock::new(),
    };
    timing.mark("parse");
    let resources = app.resources.load_full();
    let engine = app.engine();
    let request = request::engine_request(parts, principal);
    let executed = engine
        .execute(
            &request,
            |planning, _| plan_call(app, &call, &resources, planning),
            timing,
        )
        .await?;
    let Executed {
        answer:
            CallPlan {
                request: api_request,
                answer,
                raw,
                raw_bytes,
                explained,
            },
        mut outcome,
        profile,
        ..
    } = executed;
    if let Some(content_type) = explained {
        let answer = crate::api::respond::Answer::Plan { content_type };
        return crate::api::respond::answer(&api_request, answer, outcome);
    }
    let response = std::mem::take(&mut outcome.response);
    let reply = answer
        .respond(&api_request, outcome)
        .and_then(|r| match raw {
            Some(media) => r.raw_of(&media, raw_bytes),
            None => Ok(r),
        })
        // after the raw value's own type: a function may set the answer's Content-Type
        .and_then(|r| r.with_settings(&response))
        .map(|r| r.nulls_stripped_if(&api_request).profile(profile));
    timing.mark("response");
    reply
}

/// What a call's plan answers with.
struct CallPlan<'c> {
    /// The call as the respond stage reads it (media type, preferences, range).
    request: ApiRequest<'c>,
    /// How the outcome answers.
    answer: call::CallAnswer,
    /// A media type of the function's domain that `Accept` asks for: the value answered raw.
    raw: Option<String>,
    /// Whether the function returns bytes.
    raw_bytes: bool,
    /// An execution plan asked for instead of the answer: its `Content-Type`.
    explained: Option<String>,
}

/// The `plan` stage of a call: the function the name and arguments pick (404 `PGRST202`,
/// 300 `PGRST203`), authorized, its arguments and the query string's modifiers, one job.
fn plan_call<'c>(
    app: &App,
    call: &'c CallRequest<'c>,
    resources: &crate::resources::Resources,
    planning: &Planning<'_>,
) -> Result<Planned<CallPlan<'c>>, ApiError> {
    let cx = &planning.cx;
    let (name, principal) = (call.name, cx.principal);
    let callee = match call::resolve(call, cx.schema, resources) {
        Ok(callee) => callee,
        // the candidates' signatures are for roles that may call the function
        Err(e) if e.code == ErrorCode::AmbiguousFunction => {
            let subject = crate::auth::policy::Subject::Function { name };
            cx.policy.authorize(principal, subject)?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    cx.policy.authorize(principal, callee.subject())?;
    let params = callee.param_names();
    let arguments = call.arguments(callee.takes_whole_body(call), &params)?;
    let modifiers = call.modifiers(&params)?;
    request::check_limits(&modifiers.filters, &app.config.limits)?;
    let offered = [MediaType::Json, MediaType::SingleObject, MediaType::Csv];
    // a value of a media type's domain (or xml, bytea), asked for by Accept: answered raw
    let raw = callee
        .raw_media()
        .filter(|m| request::prefers(call.accept, m));
    let raw_bytes = callee.returns_bytes();
    // an execution plan of the call instead of its answer (PostgreSQL, `rest.plan`)
    let explain = call.explain.clone()?;
    let (media, nulls_stripped) = match raw {
        _ if explain.is_some() => (MediaType::Json, false),
        Some(_) => (MediaType::Json, false),
        None => request::negotiation(call.accept, &offered)?,
    };
    let mut api_request = ApiRequest {
        action: request::Action::Read { key: None },
        table: name,
        query: modifiers,
        prefer: call.prefer.clone(),
        media,
        nulls_stripped,
        range: call.range.clone()?,
        method: call.method,
        content_type: call.content_type,
        if_match: None,
        if_none_match: call.if_none_match.clone(),
        body: Bytes::new(),
    };
    let mut planned = call::plan(&callee, call, &api_request, arguments, cx)?;
    let settings = api_request.prefer.settings(cx.dialect);
    if api_request.nulls_stripped {
        planned.job.strip_nulls();
    }
    let explained = match &explain {
        Some(asked) => crate::api::explain::apply(asked, &mut planned.job),
        None => None,
    };
    // a database function reads the request (`request.jwt.claims`, …) and `db.settings`, and
    // may set the answer's headers and status (PostgREST's settings)
    let function = matches!(callee, call::Callee::Function(_));
    Ok(Planned {
        job: planned.job,
        answer: CallPlan {
            request: api_request,
            answer: planned.answer,
            raw,
            raw_bytes,
            explained,
        },
        settings,
        reads_request: function,
        sets_response: function,
        again: true,
        client_sql: false,
    })
}
