//! Which changes each subscriber's database role may see, when requests run as their role
//! (`auth.database_roles`, PostgreSQL): a change is sent only if the subscriber's role, with
//! its claims, could `SELECT` the row's image under the table's privileges and row-level
//! security policies.
//!
//! Subscribers are grouped into [`Audience`]s (a role and its claims: what a policy may read).
//! For a batch of changes, every image (the new row of an insert or update, the old row of an
//! update or delete) is put into a mirror of its table: a temporary table of the same columns
//! on this checker's own connection, carrying copies of the table's `SELECT` policies (their
//! expressions as PostgreSQL deparses them, every name qualified). Then one call per table
//! runs, for each audience in turn, its claims and a `SELECT` of the mirror: PostgreSQL itself
//! applies its policy semantics (permissive and restrictive, roles, `BYPASSRLS`, policies that
//! join other tables, read as the audience) to the images as they were at the commit, not to
//! the rows as they are now. The transaction is rolled back and the mirrors emptied. An
//! audience whose check fails (a claim a policy cannot read, a role gone) sees nothing of the
//! batch.
//!
//! What makes thousands of audiences cheap: the audiences go in ordered by role, so the role
//! is switched (and the table privilege checked) once per role, not per audience; and each
//! mirror has its own reader function whose `SELECT` is static, so PostgreSQL plans it once
//! per role and runs the cached plan for each audience (only the claims change, a setting the
//! plan reads at run time). A batch is checked in one call per table whatever its number of
//! changes, and batches grow while a check runs (the change log is read on after it), so the
//! cost per audience is paid once per batch, not per change: 5,000 distinct users cost about
//! 20 µs each per batch, plus a fraction of a µs per image (bench/RESULTS.md).
//!
//! Table privileges count too: an audience whose role may not `SELECT` the table sees none of
//! its changes. The mirrors are built again when the schema cache changes (DDL, a new policy).
//! A role that owns a table is checked as any other (PostgreSQL would let the owner bypass its
//! policies unless forced): stricter, never looser.

use serde_json::{json, Map, Value as Json};
use std::collections::{HashMap, HashSet};
use tokio::sync::Mutex;

use super::capture::{Change, Op};
use crate::auth::Principal;
use crate::schema::SchemaCache;

/// A role and the claims its policies may read: subscribers with the same audience see the
/// same changes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Audience {
    /// The database role.
    pub role: String,
    /// The claims, as the request's `request.jwt.claims` holds them.
    pub claims: String,
}

impl Audience {
    /// The audience of `principal` (its role in the claims, as a request's settings have it).
    pub fn of(principal: &Principal) -> Audience {
        let mut claims = (*principal.claims).clone();
        claims
            .entry("role")
            .or_insert_with(|| Json::String(principal.role.clone()));
        Audience {
            role: principal.role.clone(),
            claims: Json::Object(claims).to_string(),
        }
    }
}

/// Which image of a change: the row after it (insert, update) or before it (update, delete).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The row after.
    New,
    /// The row before.
    Old,
}

impl Side {
    fn code(self) -> &'static str {
        match self {
            Side::New => "n",
            Side::Old => "o",
        }
    }
}

/// What each audience of a batch may see.
#[derive(Debug, Default)]
pub struct Verdicts {
    /// Each audience checked, and its place in `seen`.
    audiences: HashMap<Audience, u32>,
    /// The images each audience may see: (audience, change id, side).
    seen: HashSet<(u32, i64, Side)>,
}

impl Verdicts {
    /// The verdicts of `audiences`, who see nothing yet (each at its place in the slice).
    pub fn new(audiences: &[Audience]) -> Verdicts {
        Verdicts {
            audiences: audiences
                .iter()
                .enumerate()
                .map(|(i, a)| (a.clone(), u32::try_from(i).unwrap_or(u32::MAX)))
                .collect(),
            seen: HashSet::new(),
        }
    }

    /// The audience at `position` may see `change`'s image `side`.
    pub fn allow(&mut self, position: u32, change: i64, side: Side) {
        self.seen.insert((position, change, side));
    }

    /// Where `audience`'s verdicts are (`None`: it was not checked).
    pub fn position(&self, audience: &Audience) -> Option<u32> {
        self.audiences.get(audience).copied()
    }

    /// Whether the audience at `position` may see `change`'s image `side`.
    pub fn sees_at(&self, position: u32, change: i64, side: Side) -> bool {
        self.seen.contains(&(position, change, side))
    }

    /// Whether `audience` may see `change`'s image `side` (not if it was not checked).
    pub fn sees(&self, audience: &Audience, change: i64, side: Side) -> bool {
        self.position(audience)
            .is_some_and(|at| self.sees_at(at, change, side))
    }

    /// Takes in `other`'s verdicts (of the same changes, other audiences).
    pub fn merge(&mut self, other: Verdicts) {
        let mut moved: HashMap<u32, u32> = HashMap::new();
        for (audience, at) in other.audiences {
            let next = u32::try_from(self.audiences.len()).unwrap_or(u32::MAX);
            let here = *self.audiences.entry(audience).or_insert(next);
            moved.insert(at, here);
        }
        for (at, change, side) in other.seen {
            if let Some(here) = moved.get(&at) {
                self.seen.insert((*here, change, side));
            }
        }
    }
}

