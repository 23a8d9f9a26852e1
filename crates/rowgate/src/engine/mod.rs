//! The one place a request meets the database. A front end (PostgREST's `/api`, RPC, ORDS, its
//! batch load) parses its request, then hands [`Engine::execute`] who asks, what the database
//! may be told about the request ([`facts::RequestFacts`]), which schema profile it names, and
//! its plan stage; the engine does, in this order and nowhere else:
//!
//! 1. `plan`: takes the schema cache as it stands, the request's profile of it, and the plan
//!    stage's job (authorization is the plan's: the grants guard every statement it renders);
//! 2. opens the transaction with its settings ([`transaction::start`]: with database roles the
//!    request's role first, then the profile's search path, the plan's own, the request's
//!    `request.*` and `db.settings` where the database may read them) and `db.pre_request`'s
//!    call, and asks for the response settings a function may have written;
//! 3. `transaction`: runs the job;
//! 4. after a schema change the plan did not know (a table or column the cache still listed
//!    is gone, `PGRST002`), reloads the schema, and plans and runs once more; still missing
//!    with a current cache, the name is the request's own and the database's error answers.
//!
//! It hands back the plan's answer and the typed outcome; each front end writes them in its own
//! envelope. Each stage is timed under its name ([`timing::Timing`], for `Server-Timing`). The
//! engine knows no HTTP type and no front end.

pub mod action_plan;
pub mod answer;
pub mod body;
pub mod compact;
pub mod context;
pub mod document_body;
pub mod document_write;
pub mod embed;
pub mod facts;
pub mod guard;
pub mod plan;
pub mod request;
pub mod rows;
pub mod timing;
pub mod transaction;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use context::Context;

use crate::auth::policy::Policy;
use crate::auth::Principal;
use crate::config::{LimitsConfig, RestConfig};
use crate::db::Database;
use crate::duality::DualityViews;
use crate::error::{ApiError, ErrorCode};
use crate::job::{Job, Output, Step};
use crate::schema::SchemaCache;
use facts::RequestFacts;
use timing::Timing;

/// The database and what every plan reads, borrowed from the server's state for one request.
pub struct Engine<'a> {
    /// The database.
    pub db: &'a Database,
    /// The grants.
    pub policy: &'a Policy,
    /// `[rest]`.
    pub rest: &'a RestConfig,
    /// `[limits]`.
    pub limits: &'a LimitsConfig,
    /// The duality views.
    pub duality: &'a DualityViews,
    /// `db.settings`.
    pub app_settings: &'a BTreeMap<String, String>,
    /// `db.pre_request`'s call.
    pub pre_request: Option<&'a str>,
    /// `db.extra_search_path`, after a profile's schema.
    pub extra_search_path: &'a str,
    /// `auth.anon_role`: a privilege it lacks is a login's to give (401), as PostgREST has it.
    pub anon_role: &'a str,
}

/// One request as the engine takes it.
pub struct Request<'r> {
    /// Who asks.
    pub principal: &'r Principal,
    /// What the database may be told about it (`request.*`).
    pub facts: &'r dyn RequestFacts,
    /// The schema profile it names (PostgREST's `Accept-Profile`/`Content-Profile`), if any.
    pub profile: Option<&'r str>,
}

/// What a plan stage sees at one attempt.
pub struct Planning<'s> {
    /// The plan's context: the request's profile of the schema, the grants, who asks.
    pub cx: Context<'s>,
    /// The whole schema cache (every profile).
    pub cache: &'s SchemaCache,
}

