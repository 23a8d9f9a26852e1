//! The numeric bounds simple `CHECK` constraints put on columns (`CHECK (salary > 0)`,
//! PostgreSQL's `CHECK ((laps > (0)::integer))`), read from a table's DDL or from
//! `pg_get_constraintdef`: the OpenAPI document states them, so that a client (or a generated
//! request) knows what the database refuses, and a `PATCH` outside them is refused whether or not
//! a row matches (as the database would refuse it for any row). Other checks are enforced all the same, only not
//! described.

use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;

/// A column's bounds from its checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bounds {
    /// The least value, and whether it is excluded (`>`).
    pub minimum: Option<(f64, bool)>,
    /// The greatest value, and whether it is excluded (`<`).
    pub maximum: Option<(f64, bool)>,
}

impl Bounds {
    /// Whether `value` lies within the bounds.
    pub fn admit(&self, value: f64) -> bool {
        let above = self.minimum.is_none_or(|(least, excluded)| {
            if excluded {
                value > least
            } else {
                value >= least
            }
        });
        let below = self.maximum.is_none_or(|(most, excluded)| {
            if excluded {
                value < most
            } else {
                value <= most
            }
        });
        above && below
    }

    /// The bounds as the checks say them: `> 0`, `>= 1 and < 100`.
    pub fn describe(&self) -> String {
        let min = self
            .minimum
            .map(|(v, excluded)| format!("{} {v}", if excluded { ">" } else { ">=" }));
        let max = self
            .maximum
            .map(|(v, excluded)| format!("{} {v}", if excluded { "<" } else { "<=" }));
        [min, max]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

/// The bounds of `column` among the `CHECK` constraints in `sql`.
pub fn bounds(sql: &str, column: &str) -> Bounds {
    static CHECK: OnceLock<Regex> = OnceLock::new();
    let check = CHECK.get_or_init(|| {
        Regex::new(
            r#"(?i)CHECK\s*\(+\s*"?([A-Za-z_][A-Za-z0-9_]*)"?\s*(>=|>|<=|<)\s*\(?\s*(-?[0-9]+(?:\.[0-9]+)?)\s*\)?(?:::[a-z ]+)?\s*\)+"#,
        )
        .expect("a valid regex")
    });
    let mut out = Bounds::default();
    for found in check.captures_iter(sql) {
        if !found[1].eq_ignore_ascii_case(column) {
            continue;
        }
        let Ok(value) = found[3].parse::<f64>() else {
            continue;
        };
        match &found[2] {
            ">" => out.minimum = Some((value, true)),
            ">=" => out.minimum = Some((value, false)),
            "<" => out.maximum = Some((value, true)),
            _ => out.maximum = Some((value, false)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_checks_become_bounds() {
        let ddl =
            "CREATE TABLE e (salary REAL NOT NULL CHECK (salary > 0), laps INT CHECK(laps <= 100))";
        assert_eq!(bounds(ddl, "salary").minimum, Some((0.0, true)));
        assert_eq!(bounds(ddl, "laps").maximum, Some((100.0, false)));
        assert_eq!(bounds(ddl, "other"), Bounds::default());
        assert!(!bounds(ddl, "salary").admit(0.0));
        assert!(bounds(ddl, "salary").admit(0.5));
        assert!(bounds(ddl, "laps").admit(100.0) && !bounds(ddl, "laps").admit(100.5));
        assert!(Bounds::default().admit(f64::MIN));
        let pg = "CHECK ((laps > (0)::double precision))";
        assert_eq!(bounds(pg, "laps").minimum, Some((0.0, true)));
        assert_eq!(
            bounds("CHECK ((x >= '-1.5'::numeric))", "x"),
            Bounds::default()
        );
    }
}
