//! Table-driven tests of `parse_query`: each case is a list of (already decoded) query pairs and
//! either the expected `Query` or the expected error kind plus a substring of the error text.

use rowgate_query::parse::{parse_logic, parse_query, MAX_LOGIC_DEPTH};
use rowgate_query::{
    Aggregate, AggregateFunction, Condition, Direction, Embed, IsValue, Join, JsonKey, JsonStep,
    Nulls, Operand, Operator as Op, OrderTerm, ParseErrorKind as K, Predicate, Quantifier, Query,
    SelectItem,
};

enum Want {
    /// Only these filters.
    F(Vec<Condition>),
    /// The whole query.
    Q(Query),
    /// An error of this kind whose text contains this.
    E(K, &'static str),
}
use Want::{E, F, Q};

fn pred(col: &str, op: Op, operand: Operand) -> Condition {
    Condition::Pred(Predicate::new(col, op, operand))
}

fn fts_in(col: &str, op: Op, language: &str, v: &str) -> Condition {
    let mut c = pred(col, op, sc(v));
    if let Condition::Pred(p) = &mut c {
        p.language = Some(language.to_owned());
    }
    c
}

fn field(name: &str) -> JsonKey {
    JsonKey::Field(name.to_owned())
}

fn with_path(mut c: Condition, steps: &[(JsonKey, bool)]) -> Condition {
    if let Condition::Pred(p) = &mut c {
        p.path = steps
            .iter()
            .map(|(key, as_text)| JsonStep {
                key: key.clone(),
                as_text: *as_text,
                to_json: false,
            })
            .collect();
    }
    c
}

fn neg(mut c: Condition) -> Condition {
    match &mut c {
        Condition::Pred(p) => p.negated = true,
        Condition::And { negated, .. } | Condition::Or { negated, .. } => *negated = true,
    }
    c
}

fn quant(mut c: Condition, q: Quantifier) -> Condition {
    if let Condition::Pred(p) = &mut c {
        p.quantifier = Some(q);
    }
    c
}

fn sc(v: &str) -> Operand {
    Operand::Scalar(v.to_owned())
}

fn li(v: &[&str]) -> Operand {
    Operand::List(v.iter().map(|s| (*s).to_owned()).collect())
}

fn or(items: Vec<Condition>) -> Condition {
    Condition::Or {
        negated: false,
        items,
    }
}

fn and(items: Vec<Condition>) -> Condition {
    Condition::And {
        negated: false,
        items,
    }
}

fn col(name: &str) -> SelectItem {
    SelectItem::Column {
        name: name.to_owned(),
        path: Vec::new(),
        alias: None,
        cast: None,
        aggregate: None,
    }
}

fn col_as(alias: Option<&str>, name: &str, cast: Option<&str>) -> SelectItem {
    SelectItem::Column {
        name: name.to_owned(),
        path: Vec::new(),
        alias: alias.map(str::to_owned),
        cast: cast.map(str::to_owned),
        aggregate: None,
    }
}

fn ord(column: &str, direction: Option<Direction>, nulls: Option<Nulls>) -> OrderTerm {
    OrderTerm {
        relation: None,
        column: column.to_owned(),
        path: Vec::new(),
        direction,
        nulls,
    }
}

fn embed_of(relation: &str, select: Vec<SelectItem>) -> Embed {
    Embed {
        relation: relation.into(),
        alias: None,
        hint: None,
        join: None,
        spread: false,
        select,
    }
}

fn embed(relation: &str, select: Vec<SelectItem>) -> SelectItem {
    SelectItem::Embed(embed_of(relation, select))
}

fn sel(items: Vec<SelectItem>) -> Want {
    Q(Query {
        select: Some(items),
        ..Query::default()
    })
}

fn order(terms: Vec<OrderTerm>) -> Want {
    Q(Query {
        order: terms,
        ..Query::default()
    })
}

fn nested(depth: usize) -> String {
    // depth groups: or=( and( and( … a.eq.1 … ) ) )
    let mut s = String::from("(");
    for _ in 1..depth {
        s.push_str("and(");
    }
    s.push_str("a.eq.1");
    for _ in 0..depth {
        s.push(')');
    }
    s
}

fn nested_ast(depth: usize) -> Condition {
    let mut c = pred("a", Op::Eq, sc("1"));
    for _ in 1..depth {
        c = and(vec![c]);
    }
    or(vec![c])
}

fn cases() -> Vec<(Vec<(String, String)>, Want)> {
    let c = |pairs: &[(&str, &str)], want: Want| {
        (
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>(),
            want,
        )
    };
    use Direction::{Asc, Desc};
    use Quantifier::{All, Any};
    vec![
        // ---- every operator
        c(&[("a", "eq.1")], F(vec![pred("a", Op::Eq, sc("1"))])),
        c(&[("a", "neq.x")], F(vec![pred("a", Op::Neq, sc("x"))])),
        c(&[("a", "gt.5")], F(vec![pred("a", Op::Gt, sc("5"))])),
        c(&[("a", "gte.5")], F(vec![pred("a", Op::Gte, sc("5"))])),
        c(&[("a", "lt.-5")], F(vec![pred("a", Op::Lt, sc("-5"))])),
        c(&[("a", "lte.5")], F(vec![pred("a", Op::Lte, sc("5"))])),
        c(
            &[("a", "like.*.com")],
            F(vec![pred("a", Op::Like, sc("*.com"))]),
        ),
        c(
            &[("a", "ilike.A*")],
            F(vec![pred("a", Op::Ilike, sc("A*"))]),
        ),
        c(
            &[("a", "match.^a.+$")],
            F(vec![pred("a", Op::Match, sc("^a.+$"))]),
        ),
        c(
            &[("a", "imatch.abc")],
            F(vec![pred("a", Op::Imatch, sc("abc"))]),
        ),
        c(
            &[("a", "isdistinct.5")],
            F(vec![pred("a", Op::IsDistinct, sc("5"))]),
        ),
        c(
            &[("a", "in.(1,2,3)")],
            F(vec![pred("a", Op::In, li(&["1", "2", "3"]))]),
        ),
        c(
            &[("a", "is.null")],
            F(vec![pred("a", Op::Is, Operand::Is(IsValue::Null))]),
        ),
        // ---- values are verbatim after the first `op.`
        c(&[("a", "eq.1.5")], F(vec![pred("a", Op::Eq, sc("1.5"))])),
        c(&[("a", "eq.")], F(vec![pred("a", Op::Eq, sc(""))])),
        c(
            &[("a", "eq.(x,y)")],
            F(vec![pred("a", Op::Eq, sc("(x,y)"))]),
        ),
        c(
            &[("a", "eq.\"q\"")],
            F(vec![pred("a", Op::Eq, sc("\"q\""))]),
        ),
        c(
            &[("a", "eq.not.x")],
            F(vec![pred("a", Op::Eq, sc("not.x"))]),
        ),
        c(
            &[("a", "eq. spaced ")],
            F(vec![pred("a", Op::Eq, sc(" spaced "))]),
        ),
        c(&[("a", "eq.日本")], F(vec![pred("a", Op::Eq, sc("日本"))])),
        c(
            &[("a", "like.a%b_c")],
            F(vec![pred("a", Op::Like, sc("a%b_c"))]),
        ),
        // ---- not.
        c(
            &[("a", "not.eq.1")],
            F(vec![neg(pred("a", Op::Eq, sc("1")))]),
        ),
        c(
            &[("a", "not.in.(1,2)")],
            F(vec![neg(pred("a", Op::In, li(&["1", "2"])))]),
        ),
        c(
            &[("a", "not.is.null")],
            F(vec![neg(pred("a", Op::Is, Operand::Is(IsValue::Null)))]),
        ),
        c(
            &[("a", "not.like.x*")],
            F(vec![neg(pred("a", Op::Like, sc("x*")))]),
        ),
        c(
            &[("a", "not.not.eq.1")],
            E(K::Filter, "operator \"not\" is unknown"),
        ),
        // ---- in lists
        c(&[("a", "in.()")], F(vec![pred("a", Op::In, li(&[]))])),
        c(
            &[("a", "in.(\"a,b\",c)")],
            F(vec![pred("a", Op::In, li(&["a,b", "c"]))]),
        ),
        c(
            &[("a", r#"in.("a\"b","c\\d")"#)],
            F(vec![pred("a", Op::In, li(&["a\"b", "c\\d"]))]),
        ),
        c(
            &[("a", "in.( x ,y )")],
            // spaces after `(` skipped, the others kept, as PostgREST reads a list
            F(vec![pred("a", Op::In, li(&["x ", "y "]))]),
        ),
        c(
            &[("a", "in.(a,,b)")],
            F(vec![pred("a", Op::In, li(&["a", "", "b"]))]),
        ),
        c(&[("a", "in.(\"\")")], F(vec![pred("a", Op::In, li(&[""]))])),
        c(
            &[("a", "in.(\"a\"b,c)")],
            F(vec![pred("a", Op::In, li(&["\"a\"b", "c"]))]),
        ),
        c(
            &[("a", "in.(a(b,c)")],
            F(vec![pred("a", Op::In, li(&["a(b", "c"]))]),
        ),
        c(
            &[("a", "in.(\"x)y\")")],
            F(vec![pred("a", Op::In, li(&["x)y"]))]),
        ),
        c(
            &[("a", "in.(1.5,2.5)")],
            F(vec![pred("a", Op::In, li(&["1.5", "2.5"]))]),
        ),
        c(&[("a", "in.1,2")], E(K::Filter, "parenthesized list")),
        c(&[("a", "in.(1,2")], E(K::Filter, "unterminated list")),
        c(
            &[("a", "in.(\"1,2)")],
            F(vec![pred("a", Op::In, li(&["\"1", "2"]))]),
        ),
        c(&[("a", "in.(1,2)x")], E(K::Filter, "unexpected \"x\"")),
        // ---- is
        c(
            &[("a", "is.NULL")],
            F(vec![pred("a", Op::Is, Operand::Is(IsValue::Null))]),
        ),
        c(
            &[("a", "is.not_null")],
            F(vec![pred("a", Op::Is, Operand::Is(IsValue::NotNull))]),
        ),
        c(
            &[("a", "is.true")],
            F(vec![pred("a", Op::Is, Operand::Is(IsValue::True))]),
        ),
        c(
            &[("a", "is.FALSE")],
            F(vec![pred("a", Op::Is, Operand::Is(IsValue::False))]),
        ),
        c(
            &[("a", "is.Unknown")],
            F(vec![pred("a", Op::Is, Operand::Is(IsValue::Unknown))]),
        ),
        c(
            &[("a", "is.maybe")],
            E(K::Filter, "unknown is value \"maybe\""),
        ),
        c(&[("a", "is.")], E(K::Filter, "unknown is value")),
        c(&[("a", "is.null.x")], E(K::Filter, "unknown is value")),
        // ---- quantifiers
        c(
            &[("a", "eq(any).{1,2}")],
            F(vec![quant(pred("a", Op::Eq, li(&["1", "2"])), Any)]),
        ),
        c(
            &[("a", "like(all).{a*,*b}")],
            F(vec![quant(pred("a", Op::Like, li(&["a*", "*b"])), All)]),
        ),
        c(
            &[("a", "ilike(any).{\"a,b\",c}")],
            F(vec![quant(pred("a", Op::Ilike, li(&["a,b", "c"])), Any)]),
        ),
        c(
            &[("a", "gt(all).{}")],
            F(vec![quant(pred("a", Op::Gt, li(&[])), All)]),
        ),
        c(
            &[("a", "gte(any).{1}")],
            F(vec![quant(pred("a", Op::Gte, li(&["1"])), Any)]),
        ),
        c(
            &[("a", "lt(any).{1}")],
            F(vec![quant(pred("a", Op::Lt, li(&["1"])), Any)]),
        ),
        c(
            &[("a", "lte(all).{1}")],
            F(vec![quant(pred("a", Op::Lte, li(&["1"])), All)]),
        ),
        c(
            &[("a", "match(any).{^a,b$}")],
            F(vec![quant(pred("a", Op::Match, li(&["^a", "b$"])), Any)]),
        ),
        c(
            &[("a", "imatch(all).{x}")],
            F(vec![quant(pred("a", Op::Imatch, li(&["x"])), All)]),
        ),
        c(
            &[("a", "not.eq(any).{1}")],
            F(vec![neg(quant(pred("a", Op::Eq, li(&["1"])), Any))]),
        ),
        c(
            &[("a", "neq(any).{1}")],
            E(K::Filter, "does not take (any) or (all)"),
        ),
        c(&[("a", "in(any).(1)")], E(K::Filter, "does not take")),
        c(&[("a", "is(all).null")], E(K::Filter, "does not take")),
        c(
            &[("a", "eq(some).{1}")],
            E(K::Filter, "unknown quantifier \"some\""),
        ),
        c(&[("a", "eq(any).1")], E(K::Filter, "braced list")),
        c(&[("a", "eq(any).{1,2")], E(K::Filter, "unterminated list")),
        c(
            &[("a", "eq(any")],
            E(K::Filter, "expected \")\" after the quantifier"),
        ),
        // ---- bad operators
        c(
            &[("a", "foo.1")],
            E(K::Filter, "operator \"foo\" is unknown"),
        ),
        // ---- PostgreSQL-only operators parse everywhere (the planner rejects them on SQLite)
        c(
            &[("a", "cs.{1,2}")],
            F(vec![pred("a", Op::Contains, sc("{1,2}"))]),
        ),
        c(
            &[("a", "not.ov.[1,5)")],
            F(vec![neg(pred("a", Op::Overlaps, sc("[1,5)")))]),
        ),
        c(
            &[("a", "adj.(1,5]")],
            F(vec![pred("a", Op::Adjacent, sc("(1,5]"))]),
        ),
        c(
            &[("a", "fts.cat & dog")],
            F(vec![pred("a", Op::Fts, sc("cat & dog"))]),
        ),
        c(
            &[("a", "wfts(english).\"fat cat\" -rat")],
            F(vec![fts_in("a", Op::Wfts, "english", "\"fat cat\" -rat")]),
        ),
        c(&[("a", "fts().x")], E(K::Filter, "text search language")),
        c(
            &[("a", "fts(english.x")],
            E(K::Filter, "text search language"),
        ),
        c(&[("a", "cs(any).{1}")], E(K::Filter, "does not take")),
        c(
            &[("or", "(a.cs.{1,2},b.sl.[1,5),c.fts(simple).x)")],
            F(vec![or(vec![
                pred("a", Op::Contains, sc("{1,2}")),
                pred("b", Op::StrictlyLeft, sc("[1,5)")),
                fts_in("c", Op::Fts, "simple", "x"),
            ])]),
        ),
        // ---- JSON paths
        c(
            &[("data->a->>b", "eq.x")],
            F(vec![with_path(
                pred("data", Op::Eq, sc("x")),
                &[(field("a"), false), (field("b"), true)],
            )]),
        ),
        c(
            &[("and", "(arr->0.gt.1,arr->-1->>k.eq.2)")],
            F(vec![and(vec![
                with_path(pred("arr", Op::Gt, sc("1")), &[(JsonKey::Index(0), false)]),
                with_path(
                    pred("arr", Op::Eq, sc("2")),
                    &[(JsonKey::Index(-1), false), (field("k"), true)],
                ),
            ])]),
        ),
        c(
            &[("data->>a->b", "eq.1")],
            E(K::Filter, "must be the last step"),
        ),
        c(&[("data->", "eq.1")], E(K::Filter, "expected a key")),
        c(&[("data->-x", "eq.1")], E(K::Filter, "array index")),
        c(
            &[("data->99999999999999999999", "eq.1")],
            E(K::Filter, "out of range"),
        ),
        c(&[("a", "EQ.1")], E(K::Filter, "operator \"EQ\" is unknown")),
        c(&[("a", "eq")], E(K::Filter, "missing \".\" and value")),
        c(&[("a", "")], E(K::Filter, "missing operator")),
        c(&[("a", ".1")], E(K::Filter, "expected an operator")),
        c(
            &[("a", "eq,1")],
            E(K::Filter, "expected \".\" after the operator"),
        ),
        // ---- column names
        c(
            &[("\"a b\"", "eq.1")],
            F(vec![pred("a b", Op::Eq, sc("1"))]),
        ),
        c(
            &[("first name", "eq.1")],
            F(vec![pred("first name", Op::Eq, sc("1"))]),
        ),
        c(
            &[("\"a.b\"", "eq.1")],
            F(vec![pred("a.b", Op::Eq, sc("1"))]),
        ),
        c(
            &[("\"we\"\"ird\"", "eq.1")],
            F(vec![pred("we\"ird", Op::Eq, sc("1"))]),
        ),
        c(
            &[(r#""we\"ird\\""#, "eq.1")],
            F(vec![pred("we\"ird\\", Op::Eq, sc("1"))]),
        ),
        c(&[("é", "eq.1")], F(vec![pred("é", Op::Eq, sc("1"))])),
        c(&[("$x_1", "eq.1")], F(vec![pred("$x_1", Op::Eq, sc("1"))])),
        c(
            &[("\"select\"", "eq.1")],
            F(vec![pred("select", Op::Eq, sc("1"))]),
        ),
        // `a.b` is column b of the embed a (see embedded_parameters_are_keyed_by_their_path)
        c(
            &[(".b", "eq.1")],
            E(
                K::Filter,
                "expected a column name, found \".\" at position 1",
            ),
        ),
        c(&[("\"\"", "eq.1")], E(K::Filter, "empty quoted identifier")),
        c(
            &[("\"abc", "eq.1")],
            E(K::Filter, "unterminated quoted identifier"),
        ),
        // dashes join words of a name, as PostgREST reads `field-with_sep`; not an arrow
        c(&[("a-b", "eq.1")], F(vec![pred("a-b", Op::Eq, sc("1"))])),
        c(&[("a-", "eq.1")], E(K::Filter, "unexpected \"-\"")),
        c(&[("", "eq.1")], E(K::Filter, "expected a column name")),
        // ---- logic trees
        // spaces around a nested group's word and inside a list, as PostgREST allows
        c(
            &[("and", "( or ( a.in.( 1,2 ) , b.eq.3 ) )")],
            F(vec![and(vec![or(vec![
                pred("a", Op::In, li(&["1", "2 "])),
                pred("b", Op::Eq, sc("3 ")),
            ])])]),
        ),
        c(&[("a", "in.(   )")], F(vec![pred("a", Op::In, li(&[]))])),
        c(
            &[("or", "(a.eq.1,b.gt.2)")],
            F(vec![or(vec![
                pred("a", Op::Eq, sc("1")),
                pred("b", Op::Gt, sc("2")),
            ])]),
        ),
        c(
            &[("and", "(a.eq.1,b.eq.2)")],
            F(vec![and(vec![
                pred("a", Op::Eq, sc("1")),
                pred("b", Op::Eq, sc("2")),
            ])]),
        ),
        c(
            &[("not.or", "(a.eq.1,b.eq.2)")],
            F(vec![neg(or(vec![
                pred("a", Op::Eq, sc("1")),
                pred("b", Op::Eq, sc("2")),
            ]))]),
        ),
        c(
            &[("not.and", "(a.eq.1)")],
            F(vec![neg(and(vec![pred("a", Op::Eq, sc("1"))]))]),
        ),
        c(
            &[(
                "or",
                "(a.eq.1,b.gt.2,or(c.is.null,not.d.like.x*),not.and(e.eq.1,f.eq.2))",
            )],
            F(vec![or(vec![
                pred("a", Op::Eq, sc("1")),
                pred("b", Op::Gt, sc("2")),
                or(vec![
                    pred("c", Op::Is, Operand::Is(IsValue::Null)),
                    neg(pred("d", Op::Like, sc("x*"))),
                ]),
                neg(and(vec![
                    pred("e", Op::Eq, sc("1")),
                    pred("f", Op::Eq, sc("2")),
                ])),
            ])]),
        ),
        c(
            &[("or", "(and(a.eq.1,not.or(b.eq.2)))")],
            F(vec![or(vec![and(vec![
                pred("a", Op::Eq, sc("1")),
                neg(or(vec![pred("b", Op::Eq, sc("2"))])),
            ])])]),
        ),
        c(
            &[("or", "(name.eq.\"a,b\",c.eq.x)")],
            F(vec![or(vec![
                pred("name", Op::Eq, sc("a,b")),
                pred("c", Op::Eq, sc("x")),
            ])]),
        ),
        c(
            &[("or", "(name.eq.\"(a)\")")],
            F(vec![or(vec![pred("name", Op::Eq, sc("(a)"))])]),
        ),
        c(
            &[("or", r#"(a.eq."x\"y\\")"#)],
            F(vec![or(vec![pred("a", Op::Eq, sc("x\"y\\"))])]),
        ),
        c(
            &[("or", "(a.in.(1,2),b.eq.3)")],
            F(vec![or(vec![
                pred("a", Op::In, li(&["1", "2"])),
                pred("b", Op::Eq, sc("3")),
            ])]),
        ),
        c(
            &[("or", "(a.in.(\"x,y\",z),b.in.())")],
            F(vec![or(vec![
                pred("a", Op::In, li(&["x,y", "z"])),
                pred("b", Op::In, li(&[])),
            ])]),
        ),
        c(
            &[("or", "(a.eq.1.5,b.like.*.com)")],
            F(vec![or(vec![
                pred("a", Op::Eq, sc("1.5")),
                pred("b", Op::Like, sc("*.com")),
            ])]),
        ),
        c(
            &[("or", "( a.eq.1 , b.eq.2 )")],
            F(vec![or(vec![
                pred("a", Op::Eq, sc("1 ")),
                pred("b", Op::Eq, sc("2 ")),
            ])]),
        ),
        c(
            &[("or", "(a.eq(any).{1,2},b.like(all).{\"x,y\"})")],
            F(vec![or(vec![
                quant(pred("a", Op::Eq, li(&["1", "2"])), Any),
                quant(pred("b", Op::Like, li(&["x,y"])), All),
            ])]),
        ),
        c(
            &[("or", "(a.eq.{1,2},b.eq.3)")],
            F(vec![or(vec![
                pred("a", Op::Eq, sc("{1,2}")),
                pred("b", Op::Eq, sc("3")),
            ])]),
        ),
        c(
            &[("or", "(\"a.b\".eq.1,\"c d\".neq.2)")],
            F(vec![or(vec![
                pred("a.b", Op::Eq, sc("1")),
                pred("c d", Op::Neq, sc("2")),
            ])]),
        ),
        c(
            &[("or", "(a.is.null,b.is.TRUE)")],
            F(vec![or(vec![
                pred("a", Op::Is, Operand::Is(IsValue::Null)),
                pred("b", Op::Is, Operand::Is(IsValue::True)),
            ])]),
        ),
        c(
            &[("or", "(a.not.eq.1)")],
            F(vec![or(vec![neg(pred("a", Op::Eq, sc("1")))])]),
        ),
        c(
            &[("or", "(or.eq.1,and.eq.2)")],
            F(vec![or(vec![
                pred("or", Op::Eq, sc("1")),
                pred("and", Op::Eq, sc("2")),
            ])]),
        ),
        c(
            &[("or", "(not.eq.1)")],
            F(vec![or(vec![pred("not", Op::Eq, sc("1"))])]),
        ),
        // lenient `not.col.op.value`, read only when `not` cannot be the column
        c(
            &[("or", "(not.d.like.x*,not.e.not.eq.1)")],
            F(vec![or(vec![
                neg(pred("d", Op::Like, sc("x*"))),
                pred("e", Op::Eq, sc("1")),
            ])]),
        ),
        c(
            &[("or", "(not.not.eq.1)")],
            F(vec![or(vec![neg(pred("not", Op::Eq, sc("1")))])]),
        ),
        c(
            &[("or", "(not.d.foo.1)")],
            E(K::Logic, "operator \"d\" is unknown"),
        ),
        c(
            &[("or", "(a.eq.(x)")],
            F(vec![or(vec![pred("a", Op::Eq, sc("(x"))])]),
        ),
        c(
            &[("or", "(a.eq.)")],
            F(vec![or(vec![pred("a", Op::Eq, sc(""))])]),
        ),
        c(&[("or", "()")], E(K::Logic, "empty logic group")),
        c(&[("or", "(a.eq.1")], E(K::Logic, "missing \")\"")),
        c(
            &[("or", "(a.eq.1,or(b.eq.2)")],
            E(K::Logic, "missing \")\""),
        ),
        c(&[("or", "a.eq.1")], E(K::Logic, "expected \"(\"")),
        c(&[("or", "")], E(K::Logic, "expected \"(\", found the end")),
        c(&[("or", "(a.eq.1))")], E(K::Logic, "unexpected \")\"")),
        c(
            &[("or", "(a.foo.1)")],
            E(K::Logic, "operator \"foo\" is unknown"),
        ),
        c(
            &[("or", "(a)")],
            E(K::Logic, "expected \".\" after the column name"),
        ),
        c(
            &[("or", "(a.eq.1,)")],
            E(K::Logic, "expected a column name"),
        ),
        c(
            &[("or", "(a.eq.\"x\"y,b.eq.2)")],
            F(vec![or(vec![
                pred("a", Op::Eq, sc("\"x\"y")),
                pred("b", Op::Eq, sc("2")),
            ])]),
        ),
        c(&[("or", "(a.eq.{x}y)")], E(K::Logic, "unexpected \"y\"")),
        c(&[("or", "(a.in.(1,2)")], E(K::Logic, "missing \")\"")),
        c(&[("or", "(a.is.maybe)")], E(K::Logic, "unknown is value")),
        c(
            &[("or", "(xor(a.eq.1))")],
            E(K::Logic, "expected \".\" after the column name"),
        ),
        c(
            &[("or", &nested(MAX_LOGIC_DEPTH))],
            F(vec![nested_ast(MAX_LOGIC_DEPTH)]),
        ),
        c(
            &[("or", &nested(MAX_LOGIC_DEPTH + 1))],
            E(K::Logic, "nested deeper than 32 levels"),
        ),
        c(
            &[("or", &nested(10_000))],
            E(K::Logic, "nested deeper than"),
        ),
        // ---- limit / offset
        c(
            &[("limit", "10"), ("offset", "5")],
            Q(Query {
                limit: Some(10),
                offset: Some(5),
                ..Query::default()
            }),
        ),
        c(
            &[("limit", "1"), ("limit", "2")],
            Q(Query {
                limit: Some(2),
                ..Query::default()
            }),
        ),
        c(
            &[("limit", "0")],
            Q(Query {
                limit: Some(0),
                ..Query::default()
            }),
        ),
        // as PostgREST, a negative offset is none, a negative limit a range nothing satisfies
        c(&[("limit", "-1")], E(K::NegativeLimit, "Limit should be greater")),
        c(
            &[("offset", "-4")],
            Q(Query {
                offset: Some(0),
                ..Query::default()
            }),
        ),
        c(&[("offset", "-")], E(K::Limit, "non-negative integer")),
        c(
            &[("limit", "abc")],
            E(
                K::Limit,
                "limit must be a non-negative integer, got \"abc\"",
            ),
        ),
        c(&[("limit", "")], E(K::Limit, "non-negative")),
        c(&[("limit", "+3")], E(K::Limit, "non-negative")),
        c(
            &[("offset", "1.5")],
            E(K::Limit, "offset must be a non-negative integer"),
        ),
        c(&[("offset", " 1")], E(K::Limit, "offset must be")),
        c(
            &[("limit", "99999999999999999999999")],
            E(K::Limit, "too large"),
        ),
        // ---- select
        c(&[("select", "*")], sel(vec![SelectItem::Star])),
        c(&[("select", "a,b")], sel(vec![col("a"), col("b")])),
        c(
            &[("select", "x:a")],
            sel(vec![col_as(Some("x"), "a", None)]),
        ),
        c(
            &[("select", "a::text")],
            sel(vec![col_as(None, "a", Some("text"))]),
        ),
        c(
            &[("select", "x:a::TEXT")],
            sel(vec![col_as(Some("x"), "a", Some("text"))]),
        ),
        c(&[("select", " a , b ")], sel(vec![col("a"), col("b")])),
        c(
            &[("select", "x : a :: int")],
            sel(vec![col_as(Some("x"), "a", Some("int"))]),
        ),
        c(
            &[("select", "\"my col\",b")],
            sel(vec![col("my col"), col("b")]),
        ),
        c(
            &[("select", "\"a,b\":\"c:d\"")],
            sel(vec![col_as(Some("a,b"), "c:d", None)]),
        ),
        c(&[("select", "é,名前")], sel(vec![col("é"), col("名前")])),
        c(&[("select", "first name")], sel(vec![col("first name")])),
        c(&[("select", "*,a")], sel(vec![SelectItem::Star, col("a")])),
        c(
            &[("select", "a::double precision")],
            sel(vec![col_as(None, "a", Some("double precision"))]),
        ),
        c(&[("select", "a"), ("select", "b")], sel(vec![col("b")])),
        // aggregates: count() of rows, a column's with casts before and after
        c(
            &[("select", "n:count()::text, team_id ,t:points::int.sum()::text,points.avg()")],
            sel(vec![
                SelectItem::CountRows {
                    alias: Some("n".into()),
                    cast: Some("text".into()),
                },
                col("team_id"),
                SelectItem::Column {
                    name: "points".into(),
                    path: Vec::new(),
                    alias: Some("t".into()),
                    cast: Some("int".into()),
                    aggregate: Some(Aggregate {
                        function: AggregateFunction::Sum,
                        cast: Some("text".into()),
                    }),
                },
                SelectItem::Column {
                    name: "points".into(),
                    path: Vec::new(),
                    alias: None,
                    cast: None,
                    aggregate: Some(Aggregate {
                        function: AggregateFunction::Avg,
                        cast: None,
                    }),
                },
            ]),
        ),
        // quoted, it is a relation of that name
        c(
            &[("select", "\"count\"()")],
            sel(vec![SelectItem::Embed(Embed {
                relation: "count".into(),
                alias: None,
                hint: None,
                join: None,
                spread: false,
                select: Vec::new(),
            })]),
        ),
        c(
            &[("select", "a.median()")],
            E(K::Select, "expected an aggregate function"),
        ),
        // an empty `select=` is every column, as PostgREST reads it
        c(&[("select", "")], Q(Query::default())),
        c(&[("select", "  ")], Q(Query::default())),
        c(&[("select", "a,")], E(K::Select, "trailing \",\"")),
        c(
            &[("select", "a,,b")],
            E(K::Select, "expected a column name, found \",\""),
        ),
        c(
            &[("select", "rel(a,b)")],
            sel(vec![embed("rel", vec![col("a"), col("b")])]),
        ),
        c(
            &[("select", "a,alias:rel(*)")],
            sel(vec![
                col("a"),
                SelectItem::Embed(Embed {
                    alias: Some("alias".into()),
                    ..embed_of("rel", vec![SelectItem::Star])
                }),
            ]),
        ),
        c(
            &[("select", "rel!fk(a)")],
            sel(vec![SelectItem::Embed(Embed {
                hint: Some("fk".into()),
                ..embed_of("rel", vec![col("a")])
            })]),
        ),
        c(
            &[("select", "rel!fk!inner(a),other!left()")],
            sel(vec![
                SelectItem::Embed(Embed {
                    hint: Some("fk".into()),
                    join: Some(Join::Inner),
                    ..embed_of("rel", vec![col("a")])
                }),
                SelectItem::Embed(Embed {
                    join: Some(Join::Left),
                    ..embed_of("other", vec![])
                }),
            ]),
        ),
        c(
            &[("select", "rel!\"inner\"(a)")],
            sel(vec![SelectItem::Embed(Embed {
                hint: Some("inner".into()),
                ..embed_of("rel", vec![col("a")])
            })]),
        ),
        c(
            &[("select", "...rel(a, b:c(d))")],
            sel(vec![SelectItem::Embed(Embed {
                spread: true,
                ..embed_of(
                    "rel",
                    vec![
                        col("a"),
                        SelectItem::Embed(Embed {
                            alias: Some("b".into()),
                            ..embed_of("c", vec![col("d")])
                        }),
                    ],
                )
            })]),
        ),
        c(&[("select", "rel(a")], E(K::Select, "missing \")\"")),
        c(
            &[("select", "rel!(a)")],
            E(K::Select, "expected a column name"),
        ),
        c(&[("select", "rel!a!b(x)")], E(K::Select, "one hint")),
        c(&[("select", "rel!inner")], E(K::Select, "expected \"(\"")),
        c(&[("select", "rel(a,)")], E(K::Select, "trailing \",\"")),
        c(
            &[("select", &"a(".repeat(20))],
            E(K::Select, "nest too deep"),
        ),
        c(
            &[("select", "x:data->\"0\"->>b::int,arr->1")],
            sel(vec![
                SelectItem::Column {
                    name: "data".into(),
                    path: vec![
                        JsonStep {
                            key: field("0"),
                            as_text: false,
                            to_json: false,
                        },
                        JsonStep {
                            key: field("b"),
                            as_text: true,
                            to_json: false,
                        },
                    ],
                    alias: Some("x".into()),
                    cast: Some("int".into()),
                    aggregate: None,
                },
                SelectItem::Column {
                    name: "arr".into(),
                    path: vec![JsonStep {
                        key: JsonKey::Index(1),
                        as_text: false,
                        to_json: false,
                    }],
                    alias: None,
                    cast: None,
                    aggregate: None,
                },
            ]),
        ),
        c(
            &[("order", "data->>a.desc.nullslast")],
            order(vec![OrderTerm {
                relation: None,
                path: vec![JsonStep {
                    key: field("a"),
                    as_text: true,
                    to_json: false,
                }],
                ..ord("data", Some(Direction::Desc), Some(Nulls::Last))
            }]),
        ),
        c(&[("select", "a::")], E(K::Select, "expected a type name")),
        c(
            &[("select", "a.b")],
            E(
                K::Select,
                "expected an aggregate function after \".\": avg(), count(), max(), min() or sum() at position 2 in \"a.b\"",
            ),
        ),
        c(
            &[("select", "\"abc")],
            E(K::Select, "unterminated quoted identifier"),
        ),
        c(&[("select", "é.x")], E(K::Select, "at position 2")),
        c(&[("select", "*x")], E(K::Select, "unexpected \"x\"")),
        // ---- order
        c(&[("order", "a")], order(vec![ord("a", None, None)])),
        c(
            &[("order", "a.asc")],
            order(vec![ord("a", Some(Asc), None)]),
        ),
        c(
            &[("order", "a.desc")],
            order(vec![ord("a", Some(Desc), None)]),
        ),
        c(
            &[("order", "a.nullsfirst")],
            order(vec![ord("a", None, Some(Nulls::First))]),
        ),
        c(
            &[("order", "a.desc.nullslast")],
            order(vec![ord("a", Some(Desc), Some(Nulls::Last))]),
        ),
        c(
            &[("order", "a.asc.nullsfirst,b")],
            order(vec![
                ord("a", Some(Asc), Some(Nulls::First)),
                ord("b", None, None),
            ]),
        ),
        c(
            &[("order", " a.desc , b.asc ")],
            order(vec![ord("a", Some(Desc), None), ord("b", Some(Asc), None)]),
        ),
        c(
            &[("order", "\"a.b\".desc")],
            order(vec![ord("a.b", Some(Desc), None)]),
        ),
        c(
            &[("order", "a.up")],
            E(K::Order, "unknown order modifier \"up\""),
        ),
        c(
            &[("order", "a.nullsfirst.desc")],
            E(K::Order, "unexpected \".\""),
        ),
        c(
            &[("order", "a.desc.asc")],
            E(K::Order, "unknown order modifier \"asc\""),
        ),
        c(&[("order", "a.")], E(K::Order, "expected asc, desc")),
        c(&[("order", "")], E(K::Order, "empty order list")),
        c(
            &[("order", "team(name.desc")],
            E(K::Order, "unexpected \".\""),
        ),
        c(&[("order", "team(name")], E(K::Order, "missing \")\"")),
        c(
            &[("order", "team(name).desc,id")],
            Q(Query {
                order: vec![
                    OrderTerm {
                        relation: Some("team".into()),
                        ..ord("name", Some(Direction::Desc), None)
                    },
                    ord("id", None, None),
                ],
                ..Query::default()
            }),
        ),
        c(&[("order", "a,")], E(K::Order, "expected a column name")),
        // ---- columns / on_conflict
        c(
            &[("columns", "a,b")],
            Q(Query {
                columns: Some(vec!["a".into(), "b".into()]),
                ..Query::default()
            }),
        ),
        c(
            &[("columns", " a , \"b,c\" ")],
            Q(Query {
                columns: Some(vec!["a".into(), "b,c".into()]),
                ..Query::default()
            }),
        ),
        c(
            &[("on_conflict", "id")],
            Q(Query {
                on_conflict: Some(vec!["id".into()]),
                ..Query::default()
            }),
        ),
        c(&[("columns", "")], E(K::Columns, "empty column list")),
        c(&[("columns", "a.b")], E(K::Columns, "unexpected \".\"")),
        c(
            &[("on_conflict", "a,")],
            E(K::Columns, "failed to parse on_conflict parameter"),
        ),
        // ---- a whole query: filters keep their order
        c(
            &[
                ("select", "id,n:name"),
                ("age", "gte.18"),
                ("or", "(a.eq.1,b.eq.2)"),
                ("name", "like.J*"),
                ("order", "age.desc"),
                ("limit", "10"),
            ],
            Q(Query {
                select: Some(vec![col("id"), col_as(Some("n"), "name", None)]),
                filters: vec![
                    pred("age", Op::Gte, sc("18")),
                    or(vec![pred("a", Op::Eq, sc("1")), pred("b", Op::Eq, sc("2"))]),
                    pred("name", Op::Like, sc("J*")),
                ],
                order: vec![ord("age", Some(Desc), None)],
                limit: Some(10),
                ..Query::default()
            }),
        ),
    ]
}

#[test]
fn table() {
    let cases = cases();
    assert!(cases.len() >= 80, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for (pairs, want) in &cases {
        let got = parse_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let ok = match (want, &got) {
            (F(filters), Ok(q)) => {
                *q == Query {
                    filters: filters.clone(),
                    ..Query::default()
                }
            }
            (Q(want), Ok(q)) => q == want,
            (E(kind, needle), Err(e)) => {
                e.kind == *kind
                    && e.to_string().contains(needle)
                    && e.details.is_some()
                    && e.message.starts_with(match kind {
                        K::Select => "failed to parse select parameter (",
                        K::Filter => "failed to parse filter",
                        K::Order => "failed to parse order (",
                        K::Limit => "failed to parse ",
                        K::NegativeLimit => "Requested range not satisfiable",
                        K::Logic => "failed to parse logic tree (",
                        K::Columns => "failed to parse ",
                    })
            }
            _ => false,
        };
        if !ok {
            failures.push(format!("{pairs:?}\n   got: {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn offset_limit_error_names_the_offset_parameter() {
    let e = parse_query([("offset", "x")]).expect_err("bad offset");
    assert_eq!(e.message, "failed to parse offset parameter (x)");
}

#[test]
fn filter_errors_quote_the_value() {
    let e = parse_query([("a", "foo.1")]).expect_err("unknown operator");
    assert_eq!(e.message, "failed to parse filter (foo.1)");
    assert_eq!(
        e.details.as_deref(),
        Some("operator \"foo\" is unknown (supported: eq, neq, gt, gte, lt, lte, like, ilike, match, imatch, in, is, isdistinct, cs, cd, ov, sl, sr, nxr, nxl, adj, fts, plfts, phfts, wfts) at position 1 in \"foo.1\"")
    );
}

#[test]
fn positions_count_characters_not_bytes() {
    let e = parse_query([("select", "ééé,x.y")]).expect_err("dot");
    let d = e.details.expect("details");
    assert!(d.contains("at position 6"), "{d}");
}

#[test]
fn huge_inputs_are_clipped_in_errors() {
    let long = format!("{}!", "a".repeat(100_000));
    let e = parse_query([("select", long.as_str())]).expect_err("embedding");
    assert!(e.to_string().len() < 1_000, "{}", e.to_string().len());
    let long = format!("foo{}", "x".repeat(100_000));
    let e = parse_query([("a", long.as_str())]).expect_err("bad op");
    assert!(e.to_string().len() < 1_000);
}

#[test]
fn logic_key_must_be_a_logic_operator() {
    let e = parse_logic("xor", "(a.eq.1)").expect_err("xor");
    assert_eq!(e.kind, K::Logic);
    assert!(e.message.contains("xor"));
}

#[test]
fn depth_limit_error_has_a_hint() {
    let e = parse_logic("or", &nested(MAX_LOGIC_DEPTH + 1)).expect_err("too deep");
    assert!(e.hint.expect("hint").contains("32"));
}

#[test]
fn the_same_filter_key_may_repeat() {
    let q = parse_query([("a", "gt.1"), ("a", "lt.5")]).expect("parses");
    assert_eq!(
        q.filters,
        vec![pred("a", Op::Gt, sc("1")), pred("a", Op::Lt, sc("5"))]
    );
}

/// An embedded resource's parameters are keyed by its path of embed keys; a quoted key with a
/// dot stays a column of the top level.
#[test]
fn embedded_parameters_are_keyed_by_their_path() {
    let q = parse_query([
        ("driver.points", "gt.10"),
        ("driver.order", "points.desc"),
        ("team.driver.limit", "2"),
        ("driver.not.or", "(points.eq.1,points.eq.2)"),
        ("\"a.b\"", "eq.1"),
        ("driver.offset", "1"),
    ])
    .expect("parses");
    assert_eq!(q.filters.len(), 1);
    assert!(matches!(&q.filters[0], Condition::Pred(p) if p.column == "a.b"));
    let driver = q.embedded(&["driver".to_string()]).expect("driver");
    assert_eq!(driver.filters.len(), 2);
    assert!(matches!(&driver.filters[0], Condition::Pred(p) if p.column == "points"));
    assert!(matches!(
        &driver.filters[1],
        Condition::Or { negated: true, items } if items.len() == 2
    ));
    assert_eq!(driver.order.len(), 1);
    assert_eq!(driver.order[0].direction, Some(Direction::Desc));
    assert_eq!(driver.offset, Some(1));
    let nested = q
        .embedded(&["team".to_string(), "driver".to_string()])
        .expect("team.driver");
    assert_eq!(nested.limit, Some(2));
    for (key, value) in [("driver.limit", "x"), ("driver.order", ""), (".x", "eq.1")] {
        assert!(parse_query([(key, value)]).is_err(), "{key}={value}");
    }
}
