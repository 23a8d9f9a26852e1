//! Change capture on PostgreSQL: `rowgate.changes` and one trigger `rowgate_rt` per realtime
//! table calling `rowgate.capture(name, key columns…)`, which appends `to_jsonb` of the rows
//! and `NOTIFY rowgate_changes` (the tailers' wake-up, on every node).
//!
//! A sequence alone does not give commit order (a transaction that took id 10 may commit after
//! the one that took 11, and a reader past 11 would skip 10), so the trigger first takes a
//! transaction-scoped advisory lock: transactions that write realtime tables commit one after
//! another from their first captured row on, and ids follow commit order. Writes to other
//! tables are not affected.

use tokio_postgres::types::ToSql;

use super::{Change, Head, Op};
use crate::db::{DbError, Postgres};
use crate::schema::Table;

use super::{CAPTURE_LOCK, CHANNEL, LOG_COLUMNS};

/// Advisory lock key of set-up (several nodes may start together).
const SETUP_LOCK: i64 = 0x726f_7767_6174_6502;

/// The log, and the capture function: on one PostgreSQL `rowgate.capture()`; on a Citus
/// cluster (see [`super::citus`]) the same function locks and notifies on the coordinator only,
/// and `rowgate.capture_reference()`, for reference tables, captures on the coordinator's copy
/// only.
fn setup_sql(citus: bool) -> String {
    let log = format!(
        "CREATE SCHEMA IF NOT EXISTS rowgate;
         CREATE TABLE IF NOT EXISTS rowgate.changes ({LOG_COLUMNS});
         CREATE TABLE IF NOT EXISTS rowgate.changes_pruned (through bigint NOT NULL);
         INSERT INTO rowgate.changes_pruned (through)
           SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM rowgate.changes_pruned);"
    );
    if !citus {
        return format!("{log}\n{}", capture_function("capture", false, ""));
    }
    format!(
        "{log}\n{}\n{}",
        capture_function("capture", true, ""),
        capture_function(
            "capture_reference",
            true,
            "IF NOT here THEN RETURN NULL; END IF;"
        )
    )
}