/// The temporary functions the checker's connection keeps: one builds a table's mirror and
/// its reader, one fills the mirrors with a batch's images. A mirror's reader takes the
/// audiences (ordered by role) and answers which images each may see.
const FUNCTIONS: &str = r#"
CREATE OR REPLACE FUNCTION pg_temp.rg_mirror(source regclass, mirror text, reader text)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE p record;
BEGIN
  PERFORM set_config('search_path', '', true);
  EXECUTE format('DROP TABLE IF EXISTS pg_temp.%I', mirror);
  EXECUTE format('CREATE TEMP TABLE %I (LIKE %s)', mirror, source);
  EXECUTE format('ALTER TABLE pg_temp.%I ADD COLUMN rg_change bigint, ADD COLUMN rg_side text',
                 mirror);
  EXECUTE format('GRANT SELECT ON pg_temp.%I TO PUBLIC', mirror);
  IF (SELECT relrowsecurity FROM pg_catalog.pg_class WHERE oid = source) THEN
    EXECUTE format('ALTER TABLE pg_temp.%I ENABLE ROW LEVEL SECURITY', mirror);
    FOR p IN
      SELECT polname, polpermissive, pg_catalog.pg_get_expr(polqual, polrelid) AS qual,
             (SELECT pg_catalog.string_agg(CASE WHEN r = 0 THEN 'PUBLIC'
                                                ELSE r::regrole::text END, ', ')
                FROM pg_catalog.unnest(polroles) AS r) AS roles
        FROM pg_catalog.pg_policy
       WHERE polrelid = source AND polcmd IN ('*', 'r')
    LOOP
      EXECUTE format('CREATE POLICY %I ON pg_temp.%I AS %s FOR SELECT TO %s USING (%s)',
                     p.polname, mirror,
                     CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
                     p.roles, coalesce(p.qual, 'false'));
    END LOOP;
  END IF;
  -- the reader: its SELECT is static, planned once per role and run for each audience
  EXECUTE format($reader$
    CREATE OR REPLACE FUNCTION pg_temp.%I(audiences jsonb)
    RETURNS TABLE (audience int, change bigint, side text) LANGUAGE plpgsql AS $r$
    DECLARE a jsonb; role_now text; readable boolean := false;
    BEGIN
      FOR a IN SELECT * FROM pg_catalog.jsonb_array_elements(audiences) LOOP
        IF role_now IS NULL OR a->>'role' <> role_now THEN
          role_now := a->>'role';
          BEGIN
            PERFORM pg_catalog.set_config('role', role_now, true);
            readable := pg_catalog.has_table_privilege(%s::oid, 'SELECT');
          EXCEPTION WHEN OTHERS THEN
            -- a role gone: its audiences see nothing (and nothing runs as the one before)
            readable := false;
          END;
        END IF;
        CONTINUE WHEN NOT readable;
        audience := (a->>'id')::int;
        BEGIN
          PERFORM pg_catalog.set_config('request.jwt.claims', a->>'claims', true);
          RETURN QUERY SELECT audience, m.rg_change, m.rg_side FROM pg_temp.%I AS m;
        EXCEPTION WHEN OTHERS THEN
          -- this audience sees nothing more of the batch
          NULL;
        END;
      END LOOP;
      PERFORM pg_catalog.set_config('role', 'none', true);
    END $r$
  $reader$, reader, source::oid, mirror);
END $fn$;

CREATE OR REPLACE FUNCTION pg_temp.rg_fill(source regclass, mirror text, images jsonb)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  EXECUTE format('INSERT INTO pg_temp.%I SELECT (pg_catalog.jsonb_populate_record(NULL::%s, x.img)).*, x.id, x.side
                    FROM pg_catalog.jsonb_to_recordset($1) AS x(img jsonb, id bigint, side text)',
                 mirror, source)
    USING images;
END $fn$;
"#;

/// The checker: its own connection (the mirrors are temporary tables of that session) and
/// the schema version its mirrors were built for.
pub struct Checker {
    url: String,
    session: Mutex<Option<Session>>,
}

/// The checker's connection, and what it has built.
struct Session {
    client: tokio_postgres::Client,
    /// The schema version the mirrors are of.
    version: i64,
    /// The mirror of each table built (by the table's name in the change log).
    mirrors: HashMap<String, Mirror>,
}

/// A table's mirror.
#[derive(Clone)]
struct Mirror {
    /// The table, qualified and quoted (`"public"."notes"`).
    source: String,
    /// The temporary table's name.
    name: String,
    /// Its reader function's name.
    reader: String,
}

impl Checker {
    /// A checker of the database at `url` (connected on first use).
    pub fn new(url: String) -> Checker {
        Checker {
            url,
            session: Mutex::new(None),
        }
    }

