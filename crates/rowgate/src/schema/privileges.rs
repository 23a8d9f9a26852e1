//! What each database role may do with the exposed tables and functions (PostgreSQL, read with
//! the schema when requests run as their role: `auth.database_roles`): its table privileges,
//! the columns it may read and write, the functions it may call. The database enforces them on
//! every request; this copy is for what describes the API to a role, so that the OpenAPI
//! document, `OPTIONS`/`Allow` and the console show what the role may really do.

use std::collections::{HashMap, HashSet};

/// The privileges of every role the connecting user may switch to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Privileges {
    roles: HashMap<String, RolePrivileges>,
}

/// One role's privileges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RolePrivileges {
    tables: HashMap<String, TablePrivileges>,
    functions: HashSet<String>,
}

/// What one role may do with one table or view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TablePrivileges {
    /// `SELECT`, `INSERT`, `UPDATE` (on a column at least) and `DELETE`, in that order.
    pub ops: [bool; 4],
    /// The columns it may read.
    pub read: HashSet<String>,
    /// The columns it may insert or update.
    pub write: HashSet<String>,
}

/// The tables' privileges, one row per role and table (roles the connecting user may switch
/// to; not PostgreSQL's own `pg_*` roles).
const TABLES: &str = "
SELECT r.rolname::text, c.relname::text,
       has_any_column_privilege(r.oid, c.oid, 'SELECT'),
       has_any_column_privilege(r.oid, c.oid, 'INSERT'),
       has_any_column_privilege(r.oid, c.oid, 'UPDATE'),
       has_table_privilege(r.oid, c.oid, 'DELETE'),
       coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
                  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                    AND has_column_privilege(r.oid, c.oid, a.attnum, 'SELECT')), '{}'),
       coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
                  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                    AND (has_column_privilege(r.oid, c.oid, a.attnum, 'INSERT')
                         OR has_column_privilege(r.oid, c.oid, a.attnum, 'UPDATE'))), '{}')
  FROM pg_roles r
  CROSS JOIN pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname::text = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
   AND r.rolname !~ '^pg_' AND pg_has_role(current_user, r.oid, 'MEMBER')";

/// The functions each role may call.
const FUNCTIONS: &str = "
SELECT r.rolname::text, p.proname::text
  FROM pg_roles r
  CROSS JOIN pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname::text = $1 AND r.rolname !~ '^pg_'
   AND pg_has_role(current_user, r.oid, 'MEMBER')
   AND has_function_privilege(r.oid, p.oid, 'EXECUTE')";

impl Privileges {
    /// Reads the privileges on the tables and functions of `schema`.
    pub async fn introspect(
        client: &tokio_postgres::Client,
        schema: &str,
    ) -> Result<Privileges, tokio_postgres::Error> {
        let mut out = Privileges::default();
        for row in client.query(TABLES, &[&schema]).await? {
            let role: String = row.get(0);
            let table: String = row.get(1);
            let ops = [row.get(2), row.get(3), row.get(4), row.get(5)];
            let read: Vec<String> = row.get(6);
            let write: Vec<String> = row.get(7);
            out.roles.entry(role).or_default().tables.insert(
                table,
                TablePrivileges {
                    ops,
                    read: read.into_iter().collect(),
                    write: write.into_iter().collect(),
                },
            );
        }
        for row in client.query(FUNCTIONS, &[&schema]).await? {
            let role: String = row.get(0);
            out.roles
                .entry(role)
                .or_default()
                .functions
                .insert(row.get(1));
        }
        Ok(out)
    }

    /// What `role` may do with `table` (`None`: nothing; a role the connecting user may not
    /// switch to may do nothing).
    pub fn table(&self, role: &str, table: &str) -> Option<&TablePrivileges> {
        self.roles
            .get(role)?
            .tables
            .get(table)
            .filter(|t| t.ops.iter().any(|allowed| *allowed))
    }

    /// Whether `role` may call the function `name`.
    pub fn may_call(&self, role: &str, name: &str) -> bool {
        self.roles
            .get(role)
            .is_some_and(|r| r.functions.contains(name))
    }
}
