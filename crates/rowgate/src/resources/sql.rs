//! Named parameters in a resource's SQL: finds every `:name` outside string literals, quoted
//! identifiers and comments, and rewrites the statement with numbered placeholders (`?1` for
//! SQLite, `$1` for PostgreSQL) so values are always bound, never spliced. `::` (a PostgreSQL
//! cast) is not a parameter.

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

/// Rewrites `sql`'s `:name` parameters as the dialect's numbered placeholders (`?N`, `$N`).
pub fn number(sql: &str, dialect: &dyn Dialect) -> Result<Numbered, SqlParamError> {
    let bytes = sql.as_bytes();
    let mut text = String::with_capacity(sql.len());
    let mut names: Vec<String> = Vec::new();
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"' | b'`') => i = skip_quoted(bytes, i, q)?,
            b'[' => {
                i = find(bytes, i + 1, b"]")
                    .ok_or(SqlParamError::Unterminated("[identifier]", i))?
                    + 1;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = find(bytes, i, b"\n").map_or(bytes.len(), |n| n + 1);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = find(bytes, i + 2, b"*/").ok_or(SqlParamError::Unterminated("comment", i))? + 2;
            }
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
    text.push_str(&sql[copied..]);
    Ok(Numbered { text, names })
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
        let n = number("SELECT * FROM t WHERE a = :a AND b > :b OR a < :a", &Sqlite).expect("ok");
        assert_eq!(n.text, "SELECT * FROM t WHERE a = ?1 AND b > ?2 OR a < ?1");
        assert_eq!(n.names, ["a", "b"]);
    }

    #[test]
    fn literals_comments_and_casts_are_not_parameters() {
        let sql = "SELECT ':x', \":y\", [z:w], `q:r` -- :c\n, x::text /* :d */ FROM t WHERE v = :v";
        let n = number(sql, &Sqlite).expect("ok");
        assert_eq!(n.names, ["v"]);
        assert!(n.text.ends_with("v = ?1"));
        assert!(n.text.contains("':x'") && n.text.contains("x::text"));
        let n = number("SELECT 'it''s :not' || :yes", &Sqlite).expect("ok");
        assert_eq!(n.names, ["yes"]);
        assert_eq!(n.text, "SELECT 'it''s :not' || ?1");
    }

    #[test]
    fn placeholders_follow_the_dialect() {
        let n = number("SELECT :a, :b, :a", &Postgres).expect("ok");
        assert_eq!(n.text, "SELECT $1, $2, $1");
    }

    #[test]
    fn positional_and_unterminated_are_errors() {
        assert_eq!(
            number("SELECT ?", &Sqlite),
            Err(SqlParamError::Positional(7))
        );
        assert_eq!(
            number("SELECT $1", &Sqlite),
            Err(SqlParamError::Positional(7))
        );
        assert_eq!(
            number("SELECT @a", &Sqlite),
            Err(SqlParamError::Positional(7))
        );
        assert!(matches!(
            number("SELECT 'x", &Sqlite),
            Err(SqlParamError::Unterminated("string", 7))
        ));
        assert!(matches!(
            number("SELECT 1 /* x", &Sqlite),
            Err(SqlParamError::Unterminated("comment", 9))
        ));
        // A lone colon or `$` in text outside a name is fine.
        assert_eq!(
            number("SELECT time('now') || ':'", &Sqlite)
                .expect("ok")
                .names
                .len(),
            0
        );
    }
}
