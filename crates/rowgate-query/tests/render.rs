//! Snapshot tests of rendered SQL and parameters for both dialects, plus checks that the SQLite
//! rendering runs on SQLite with the intended effect.

use rowgate_query::json_rows::{Cell, JsonRowsWriter};
use rowgate_query::parse::parse_query;
use rowgate_query::render::{self, Dialect, Postgres, Sqlite};
use rowgate_query::stmt::{
    Constant, CountStmt, DeleteStmt, InsertRows, InsertStmt, OnConflict, OutputColumn, SelectStmt,
    Sql, UpdateStmt,
};
use rowgate_query::{Condition, Direction, Nulls, OrderTerm, Value};

fn show(sql: &Sql) -> String {
    let mut out = sql.text.clone();
    for (i, p) in sql.params.iter().enumerate() {
        out.push_str(&format!("\n  {}: {p:?}", i + 1));
    }
    out
}

/// Render with both dialects, for one snapshot.
fn both(f: impl Fn(&dyn Dialect) -> Sql) -> String {
    format!(
        "-- sqlite\n{}\n-- postgres\n{}\n",
        show(&f(&Sqlite)),
        show(&f(&Postgres))
    )
}

fn filters(pairs: &[(&str, &str)]) -> Vec<Condition> {
    parse_query(pairs.iter().copied())
        .expect("valid filters")
        .filters
}

fn out(column: &str) -> OutputColumn {
    OutputColumn {
        path: Vec::new(),
        column: column.to_owned(),
        key: column.to_owned(),
        cast: None,
        aggregate: None,
        format: None,
        written_row: None,
    }
}

fn select_stmt(f: Vec<Condition>) -> SelectStmt {
    SelectStmt {
        table: "items".into(),
        columns: vec![out("id"), out("name")],
        filters: f,
        order: vec![],
        not_null: vec![],
        limit: None,
        offset: None,
        embeds: vec![],
    }
}

#[test]
fn select_plain() {
    insta::assert_snapshot!(both(|d| render::select(d, &select_stmt(vec![]))));
}

#[test]
fn select_columns_casts_aliases() {
    let s = SelectStmt {
        columns: vec![
            out("id"),
            OutputColumn {
                path: Vec::new(),
                column: "name".into(),
                key: "label".into(),
                cast: None,
                aggregate: None,
                format: None,
                written_row: None,
            },
            OutputColumn {
                path: Vec::new(),
                column: "price".into(),
                key: "price".into(),
                cast: Some("text".into()),
                aggregate: None,
                format: None,
                written_row: None,
            },
            OutputColumn {
                path: Vec::new(),
                column: "qty".into(),
                key: "n".into(),
                cast: Some("bigint".into()),
                aggregate: None,
                format: None,
                written_row: None,
            },
            OutputColumn {
                path: Vec::new(),
                column: "x".into(),
                key: "x".into(),
                cast: Some("no_such_type".into()),
                aggregate: None,
                format: None,
                written_row: None,
            },
        ],
        ..select_stmt(vec![])
    };
    insta::assert_snapshot!(both(|d| render::select(d, &s)));
}

#[test]
fn select_comparison_operators() {
    let f = filters(&[
        ("a", "eq.1"),
        ("b", "neq.x"),
        ("c", "gt.1.5"),
        ("d", "gte.2"),
        ("e", "lt.3"),
        ("f", "lte.4"),
        ("g", "isdistinct.5"),
        ("h", "not.eq.6"),
    ]);
    insta::assert_snapshot!(both(|d| render::select(d, &select_stmt(f.clone()))));
}

#[test]
fn select_pattern_operators() {
    let f = filters(&[
        ("a", "like.*.com"),
        ("b", "ilike.A*b_%"),
        ("c", "match.^a.+$"),
        ("d", "imatch.abc"),
        ("e", "not.like.x*"),
    ]);
    insta::assert_snapshot!(both(|d| render::select(d, &select_stmt(f.clone()))));
}

#[test]
fn select_in_and_is() {
    let f = filters(&[
        ("a", "in.(1,2,\"x,y\")"),
        ("b", "in.()"),
        ("c", "not.in.()"),
        ("d", "is.null"),
        ("e", "is.not_null"),
        ("f", "is.true"),
        ("g", "is.false"),
        ("h", "is.unknown"),
        ("i", "not.is.null"),
    ]);
    insta::assert_snapshot!(both(|d| render::select(d, &select_stmt(f.clone()))));
}

