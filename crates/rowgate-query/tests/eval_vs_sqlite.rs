//! `eval` must agree with SQLite running the SQL that `render::Sqlite` produces: random tables
//! `t(id INTEGER PRIMARY KEY, i INTEGER, r REAL, s TEXT)`, random conditions over `i`, `r`, `s`,
//! and the ids SQLite selects must be exactly the ids for which `eval` gives `Some(true)`.

mod common;

use proptest::prelude::*;
use rowgate_query::eval::{eval, eval_all, sqlite_text, EvalError};
use rowgate_query::parse::parse_query;
use rowgate_query::render::{self, Sqlite};
use rowgate_query::stmt::{OutputColumn, SelectStmt};
use rowgate_query::{Condition, IsValue, Operand, Operator, Predicate, Quantifier, Value};
use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::Connection;

#[derive(Debug, Clone)]
struct Row {
    i: Option<i64>,
    r: Option<f64>,
    s: Option<String>,
}

impl Row {
    fn get(&self, id: i64, col: &str) -> Option<Value> {
        Some(match col {
            "id" => Value::Int(id),
            "i" => self.i.map_or(Value::Null, Value::Int),
            "r" => self.r.map_or(Value::Null, Value::Real),
            "s" => self.s.clone().map_or(Value::Null, Value::Text),
            _ => return None,
        })
    }
}

/// The `regexp(pattern, value)` function the server registers: NULL when either is NULL, numbers
/// matched through their SQLite text form.
fn register_regexp(conn: &Connection) {
    conn.create_scalar_function(
        "regexp",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let pattern = match ctx.get_raw(0) {
                ValueRef::Null => return Ok(None),
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                other => {
                    return Err(rusqlite::Error::InvalidFunctionParameterType(
                        0,
                        other.data_type(),
                    ))
                }
            };
            let text = match ctx.get_raw(1) {
                ValueRef::Null => return Ok(None),
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                ValueRef::Integer(i) => i.to_string(),
                ValueRef::Real(r) => sqlite_text(&Value::Real(r)).unwrap_or_default(),
                ValueRef::Blob(_) => {
                    return Err(rusqlite::Error::InvalidFunctionParameterType(
                        1,
                        rusqlite::types::Type::Blob,
                    ))
                }
            };
            let re = regex::Regex::new(&pattern)
                .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))?;
            Ok(Some(re.is_match(&text)))
        },
    )
    .expect("register regexp");
}

fn table(rows: &[Row]) -> Connection {
    let conn = Connection::open_in_memory().expect("sqlite");
    register_regexp(&conn);
    conn.execute_batch(
        "PRAGMA case_sensitive_like=ON;
         CREATE TABLE t (id INTEGER PRIMARY KEY, i INTEGER, r REAL, s TEXT);
         CREATE INDEX t_s ON t (s);",
    )
    .expect("schema");
    for (n, row) in rows.iter().enumerate() {
        conn.execute(
            "INSERT INTO t (id, i, r, s) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![n as i64 + 1, row.i, row.r, row.s],
        )
        .expect("insert");
    }
    conn
}

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

/// Ids SQLite selects with these filters.
fn sqlite_ids(conn: &Connection, filters: &[Condition]) -> Vec<i64> {
    let stmt = SelectStmt {
        table: "t".into(),
        columns: vec![OutputColumn::plain("id")],
        filters: filters.to_vec(),
        order: vec![],
        not_null: vec![],
        embeds: vec![],
        limit: None,
        offset: None,
    };
    let sql = render::select(&Sqlite, &stmt);
    let mut st = conn.prepare(&sql.text).expect(&sql.text);
    let params: Vec<_> = sql.params.iter().map(bind).collect();
    let mut ids: Vec<i64> = st
        .query_map(rusqlite::params_from_iter(params), |r| r.get(0))
        .expect(&sql.text)
        .collect::<Result<_, _>>()
        .expect("rows");
    ids.sort_unstable();
    ids
}

/// Ids for which `eval_all` is true.
fn eval_ids(rows: &[Row], filters: &[Condition]) -> Vec<i64> {
    let mut ids = Vec::new();
    for (n, row) in rows.iter().enumerate() {
        let id = n as i64 + 1;
        let get = |c: &str| row.get(id, c);
        if eval_all(filters, &get).expect("eval") == Some(true) {
            ids.push(id);
        }
    }
    ids
}

// ---- strategies

