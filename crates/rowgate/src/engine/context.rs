//! What the plan stage reads besides the request: the schema (the request's profile of it),
//! the grants, who asks, the dialect, and the settings plans obey. Made by
//! [`super::Engine::context`] for each attempt at a request, borrowed from the engine and the
//! schema cache of that attempt.

use std::collections::BTreeMap;

use rowgate_query::render::Dialect;

use crate::auth::policy::Policy;
use crate::auth::Principal;
use crate::config::{LimitsConfig, RestConfig};
use crate::duality::DualityViews;
use crate::schema::SchemaCache;

/// What the plan stage needs besides the request.
pub struct Context<'a> {
    /// The schema cache.
    pub schema: &'a SchemaCache,
    /// The grants.
    pub policy: &'a Policy,
    /// Who asks.
    pub principal: &'a Principal,
    /// The database's dialect.
    pub dialect: &'a dyn Dialect,
    /// `[rest]` settings.
    pub rest: &'a RestConfig,
    /// `[limits]` settings.
    pub limits: &'a LimitsConfig,
    /// The duality views, served like tables.
    pub duality: &'a DualityViews,
    /// `db.settings`: a function call's transaction starts with them.
    pub app_settings: &'a BTreeMap<String, String>,
    /// `db.pre_request`'s call, which every API request's transaction makes after its
    /// settings.
    pub pre_request: Option<&'a str>,
}

impl Context<'_> {
    /// Whether the principal may call the database function `name` (a computed column or
    /// relationship is one).
    pub fn may_call(&self, name: &str) -> bool {
        self.policy
            .authorize(
                self.principal,
                crate::auth::policy::Subject::Function { name },
            )
            .is_ok()
    }
}