#[test]
fn select_quantifiers() {
    let f = filters(&[
        ("a", "eq(any).{1,2}"),
        ("b", "like(all).{a*,*b}"),
        ("c", "ilike(any).{X*}"),
        ("d", "imatch(all).{^a,b$}"),
        ("e", "gt(any).{}"),
        ("f", "lt(all).{}"),
        ("g", "not.eq(any).{1,2}"),
    ]);
    insta::assert_snapshot!(both(|d| render::select(d, &select_stmt(f.clone()))));
}

#[test]
fn select_logic_trees() {
    let mut f = filters(&[
        ("x", "eq.0"),
        (
            "or",
            "(a.eq.1,b.gt.2,or(c.is.null,d.not.like.x*),not.and(e.eq.1,f.eq.2))",
        ),
        ("not.or", "(g.eq.1,h.eq.2)"),
        ("and", "(i.eq.1)"),
    ]);
    f.push(Condition::And {
        negated: false,
        items: vec![],
    });
    f.push(Condition::Or {
        negated: false,
        items: vec![],
    });
    f.push(Condition::Or {
        negated: true,
        items: vec![],
    });
    insta::assert_snapshot!(both(|d| render::select(d, &select_stmt(f.clone()))));
}

#[test]
fn select_order_limit_offset() {
    let s = SelectStmt {
        order: vec![
            OrderTerm {
                relation: None,
                path: Vec::new(),
                column: "a".into(),
                direction: None,
                nulls: None,
            },
            OrderTerm {
                relation: None,
                path: Vec::new(),
                column: "b".into(),
                direction: Some(Direction::Desc),
                nulls: None,
            },
            OrderTerm {
                relation: None,
                path: Vec::new(),
                column: "c".into(),
                direction: Some(Direction::Asc),
                nulls: Some(Nulls::First),
            },
            OrderTerm {
                relation: None,
                path: Vec::new(),
                column: "d".into(),
                direction: Some(Direction::Desc),
                nulls: Some(Nulls::Last),
            },
        ],
        limit: Some(10),
        offset: Some(20),
        ..select_stmt(filters(&[("a", "gt.1")]))
    };
    insta::assert_snapshot!(both(|d| render::select(d, &s)));
}

#[test]
fn select_offset_only_and_limit_only() {
    let offset_only = SelectStmt {
        offset: Some(5),
        ..select_stmt(vec![])
    };
    let limit_only = SelectStmt {
        limit: Some(u64::MAX),
        ..select_stmt(vec![])
    };
    insta::assert_snapshot!(format!(
        "{}{}",
        both(|d| render::select(d, &offset_only)),
        both(|d| render::select(d, &limit_only))
    ));
}

#[test]
fn weird_identifiers_are_quoted() {
    let s = SelectStmt {
        table: "my \"table\"".into(),
        columns: vec![OutputColumn {
            path: Vec::new(),
            column: "we\"ird\0col".into(),
            key: "k\"ey".into(),
            cast: None,
            aggregate: None,
            format: None,
            written_row: None,
        }],
        ..select_stmt(filters(&[("\"a\"\"b\"", "eq.1")]))
    };
    insta::assert_snapshot!(both(|d| render::select(d, &s)));
}

#[test]
fn count_statement() {
    let s = CountStmt {
        table: "items".into(),
        filters: filters(&[("a", "eq.1"), ("or", "(b.lt.0,b.gt.10)")]),
        embeds: vec![],
    };
    let empty = CountStmt {
        table: "items".into(),
        filters: vec![],
        embeds: vec![],
    };
    insta::assert_snapshot!(format!(
        "{}{}",
        both(|d| render::count(d, &s)),
        both(|d| render::count(d, &empty))
    ));
}

fn json_rows(d: &dyn Dialect, columns: &[String], rows: &[Vec<Value>]) -> InsertRows {
    let mut w = JsonRowsWriter::new(d, columns);
    for row in rows {
        w.begin_row();
        for v in row {
            w.cell(Cell::Value(v));
        }
        w.end_row();
    }
    InsertRows::Json(w.finish().remove(0))
}