    /// What each of `audiences` may see of `changes`, over the tables as `schema` describes
    /// them. On a failure of the checker itself, no audience sees anything of the batch (and
    /// the connection is made again next time).
    pub async fn verdicts(
        &self,
        schema: &SchemaCache,
        audiences: &[Audience],
        changes: &[Change],
    ) -> Verdicts {
        let mut verdicts = Verdicts::new(audiences);
        if audiences.is_empty() || changes.is_empty() {
            return verdicts;
        }
        let mut session = self.session.lock().await;
        match self.check(&mut session, schema, audiences, changes).await {
            Ok(seen) => verdicts.seen = seen,
            Err(e) => {
                tracing::warn!("realtime: the visibility of changes could not be checked: {e:#}");
                *session = None;
            }
        }
        verdicts
    }

    async fn check(
        &self,
        session: &mut Option<Session>,
        schema: &SchemaCache,
        audiences: &[Audience],
        changes: &[Change],
    ) -> anyhow::Result<HashSet<(u32, i64, Side)>> {
        if session.as_ref().is_none_or(|s| s.version != schema.version) {
            *session = Some(self.connect(schema.version).await?);
        }
        let Some(session) = session.as_mut() else {
            return Ok(HashSet::new());
        };
        // the images, per table
        let mut images: HashMap<&str, Vec<Json>> = HashMap::new();
        for change in changes {
            let sides: &[(Side, &Option<Map<String, Json>>)] = match change.op {
                Op::Insert => &[(Side::New, &change.new)],
                Op::Update => &[(Side::New, &change.new), (Side::Old, &change.old)],
                Op::Delete => &[(Side::Old, &change.old)],
            };
            for (side, row) in sides {
                if let Some(row) = row {
                    images
                        .entry(change.table.as_str())
                        .or_default()
                        .push(json!({"img": row, "id": change.id, "side": side.code()}));
                }
            }
        }
        let mut tables = Vec::new();
        for table in images.keys() {
            let mirror = match session.mirrors.get(*table) {
                Some(m) => m.clone(),
                None => {
                    let Some(shape) = schema.table(table) else {
                        continue;
                    };
                    let n = session.mirrors.len();
                    let mirror = Mirror {
                        source: qualified(shape.schema.as_deref(), &shape.name),
                        name: format!("rg_mirror_{n}"),
                        reader: format!("rg_visible_{n}"),
                    };
                    session
                        .client
                        .execute(
                            "SELECT pg_temp.rg_mirror($1::text::regclass, $2, $3)",
                            &[&mirror.source, &mirror.name, &mirror.reader],
                        )
                        .await?;
                    session.mirrors.insert(table.to_string(), mirror.clone());
                    mirror
                }
            };
            tables.push((table.to_string(), mirror));
        }
        // the audiences by role: each reader switches roles once per role
        let mut order: Vec<usize> = (0..audiences.len()).collect();
        order.sort_by(|a, b| audiences[*a].role.cmp(&audiences[*b].role));
        let audiences_json = Json::Array(
            order
                .iter()
                .map(|i| json!({"id": i, "role": audiences[*i].role, "claims": audiences[*i].claims}))
                .collect(),
        )
        .to_string();
        let tx = session.client.transaction().await?;
        let mut seen = HashSet::new();
        for (table, mirror) in &tables {
            let rows = Json::Array(images.remove(table.as_str()).unwrap_or_default());
            tx.execute(
                "SELECT pg_temp.rg_fill($1::text::regclass, $2, $3::text::jsonb)",
                &[&mirror.source, &mirror.name, &rows.to_string()],
            )
            .await?;
            // (the reader's name is the checker's own, never a client's)
            let read = format!(
                "SELECT audience, change, side FROM pg_temp.{}($1::text::jsonb)",
                mirror.reader
            );
            for row in tx.query(&read, &[&audiences_json]).await? {
                let audience: i32 = row.get(0);
                let change: i64 = row.get(1);
                let side: String = row.get(2);
                let side = if side == "o" { Side::Old } else { Side::New };
                seen.insert((u32::try_from(audience).unwrap_or(u32::MAX), change, side));
            }
        }
        tx.rollback().await?;
        // a rolled-back insert leaves dead rows that every later scan would read (temporary
        // tables are never vacuumed): emptied at once, outside the transaction
        let names: Vec<&str> = tables.iter().map(|(_, m)| m.name.as_str()).collect();
        if !names.is_empty() {
            let truncate = format!("TRUNCATE pg_temp.{}", names.join(", pg_temp."));
            session.client.batch_execute(&truncate).await?;
        }
        Ok(seen)
    }

    /// A new connection with the checker's functions, for schema `version`.
    async fn connect(&self, version: i64) -> anyhow::Result<Session> {
        let (client, connection) = crate::db::postgres_connect::connect(&self.url).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "realtime visibility checker: connection ended");
            }
        });
        client.batch_execute(FUNCTIONS).await?;
        Ok(Session {
            client,
            version,
            mirrors: HashMap::new(),
        })
    }
}

/// `"schema"."name"` (the schema when the table has one).
fn qualified(schema: Option<&str>, name: &str) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    match schema {
        Some(schema) => format!("{}.{}", quote(schema), quote(name)),
        None => quote(name),
    }
}
