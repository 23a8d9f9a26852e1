//! Roles and grants: what each role may do with each table, compiled from `[[grants]]`. Nothing
//! is granted unless the configuration says so. A grant names operations (`select`, `insert`,
//! `update`, `delete`), optionally the columns the role may read (and so filter and order by) and
//! write, and optionally a row filter in the REST filter syntax whose values may be token claims
//! (`owner=eq.@sub`). A grant for `*` covers every table without a grant of its own.
//!
//! Refusals: the anonymous role gets 401 (`RG401`, a token might help), other roles 403 (`42501`).
//! A table the role has no grant on at all is refused the same way (its existence is not hidden:
//! the names of tables are not secret in this design, their rows are).
//!
//! With `auth.database_roles` (PostgreSQL; [`Policy::deferring_to_database`]) each request runs
//! as its role in the database, whose GRANTs and row-level security decide: a role with no
//! `[[grants]]` of its own is granted everything here, and a role with grants is narrowed by
//! them as well (both must allow).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use anyhow::bail;
use rowgate_query::{Condition, Operand};
use serde_json::{Map, Value as Json};

use super::Principal;
use crate::config::GrantConfig;
use crate::error::{ApiError, ErrorCode};
use crate::schema::{SchemaCache, Table};

/// An operation on a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// GET, HEAD.
    Select,
    /// POST (and the insert half of an upsert or PUT).
    Insert,
    /// PATCH (and the update half of an upsert or PUT).
    Update,
    /// DELETE.
    Delete,
}

impl Op {
    /// The SQL command it is.
    pub fn verb(self) -> &'static str {
        match self {
            Op::Select => "SELECT",
            Op::Insert => "INSERT",
            Op::Update => "UPDATE",
            Op::Delete => "DELETE",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        Some(match s.to_ascii_lowercase().as_str() {
            "select" => Op::Select,
            "insert" => Op::Insert,
            "update" => Op::Update,
            "delete" => Op::Delete,
            _ => return None,
        })
    }

    /// The operation's name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Op::Select => "select",
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// What one role may do with one table.
#[derive(Debug, Clone)]
pub struct Grant {
    ops: HashSet<Op>,
    read: Option<HashSet<String>>,
    write: Option<HashSet<String>>,
    filter: Vec<Condition>,
}

impl Grant {
    /// Whether the grant allows `op`.
    pub fn allows(&self, op: Op) -> bool {
        self.ops.contains(&op)
    }

    /// Whether the role may read (filter, order by) `column`.
    pub fn readable(&self, column: &str) -> bool {
        self.read.as_ref().is_none_or(|cols| cols.contains(column))
    }

    /// Whether the role may write `column`.
    pub fn writable(&self, column: &str) -> bool {
        self.write.as_ref().is_none_or(|cols| cols.contains(column))
    }

    /// Whether the grant has a row filter.
    pub fn has_filter(&self) -> bool {
        !self.filter.is_empty()
    }

    /// `table` as the role sees it: only the columns it may read.
    pub fn view<'a>(&self, table: &'a Table) -> Cow<'a, Table> {
        match &self.read {
            None => Cow::Borrowed(table),
            Some(cols) => Cow::Owned({
                let mut view = Table::new(
                    table.name.clone(),
                    table.is_view,
                    table
                        .columns
                        .iter()
                        .filter(|c| cols.contains(&c.name))
                        .cloned()
                        .collect(),
                    table.primary_key.clone(),
                    table.foreign_keys.clone(),
                );
                view.schema = table.schema.clone();
                view.sources = table.sources.clone();
                view.unique = table.unique.clone();
                view.writes = table.writes;
                view.computed = table.computed.clone();
                view.computed_rels = table.computed_rels.clone();
                view
            }),
        }
    }

    /// The row filter with the principal's claims in place of `@claim` values; a claim the
    /// token does not have refuses the request (a filter that cannot be stated cannot be met).
    pub fn row_filter(&self, principal: &Principal) -> Result<Vec<Condition>, ApiError> {
        self.filter
            .iter()
            .map(|c| substitute(c, &principal.claims))
            .collect::<Result<_, String>>()
            .map_err(|claim| {
                denied(principal).details(format!(
                    "the row filter needs the token claim {claim:?}, which it does not have"
                ))
            })
    }
}

/// Every role's grants.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    roles: HashMap<String, RoleGrants>,
    /// With database roles: the grants of a role that has none of its own (everything; the
    /// database decides).
    database: Option<RoleGrants>,
}

#[derive(Debug, Clone, Default)]
struct RoleGrants {
    tables: HashMap<String, Grant>,
    any: Option<Grant>,
    /// Functions the role may call (`*`: every one).
    functions: HashSet<String>,
}