fn insert_with(
    d: &dyn Dialect,
    on_conflict: Option<OnConflict>,
    rows: &[Vec<Value>],
) -> InsertStmt {
    let columns: Vec<String> = vec!["id".into(), "name".into(), "ok".into()];
    InsertStmt {
        table: "items".into(),
        rows: json_rows(d, &columns, rows),
        columns,
        constants: vec![],
        on_conflict,
        returning: vec![],
    }
}

fn insert_stmt(d: &dyn Dialect, on_conflict: Option<OnConflict>) -> InsertStmt {
    insert_with(
        d,
        on_conflict,
        &[
            vec![Value::Int(1), Value::Text("a".into()), Value::Bool(true)],
            vec![Value::Int(2), Value::Null, Value::Real(1.5)],
        ],
    )
}

#[test]
fn insert_rows() {
    insta::assert_snapshot!(both(|d| render::insert(d, insert_stmt(d, None))));
}

#[test]
fn insert_bound_values() {
    let values = |d: &dyn Dialect| InsertStmt {
        rows: InsertRows::Values(vec![
            vec![Value::Int(1), Value::Text("a".into()), Value::Bool(true)],
            vec![Value::Int(2), Value::Null, Value::Real(1.5)],
        ]),
        constants: vec![Constant {
            column: "owner".into(),
            value: Value::Text("u1".into()),
            cast: None,
        }],
        ..insert_stmt(d, None)
    };
    let mut checked = Sql::default();
    render::rows_select(
        &Sqlite,
        &values(&Sqlite),
        &["id".into(), "owner".into()],
        &|_, cell| format!("CAST({cell} AS INTEGER)"),
        &mut checked,
    );
    insta::assert_snapshot!(format!(
        "{}{}",
        both(|d| render::insert(d, values(d))),
        show(&checked)
    ));
}

#[test]
fn insert_default_values_and_no_rows() {
    let default = |d: &dyn Dialect| InsertStmt {
        columns: vec![],
        returning: vec![out("id")],
        ..insert_with(d, None, &[])
    };
    let pinned = |d: &dyn Dialect| InsertStmt {
        constants: vec![Constant {
            column: "owner".into(),
            value: Value::Text("u1".into()),
            cast: Some("INTEGER".into()),
        }],
        ..default(d)
    };
    let no_rows = |d: &dyn Dialect| insert_with(d, None, &[]);
    insta::assert_snapshot!(format!(
        "{}{}{}",
        both(|d| render::insert(d, default(d))),
        both(|d| render::insert(d, pinned(d))),
        both(|d| render::insert(d, no_rows(d)))
    ));
}

/// A row of defaults updates nothing on conflict: PostgreSQL says `DO NOTHING`; SQLite's grammar
/// has no upsert after `DEFAULT VALUES`, so there it is a plain insert (a duplicate key is
/// refused by the database, never a syntax error).
#[test]
fn insert_default_values_upsert() {
    let default = |d: &dyn Dialect| InsertStmt {
        columns: vec![],
        ..insert_with(
            d,
            Some(OnConflict::Ignore {
                target: vec!["id".into()],
            }),
            &[],
        )
    };
    assert_eq!(
        render::insert(&Postgres, default(&Postgres)).text,
        "INSERT INTO \"items\" DEFAULT VALUES ON CONFLICT (\"id\") DO NOTHING"
    );
    assert_eq!(
        render::insert(&Sqlite, default(&Sqlite)).text,
        "INSERT INTO \"items\" DEFAULT VALUES"
    );
}

#[test]
fn insert_upserts() {
    let ignore = |d: &dyn Dialect| {
        insert_stmt(
            d,
            Some(OnConflict::Ignore {
                target: vec!["id".into()],
            }),
        )
    };
    let merge = |d: &dyn Dialect| InsertStmt {
        returning: vec![
            out("id"),
            OutputColumn {
                path: Vec::new(),
                column: "name".into(),
                key: "n".into(),
                cast: Some("text".into()),
                aggregate: None,
                format: None,
                written_row: None,
            },
        ],
        constants: vec![Constant {
            column: "owner".into(),
            value: Value::Text("u1".into()),
            cast: Some("INTEGER".into()),
        }],
        ..insert_stmt(
            d,
            Some(OnConflict::Merge {
                target: vec!["id".into(), "name".into()],
                update: vec!["ok".into()],
            }),
        )
    };
    let merge_nothing = |d: &dyn Dialect| {
        insert_stmt(
            d,
            Some(OnConflict::Merge {
                target: vec!["id".into()],
                update: vec![],
            }),
        )
    };
    insta::assert_snapshot!(format!(
        "{}{}{}",
        both(|d| render::insert(d, ignore(d))),
        both(|d| render::insert(d, merge(d))),
        both(|d| render::insert(d, merge_nothing(d)))
    ));
}

