//! Seed 001's database shape beside the demo (`demo init --wide`): 4D's benchmark ran on 268
//! tables, `people` with 1,000,000 rows, half of the others 500,000 rows each and the rest about
//! 50,000. This adds the 267 others as `t1` … `t267` (`t1`-`t134` large, the rest a tenth of
//! that), each with a key, two texts, a number and the id of a person (indexed), generated as
//! the rest of the demo is: deterministic, row by row. The id is not a foreign key: 4D's
//! relations leave the related records intact when a record is deleted (their default, "Leave
//! related many intact"), and 4D's mix deletes random people; with `ON DELETE SET NULL` each
//! delete would also rewrite the ~73 rows that name the person, work 4D's run did not do.

use super::{below, pick, Cell, RowSink, SplitMix64};

/// The tables beside `people`.
pub const TABLES: usize = 267;

/// How many of them are large (the rest hold a tenth as many rows).
const LARGE: usize = 134;

/// Words of the `label` column.
const LABELS: &[&str] = &[
    "open", "closed", "pending", "shipped", "billed", "paid", "late", "void", "draft", "final",
];

/// The name of table `n` (1-based).
pub fn name(n: usize) -> String {
    format!("t{n}")
}

/// Rows of table `n` when the large ones hold `large_rows`.
pub fn rows(n: usize, large_rows: u64) -> u64 {
    if n <= LARGE {
        large_rows
    } else {
        large_rows / 10
    }
}

/// `CREATE TABLE` statements of the 267 tables.
pub fn schema() -> String {
    (1..=TABLES)
        .map(|n| {
            format!(
                "CREATE TABLE {} (id INTEGER PRIMARY KEY, code TEXT NOT NULL, label TEXT NOT NULL, \
                 amount INTEGER NOT NULL, person_id INTEGER);\n",
                name(n)
            )
        })
        .collect()
}

/// The index on each table's person id, made once the rows are in (a person's rows are
/// found without a scan).
pub fn indexes() -> String {
    (1..=TABLES)
        .map(|n| format!("CREATE INDEX {0}_person ON {0}(person_id);\n", name(n)))
        .collect()
}

/// Every row of the 267 tables into `sink`; `people` rows exist to refer to.
pub(crate) fn generate(sink: &mut dyn RowSink, people: i64, large_rows: u64) -> anyhow::Result<()> {
    let mut code = String::with_capacity(12);
    for n in 1..=TABLES {
        sink.table(&name(n), &["id", "code", "label", "amount", "person_id"])?;
        let seed = 0x4D00_0000_0000_0000 ^ n as u64;
        for id in 1..=i64::try_from(rows(n, large_rows))? {
            let mut rng = SplitMix64::for_row(seed, id);
            code.clear();
            use std::fmt::Write as _;
            let _ = write!(code, "C{n}-{id:07}");
            let label = pick(&mut rng, LABELS);
            let amount = below(&mut rng, 100_000);
            let person = if people > 0 {
                Cell::Int(1 + below(&mut rng, people))
            } else {
                Cell::Null
            };
            sink.row(&[
                Cell::Int(id),
                Cell::Text(&code),
                Cell::Text(label),
                Cell::Int(amount),
                person,
            ])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape: 268 tables, their sizes, and a person's delete leaving the rows that name
    /// the person intact (4D's relations' default), with foreign keys enforced.
    #[test]
    fn seed_001s_shape_beside_the_demo() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wide.db");
        crate::demo::init(&path, 50, Some(20)).expect("init");
        let conn = rusqlite::Connection::open(&path).expect("open");
        let schema = crate::schema::SchemaCache::introspect(&conn).expect("introspect");
        let tables = schema.tables.values().filter(|t| !t.is_view).count();
        assert_eq!(
            tables,
            crate::demo::TABLES.len() + TABLES,
            "the demo's, and 267 more"
        );
        let count = |table: &str| -> i64 {
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .expect("count")
        };
        assert_eq!(
            (count("t1"), count("t134"), count("t135"), count("t267")),
            (20, 20, 2, 2)
        );
        let t5 = schema.table("t5").expect("t5");
        assert!(t5.foreign_keys.is_empty(), "4D's relations: no constraint");
        conn.execute_batch("PRAGMA foreign_keys = ON").expect("fk");
        let person: i64 = conn
            .query_row("SELECT person_id FROM t1 WHERE id = 1", [], |r| r.get(0))
            .expect("person");
        assert!((1..=50).contains(&person), "a person's id: {person}");
        conn.execute("DELETE FROM people WHERE id = ?1", [person])
            .expect("a named person can be deleted");
        let intact: Option<i64> = conn
            .query_row("SELECT person_id FROM t1 WHERE id = 1", [], |r| r.get(0))
            .expect("row");
        assert_eq!(intact, Some(person), "left intact, as 4D does");
    }
}