impl Policy {
    /// Compiles `[[grants]]`: operations known, filters parsed, one grant per role and table.
    pub fn compile(grants: &[GrantConfig]) -> anyhow::Result<Policy> {
        let mut policy = Policy::default();
        for (i, g) in grants.iter().enumerate() {
            let at = format!("grants[{i}] (role {:?})", g.role);
            if g.role.trim().is_empty() {
                bail!("{at}: role is empty");
            }
            if g.tables.is_empty() && g.functions.is_empty() {
                bail!("{at}: names no tables and no functions");
            }
            if !g.tables.is_empty() && g.ops.is_empty() {
                bail!("{at}: ops is empty (select, insert, update, delete)");
            }
            let mut ops = HashSet::new();
            for op in &g.ops {
                let Some(parsed) = Op::parse(op) else {
                    bail!("{at}: unknown operation {op:?} (select, insert, update, delete)");
                };
                ops.insert(parsed);
            }
            let filter = match &g.filter {
                None => Vec::new(),
                Some(text) => {
                    parse_filter(text).map_err(|e| anyhow::anyhow!("{at}: filter: {e}"))?
                }
            };
            let grant = Grant {
                ops,
                read: g.read_columns.as_ref().map(|c| c.iter().cloned().collect()),
                write: g
                    .write_columns
                    .as_ref()
                    .map(|c| c.iter().cloned().collect()),
                filter,
            };
            let role = policy.roles.entry(g.role.clone()).or_default();
            role.functions.extend(g.functions.iter().cloned());
            for table in &g.tables {
                let slot = if table == "*" {
                    &mut role.any
                } else {
                    if role.tables.contains_key(table) {
                        bail!("{at}: table {table:?} is granted to this role twice");
                    }
                    role.tables.insert(table.clone(), grant.clone());
                    continue;
                };
                if slot.is_some() {
                    bail!("{at}: \"*\" is granted to this role twice");
                }
                *slot = Some(grant.clone());
            }
        }
        Ok(policy)
    }

    /// Problems of the grants against the schema: unknown tables and columns (logged at start
    /// and on schema reloads; `config check` reports them).
    pub fn problems(&self, schema: &SchemaCache) -> Vec<String> {
        let mut out = Vec::new();
        let mut roles: Vec<_> = self.roles.iter().collect();
        roles.sort_by(|a, b| a.0.cmp(b.0));
        for (role, grants) in roles {
            for (name, grant) in &grants.tables {
                let Some(table) = schema.table(name) else {
                    out.push(format!("role {role:?}: table {name:?} does not exist"));
                    continue;
                };
                let named = grant
                    .read
                    .iter()
                    .chain(grant.write.iter())
                    .flatten()
                    .chain(grant.filter.iter().flat_map(columns_of));
                for column in named {
                    if table.column(column).is_none() {
                        out.push(format!(
                            "role {role:?}, table {name:?}: column {column:?} does not exist"
                        ));
                    }
                }
            }
        }
        out
    }

    /// The policy with database roles (`auth.database_roles`): a role with no grants of its
    /// own may do whatever the database lets it.
    pub fn deferring_to_database(mut self) -> Policy {
        self.database = Some(RoleGrants {
            tables: HashMap::new(),
            any: Some(Grant {
                ops: [Op::Select, Op::Insert, Op::Update, Op::Delete]
                    .into_iter()
                    .collect(),
                read: None,
                write: None,
                filter: Vec::new(),
            }),
            functions: ["*".to_string()].into_iter().collect(),
        });
        self
    }

    /// Whether requests run as their role in the database, whose privileges and policies
    /// decide ([`Policy::deferring_to_database`]).
    pub fn defers_to_database(&self) -> bool {
        self.database.is_some()
    }

    /// The grants of `principal`'s role: its own, else (with database roles) everything.
    fn role_grants(&self, principal: &Principal) -> Option<&RoleGrants> {
        self.roles.get(&principal.role).or(self.database.as_ref())
    }

    /// The grant of `principal`'s role on `table`, if any.
    pub fn grant(&self, principal: &Principal, table: &str) -> Option<&Grant> {
        let role = self.role_grants(principal)?;
        role.tables.get(table).or(role.any.as_ref())
    }