#[test]
fn update_statement() {
    let s = UpdateStmt {
        table: "items".into(),
        set: vec![
            ("name".into(), Value::Text("b".into())),
            ("ok".into(), Value::Null),
        ],
        defaults: Vec::new(),
        filters: filters(&[("id", "eq.1"), ("name", "like.a*")]),
        returning: vec![out("id")],
    };
    let all = UpdateStmt {
        filters: vec![],
        returning: vec![],
        ..s.clone()
    };
    insta::assert_snapshot!(format!(
        "{}{}",
        both(|d| render::update(d, &s)),
        both(|d| render::update(d, &all))
    ));
}

#[test]
fn delete_statement() {
    let s = DeleteStmt {
        table: "items".into(),
        filters: filters(&[("id", "in.(1,2)")]),
        returning: vec![out("id"), out("name")],
    };
    let all = DeleteStmt {
        table: "items".into(),
        filters: vec![],
        returning: vec![],
    };
    insta::assert_snapshot!(format!(
        "{}{}",
        both(|d| render::delete(d, &s)),
        both(|d| render::delete(d, &all))
    ));
}

#[test]
fn condition_appends_and_numbers_placeholders_after_existing_params() {
    let mut sql = Sql {
        text: "SELECT 1 WHERE x = ?1 AND ".into(),
        params: vec![Value::Int(0)],
    };
    let c = &filters(&[("a", "in.(p,q)")])[0];
    render::condition(&Sqlite, c, &mut sql);
    assert_eq!(sql.text, "SELECT 1 WHERE x = ?1 AND \"a\" IN (?2, ?3)");
    assert_eq!(
        sql.params,
        vec![
            Value::Int(0),
            Value::Text("p".into()),
            Value::Text("q".into())
        ]
    );
}

#[test]
fn cast_type_allowlists() {
    for (req, want) in [
        ("text", Some("TEXT")),
        ("TEXT", Some("TEXT")),
        ("int", Some("INTEGER")),
        ("bigint", Some("INTEGER")),
        ("smallint", Some("INTEGER")),
        ("float8", Some("REAL")),
        ("double precision", Some("REAL")),
        ("numeric", Some("NUMERIC")),
        ("json", Some("TEXT")),
        ("text); DROP TABLE x; --", None),
        ("", None),
    ] {
        assert_eq!(Sqlite.cast_type(req), want, "sqlite {req:?}");
    }
    for (req, want) in [
        ("text", Some("text")),
        ("integer", Some("int4")),
        ("int8", Some("int8")),
        ("bigint", Some("int8")),
        ("boolean", Some("bool")),
        ("jsonb", Some("jsonb")),
        ("timestamptz", Some("timestamptz")),
        ("uuid", Some("uuid")),
        ("float8", Some("float8")),
        ("regclass", None),
    ] {
        assert_eq!(Postgres.cast_type(req), want, "postgres {req:?}");
    }
    // idempotent: a returned type maps to itself
    for d in [&Sqlite as &dyn Dialect, &Postgres] {
        for req in ["text", "int", "bigint", "real", "numeric", "bool", "json"] {
            if let Some(t) = d.cast_type(req) {
                assert_eq!(d.cast_type(t), Some(t), "{} {t}", d.name());
            }
        }
    }
}

#[test]
fn placeholders_and_quoting() {
    assert_eq!(Sqlite.placeholder(1), "?1");
    assert_eq!(Sqlite.placeholder(12), "?12");
    assert_eq!(Postgres.placeholder(3), "$3");
    assert_eq!(Sqlite.quote_ident("a\"b\0c"), "\"a\"\"bc\"");
    assert_eq!(Postgres.quote_ident("ü"), "\"ü\"");
    assert_eq!(Sqlite.name(), "sqlite");
    assert_eq!(Postgres.name(), "postgres");
}

// ---- the SQLite rendering runs on SQLite

