//! ORDS filter objects, property-tested: any text is answered (a filter or an error, never a
//! panic), and every filter object built from ORDS's grammar becomes conditions of the same
//! filter tree as the PostgREST syntax: each prints as a query parameter that parses back to it,
//! naming only the columns the object names.

use proptest::prelude::*;
use rowgate_query::filter_object::parse_filter_object;
use rowgate_query::parse::{parse_filter, parse_logic};
use rowgate_query::print::filter_param;
use rowgate_query::Condition;
use serde_json::{json, Value};

const COLUMNS: &[&str] = &["ename", "sal", "comm", "hiredate", "deptno"];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i32>().prop_map(Value::from),
        "[a-zA-Z0-9 %_.,()\"'*\\\\-]{0,12}".prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T00:00:00Z".prop_map(|d| json!({"$date": d})),
    ]
}

/// An operator object on one column.
fn operators() -> impl Strategy<Value = Value> {
    let op = prop_oneof![
        (
            prop::sample::select(vec![
                "$eq", "$ne", "$lt", "$lte", "$gt", "$gte", "$like", "$instr", "$ninstr"
            ]),
            scalar()
        )
            .prop_map(|(op, v)| (op.to_string(), v)),
        Just(("$null".to_string(), Value::Null)),
        Just(("$notnull".to_string(), Value::Null)),
        (scalar(), scalar()).prop_map(|(a, b)| ("$between".to_string(), json!([a, b]))),
        prop::collection::vec(scalar(), 1..4).prop_map(|vs| ("$in".to_string(), Value::from(vs))),
        prop::collection::vec(scalar(), 1..4).prop_map(|vs| ("$nin".to_string(), Value::from(vs))),
    ];
    prop::collection::vec(op, 1..3).prop_map(|ops| Value::Object(ops.into_iter().collect()))
}

/// A filter object: columns with values or operators, and `$and`/`$or` of such objects.
fn filter_object() -> impl Strategy<Value = Value> {
    let member = (
        prop::sample::select(COLUMNS),
        prop_oneof![scalar(), operators()],
    )
        .prop_map(|(c, v)| json!({ c: v }));
    member.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            (
                prop::sample::select(vec!["$and", "$or"]),
                prop::collection::vec(inner.clone(), 1..3)
            )
                .prop_map(|(k, items)| json!({ k: items })),
            (inner.clone(), inner).prop_map(|(a, b)| {
                let mut o = a.as_object().cloned().unwrap_or_default();
                o.extend(b.as_object().cloned().unwrap_or_default());
                Value::Object(o)
            }),
        ]
    })
}

fn columns_of(c: &Condition, out: &mut Vec<String>) {
    match c {
        Condition::Pred(p) => out.push(p.column.clone()),
        Condition::And { items, .. } | Condition::Or { items, .. } => {
            items.iter().for_each(|i| columns_of(i, out))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_is_answered(text in "\\PC{0,64}") {
        let _ = parse_filter_object(&text);
    }

    #[test]
    fn filter_objects_are_postgrest_conditions(object in filter_object()) {
        let text = object.to_string();
        let parsed = parse_filter_object(&text);
        prop_assert!(parsed.is_ok(), "{}: {:?}", text, parsed);
        for c in parsed.expect("parsed").filters {
            let (k, v) = filter_param(&c);
            let back = match &c {
                Condition::Pred(_) => parse_filter(&k, &v),
                _ => parse_logic(&k, &v),
            };
            prop_assert_eq!(back, Ok(c.clone()), "{} -> {}={}", text, k, v);
            let mut names = Vec::new();
            columns_of(&c, &mut names);
            prop_assert!(names.iter().all(|n| COLUMNS.contains(&n.as_str())), "{:?}", names);
        }
    }
}