    /// The grant of `principal`'s role on `table` as what describes the API shows it (the
    /// OpenAPI document, `OPTIONS`, the console): with database roles, narrowed to the
    /// operations and columns the database lets the role use (`schema`'s privileges), so that
    /// they show what the role may really do; the grant itself otherwise.
    pub fn described<'g>(
        &'g self,
        principal: &Principal,
        table: &str,
        schema: &SchemaCache,
    ) -> Option<Cow<'g, Grant>> {
        let grant = self.grant(principal, table)?;
        let Some(privileges) = schema
            .privileges
            .as_deref()
            .filter(|_| self.defers_to_database())
        else {
            return Some(Cow::Borrowed(grant));
        };
        let allowed = privileges.table(&principal.role, table)?;
        let [select, insert, update, delete] = allowed.ops;
        let narrowed = |ours: &Option<HashSet<String>>, theirs: &HashSet<String>| {
            Some(match ours {
                Some(ours) => ours.intersection(theirs).cloned().collect(),
                None => theirs.clone(),
            })
        };
        Some(Cow::Owned(Grant {
            ops: [
                (Op::Select, select),
                (Op::Insert, insert),
                (Op::Update, update),
                (Op::Delete, delete),
            ]
            .into_iter()
            .filter(|(op, allowed)| *allowed && grant.allows(*op))
            .map(|(op, _)| op)
            .collect(),
            read: narrowed(&grant.read, &allowed.read),
            write: narrowed(&grant.write, &allowed.write),
            filter: grant.filter.clone(),
        }))
    }

    /// Whether `principal`'s role may call the function `name` as what describes the API
    /// shows it: granted, and with database roles, `EXECUTE` too.
    pub fn described_call(&self, principal: &Principal, name: &str, schema: &SchemaCache) -> bool {
        self.may_call(principal, name)
            && schema
                .privileges
                .as_deref()
                .filter(|_| self.defers_to_database())
                .is_none_or(|p| p.may_call(&principal.role, name))
    }

    /// Whether `principal`'s role is granted the function `name` (the OpenAPI document lists
    /// only those).
    pub fn may_call(&self, principal: &Principal, name: &str) -> bool {
        self.role_grants(principal)
            .is_some_and(|r| r.functions.contains(name) || r.functions.contains("*"))
    }

    /// The one authorization decision, for every front end and route: may `principal` do
    /// what `subject` says? A table's operation needs the role's grant allowing it; a custom
    /// resource needs the role (or `*`) among the roles it declares. Nothing declared or
    /// granted is refused (401 anonymous, 403 otherwise).
    pub fn authorize(
        &self,
        principal: &Principal,
        subject: Subject<'_>,
    ) -> Result<Permit<'_>, ApiError> {
        match subject {
            Subject::Table { name, op } => match self.grant(principal, name) {
                Some(g) if g.allows(op) => Ok(Permit::Table(g)),
                _ => Err(denied(principal).details(format!(
                    "role {:?} may not {} {name:?}",
                    principal.role,
                    op.name()
                ))),
            },
            Subject::Function { name } => {
                if self.may_call(principal, name) {
                    Ok(Permit::Resource)
                } else {
                    Err(denied(principal).details(format!(
                        "role {:?} may not call the function {name:?}",
                        principal.role
                    )))
                }
            }
            Subject::Resource { path, roles } => match roles {
                Some(roles) if roles.iter().any(|r| r == "*" || *r == principal.role) => {
                    Ok(Permit::Resource)
                }
                Some(roles) => Err(denied(principal)
                    .details(format!("{path} is open to roles {}", roles.join(", ")))),
                None => Err(denied(principal).details(format!(
                    "{path} names no roles, so no one may call it (declare roles = [\"anon\"] or \"*\")"
                ))),
            },
        }
    }
}

/// What a principal asks to do: the question of [`Policy::authorize`].
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// An operation on a table or view (REST, realtime).
    Table {
        /// The table or view.
        name: &'a str,
        /// The operation.
        op: Op,
    },
    /// Calling a database function (RPC), open to the roles granted it.
    Function {
        /// The function's name.
        name: &'a str,
    },
    /// Calling a custom resource, open to the roles it declares (`None`: it declares none).
    Resource {
        /// Its path, for the refusal's details.
        path: &'a str,
        /// Its `roles`.
        roles: Option<&'a [String]>,
    },
}

/// What [`Policy::authorize`] allowed.
#[derive(Debug)]
pub enum Permit<'a> {
    /// The role's grant on the table (its columns and row filter apply).
    Table(&'a Grant),
    /// The resource or function may be called.
    Resource,
}

/// The refusal for `principal`: 401 for the anonymous role, 403 for others.
pub fn denied(principal: &Principal) -> ApiError {
    if principal.anonymous {
        ApiError::new(
            ErrorCode::LoginRequired,
            "permission denied: the anonymous role may not do this",
        )
        .hint("get a token at /oauth/token and send it as Authorization: Bearer …")
    } else {
        ApiError::new(
            ErrorCode::PermissionDenied,
            format!("permission denied for role {:?}", principal.role),
        )
    }
}