/// A plan stage's work: the job to run and how its outcome answers.
pub struct Planned<A> {
    /// The statements.
    pub job: Job,
    /// How the outcome answers: the front end's own, handed back with the outcome.
    pub answer: A,
    /// Settings the plan asks of the transaction (`Prefer: timezone=`, …).
    pub settings: Vec<(&'static str, String)>,
    /// Whether the database may read the request's settings: a function is called, or a write
    /// fires triggers (PostgreSQL).
    pub reads_request: bool,
    /// Whether a function may write the answer's headers and status (`response.headers`,
    /// `response.status`): asked for after the job (and always with `db.pre_request`).
    pub sets_response: bool,
    /// Whether the request can be planned again after a schema change (a large body is not
    /// kept for a second plan: such a request answers 503 `PGRST002`, to be retried).
    pub again: bool,
    /// Whether the job's SQL is the client's own (REST-enabled SQL): what is wrong with it is
    /// the client's mistake ([`ApiError::of_client_sql`]), a name it gives that is missing
    /// included, so it is not run again after a reload.
    pub client_sql: bool,
}

impl<A> Planned<A> {
    /// A plan of `job`, answered by `answer`, with no settings of its own, that reads nothing
    /// of the request and may be planned again.
    pub fn new(job: Job, answer: A) -> Planned<A> {
        Planned {
            job,
            answer,
            settings: Vec::new(),
            reads_request: false,
            sets_response: false,
            again: true,
            client_sql: false,
        }
    }
}

/// A request executed: the plan's answer, the outcome, and the schema it was planned on.
pub struct Executed<A> {
    /// The plan's answer.
    pub answer: A,
    /// What the database did and returned.
    pub outcome: Output,
    /// The schema cache it was planned on.
    pub cache: Arc<SchemaCache>,
    /// The profile it was answered from, where there are several (for `Content-Profile`).
    pub profile: Option<String>,
}

impl<'a> Engine<'a> {
    /// The plan context for `principal` over `schema`.
    pub fn context<'s>(&self, schema: &'s SchemaCache, principal: &'s Principal) -> Context<'s>
    where
        'a: 's,
    {
        Context {
            schema,
            policy: self.policy,
            principal,
            dialect: self.db.dialect(),
            rest: self.rest,
            limits: self.limits,
            duality: self.duality,
            app_settings: self.app_settings,
            pre_request: self.pre_request,
        }
    }

    /// A database error as answered when requests run as their role (database roles:
    /// [`transaction::role_error`]); as it is otherwise.
    fn as_role(&self, e: ApiError, principal: &Principal) -> ApiError {
        if self.policy.defers_to_database() {
            transaction::role_error(e, principal.anonymous || principal.role == self.anon_role)
        } else {
            e
        }
    }

    /// [`Engine::execute`] for a front end that names no schema profile and times no stages
    /// (ORDS, its batch load and REST-enabled SQL, custom resources).
    pub async fn execute_plain<A>(
        &self,
        principal: &Principal,
        facts: &dyn RequestFacts,
        plan: impl FnMut(&Planning<'_>, &mut Timing) -> Result<Planned<A>, ApiError>,
    ) -> Result<Executed<A>, ApiError> {
        let request = Request {
            principal,
            facts,
            profile: None,
        };
        self.execute(&request, plan, &mut Timing::start(false))
            .await
    }

    /// Plans `request` with `plan` and runs it (see the module's description); `plan` is
    /// called again after a schema change, on the reloaded schema.
    pub async fn execute<A>(
        &self,
        request: &Request<'_>,
        mut plan: impl FnMut(&Planning<'_>, &mut Timing) -> Result<Planned<A>, ApiError>,
        timing: &mut Timing,
    ) -> Result<Executed<A>, ApiError> {
        let mut first: Option<ApiError> = None;
        loop {
            let cache = self.db.schema();
            let (job, answer, profile) = {
                let schema = cache.profile(request.profile)?;
                let (mut settings, profile) =
                    transaction::profile_settings(&cache, schema, self.extra_search_path);
                let planning = Planning {
                    cx: self.context(schema, request.principal),
                    cache: &cache,
                };
                let planned = plan(&planning, timing)?;
                let Planned {
                    mut job,
                    answer,
                    settings: own,
                    reads_request,
                    sets_response,
                    again,
                    client_sql,
                } = planned;
                settings.extend(own);
                transaction::start(
                    &planning.cx,
                    request.facts,
                    settings,
                    reads_request,
                    &mut job.steps,
                );
                if sets_response || self.pre_request.is_some() {
                    job.steps.push(Step::ResponseSettings);
                }
                timing.mark("plan");
                (job, (answer, again, client_sql), profile)
            };
            let (answer, again, client_sql) = answer;
            match self.db.run(job).await {
                Ok(outcome) => {
                    timing.mark("transaction");
                    return Ok(Executed {
                        answer,
                        outcome,
                        cache,
                        profile,
                    });
                }
                Err(e) if client_sql => {
                    return Err(self.as_role(ApiError::of_client_sql(e), request.principal))
                }
                Err(e) => {
                    let mut e = self.as_role(ApiError::from(e), request.principal);
                    if e.code != ErrorCode::SchemaChanged {
                        return Err(e);
                    }
                    if let Some(first) = first {
                        // still missing with a current cache: the name is the request's own
                        // (or a function's it called), not a stale plan's
                        return Err(e.take_if_current().unwrap_or(first));
                    }
                    self.db.reload_schema().await?;
                    if !again {
                        return Err(e);
                    }
                    first = Some(e);
                }
            }
        }
    }
}
