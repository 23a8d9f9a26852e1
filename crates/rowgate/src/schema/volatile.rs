//! Which SQL answers can change without a commit: SQL that calls the time, randomness or a
//! connection's own counters. The response cache ([`crate::cache`]) keeps no answer of a view
//! or custom resource whose SQL does.

/// Whether SQL calls something whose result changes without a commit: the time, randomness,
/// or a connection's own counters. Judged by its words, conservatively: a function name
/// followed by `(` anywhere (`date(x)` of a column counts too: such SQL is only not cached),
/// and SQL's `CURRENT_…` keywords.
pub fn is_volatile_sql(sql: &str) -> bool {
    const FUNCTIONS: &[&str] = &[
        "random",
        "randomblob",
        "changes",
        "total_changes",
        "last_insert_rowid",
        "date",
        "time",
        "datetime",
        "julianday",
        "unixepoch",
        "strftime",
        "timediff",
    ];
    const KEYWORDS: &[&str] = &["current_date", "current_time", "current_timestamp"];
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut rest = sql;
    while let Some(start) = rest.find(is_word) {
        let tail = &rest[start..];
        let end = tail.find(|c: char| !is_word(c)).unwrap_or(tail.len());
        let (word, after) = tail.split_at(end);
        let called = after.trim_start().starts_with('(');
        if KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word))
            || (called && FUNCTIONS.iter().any(|f| f.eq_ignore_ascii_case(word)))
        {
            return true;
        }
        rest = after;
    }
    false
}

/// Every view of a SQLite database's `main` schema with its SQL (name, `CREATE VIEW …`).
pub fn views_sql(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt =
        conn.prepare("SELECT name, coalesce(sql, '') FROM sqlite_schema WHERE type = 'view'")?;
    let views = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect();
    views
}

/// Whether any of `statements` reads the time or randomness, or names one of `views`
/// (volatile ones, as [`volatile_views`] finds them).
pub fn reads_volatile<'a>(mut statements: impl Iterator<Item = &'a str>, views: &[String]) -> bool {
    statements.any(|sql| is_volatile_sql(sql) || views.iter().any(|v| mentions(sql, v)))
}

/// Whether `word` appears in `sql` as a whole word (an identifier, bare or quoted).
fn mentions(sql: &str, word: &str) -> bool {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    sql.match_indices(word).any(|(at, _)| {
        let before = sql[..at].chars().next_back();
        let after = sql[at + word.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

/// The views of `views` (name, SQL) whose answers can change without a commit: their own SQL
/// is volatile, or it names such a view.
pub fn volatile_views(views: &[(String, String)]) -> Vec<String> {
    let mut volatile: Vec<String> = views
        .iter()
        .filter(|(_, sql)| is_volatile_sql(sql))
        .map(|(name, _)| name.clone())
        .collect();
    loop {
        let more: Vec<String> = views
            .iter()
            .filter(|(name, sql)| {
                !volatile.contains(name) && volatile.iter().any(|v| mentions(sql, v))
            })
            .map(|(name, _)| name.clone())
            .collect();
        if more.is_empty() {
            return volatile;
        }
        volatile.extend(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_sql_is_told_by_its_words() {
        assert!(is_volatile_sql("SELECT datetime('now')"));
        assert!(is_volatile_sql("select RANDOM() as r"));
        assert!(is_volatile_sql(
            "SELECT * FROM t WHERE d > CURRENT_TIMESTAMP"
        ));
        assert!(is_volatile_sql("SELECT strftime ('%s', d) FROM t"));
        assert!(!is_volatile_sql(
            "SELECT id, name FROM employee ORDER BY id"
        ));
        // columns named like a function, or containing one's name
        assert!(!is_volatile_sql(
            "SELECT date, time, updated_time, randomness FROM t"
        ));
    }

    #[test]
    fn a_view_over_a_volatile_view_is_volatile() {
        let views = [
            (
                "today".to_string(),
                "CREATE VIEW today AS SELECT date('now') AS d".to_string(),
            ),
            (
                "shown".to_string(),
                "CREATE VIEW shown AS SELECT * FROM \"today\"".to_string(),
            ),
            (
                "todays".to_string(),
                "CREATE VIEW todays AS SELECT 1 FROM todays_list".to_string(),
            ),
            (
                "plain".to_string(),
                "CREATE VIEW plain AS SELECT id FROM employee".to_string(),
            ),
        ];
        let mut volatile = volatile_views(&views);
        volatile.sort();
        assert_eq!(volatile, ["shown", "today"]);
    }
}