/// Parses a grant's row filter: `col=op.value` terms joined by `&` (logic trees allowed).
pub fn parse_filter(text: &str) -> anyhow::Result<Vec<Condition>> {
    let pairs: Vec<(&str, &str)> = text
        .split('&')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    let query = rowgate_query::parse::parse_query(pairs).map_err(|e| anyhow::anyhow!("{e}"))?;
    if query.select.is_some()
        || !query.order.is_empty()
        || query.limit.is_some()
        || query.offset.is_some()
        || query.columns.is_some()
        || query.on_conflict.is_some()
    {
        bail!("only filters are allowed (no select, order, limit, offset, columns, on_conflict)");
    }
    if query.filters.is_empty() {
        bail!("no filter");
    }
    Ok(query.filters)
}

/// The columns a filter names.
pub fn columns_of(c: &Condition) -> Vec<&String> {
    match c {
        Condition::Pred(p) => vec![&p.column],
        Condition::And { items, .. } | Condition::Or { items, .. } => {
            items.iter().flat_map(columns_of).collect()
        }
    }
}

/// `c` with every `@claim` value replaced by the claim's value; `Err(claim)` when missing.
fn substitute(c: &Condition, claims: &Map<String, Json>) -> Result<Condition, String> {
    let value = |v: &String| -> Result<String, String> {
        match v.strip_prefix('@') {
            None => Ok(v.clone()),
            Some(name) => match claims.get(name) {
                Some(Json::String(s)) => Ok(s.clone()),
                Some(Json::Number(n)) => Ok(n.to_string()),
                Some(Json::Bool(b)) => Ok(b.to_string()),
                _ => Err(name.to_string()),
            },
        }
    };
    Ok(match c {
        Condition::Pred(p) => {
            let operand = match &p.operand {
                Operand::Scalar(v) => Operand::Scalar(value(v)?),
                Operand::List(items) => {
                    Operand::List(items.iter().map(value).collect::<Result<_, _>>()?)
                }
                other => other.clone(),
            };
            Condition::Pred(rowgate_query::Predicate {
                operand,
                ..p.clone()
            })
        }
        Condition::And { negated, items } => Condition::And {
            negated: *negated,
            items: items
                .iter()
                .map(|i| substitute(i, claims))
                .collect::<Result<_, _>>()?,
        },
        Condition::Or { negated, items } => Condition::Or {
            negated: *negated,
            items: items
                .iter()
                .map(|i| substitute(i, claims))
                .collect::<Result<_, _>>()?,
        },
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::GrantConfig;

    fn principal(role: &str, anonymous: bool) -> Principal {
        Principal {
            role: role.into(),
            claims: Arc::new(serde_json::Map::new()),
            anonymous,
            standing: None,
        }
    }

    /// One decision for tables and resources: granted operations and declared roles pass;
    /// anything else is refused, 401 for the anonymous role and 403 for others.
    #[test]
    fn one_decision_for_tables_and_resources() {
        let policy = Policy::compile(&[GrantConfig {
            role: "reader".into(),
            tables: vec!["team".into()],
            ops: vec!["select".into()],
            read_columns: None,
            write_columns: None,
            filter: None,
            functions: Vec::new(),
        }])
        .expect("policy");
        let reader = principal("reader", false);
        let anon = principal("anon", true);
        let select = Subject::Table {
            name: "team",
            op: Op::Select,
        };
        let insert = Subject::Table {
            name: "team",
            op: Op::Insert,
        };
        assert!(matches!(
            policy.authorize(&reader, select),
            Ok(Permit::Table(_))
        ));
        let refused = policy.authorize(&reader, insert).expect_err("insert");
        assert_eq!(refused.code, ErrorCode::PermissionDenied);
        let refused = policy.authorize(&anon, select).expect_err("anonymous");
        assert_eq!(refused.code, ErrorCode::LoginRequired);

        let roles = ["reader".to_string()];
        let open = Subject::Resource {
            path: "/r",
            roles: Some(&roles),
        };
        assert!(matches!(
            policy.authorize(&reader, open),
            Ok(Permit::Resource)
        ));
        assert!(policy.authorize(&anon, open).is_err());
        let everyone = ["*".to_string()];
        let any = Subject::Resource {
            path: "/r",
            roles: Some(&everyone),
        };
        assert!(policy.authorize(&anon, any).is_ok());
        // no roles declared: default deny, as for tables without a grant
        let undeclared = Subject::Resource {
            path: "/r",
            roles: None,
        };
        let refused = policy.authorize(&reader, undeclared).expect_err("no roles");
        assert!(
            refused
                .details
                .as_deref()
                .unwrap_or("")
                .contains("names no roles"),
            "{refused:?}"
        );
    }
}
