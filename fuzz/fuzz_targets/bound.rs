//! The check the parser targets share: a condition renders with every value bound (placeholders
//! `1..=n`, nothing spliced into the text) on both dialects, with as many values on each.

use rowgate_query::ast::Condition;
use rowgate_query::render::{self, Postgres, Sqlite};
use rowgate_query::stmt::Sql;

/// Panics unless `condition` renders with every value bound on SQLite and PostgreSQL alike.
pub fn assert_binds_every_value(condition: &Condition) {
    let mut sqlite = Sql::default();
    render::condition(&Sqlite, condition, &mut sqlite);
    assert!(sqlite.binds_every_placeholder('?'), "{sqlite:?}");
    let mut postgres = Sql::default();
    render::condition(&Postgres, condition, &mut postgres);
    assert!(postgres.binds_every_placeholder('$'), "{postgres:?}");
    assert_eq!(sqlite.params.len(), postgres.params.len());
}
