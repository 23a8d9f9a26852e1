//! Named parameters in a resource's SQL: finds every `:name` outside string literals, quoted
//! identifiers and comments, and rewrites the statement with numbered placeholders (`?1` for
//! SQLite, `$1` for PostgreSQL) so values are always bound, never spliced. `::` (a PostgreSQL
//! cast) is not a parameter.

use std::ops::Range;

use rowgate_query::render::Dialect;

/// A statement with its named parameters replaced by numbered placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numbered {
    /// The SQL text with numbered placeholders.
    pub text: String,
    /// Parameter names by placeholder number (index 0 is `?1`); a name used twice shares one.
    pub names: Vec<String>,
}

/// Why a statement's parameters could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqlParamError {
    /// A positional placeholder (`?`, `?1`, `$1`, `@x`): only `:name` is supported.
    #[error("positional or @/$ placeholders are not supported (at byte {0}); write :name")]
    Positional(usize),
    /// A string, identifier or comment that never ends.
    #[error("unterminated {0} starting at byte {1}")]
    Unterminated(&'static str, usize),
}

/// Rewrites `sql`'s `:name` parameters as the dialect's numbered placeholders (`?N`, `$N`),
/// followed by `::type` where `cast` gives a type for the name (PostgreSQL, so a declared type
/// reaches the statement even where PostgreSQL would infer another, as in `SELECT :n`).
pub fn number(
    sql: &str,
    dialect: &dyn Dialect,
    cast: &dyn Fn(&str) -> Option<&'static str>,
) -> Result<Numbered, SqlParamError> {
    let bytes = sql.as_bytes();
    let mut text = String::with_capacity(sql.len());
    let mut names: Vec<String> = Vec::new();
    let mut copied = 0;
    for span in code_spans(sql, dialect)? {
        let mut i = span.start;
        while i < span.end {
            match bytes[i] {
                b':' if bytes.get(i + 1) == Some(&b':') => i += 2,
                b':' if bytes.get(i + 1).is_some_and(|b| is_ident_start(*b)) => {
                    let start = i + 1;
                    let mut end = start;
                    while end < bytes.len() && is_ident(bytes[end]) {
                        end += 1;
                    }
                    let name = &sql[start..end];
                    let n = match names.iter().position(|x| x == name) {
                        Some(p) => p + 1,
                        None => {
                            names.push(name.to_string());
                            names.len()
                        }
                    };
                    text.push_str(&sql[copied..i]);
                    text.push_str(&dialect.placeholder(n));
                    if let Some(ty) = cast(name) {
                        text.push_str("::");
                        text.push_str(ty);
                    }
                    copied = end;
                    i = end;
                }
                b'?' => return Err(SqlParamError::Positional(i)),
                b'@' | b'$' if bytes.get(i + 1).is_some_and(|b| is_ident(*b)) => {
                    return Err(SqlParamError::Positional(i))
                }
                _ => i += 1,
            }
        }
    }
    text.push_str(&sql[copied..]);
    Ok(Numbered { text, names })
}

/// Whether a statement may write, judged from its words (outside literals and comments): only a
/// statement that starts with `SELECT`, `VALUES`, `TABLE` or `WITH` and names no `INSERT`,
/// `UPDATE`, `DELETE` or `MERGE` (a data-modifying CTE, `FOR UPDATE`) counts as a read. For
/// databases that cannot say themselves (SQLite's `sqlite3_stmt_readonly` can); a function that
/// writes behind a SELECT is caught at run time by the read-only transaction reads run in.
pub fn may_write(sql: &str, dialect: &dyn Dialect) -> Result<bool, SqlParamError> {
    let mut words = Vec::new();
    for span in code_spans(sql, dialect)? {
        words.extend(
            sql[span]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_ascii_uppercase),
        );
    }
    let reads = matches!(
        words.first().map(String::as_str),
        Some("SELECT" | "VALUES" | "TABLE" | "WITH")
    );
    let modifies = words
        .iter()
        .any(|w| matches!(w.as_str(), "INSERT" | "UPDATE" | "DELETE" | "MERGE"));
    Ok(!reads || modifies)
}

