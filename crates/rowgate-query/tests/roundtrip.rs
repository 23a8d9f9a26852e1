//! Property tests: every AST the parser can produce prints to a query string that parses back to
//! the same AST, and no input makes a parse function panic.

mod common;

use proptest::prelude::*;
use rowgate_query::parse::{
    parse_columns, parse_filter, parse_logic, parse_order, parse_query, parse_select,
};
use rowgate_query::print::{filter_param, order_param, select_param, to_query_string};
use rowgate_query::render::{self, Postgres, Sqlite};
use rowgate_query::stmt::Sql;
use rowgate_query::{
    Aggregate, AggregateFunction, Condition, Direction, Embed, EmbedParams, IsValue, Join, JsonKey,
    JsonStep, Nulls, Operand, Operator, OrderTerm, Predicate, Quantifier, Query, SelectItem,
};

/// Text with the characters that matter to the syntax, plain words and arbitrary Unicode.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9]{0,6}",
        r#"[a-zA-Z0-9 .,()"\\{}*%_:!$é日\-]{0,12}"#,
        any::<String>(),
    ]
}

/// Any non-empty identifier (quoted identifiers can spell anything).
fn ident() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z_$][a-zA-Z0-9_$]{0,6}",
        "[a-z]{1,4} [a-z]{1,4}",
        "or|and|not|select|order|limit|offset|columns|on_conflict|asc|desc",
        text().prop_filter("non-empty", |s| !s.is_empty()),
    ]
}

fn is_value() -> impl Strategy<Value = IsValue> {
    prop_oneof![
        Just(IsValue::Null),
        Just(IsValue::NotNull),
        Just(IsValue::True),
        Just(IsValue::False),
        Just(IsValue::Unknown),
    ]
}

fn quantifiable() -> impl Strategy<Value = Operator> {
    prop_oneof![
        Just(Operator::Eq),
        Just(Operator::Like),
        Just(Operator::Ilike),
        Just(Operator::Match),
        Just(Operator::Imatch),
        Just(Operator::Gt),
        Just(Operator::Gte),
        Just(Operator::Lt),
        Just(Operator::Lte),
    ]
}

/// A JSON path (usually empty); `->>` only as the last step.
fn path() -> impl Strategy<Value = Vec<JsonStep>> {
    let key = prop_oneof![
        ident().prop_map(JsonKey::Field),
        any::<i64>().prop_map(JsonKey::Index),
    ];
    prop_oneof![
        3 => Just(Vec::new()),
        1 => (prop::collection::vec(key, 1..4), any::<bool>()).prop_map(|(keys, last_text)| {
            let n = keys.len();
            keys.into_iter()
                .enumerate()
                .map(|(i, key)| JsonStep {
                    key,
                    as_text: last_text && i + 1 == n,
                    to_json: false,
                })
                .collect()
        }),
    ]
}

/// PostgreSQL-only operators (scalar operand; full-text ones may carry a language).
fn postgres_op() -> impl Strategy<Value = Operator> {
    prop_oneof![
        Just(Operator::Contains),
        Just(Operator::ContainedIn),
        Just(Operator::Overlaps),
        Just(Operator::StrictlyLeft),
        Just(Operator::StrictlyRight),
        Just(Operator::NotExtendsRight),
        Just(Operator::NotExtendsLeft),
        Just(Operator::Adjacent),
        Just(Operator::Fts),
        Just(Operator::Plfts),
        Just(Operator::Phfts),
        Just(Operator::Wfts),
    ]
}

/// (op, quantifier, operand) combinations the parser produces.
fn op_operand() -> impl Strategy<Value = (Operator, Option<Quantifier>, Operand)> {
    let list = || prop::collection::vec(text(), 0..4).prop_map(Operand::List);
    prop_oneof![
        (
            prop_oneof![
                quantifiable(),
                Just(Operator::Neq),
                Just(Operator::IsDistinct),
                postgres_op(),
            ],
            text()
        )
            .prop_map(|(op, v)| (op, None, Operand::Scalar(v))),
        (
            quantifiable(),
            prop_oneof![Just(Quantifier::Any), Just(Quantifier::All)],
            list()
        )
            .prop_map(|(op, q, l)| (op, Some(q), l)),
        list().prop_map(|l| (Operator::In, None, l)),
        is_value().prop_map(|v| (Operator::Is, None, Operand::Is(v))),
    ]
}