fn row() -> impl Strategy<Value = Row> {
    let i = prop::option::weighted(
        0.8,
        prop_oneof![
            -3i64..=3,
            Just(10),
            Just(100),
            Just(-100),
            Just(i64::MAX),
            Just(i64::MIN),
            Just(123_456),
        ],
    );
    let r = prop::option::weighted(
        0.8,
        prop_oneof![
            Just(-2.5),
            Just(0.0),
            Just(1.0),
            Just(1.5),
            Just(2.0),
            Just(10.0),
            Just(100.5),
            Just(1e20),
            Just(-0.001),
            Just(3.0),
            Just(0.1),
            Just(1.0 / 3.0),
            Just(9_223_372_036_854_775_808.0),
        ],
    );
    let s = prop::option::weighted(
        0.8,
        prop::sample::select(vec![
            "",
            "a",
            "A",
            "abc",
            "Abc",
            "ABC",
            "b",
            "10",
            "2",
            "1.5",
            " 5",
            "5 ",
            "1e3",
            "0x10",
            "-1",
            "abc%",
            "a_c",
            "日本",
            "é",
            "É",
            "Ab_c",
            "0",
            "0.0",
            "x y",
            "1abc",
            "true",
            "%",
            "*",
            "ab",
            "abd",
            "ac",
            "日本語",
            "Éa",
            "ê",
        ])
        .prop_map(str::to_owned),
    );
    (i, r, s).prop_map(|(i, r, s)| Row { i, r, s })
}

fn compare_operand() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "0",
        "1",
        "2",
        "3",
        "-1",
        "10",
        "100",
        "1.5",
        "2.0",
        "-2.5",
        "1e3",
        "1e20",
        " 5",
        "5 ",
        "+3",
        ".5",
        "5.",
        "abc",
        "a",
        "A",
        "ABC",
        "Abc",
        "b",
        "",
        "0x10",
        "1e",
        "-0",
        "日本",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775809",
        "0.1",
        "0.333333333333333",
        "1.0",
        "true",
    ])
    .prop_map(str::to_owned)
}

fn like_operand() -> impl Strategy<Value = String> {
    prop_oneof![
        compare_operand(),
        prop::sample::select(vec![
            "a%", "A*", "%b%", "_", "__", "%", "*", "a_c", "1%", "%.5", "%0", "%e+%", "1.%", "%c",
            "%C", "ab*", "*B*", "日%", "%É", "_.%", "-%", "%.0", "0.%", "ab", "a%c", "a_", "日本*",
            "É*", "a**",
        ])
        .prop_map(str::to_owned),
    ]
}

fn regex_operand() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "^a", "b", "^[0-9]+$", "^-", r"\.", "c$", "^A", "0$", r"e\+", "^$", "日", "(?i)X", "5",
        r"^\s",
    ])
    .prop_map(str::to_owned)
}

fn column() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["i", "r", "s"]).prop_map(str::to_owned)
}

fn predicate() -> impl Strategy<Value = Predicate> {
    let cmp_op = prop::sample::select(vec![
        Operator::Eq,
        Operator::Neq,
        Operator::Gt,
        Operator::Gte,
        Operator::Lt,
        Operator::Lte,
        Operator::IsDistinct,
    ]);
    let quant = prop_oneof![Just(Quantifier::Any), Just(Quantifier::All)];
    let list = |s: BoxedStrategy<String>| prop::collection::vec(s, 0..4).prop_map(Operand::List);
    let shape = prop_oneof![
        (cmp_op, compare_operand()).prop_map(|(op, v)| (op, None, Operand::Scalar(v))),
        (
            prop::sample::select(vec![Operator::Like, Operator::Ilike]),
            like_operand()
        )
            .prop_map(|(op, v)| (op, None, Operand::Scalar(v))),
        (
            prop::sample::select(vec![Operator::Match, Operator::Imatch]),
            regex_operand()
        )
            .prop_map(|(op, v)| (op, None, Operand::Scalar(v))),
        list(compare_operand().boxed()).prop_map(|l| (Operator::In, None, l)),
        prop::sample::select(vec![
            IsValue::Null,
            IsValue::NotNull,
            IsValue::True,
            IsValue::False,
            IsValue::Unknown
        ])
        .prop_map(|v| (Operator::Is, None, Operand::Is(v))),
        (
            prop::sample::select(vec![
                Operator::Eq,
                Operator::Gt,
                Operator::Gte,
                Operator::Lt,
                Operator::Lte
            ]),
            quant.clone(),
            list(compare_operand().boxed())
        )
            .prop_map(|(op, q, l)| (op, Some(q), l)),
        (
            prop::sample::select(vec![Operator::Like, Operator::Ilike]),
            quant.clone(),
            list(like_operand().boxed())
        )
            .prop_map(|(op, q, l)| (op, Some(q), l)),
        (
            prop::sample::select(vec![Operator::Match, Operator::Imatch]),
            quant,
            list(regex_operand().boxed())
        )
            .prop_map(|(op, q, l)| (op, Some(q), l)),
    ];
    (column(), any::<bool>(), shape, any::<bool>(), any::<bool>()).prop_map(
        |(column, negated, (op, quantifier, operand), ranged, unindexed)| {
            let like = op == Operator::Like;
            Predicate {
                // `s` is the indexed text column: its prefixes may be rendered as ranges
                prefix_range: ranged && like && column == "s",
                // the other columns are keys of no index
                unindexed: unindexed && like && column != "s",
                ..parsed(column, negated, op, quantifier, operand)
            }
        },
    )
}