fn bind(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as V;
    match v {
        Value::Null => V::Null,
        Value::Int(i) => V::Integer(*i),
        Value::Real(r) => V::Real(*r),
        Value::Text(s) => V::Text(s.clone()),
        Value::Bool(b) => V::Integer(i64::from(*b)),
    }
}

fn rows(conn: &rusqlite::Connection, sql: &Sql) -> Vec<Vec<rusqlite::types::Value>> {
    let mut stmt = conn.prepare(&sql.text).expect(&sql.text);
    let n = stmt.column_count();
    let params: Vec<_> = sql.params.iter().map(bind).collect();
    let mut out = Vec::new();
    let mut q = stmt
        .query(rusqlite::params_from_iter(params))
        .expect(&sql.text);
    while let Some(r) = q.next().expect("row") {
        out.push((0..n).map(|i| r.get(i).expect("value")).collect());
    }
    out
}

#[test]
fn sqlite_rendering_executes() {
    use rusqlite::types::Value as V;
    let conn = rusqlite::Connection::open_in_memory().expect("sqlite");
    conn.execute_batch(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, ok INTEGER DEFAULT 0);",
    )
    .expect("schema");
    let ins = InsertStmt {
        returning: vec![out("id")],
        ..insert_stmt(&Sqlite, None)
    };
    assert_eq!(
        rows(&conn, &render::insert(&Sqlite, ins)),
        vec![vec![V::Integer(1)], vec![V::Integer(2)]]
    );
    // upsert: id 1 conflicts and merges `ok`, id 3 is new
    let up = InsertStmt {
        returning: vec![out("id"), out("name"), out("ok")],
        ..insert_with(
            &Sqlite,
            Some(OnConflict::Merge {
                target: vec!["id".into()],
                update: vec!["ok".into()],
            }),
            &[
                vec![Value::Int(1), Value::Text("ignored".into()), Value::Int(7)],
                vec![Value::Int(3), Value::Text("c".into()), Value::Int(0)],
            ],
        )
    };
    assert_eq!(
        rows(&conn, &render::insert(&Sqlite, up)),
        vec![
            vec![V::Integer(1), V::Text("a".into()), V::Integer(7)],
            vec![V::Integer(3), V::Text("c".into()), V::Integer(0)],
        ]
    );
    let ignore = InsertStmt {
        returning: vec![out("id")],
        ..insert_with(
            &Sqlite,
            Some(OnConflict::Ignore {
                target: vec!["id".into()],
            }),
            &[vec![Value::Int(3), Value::Text("x".into()), Value::Int(1)]],
        )
    };
    assert!(rows(&conn, &render::insert(&Sqlite, ignore)).is_empty());
    let none = InsertStmt {
        returning: vec![out("id")],
        ..insert_with(&Sqlite, None, &[])
    };
    assert!(rows(&conn, &render::insert(&Sqlite, none)).is_empty());
    let default = InsertStmt {
        columns: vec![],
        returning: vec![out("id"), out("ok")],
        ..insert_with(&Sqlite, None, &[])
    };
    assert_eq!(
        rows(&conn, &render::insert(&Sqlite, default)),
        vec![vec![V::Integer(4), V::Integer(0)]]
    );
    // ids 1..4, names a, NULL, c, NULL: NULLs sort last ascending, first descending
    let sel = SelectStmt {
        columns: vec![OutputColumn {
            path: Vec::new(),
            column: "id".into(),
            key: "ident".into(),
            cast: Some("text".into()),
            aggregate: None,
            format: None,
            written_row: None,
        }],
        order: vec![
            OrderTerm {
                relation: None,
                path: Vec::new(),
                column: "name".into(),
                direction: None,
                nulls: None,
            },
            OrderTerm {
                relation: None,
                path: Vec::new(),
                column: "id".into(),
                direction: Some(Direction::Desc),
                nulls: None,
            },
        ],
        limit: None,
        offset: Some(1),
        ..select_stmt(filters(&[("id", "lte.4")]))
    };
    assert_eq!(
        rows(&conn, &render::select(&Sqlite, &sel)),
        vec![
            vec![V::Text("3".into())],
            vec![V::Text("4".into())],
            vec![V::Text("2".into())]
        ]
    );
    let cnt = CountStmt {
        table: "items".into(),
        filters: filters(&[("or", "(name.is.null,id.eq.1)")]),
        embeds: vec![],
    };
    assert_eq!(
        rows(&conn, &render::count(&Sqlite, &cnt)),
        vec![vec![V::Integer(3)]]
    );
    let upd = UpdateStmt {
        table: "items".into(),
        set: vec![("name".into(), Value::Text("z".into()))],
        defaults: Vec::new(),
        filters: filters(&[("name", "is.null")]),
        returning: vec![out("id")],
    };
    assert_eq!(
        rows(&conn, &render::update(&Sqlite, &upd)),
        vec![vec![V::Integer(2)], vec![V::Integer(4)]]
    );
    let del = DeleteStmt {
        table: "items".into(),
        filters: filters(&[("name", "in.(z,c)")]),
        returning: vec![out("id")],
    };
    let mut deleted = rows(&conn, &render::delete(&Sqlite, &del));
    deleted.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(
        deleted,
        vec![
            vec![V::Integer(2)],
            vec![V::Integer(3)],
            vec![V::Integer(4)]
        ]
    );
}

