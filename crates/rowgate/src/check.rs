//! What `config check` finds in a configuration, against the database's schema when there is
//! one: warnings (no grants, resources no role may call) and errors (grants naming what does not
//! exist, realtime tables or duality views that do not compile). The command prints them; the
//! console shows them for the running server.

use serde::Serialize;

use crate::config::Config;
use crate::resources::Resources;
use crate::schema::SchemaCache;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The server runs, but likely not as meant.
    Warning,
    /// `config check` fails.
    Error,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// What it is, and what to do.
    pub text: String,
}

/// The warning for a configuration without any grant: default deny then refuses every table
/// (the first thing a new user meets on their own database). With database roles the
/// database's privileges decide, and no grant is needed.
pub fn no_grants_warning(config: &Config) -> Option<&'static str> {
    (config.grants.is_empty() && !config.auth.database_roles).then_some(
        "no [[grants]] in the configuration: nothing is reachable, every table answers 401/403. \
         Grant roles access in rowgate.toml (README, Security), e.g. \
         [[grants]] role = \"anon\" tables = [\"*\"] ops = [\"select\"]",
    )
}

/// Everything `config check` finds in `config` with its compiled `resources`, against
/// `schema` when the database is there (the grants, realtime tables and duality views are
/// checked only then).
pub fn findings(
    config: &Config,
    resources: &Resources,
    schema: Option<&SchemaCache>,
) -> anyhow::Result<Vec<Finding>> {
    let warning = |text: String| Finding {
        severity: Severity::Warning,
        text,
    };
    let error = |text: String| Finding {
        severity: Severity::Error,
        text,
    };
    let mut found = Vec::new();
    found.extend(no_grants_warning(config).map(|w| warning(w.to_string())));
    found.extend(resources.unreachable_warning().map(warning));
    if let Some(schema) = schema {
        let policy = crate::auth::policy::Policy::compile(&config.grants)?;
        found.extend(
            policy
                .problems(schema)
                .into_iter()
                .map(|p| error(format!("grants: {p}"))),
        );
        if let Err(e) = crate::realtime::check(&config.realtime, schema) {
            found.push(error(format!("{e:#}")));
        }
        if let Err(e) = crate::duality::compile(&config.duality_views, schema) {
            found.push(error(format!("{e:#}")));
        }
    }
    Ok(found)
}