fn predicate() -> impl Strategy<Value = Predicate> {
    (
        ident(),
        path(),
        any::<bool>(),
        op_operand(),
        prop::option::of("[a-z_]{1,8}"),
    )
        .prop_map(
            |(column, path, negated, (op, quantifier, operand), language)| Predicate {
                path,
                negated,
                quantifier,
                language: language.filter(|_| op.is_full_text()),
                ..Predicate::new(column, op, operand)
            },
        )
}

fn condition() -> impl Strategy<Value = Condition> {
    common::logic_tree(predicate(), 4, 1)
}

fn select_item() -> impl Strategy<Value = SelectItem> {
    let leaf = prop_oneof![
        Just(SelectItem::Star),
        (
            ident(),
            path(),
            prop::option::of(ident()),
            prop::option::of("[a-z0-9_]{1,6}( [a-z0-9_]{1,6})?")
        )
            .prop_map(|(name, path, alias, cast)| SelectItem::Column {
                name,
                path,
                alias,
                cast,
                aggregate: None,
            }),
        (
            ident(),
            prop::option::of(ident()),
            prop::option::of("[a-z0-9_]{1,6}"),
            prop::sample::select(AggregateFunction::ALL.to_vec()),
            prop::option::of("[a-z0-9_]{1,6}"),
        )
            .prop_map(|(name, alias, cast, function, result_cast)| {
                SelectItem::Column {
                    name,
                    path: Vec::new(),
                    alias,
                    cast,
                    aggregate: Some(Aggregate {
                        function,
                        cast: result_cast,
                    }),
                }
            }),
        (
            prop::option::of(ident()),
            prop::option::of("[a-z0-9_]{1,6}")
        )
            .prop_map(|(alias, cast)| SelectItem::CountRows { alias, cast }),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        (
            ident(),
            prop::option::of(ident()),
            prop::option::of(ident()),
            prop::option::of(prop_oneof![Just(Join::Inner), Just(Join::Left)]),
            any::<bool>(),
            prop::collection::vec(inner, 0..4),
        )
            .prop_map(|(relation, alias, hint, join, spread, select)| {
                SelectItem::Embed(Embed {
                    relation,
                    // a spread embed has no key of its own
                    alias: alias.filter(|_| !spread),
                    hint,
                    join,
                    spread,
                    select,
                })
            })
    })
}

/// The parameters of embeds at distinct paths, each with at least a limit (an embed without
/// parameters prints nothing).
fn embedded() -> impl Strategy<Value = Vec<EmbedParams>> {
    prop::collection::vec(
        (
            prop::collection::vec(ident(), 1..3),
            prop::collection::vec(condition(), 0..3),
            prop::collection::vec(order_term(), 0..2),
            any::<u64>(),
            prop::option::of(any::<u64>()),
        )
            .prop_map(|(path, filters, order, limit, offset)| EmbedParams {
                path,
                filters,
                order,
                limit: Some(limit),
                offset,
            }),
        0..3,
    )
    .prop_map(|mut list| {
        let mut seen = Vec::new();
        list.retain(|e| {
            let new = !seen.contains(&e.path);
            seen.push(e.path.clone());
            new
        });
        list
    })
}

fn order_term() -> impl Strategy<Value = OrderTerm> {
    (
        prop::option::of(ident()),
        ident(),
        path(),
        prop::option::of(prop_oneof![Just(Direction::Asc), Just(Direction::Desc)]),
        prop::option::of(prop_oneof![Just(Nulls::First), Just(Nulls::Last)]),
    )
        .prop_map(|(relation, column, path, direction, nulls)| OrderTerm {
            relation,
            column,
            path,
            direction,
            nulls,
        })
}