/// A predicate as the parser gives it: none of the planner's flags set.
fn parsed(
    column: String,
    negated: bool,
    op: Operator,
    quantifier: Option<Quantifier>,
    operand: Operand,
) -> Predicate {
    Predicate {
        negated,
        quantifier,
        ..Predicate::new(column, op, operand)
    }
}

fn condition() -> impl Strategy<Value = Condition> {
    common::logic_tree(predicate(), 3, 0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn eval_agrees_with_sqlite(
        rows in prop::collection::vec(row(), 1..24),
        filters in prop::collection::vec(condition(), 0..3),
    ) {
        // SQLite quirk, not modelled: comparing an INTEGER column with text beyond the 64-bit
        // range converts the column's register to REAL in place, so a text operator (REGEXP,
        // LIKE) evaluated afterwards in the same row sees "-9.2e+18"-style text.
        let debug = format!("{filters:?}");
        prop_assume!(
            !(debug.contains("922337203685477580")
                && ["Match", "Imatch", "Like", "Ilike"].iter().any(|op| debug.contains(op)))
        );
        let conn = table(&rows);
        let want = sqlite_ids(&conn, &filters);
        let got = eval_ids(&rows, &filters);
        prop_assert_eq!(got, want, "filters: {:?}", filters);
    }

    #[test]
    fn single_predicates_agree_with_sqlite(
        rows in prop::collection::vec(row(), 8..32),
        p in predicate(),
    ) {
        let conn = table(&rows);
        let filters = [Condition::Pred(p)];
        let want = sqlite_ids(&conn, &filters);
        let got = eval_ids(&rows, &filters);
        prop_assert_eq!(got, want, "filter: {:?}", filters);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A `like` on the indexed text column rendered as a prefix range selects exactly the rows
    /// the plain `LIKE` does, and that `eval` selects.
    #[test]
    fn prefix_ranges_select_what_like_selects(
        rows in prop::collection::vec(row(), 8..32),
        negated in any::<bool>(),
        operand in prop_oneof![
            like_operand().prop_map(Operand::Scalar),
            prop::collection::vec(like_operand(), 0..3).prop_map(Operand::List),
        ],
        quantifier in prop_oneof![Just(Quantifier::Any), Just(Quantifier::All)],
    ) {
        let quantifier = matches!(operand, Operand::List(_)).then_some(quantifier);
        let like = |prefix_range| Condition::Pred(Predicate {
            prefix_range,
            ..parsed("s".into(), negated, Operator::Like, quantifier, operand.clone())
        });
        let conn = table(&rows);
        let ranged = sqlite_ids(&conn, &[like(true)]);
        prop_assert_eq!(&ranged, &sqlite_ids(&conn, &[like(false)]));
        prop_assert_eq!(&ranged, &eval_ids(&rows, &[like(true)]));
    }
}

// ---- hand-picked cases, checked against SQLite and against the expected values

fn one(pairs: &[(&str, &str)]) -> Vec<Condition> {
    parse_query(pairs.iter().copied()).expect("valid").filters
}

#[test]
fn documented_semantics() {
    let rows = vec![
        Row {
            i: Some(5),
            r: Some(2.5),
            s: Some("10".into()),
        },
        Row {
            i: None,
            r: None,
            s: None,
        },
        Row {
            i: Some(-1),
            r: Some(100.0),
            s: Some("Abc".into()),
        },
        Row {
            i: Some(0),
            r: Some(1e20),
            s: Some("abc".into()),
        },
        Row {
            i: None,
            r: None,
            s: Some("é".into()),
        },
    ];
    let conn = table(&rows);
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [i64]);
    let cases: &[Case] = &[
        // numeric column vs numeric-looking text: numeric comparison
        (&[("i", "eq.5")], &[1]),
        (&[("i", "eq.5.0")], &[1]),
        (&[("i", "eq. 5 ")], &[1]),
        (&[("i", "lt.10")], &[1, 3, 4]),
        (&[("r", "gte.2.5")], &[1, 3, 4]),
        // numeric column vs non-numeric text: numbers sort before text
        (&[("i", "gt.abc")], &[]),
        (&[("i", "lt.abc")], &[1, 3, 4]),
        (&[("i", "neq.abc")], &[1, 3, 4]),
        // text column compares as text
        (&[("s", "gt.9")], &[3, 4, 5]),
        (&[("s", "lt.9")], &[1]),
        // NULL never matches a comparison, even negated
        (&[("i", "not.eq.5")], &[3, 4]),
        (&[("i", "isdistinct.5")], &[2, 3, 4, 5]),
        (&[("i", "is.null")], &[2, 5]),
        (&[("i", "is.true")], &[1, 3]),
        (&[("i", "is.false")], &[4]),
        (&[("s", "is.true")], &[1]),
        // like / ilike
        (&[("s", "like.A*")], &[3]),
        (&[("s", "ilike.A*")], &[3, 4]),
        (&[("s", "like.a_c")], &[4]),
        // ilike folds ASCII only, like SQLite's lower()
        (&[("s", "ilike.É")], &[]),
        (&[("s", "ilike.é")], &[5]),
        (&[("s", "like._")], &[5]),
        (&[("r", "like.1.0e+20")], &[4]),
        (&[("r", "like.*.0")], &[3]),
        // regex
        (&[("s", "match.^A")], &[3]),
        (&[("s", "imatch.^A")], &[3, 4]),
        (&[("i", "match.^-")], &[3]),
        // lists and quantifiers
        (&[("i", "in.(5,0)")], &[1, 4]),
        (&[("i", "in.()")], &[]),
        (&[("i", "not.in.()")], &[1, 2, 3, 4, 5]),
        (&[("i", "eq(any).{5,-1}")], &[1, 3]),
        (&[("i", "gt(all).{-5,-2}")], &[1, 3, 4]),
        (&[("i", "gt(all).{}")], &[1, 2, 3, 4, 5]),
        // logic
        (&[("or", "(i.eq.5,s.eq.abc)")], &[1, 4]),
        (&[("not.or", "(i.eq.5,s.eq.abc)")], &[3]),
        (&[("and", "(i.gte.0,r.lt.10)")], &[1]),
    ];
    for (pairs, want) in cases {
        let f = one(pairs);
        assert_eq!(sqlite_ids(&conn, &f), *want, "sqlite {pairs:?}");
        assert_eq!(eval_ids(&rows, &f), *want, "eval {pairs:?}");
    }
}

#[test]
fn three_valued_logic() {
    let null_row = |c: &str| (c == "x").then_some(Value::Null);
    let t = |pairs: &[(&str, &str)]| eval(&one(pairs)[0], &null_row).expect("eval");
    assert_eq!(t(&[("x", "eq.1")]), None);
    assert_eq!(t(&[("x", "not.eq.1")]), None);
    assert_eq!(t(&[("x", "is.null")]), Some(true));
    assert_eq!(t(&[("x", "not.is.null")]), Some(false));
    assert_eq!(t(&[("x", "isdistinct.1")]), Some(true));
    assert_eq!(t(&[("x", "in.(1)")]), None);
    assert_eq!(t(&[("x", "in.()")]), Some(false));
    assert_eq!(t(&[("x", "like.*")]), None);
    assert_eq!(t(&[("or", "(x.eq.1,x.is.null)")]), Some(true));
    assert_eq!(t(&[("or", "(x.eq.1,x.not.is.null)")]), None);
    assert_eq!(t(&[("and", "(x.eq.1,x.not.is.null)")]), Some(false));
    assert_eq!(t(&[("and", "(x.eq.1,x.is.null)")]), None);
    assert_eq!(t(&[("not.and", "(x.eq.1,x.is.null)")]), None);
    assert_eq!(eval_all(&[], &null_row), Ok(Some(true)));
}

#[test]
fn unknown_columns_and_bad_regexes_are_errors() {
    let row = |c: &str| (c == "x").then(|| Value::Text("a".into()));
    let f = one(&[("or", "(x.eq.a,y.eq.1)")]);
    assert_eq!(eval(&f[0], &row), Err(EvalError::UnknownColumn("y".into())));
    let f = one(&[("x", "match.(")]);
    assert!(matches!(
        eval(&f[0], &row),
        Err(EvalError::InvalidRegex { .. })
    ));
}

#[test]
fn sqlite_text_of_values() {
    assert_eq!(sqlite_text(&Value::Null), None);
    assert_eq!(sqlite_text(&Value::Int(-3)).as_deref(), Some("-3"));
    assert_eq!(sqlite_text(&Value::Bool(true)).as_deref(), Some("1"));
    let conn = Connection::open_in_memory().expect("sqlite");
    for r in [
        0.0,
        1.0,
        -2.5,
        0.1,
        1e20,
        1.5e-7,
        1.0 / 3.0,
        123456.789,
        1e15,
        1e14,
        2e-4,
        -1e300,
    ] {
        let want: String = conn
            .query_row("SELECT CAST(?1 AS TEXT)", [r], |row| row.get(0))
            .expect("cast");
        assert_eq!(sqlite_text(&Value::Real(r)), Some(want), "{r}");
    }
}