/// `CREATE OR REPLACE FUNCTION rowgate.{name}()`: the row's change appended to the log, under
/// the capture lock and with a `NOTIFY`; on Citus (`citus`) those only on the coordinator
/// (`here`), a worker's change going to its outbox; `guard` runs first.
fn capture_function(name: &str, citus: bool, guard: &str) -> String {
    let (here, locks) = if citus {
        (
            format!("here boolean := {};", super::citus::ON_COORDINATOR),
            "here",
        )
    } else {
        (String::new(), "true")
    };
    format!(
        "CREATE OR REPLACE FUNCTION rowgate.{name}() RETURNS trigger
         LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
         DECLARE
           after jsonb := CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END;
           before jsonb := CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END;
           key jsonb;
           {here}
         BEGIN
           {guard}
           IF {locks} THEN
             PERFORM pg_advisory_xact_lock({CAPTURE_LOCK});
           END IF;
           IF TG_NARGS > 1 THEN
             SELECT jsonb_object_agg(k, coalesce(after, before) -> k) INTO key
               FROM unnest(TG_ARGV[1:TG_NARGS - 1]) AS k;
           END IF;
           INSERT INTO rowgate.changes (tbl, op, pk, new, old, at)
             VALUES (TG_ARGV[0], lower(TG_OP), key, after, before,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
           IF {locks} THEN
             PERFORM pg_notify('{CHANNEL}', '');
           END IF;
           RETURN NULL;
         END
         $fn$;"
    )
}

/// Creates the log, the capture function and the triggers of `tables`; drops the triggers of
/// tables no longer listed. One node at a time (advisory lock), in one transaction.
pub async fn ensure(db: &Postgres, tables: &[Table]) -> anyhow::Result<()> {
    let mut client = db.client().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let citus = super::citus::installed(&client).await?;
    if citus && !tables.is_empty() {
        super::citus::prepare_nodes(&mut client).await?;
    }
    let tx = client.build_transaction().read_only(false).start().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SETUP_LOCK])
        .await?;
    tx.batch_execute("SET LOCAL client_min_messages = warning")
        .await?;
    if citus {
        super::citus::prepare_coordinator(&tx).await?;
    }
    tx.batch_execute(&setup_sql(citus)).await?;
    let wanted: Vec<String> = tables.iter().map(qualified).collect();
    let unlisted = tx
        .query(
            "SELECT t.tgrelid::regclass::text FROM pg_trigger t
             WHERE t.tgname = 'rowgate_rt'
               AND NOT t.tgrelid = ANY (SELECT to_regclass(w) FROM unnest($1::text[]) w)",
            &[&wanted],
        )
        .await?;
    for row in unlisted {
        let relation: String = row.get(0);
        tx.batch_execute(&format!("DROP TRIGGER IF EXISTS rowgate_rt ON {relation}"))
            .await?;
    }
    for table in tables {
        let mut args = vec![literal(&table.name)];
        args.extend(table.primary_key.iter().map(|k| literal(k)));
        let relation = qualified(table);
        let function = if citus && super::citus::is_reference(&tx, &relation).await? {
            anyhow::ensure!(
                super::citus::coordinator_holds_references(&tx).await?,
                "realtime on the reference table {relation} needs the coordinator in the Citus \
                 cluster's metadata (SELECT citus_set_coordinator_host('host', port)): its \
                 changes are captured on the coordinator's copy"
            );
            "capture_reference"
        } else {
            "capture"
        };
        tx.batch_execute(&format!(
            "CREATE OR REPLACE TRIGGER rowgate_rt AFTER INSERT OR UPDATE OR DELETE ON {relation} \
             FOR EACH ROW EXECUTE FUNCTION rowgate.{function}({})",
            args.join(", ")
        ))
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Changes after `after` (up to `upto`, of `table` when given), oldest first.
pub async fn fetch(
    db: &Postgres,
    after: i64,
    upto: Option<i64>,
    table: Option<String>,
    limit: usize,
) -> Result<Vec<Change>, DbError> {
    let client = db.client().await?;
    let upto = upto.unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let params: [&(dyn ToSql + Sync); 4] = [&after, &upto, &table, &limit];
    let rows = client
        .query(
            "SELECT id, tbl, op, pk::text, new::text, old::text, at FROM rowgate.changes
             WHERE id > $1 AND id <= $2 AND ($3::text IS NULL OR tbl = $3)
             ORDER BY id LIMIT $4",
            &params,
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let op: String = r.get(2);
            Some(Change {
                id: r.get(0),
                table: r.get(1),
                op: Op::parse(&op)?,
                key: r
                    .get::<_, Option<String>>(3)
                    .as_deref()
                    .and_then(super::object),
                new: r
                    .get::<_, Option<String>>(4)
                    .as_deref()
                    .and_then(super::object),
                old: r
                    .get::<_, Option<String>>(5)
                    .as_deref()
                    .and_then(super::object),
                at: r.get(6),
            })
        })
        .collect())
}

/// The last id given (the sequence, also past pruned rows) and the pruning mark.
pub async fn head(db: &Postgres) -> Result<Head, DbError> {
    let client = db.client().await?;
    let row = client
        .query_one(
            "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END
                       FROM rowgate.changes_id_seq),
                    (SELECT coalesce(max(through), 0) FROM rowgate.changes_pruned)",
            &[],
        )
        .await?;
    Ok(Head {
        last: row.get(0),
        pruned_through: row.get(1),
    })
}

/// Deletes the oldest changes past the retention (a chunk at a time); returns how many.
pub async fn prune(db: &Postgres, cutoff_ms: i64, keep: i64) -> Result<usize, DbError> {
    let mut client = db.client().await?;
    let tx = client.build_transaction().read_only(false).start().await?;
    let through: Option<i64> = tx
        .query_one(
            "SELECT max(id) FROM (SELECT id, at FROM rowgate.changes ORDER BY id LIMIT 10000) o
             WHERE at < $1 OR id <= (SELECT max(id) FROM rowgate.changes) - $2",
            &[&cutoff_ms, &keep],
        )
        .await?
        .get(0);
    let Some(through) = through else {
        return Ok(0);
    };
    let deleted = tx
        .execute("DELETE FROM rowgate.changes WHERE id <= $1", &[&through])
        .await?;
    tx.execute(
        "UPDATE rowgate.changes_pruned SET through = greatest(through, $1)",
        &[&through],
    )
    .await?;
    tx.commit().await?;
    Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
}

/// A table's name as the schema cache has it (`name` or `schema.name`), quoted for SQL.
/// The table's name as SQL gives it, schema-qualified where the cache knows its schema.
fn qualified(table: &Table) -> String {
    match &table.schema {
        Some(schema) => format!("{}.{}", quote(schema), quote(&table.name)),
        None => quote(&table.name),
    }
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