fn query() -> impl Strategy<Value = Query> {
    (
        prop::option::of(prop::collection::vec(select_item(), 1..4)),
        prop::collection::vec(condition(), 0..4),
        prop::collection::vec(order_term(), 0..3),
        prop::option::of(any::<u64>()),
        prop::option::of(any::<u64>()),
        prop::option::of(prop::collection::vec(ident(), 1..3)),
        prop::option::of(prop::collection::vec(ident(), 1..3)),
        embedded(),
    )
        .prop_map(
            |(select, filters, order, limit, offset, columns, on_conflict, embedded)| Query {
                select,
                filters,
                order,
                limit,
                offset,
                columns,
                on_conflict,
                embedded,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn query_roundtrips(q in query()) {
        let pairs = to_query_string(&q);
        let parsed = parse_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        prop_assert_eq!(parsed, Ok(q), "pairs: {:?}", pairs);
    }

    #[test]
    fn condition_roundtrips(c in condition()) {
        let (k, v) = filter_param(&c);
        let parsed = match &c {
            Condition::Pred(_) => parse_filter(&k, &v),
            _ => parse_logic(&k, &v),
        };
        prop_assert_eq!(parsed, Ok(c), "{}={}", k, v);
    }

    #[test]
    fn select_roundtrips(items in prop::collection::vec(select_item(), 1..5)) {
        let s = select_param(&items);
        prop_assert_eq!(parse_select(&s), Ok(items), "{}", s);
    }

    #[test]
    fn order_roundtrips(terms in prop::collection::vec(order_term(), 1..5)) {
        let s = order_param(&terms);
        prop_assert_eq!(parse_order(&s), Ok(terms), "{}", s);
    }

    #[test]
    fn rendering_binds_every_placeholder(c in condition()) {
        let mut s = Sql::default();
        render::condition(&Sqlite, &c, &mut s);
        prop_assert!(s.binds_every_placeholder('?'), "{:?}", s);
        let mut p = Sql::default();
        render::condition(&Postgres, &c, &mut p);
        prop_assert!(p.binds_every_placeholder('$'), "{:?}", p);
        prop_assert_eq!(s.params.len(), p.params.len());
    }

    #[test]
    fn parsers_never_panic(s in text(), t in text()) {
        let _ = parse_select(&s);
        let _ = parse_order(&s);
        let _ = parse_columns(&s);
        let _ = parse_filter(&s, &t);
        let _ = parse_filter(&t, &s);
        for key in ["or", "and", "not.or", "not.and", "xor"] {
            let _ = parse_logic(key, &s);
        }
        let _ = parse_query([(s.as_str(), t.as_str()), ("limit", s.as_str()), ("offset", t.as_str())]);
    }

    #[test]
    fn parsers_never_panic_on_syntax_soup(
        s in r#"[a-z.,()"\\{}:*!éor ]{0,60}"#,
        op in "(not\\.)?(eq|in|is|like|or|and|eq\\(any\\)|in\\(all\\))\\.",
    ) {
        let value = format!("{op}{s}");
        let _ = parse_filter("a", &value);
        let _ = parse_logic("or", &format!("({s})"));
        let _ = parse_logic("or", &format!("(a.{value})"));
        let _ = parse_select(&s);
        let _ = parse_order(&s);
    }
}

#[test]
fn deep_and_huge_inputs_do_not_panic() {
    let deep = format!("{}{}", "or(".repeat(200_000), ")".repeat(200_000));
    assert!(parse_logic("or", &format!("({deep})")).is_err());
    let unbalanced = "(".repeat(100_000);
    assert!(parse_logic("or", &unbalanced).is_err());
    assert!(parse_filter("a", &format!("in.{unbalanced}")).is_err());
    let wide = format!("({})", vec!["a.eq.1"; 50_000].join(","));
    assert!(parse_logic("and", &wide).is_ok());
    let quotes = "\"".repeat(100_001);
    assert!(parse_select(&quotes).is_err());
    assert!(parse_order(&quotes).is_err());
}