/// The byte ranges of `sql` outside string literals, quoted identifiers and comments (`[x]` is
/// a quoted identifier on SQLite only; on PostgreSQL it is a subscript).
fn code_spans(sql: &str, dialect: &dyn Dialect) -> Result<Vec<Range<usize>>, SqlParamError> {
    let bytes = sql.as_bytes();
    let brackets_quote = dialect.brackets_quote_identifiers();
    let mut spans = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let skip_to = match bytes[i] {
            q @ (b'\'' | b'"' | b'`') => Some(skip_quoted(bytes, i, q)?),
            b'[' if brackets_quote => Some(
                find(bytes, i + 1, b"]").ok_or(SqlParamError::Unterminated("[identifier]", i))? + 1,
            ),
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                Some(find(bytes, i, b"\n").map_or(bytes.len(), |n| n + 1))
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => Some(
                find(bytes, i + 2, b"*/").ok_or(SqlParamError::Unterminated("comment", i))? + 2,
            ),
            _ => None,
        };
        match skip_to {
            Some(end) => {
                if start < i {
                    spans.push(start..i);
                }
                start = end;
                i = end;
            }
            None => i += 1,
        }
    }
    if start < bytes.len() {
        spans.push(start..bytes.len());
    }
    Ok(spans)
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Skips a quoted run starting at `start` (the quote is doubled to escape it); returns the index
/// after the closing quote.
fn skip_quoted(bytes: &[u8], start: usize, quote: u8) -> Result<usize, SqlParamError> {
    let what = match quote {
        b'\'' => "string",
        _ => "quoted identifier",
    };
    let mut i = start + 1;
    loop {
        match bytes.get(i) {
            None => return Err(SqlParamError::Unterminated(what, start)),
            Some(&b) if b == quote => {
                if bytes.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return Ok(i + 1);
                }
            }
            Some(_) => i += 1,
        }
    }
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rowgate_query::render::{Postgres, Sqlite};

    #[test]
    fn names_become_numbers_and_repeat() {
        let n = number(
            "SELECT * FROM t WHERE a = :a AND b > :b OR a < :a",
            &Sqlite,
            &|_| None,
        )
        .expect("ok");
        assert_eq!(n.text, "SELECT * FROM t WHERE a = ?1 AND b > ?2 OR a < ?1");
        assert_eq!(n.names, ["a", "b"]);
    }

    #[test]
    fn literals_comments_and_casts_are_not_parameters() {
        let sql = "SELECT ':x', \":y\", [z:w], `q:r` -- :c\n, x::text /* :d */ FROM t WHERE v = :v";
        let n = number(sql, &Sqlite, &|_| None).expect("ok");
        assert_eq!(n.names, ["v"]);
        assert!(n.text.ends_with("v = ?1"));
        assert!(n.text.contains("':x'") && n.text.contains("x::text"));
        let n = number("SELECT 'it''s :not' || :yes", &Sqlite, &|_| None).expect("ok");
        assert_eq!(n.names, ["yes"]);
        assert_eq!(n.text, "SELECT 'it''s :not' || ?1");
    }

    #[test]
    fn placeholders_follow_the_dialect() {
        let n = number("SELECT :a, :b, :a", &Postgres, &|n| {
            (n == "b").then_some("int8")
        })
        .expect("ok");
        assert_eq!(n.text, "SELECT $1, $2::int8, $1");
    }

    #[test]
    fn brackets_quote_on_sqlite_only() {
        let n = number("SELECT [a:b], :c", &Sqlite, &|_| None).expect("ok");
        assert_eq!(n.names, ["c"]);
        let n = number("SELECT tags[:i] FROM t", &Postgres, &|_| None).expect("ok");
        assert_eq!(n.text, "SELECT tags[$1] FROM t");
    }

    #[test]
    fn reads_and_writes_by_their_words() {
        let reads = [
            "SELECT * FROM t WHERE a = :a",
            "  with x AS (SELECT 1) SELECT * FROM x",
            "VALUES (1)",
            "SELECT 'delete me', \"update\" FROM t -- insert\n",
            "SELECT updated_at, deleted FROM t",
        ];
        for sql in reads {
            assert!(!may_write(sql, &Postgres).expect("ok"), "{sql}");
        }
        let writes = [
            "INSERT INTO t VALUES (1)",
            "update t set a = 1",
            "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
            "SELECT * FROM t FOR UPDATE",
            "CALL p()",
            "TRUNCATE t",
            "/* SELECT */ DELETE FROM t",
        ];
        for sql in writes {
            assert!(may_write(sql, &Postgres).expect("ok"), "{sql}");
        }
    }

    #[test]
    fn positional_and_unterminated_are_errors() {
        assert_eq!(
            number("SELECT ?", &Sqlite, &|_| None),
            Err(SqlParamError::Positional(7))
        );
        assert_eq!(
            number("SELECT $1", &Sqlite, &|_| None),
            Err(SqlParamError::Positional(7))
        );
        assert_eq!(
            number("SELECT @a", &Sqlite, &|_| None),
            Err(SqlParamError::Positional(7))
        );
        assert!(matches!(
            number("SELECT 'x", &Sqlite, &|_| None),
            Err(SqlParamError::Unterminated("string", 7))
        ));
        assert!(matches!(
            number("SELECT 1 /* x", &Sqlite, &|_| None),
            Err(SqlParamError::Unterminated("comment", 9))
        ));
        // A lone colon or `$` in text outside a name is fine.
        assert_eq!(
            number("SELECT time('now') || ':'", &Sqlite, &|_| None)
                .expect("ok")
                .names
                .len(),
            0
        );
    }
}