#[test]
fn never_null_columns_get_no_null_placement() {
    // SQLite's default null placement differs from PostgreSQL's, so it is spelled out — except
    // for columns that hold no NULL, where it cannot matter and would keep an index from serving
    // the order.
    let s = SelectStmt {
        order: vec![
            OrderTerm {
                relation: None,
                path: Vec::new(),
                column: "a".into(),
                direction: None,
                nulls: None,
            },
            OrderTerm {
                relation: None,
                path: Vec::new(),
                column: "b".into(),
                direction: Some(Direction::Desc),
                nulls: None,
            },
        ],
        not_null: vec!["a".into()],
        ..select_stmt(vec![])
    };
    let sql = render::select(&Sqlite, &s).text;
    assert!(
        sql.ends_with(r#"ORDER BY "items"."a" ASC, "items"."b" DESC NULLS FIRST"#),
        "{sql}"
    );
}

/// A read with embeds is one statement: a to-many embed (with its own filter, order and limit)
/// holding a to-one embed, a many-to-many embed through a junction, and a required (`!inner`)
/// embed that only filters; each a correlated subquery building its JSON in the database.
#[test]
fn select_with_embeds() {
    use rowgate_query::stmt::{EmbedStmt, Junction, ValueKind};
    let child = |table: &str, columns: Vec<OutputColumn>| SelectStmt {
        table: table.into(),
        columns,
        ..select_stmt(vec![])
    };
    let country = EmbedStmt {
        key: "country".into(),
        position: 1,
        many: false,
        select: child("countries", vec![out("name")]),
        kinds: vec![ValueKind::Plain],
        on: vec![("id".into(), "country_id".into())],
        through: None,
        required: None,
        hidden: false,
        spread: false,
        count: None,
    };
    let drivers = EmbedStmt {
        key: "drivers".into(),
        position: 2,
        many: true,
        select: SelectStmt {
            filters: filters(&[("points", "gt.10")]),
            order: parse_query([("order", "points.desc")])
                .expect("order")
                .order,
            limit: Some(2),
            embeds: vec![country],
            ..child("driver", vec![out("name")])
        },
        kinds: vec![ValueKind::Plain],
        on: vec![("team_id".into(), "id".into())],
        through: None,
        required: None,
        hidden: false,
        spread: false,
        count: None,
    };
    let sponsors = EmbedStmt {
        key: "sponsors".into(),
        position: 2,
        many: true,
        select: child("sponsor", vec![out("name")]),
        kinds: vec![ValueKind::Bool],
        on: vec![],
        through: Some(Junction {
            table: "team_sponsor".into(),
            to_parent: vec![("team_id".into(), "id".into())],
            to_related: vec![("sponsor_id".into(), "id".into())],
        }),
        required: None,
        hidden: false,
        spread: false,
        count: None,
    };
    let only_with_staff = EmbedStmt {
        key: "staff".into(),
        position: 0,
        many: true,
        select: child("staff", vec![]),
        kinds: vec![],
        on: vec![("team_id".into(), "id".into())],
        through: None,
        required: Some(true),
        hidden: true,
        spread: false,
        count: None,
    };
    let s = SelectStmt {
        embeds: vec![drivers, sponsors, only_with_staff],
        ..select_stmt(vec![])
    };
    insta::assert_snapshot!(both(|d| render::select(d, &s)));
}
