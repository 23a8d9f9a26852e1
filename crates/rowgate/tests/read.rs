//! Reads: select, filters, logic trees, ordering, pagination and counts, media types, item URLs,
//! views, the OpenAPI document, health routes, `rest.max_rows`, and schema reloads.

mod common;
use common::*;
use serde_json::{json, Value};

const OBJECT: &str = "application/vnd.pgrst.object+json";

/// One integer column of a direct SQL query, in order.
fn sql_ints(s: &TestServer, sql: &str) -> Vec<i64> {
    s.ints(sql)
}

fn sql_count(s: &TestServer, sql: &str) -> u64 {
    u64::try_from(s.int(sql)).expect("count")
}

/// The integer values of `key` in a JSON array of objects.
fn ints(body: &Value, key: &str) -> Vec<i64> {
    body.as_array()
        .unwrap_or_else(|| panic!("array expected: {body}"))
        .iter()
        .map(|r| r[key].as_i64().unwrap_or_else(|| panic!("{key} in {r}")))
        .collect()
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .unwrap_or_else(|| panic!("missing header {name}: {:?}", r.headers()))
        .to_str()
        .expect("ascii header")
        .to_string()
}

/// GET `/{table}?select={pk}&order={pk}&{filter}` must return exactly the keys of
/// `SELECT pk FROM table WHERE where_ ORDER BY pk`.
async fn check_filter(
    s: &TestServer,
    table: &str,
    pk: &str,
    filter: &str,
    where_: &str,
) -> Vec<i64> {
    let (status, body) = get_json(s, &format!("/{table}?select={pk}&order={pk}&{filter}")).await;
    assert_eq!(status, 200, "{filter}: {body}");
    let want = sql_ints(
        s,
        &format!("SELECT {pk} FROM {table} WHERE {where_} ORDER BY {pk}"),
    );
    assert_eq!(ints(&body, pk), want, "filter {filter} vs SQL {where_}");
    want
}

/// As [`check_filter`], and the filter must select some but not all rows (so it is meaningful).
async fn check_selective(s: &TestServer, table: &str, pk: &str, filter: &str, where_: &str) {
    let total = sql_count(s, &format!("SELECT count(*) FROM {table}"));
    let want = check_filter(s, table, pk, filter, where_).await;
    assert!(
        !want.is_empty() && (want.len() as u64) < total,
        "{filter} selects {} of {total} rows",
        want.len()
    );
}

async fn select_columns_alias_cast_star(b: Backend) {
    let s = TestServer::start(b).await;
    let (status, body) = get_json(&s, "/team?select=team_id,name&order=team_id").await;
    assert_eq!(status, 200);
    let rows = body.as_array().expect("array");
    assert_eq!(rows.len(), 10);
    let names: Vec<String> = s
        .rows("SELECT name FROM team ORDER BY team_id")
        .into_iter()
        .map(|r| r[0].clone().expect("name"))
        .collect();
    for (row, name) in rows.iter().zip(&names) {
        let obj = row.as_object().expect("object");
        assert_eq!(obj.len(), 2, "{row}");
        assert_eq!(row["name"], json!(name));
    }

    let (status, body) = get_json(
        &s,
        "/team?select=id:team_id,team_name:name&order=team_id&limit=2",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!([{"id": 1, "team_name": "Mercedes"}, {"id": 2, "team_name": "Ferrari"}])
    );

    let (status, body) = get_json(&s, "/team?select=team_id::text,points&team_id=eq.3").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!([{"team_id": "3", "points": 860}]));

    let (status, body) = get_json(&s, "/team?select=label:points::text&team_id=eq.3").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!([{"label": "860"}]));

    let (status, body) = get_json(&s, "/team?select=*&team_id=eq.1").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!([{"team_id": 1, "name": "Mercedes", "points": 409}])
    );

    // No select at all is `*`, in table column order.
    let r = s.get("/team?team_id=eq.1").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("text");
    assert_eq!(text, r#"[{"team_id":1,"name":"Mercedes","points":409}]"#);

    // Declared order of select= is kept in the output.
    let r = s
        .get("/team?select=points,name&team_id=eq.2")
        .send()
        .await
        .expect("request");
    assert_eq!(
        r.text().await.expect("text"),
        r#"[{"points":406,"name":"Ferrari"}]"#
    );
}

async fn comparison_operators_with_and_without_not(b: Backend) {
    let s = TestServer::start(b).await;
    let cases: &[(&str, &str)] = &[
        ("salary=eq.105900", "salary = 105900"),
        ("salary=neq.105900", "salary <> 105900"),
        ("salary=gt.100000", "salary > 100000"),
        ("salary=gte.111262.5", "salary >= 111262.5"),
        ("salary=lt.40000", "salary < 40000"),
        ("salary=lte.35000", "salary <= 35000"),
        ("job_country=eq.England", "job_country = 'England'"),
        ("hire_date=gte.1993-01-01", "hire_date >= '1993-01-01'"),
        ("last_name=like.B*", "last_name LIKE 'B%'"),
        ("last_name=like.*son", "last_name LIKE '%son'"),
        ("last_name=like.%25o_n%25", "last_name LIKE '%o_n%'"),
        ("first_name=ilike.*RO*", "lower(first_name) LIKE '%ro%'"),
        (
            "last_name=match.^[A-C]",
            "last_name >= 'A' AND last_name < 'D'",
        ),
        ("last_name=match.son$", "last_name LIKE '%son'"),
        ("last_name=imatch.^b", "lower(last_name) LIKE 'b%'"),
        ("emp_no=in.(2,4,5,200)", "emp_no IN (2, 4, 5)"),
        ("phone_ext=is.null", "phone_ext IS NULL"),
        ("phone_ext=is.not_null", "phone_ext IS NOT NULL"),
        ("phone_ext=isdistinct.22", "phone_ext IS DISTINCT FROM '22'"),
        ("phone_ext=eq.22", "phone_ext = '22'"),
    ];
    for (filter, where_) in cases {
        check_selective(&s, "employee", "emp_no", filter, where_).await;
        // The same with `not.` after the `=`.
        let (col, rest) = filter.split_once('=').expect("filter");
        let negated = format!("{col}=not.{rest}");
        check_selective(
            &s,
            "employee",
            "emp_no",
            &negated,
            &format!("NOT ({where_})"),
        )
        .await;
    }
    // Exact known answers, so the SQL comparisons above are anchored.
    let (_, body) = get_json(&s, "/employee?select=emp_no&phone_ext=is.null&order=emp_no").await;
    assert_eq!(ints(&body, "emp_no"), vec![72, 134, 141]);
    let (_, body) = get_json(
        &s,
        "/employee?select=emp_no&phone_ext=not.isdistinct.22&order=emp_no",
    )
    .await;
    assert_eq!(ints(&body, "emp_no"), vec![5, 110]);
    // `neq` excludes NULLs (SQL three-valued logic), `isdistinct` includes them.
    let (_, neq) = get_json(&s, "/employee?select=emp_no&phone_ext=neq.22").await;
    let (_, distinct) = get_json(&s, "/employee?select=emp_no&phone_ext=isdistinct.22").await;
    assert_eq!(neq.as_array().map(Vec::len), Some(37));
    assert_eq!(distinct.as_array().map(Vec::len), Some(40));
}

async fn like_wildcards_and_case(b: Backend) {
    let s = TestServer::start(b).await;
    let names = |body: &Value| -> Vec<String> {
        body.as_array()
            .expect("array")
            .iter()
            .map(|r| r["name"].as_str().expect("name").to_string())
            .collect()
    };
    let (_, body) = get_json(&s, "/team?select=name&name=like.*Bull").await;
    assert_eq!(names(&body), ["Red Bull"]);
    let (_, body) = get_json(&s, "/team?select=name&name=like.Al*&order=name").await;
    assert_eq!(names(&body), ["Alfa Romeo", "AlphaTauri", "Alpine"]);
    // like is case-sensitive, ilike is not.
    let (_, body) = get_json(&s, "/team?select=name&name=like.al*").await;
    assert_eq!(body, json!([]));
    let (_, body) = get_json(&s, "/team?select=name&name=ilike.al*&order=name").await;
    assert_eq!(names(&body), ["Alfa Romeo", "AlphaTauri", "Alpine"]);
    // `*` anywhere, `_` one character, `%` like `*`.
    let (_, body) = get_json(&s, "/team?select=name&name=like.*a*a*&order=name").await;
    assert_eq!(names(&body), ["AlphaTauri", "Haas"]);
    let (_, body) = get_json(&s, "/team?select=name&name=like.H_as").await;
    assert_eq!(names(&body), ["Haas"]);
    let (_, body) = get_json(&s, "/team?select=name&name=like.Red%25").await;
    assert_eq!(names(&body), ["Red Bull"]);
    // match is case-sensitive, imatch is not.
    let (_, body) = get_json(&s, "/team?select=name&name=match.^f").await;
    assert_eq!(body, json!([]));
    let (_, body) = get_json(&s, "/team?select=name&name=imatch.^f").await;
    assert_eq!(names(&body), ["Ferrari"]);
    // Quantified: like(any).
    let (_, body) = get_json(
        &s,
        "/team?select=name&name=like(any).{Fer*,Haa*}&order=name",
    )
    .await;
    assert_eq!(names(&body), ["Ferrari", "Haas"]);
    let (_, body) = get_json(&s, "/team?select=name&name=like(all).{*a*,*i*}&order=name").await;
    assert_eq!(
        names(&body),
        ["AlphaTauri", "Aston Martin", "Ferrari", "Williams"]
    );
}

async fn in_with_quoted_values(b: Backend) {
    let s = TestServer::start(b).await;
    let (status, body) = get_json(
        &s,
        "/employee?select=emp_no,full_name&full_name=in.(\"Nelson, Robert\",\"Young, Bruce\")&order=emp_no",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([{"emp_no": 2, "full_name": "Nelson, Robert"}, {"emp_no": 4, "full_name": "Young, Bruce"}])
    );
    let (_, body) = get_json(
        &s,
        "/team?select=team_id&name=in.(\"Red Bull\",\"Aston Martin\",Haas)&order=team_id",
    )
    .await;
    assert_eq!(ints(&body, "team_id"), vec![3, 5, 10]);
    let (_, body) = get_json(
        &s,
        "/team?select=team_id&name=not.in.(\"Red Bull\",\"Aston Martin\",Haas)&order=team_id",
    )
    .await;
    assert_eq!(ints(&body, "team_id"), vec![1, 2, 4, 6, 7, 8, 9]);
    // An empty list matches nothing; its negation everything.
    let (status, body) = get_json(&s, "/team?select=team_id&team_id=in.()").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!([]));
    let (_, body) = get_json(&s, "/team?select=team_id&team_id=not.in.()").await;
    assert_eq!(body.as_array().map(Vec::len), Some(10));
}

async fn is_true_false_null_on_booleans(b: Backend) {
    let s = TestServer::start_with(b, |c| {
        db_exec(
            &c.db.path,
            "CREATE TABLE flags (id INTEGER PRIMARY KEY, name TEXT, active BOOLEAN);
             INSERT INTO flags VALUES (1, 'on', true), (2, 'off', false), (3, 'unset', NULL);",
        );
    })
    .await;
    let (status, body) = get_json(&s, "/flags?order=id").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!([
            {"id": 1, "name": "on", "active": true},
            {"id": 2, "name": "off", "active": false},
            {"id": 3, "name": "unset", "active": null}
        ])
    );
    for (filter, ids) in [
        ("active=is.true", vec![1]),
        ("active=is.false", vec![2]),
        ("active=is.null", vec![3]),
        ("active=is.unknown", vec![3]),
        ("active=is.not_null", vec![1, 2]),
        ("active=not.is.true", vec![2, 3]),
        ("active=not.is.false", vec![1, 3]),
        ("active=not.is.null", vec![1, 2]),
    ] {
        let (status, body) = get_json(&s, &format!("/flags?select=id&order=id&{filter}")).await;
        assert_eq!(status, 200, "{filter}: {body}");
        assert_eq!(ints(&body, "id"), ids, "{filter}");
    }
}

/// `eq.true` / `eq.false` on a BOOLEAN column compare booleans, as in PostgreSQL.
async fn eq_true_on_boolean_column(b: Backend) {
    let s = TestServer::start_with(b, |c| {
        db_exec(
            &c.db.path,
            "CREATE TABLE flags (id INTEGER PRIMARY KEY, active BOOLEAN);
             INSERT INTO flags VALUES (1, true), (2, false), (3, NULL);",
        );
    })
    .await;
    for (filter, ids) in [
        ("active=eq.true", vec![1]),
        ("active=eq.false", vec![2]),
        ("active=neq.true", vec![2]),
    ] {
        let (status, body) = get_json(&s, &format!("/flags?select=id&order=id&{filter}")).await;
        assert_eq!(status, 200, "{filter}: {body}");
        assert_eq!(ints(&body, "id"), ids, "{filter}");
    }
}

async fn logic_trees(b: Backend) {
    let s = TestServer::start(b).await;
    let cases: &[(&str, &str)] = &[
        (
            "or=(points.gt.400,name.eq.Haas)",
            "points > 400 OR name = 'Haas'",
        ),
        (
            "and=(points.gt.20,points.lt.300)",
            "points > 20 AND points < 300",
        ),
        (
            "not.or=(points.gt.400,points.lt.20)",
            "NOT (points > 400 OR points < 20)",
        ),
        (
            "not.and=(points.gt.20,points.lt.300)",
            "NOT (points > 20 AND points < 300)",
        ),
        (
            "or=(points.gt.800,and(points.gt.100,points.lt.200))",
            "points > 800 OR (points > 100 AND points < 200)",
        ),
        (
            "or=(name.eq.Haas,not.and(points.gt.20,points.lt.1000))",
            "name = 'Haas' OR NOT (points > 20 AND points < 1000)",
        ),
        (
            "or=(team_id.in.(1,2),name.like.*Tauri)",
            "team_id IN (1, 2) OR name LIKE '%Tauri'",
        ),
        (
            "or=(name.not.eq.Haas,points.lt.0)",
            "NOT (name = 'Haas') OR points < 0",
        ),
        (
            "points=gt.20&or=(team_id.eq.1,team_id.eq.10)",
            "points > 20 AND (team_id = 1 OR team_id = 10)",
        ),
        (
            "or=(name.eq.\"Red Bull\",name.ilike.*williams*)",
            "name IN ('Red Bull', 'Williams')",
        ),
        (
            "or=(and(points.gte.400,points.lte.410),not.or(team_id.lt.9))",
            "(points >= 400 AND points <= 410) OR NOT (team_id < 9)",
        ),
        (
            "or=(points.gt.400)&or=(points.lt.500)",
            "points > 400 AND points < 500",
        ),
        (
            "and=(or(team_id.eq.1,team_id.eq.2),or(team_id.eq.2,team_id.eq.3))",
            "team_id = 2",
        ),
    ];
    for (filter, where_) in cases {
        check_selective(&s, "team", "team_id", filter, where_).await;
    }
    // Quoted values with commas and parentheses inside a logic tree.
    let (status, body) = get_json(
        &s,
        "/employee?select=emp_no&or=(full_name.eq.\"Nelson, Robert\",emp_no.eq.4)&order=emp_no",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ints(&body, "emp_no"), vec![2, 4]);
    let (_, body) = get_json(
        &s,
        "/employee?select=emp_no&or=(phone_ext.is.null,emp_no.in.(2,4))&order=emp_no",
    )
    .await;
    assert_eq!(ints(&body, "emp_no"), vec![2, 4, 72, 134, 141]);
}

async fn ordering(b: Backend) {
    let s = TestServer::start(b).await;
    for (order, sql) in [
        ("points.desc", "points DESC"),
        ("points.asc", "points ASC"),
        ("points", "points ASC"),
        ("name.desc", "name DESC"),
    ] {
        let (status, body) = get_json(&s, &format!("/team?select=team_id&order={order}")).await;
        assert_eq!(status, 200);
        assert_eq!(
            ints(&body, "team_id"),
            sql_ints(&s, &format!("SELECT team_id FROM team ORDER BY {sql}")),
            "{order}"
        );
    }
    let (_, body) = get_json(&s, "/team?select=team_id&order=points.desc&limit=3").await;
    assert_eq!(ints(&body, "team_id"), vec![3, 1, 2]);

    // Null placement: explicit, and PostgreSQL's defaults (last ascending, first descending).
    for (order, sql) in [
        (
            "phone_ext.asc.nullsfirst,emp_no",
            "phone_ext ASC NULLS FIRST, emp_no",
        ),
        (
            "phone_ext.asc.nullslast,emp_no",
            "phone_ext ASC NULLS LAST, emp_no",
        ),
        (
            "phone_ext.desc.nullsfirst,emp_no",
            "phone_ext DESC NULLS FIRST, emp_no",
        ),
        (
            "phone_ext.desc.nullslast,emp_no",
            "phone_ext DESC NULLS LAST, emp_no",
        ),
        (
            "phone_ext.nullsfirst,emp_no",
            "phone_ext ASC NULLS FIRST, emp_no",
        ),
        ("phone_ext,emp_no", "phone_ext ASC NULLS LAST, emp_no"),
        (
            "phone_ext.desc,emp_no",
            "phone_ext DESC NULLS FIRST, emp_no",
        ),
        (
            "job_country.asc,salary.desc,emp_no",
            "job_country ASC, salary DESC, emp_no",
        ),
        (
            "job_grade.desc,last_name.asc,emp_no.desc",
            "job_grade DESC, last_name ASC, emp_no DESC",
        ),
    ] {
        let (status, body) = get_json(&s, &format!("/employee?select=emp_no&order={order}")).await;
        assert_eq!(status, 200, "{order}: {body}");
        assert_eq!(
            ints(&body, "emp_no"),
            sql_ints(&s, &format!("SELECT emp_no FROM employee ORDER BY {sql}")),
            "{order}"
        );
    }
    let (_, body) = get_json(
        &s,
        "/employee?select=emp_no&order=phone_ext.asc.nullsfirst,emp_no&limit=3",
    )
    .await;
    assert_eq!(ints(&body, "emp_no"), vec![72, 134, 141]);
    let (_, body) = get_json(
        &s,
        "/employee?select=emp_no&order=phone_ext.desc,emp_no&limit=3",
    )
    .await;
    assert_eq!(ints(&body, "emp_no"), vec![72, 134, 141]);
}

async fn limit_and_offset(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .get("/people?select=id&order=id&limit=5&offset=10")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-range"), "10-14/*");
    let body: Value = r.json().await.expect("json");
    assert_eq!(ints(&body, "id"), vec![11, 12, 13, 14, 15]);

    let (_, body) = get_json(&s, "/people?select=id&order=id.desc&limit=3").await;
    assert_eq!(ints(&body, "id"), vec![200, 199, 198]);
    let (_, body) = get_json(&s, "/people?select=id&order=id&offset=197").await;
    assert_eq!(ints(&body, "id"), vec![198, 199, 200]);
    let (status, body) = get_json(&s, "/people?select=id&limit=0").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!([]));
    // Limit applies after filtering.
    let (_, body) = get_json(
        &s,
        "/employee?select=emp_no&job_country=eq.USA&order=emp_no&limit=2&offset=1",
    )
    .await;
    assert_eq!(
        ints(&body, "emp_no"),
        sql_ints(&s, "SELECT emp_no FROM employee WHERE job_country = 'USA' ORDER BY emp_no LIMIT 2 OFFSET 1")
    );
}

async fn range_header_and_counts(b: Backend) {
    let s = TestServer::start(b).await;
    let total = sql_count(&s, "SELECT count(*) FROM employee");
    assert_eq!(total, 42);

    // Range with an exact count: 206 Partial Content.
    let r = s
        .get("/employee?order=emp_no")
        .header("Range", "0-4")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(header(&r, "content-range"), format!("0-4/{total}"));
    let body: Value = r.json().await.expect("json");
    assert_eq!(
        ints(&body, "emp_no"),
        sql_ints(&s, "SELECT emp_no FROM employee ORDER BY emp_no LIMIT 5")
    );

    // Range without a count: 200, total unknown.
    let r = s
        .get("/employee?order=emp_no")
        .header("Range", "0-4")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-range"), "0-4/*");
    assert_eq!(
        r.json::<Value>()
            .await
            .expect("json")
            .as_array()
            .map(Vec::len),
        Some(5)
    );

    // No Range, no count: everything, 200.
    let r = s.get("/employee").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-range"), "0-41/*");

    // A count of the whole result: 200 with the total.
    let r = s
        .get("/employee")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-range"), "0-41/42");

    // Open-ended range and range in the middle.
    let r = s
        .get("/employee?order=emp_no")
        .header("Range", "40-")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(header(&r, "content-range"), "40-41/42");
    assert_eq!(
        ints(&r.json::<Value>().await.expect("json"), "emp_no"),
        vec![144, 145]
    );
    let r = s
        .get("/employee?order=emp_no")
        .header("Range", "10-19")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(header(&r, "content-range"), "10-19/42");

    // Counts respect filters; limit/offset in the query string page like Range.
    let usa = sql_count(
        &s,
        "SELECT count(*) FROM employee WHERE job_country = 'USA'",
    );
    let r = s
        .get("/employee?job_country=eq.USA&limit=3&offset=3&order=emp_no")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(header(&r, "content-range"), format!("3-5/{usa}"));

    // planned and estimated: SQLite has no planner estimate, so the total is exact.
    for pref in ["count=planned", "count=estimated"] {
        let r = s
            .get("/employee")
            .header("Range", "0-4")
            .header("Prefer", pref)
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 206, "{pref}");
        assert_eq!(header(&r, "content-range"), "0-4/42", "{pref}");
    }

    // As PostgREST: a negative offset skips nothing, `limit=0` is no rows.
    let r = s
        .get("/employee?select=emp_no&order=emp_no&offset=-4&limit=2")
        .send()
        .await
        .expect("request");
    assert_eq!(header(&r, "content-range"), "0-1/*");
    let rows: Value = r.json().await.expect("json");
    assert_eq!(rows.as_array().map(Vec::len), Some(2), "{rows}");
    let r = s.get("/employee?limit=0").send().await.expect("request");
    assert_eq!(header(&r, "content-range"), "*/*");
    assert_eq!(r.json::<Value>().await.expect("json"), json!([]));

    // An empty result with a count.
    let r = s
        .get("/employee?emp_no=eq.-1")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-range"), "*/0");
    assert_eq!(r.json::<Value>().await.expect("json"), json!([]));
}

async fn offset_beyond_count_is_416(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .get("/employee?offset=100")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    // the total still said, as PostgREST says it
    assert_eq!(header(&r, "content-range"), "*/42");
    let body = assert_error(r, 416, "PGRST103").await;
    assert!(
        body["details"].as_str().unwrap_or("").contains("42"),
        "{body}"
    );

    let r = s
        .get("/employee")
        .header("Range", "100-110")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_error(r, 416, "PGRST103").await;

    // A Range ending before it starts.
    let r = s
        .get("/employee")
        .header("Range", "5-2")
        .send()
        .await
        .expect("request");
    assert_error(r, 416, "PGRST103").await;
    // `limit=` and a Range header: the rows both take.
    let r = s
        .get("/employee?select=emp_no&order=emp_no&limit=3")
        .header("Range", "1-5")
        .send()
        .await
        .expect("request");
    assert_eq!(header(&r, "content-range"), "1-2/*");
    assert_eq!(
        r.json::<Value>()
            .await
            .expect("json")
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Without a count the total is unknown: an empty page, not an error.
    let r = s.get("/employee?offset=100").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-range"), "*/*");
    assert_eq!(r.json::<Value>().await.expect("json"), json!([]));
}

async fn singular_object_accept(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .get("/team?team_id=eq.3")
        .header("Accept", OBJECT)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert!(header(&r, "content-type").starts_with(OBJECT));
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"team_id": 3, "name": "Red Bull", "points": 860})
    );

    let r = s
        .get("/team?select=name&name=eq.Haas")
        .header("Accept", OBJECT)
        .send()
        .await
        .expect("request");
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"name": "Haas"})
    );

    let r = s
        .get("/team?team_id=eq.99")
        .header("Accept", OBJECT)
        .send()
        .await
        .expect("request");
    assert_error(r, 406, "PGRST116").await;
    let r = s
        .get("/team?team_id=lt.3")
        .header("Accept", OBJECT)
        .send()
        .await
        .expect("request");
    let body = assert_error(r, 406, "PGRST116").await;
    assert!(
        body["details"].as_str().unwrap_or("").contains('2'),
        "{body}"
    );
    let r = s
        .get("/team")
        .header("Accept", OBJECT)
        .send()
        .await
        .expect("request");
    assert_error(r, 406, "PGRST116").await;
}

async fn csv_output(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .get("/employee?select=emp_no,full_name,phone_ext&emp_no=in.(2,72)&order=emp_no")
        .header("Accept", "text/csv")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        header(&r, "content-type").starts_with("text/csv"),
        "{:?}",
        r.headers()
    );
    let text = r.text().await.expect("text");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "emp_no,full_name,phone_ext",
            "2,\"Nelson, Robert\",250",
            "72,\"Sutherland, Claudia\","
        ]
    );

    let r = s
        .get("/team?order=team_id")
        .header("Accept", "text/csv")
        .send()
        .await
        .expect("request");
    let text = r.text().await.expect("text");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 11, "{text}");
    assert_eq!(lines[0], "team_id,name,points");
    assert_eq!(lines[3], "3,Red Bull,860");

    // Quotes inside values are doubled.
    let r = s
        .get("/employee?select=last_name&emp_no=eq.65")
        .header("Accept", "text/csv")
        .send()
        .await
        .expect("request");
    let text = r.text().await.expect("text");
    assert_eq!(text.lines().collect::<Vec<_>>(), ["last_name", "O'Brien"]);
}

async fn head_requests(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .client
        .head(s.url("/employee"))
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-range"), "0-41/42");
    assert!(header(&r, "content-type").starts_with("application/json"));
    assert!(r.bytes().await.expect("body").is_empty());

    let r = s
        .client
        .head(s.url("/employee"))
        .header("Range", "0-9")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    // RFC 9110 §14.2 defines ranges for GET only: HEAD (as any other method) ignores them,
    // as PostgREST does
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-range"), "0-41/42");
    assert!(r.bytes().await.expect("body").is_empty());
    let r = s
        .client
        .head(s.url("/employee?limit=10"))
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(header(&r, "content-range"), "0-9/42");

    let get = s.get("/team/3").send().await.expect("request");
    let tag = header(&get, "etag");
    let r = s
        .client
        .head(s.url("/team/3"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "etag"), tag);
    assert!(r.bytes().await.expect("body").is_empty());

    // HEAD of a missing table: the error status, no body.
    let r = s.client.head(s.url("/nope")).send().await.expect("request");
    assert_eq!(r.status().as_u16(), 404);
    assert!(r.bytes().await.expect("body").is_empty());
}

async fn item_urls_and_etags(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s.get("/team/3").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert!(header(&r, "content-type").starts_with("application/json"));
    let tag = header(&r, "etag");
    assert!(
        tag.starts_with('"') && tag.ends_with('"') && tag.len() > 2,
        "{tag}"
    );
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"team_id": 3, "name": "Red Bull", "points": 860})
    );

    // Stable ETag; a different row has a different one.
    let again = s.get("/team/3").send().await.expect("request");
    assert_eq!(header(&again, "etag"), tag);
    let other = s.get("/team/4").send().await.expect("request");
    assert_ne!(header(&other, "etag"), tag);

    // If-None-Match with the current ETag: 304, empty body.
    let r = s
        .get("/team/3")
        .header("If-None-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 304);
    assert!(r.bytes().await.expect("body").is_empty());
    let r = s
        .get("/team/3")
        .header("If-None-Match", format!("\"nope\", {tag}"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 304);

    // Another ETag: 200 with the row.
    let r = s
        .get("/team/3")
        .header("If-None-Match", "\"0123\"")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().await.expect("json")["name"], "Red Bull");

    // After the row changes its ETag changes, and the old one no longer matches.
    s.exec("UPDATE team SET points = 861 WHERE team_id = 3");
    let r = s
        .get("/team/3")
        .header("If-None-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_ne!(header(&r, "etag"), tag);
    assert_eq!(r.json::<Value>().await.expect("json")["points"], 861);

    // select= applies to item URLs.
    let (status, body) = get_json(&s, "/team/3?select=name").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"name": "Red Bull"}));

    // Missing key: 404 with a JSON error.
    let r = s.get("/team/999").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 404);
    let body: Value = r.json().await.expect("json error");
    assert!(
        body["code"].is_string() && body["message"].is_string(),
        "{body}"
    );

    // Item URLs of other tables.
    let (status, body) = get_json(&s, "/employee/2?select=full_name").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"full_name": "Nelson, Robert"}));
}

async fn views_are_readable(b: Backend) {
    let s = TestServer::start(b).await;
    let (status, body) = get_json(&s, "/team_standings?order=team_id").await;
    assert_eq!(status, 200);
    let rows = body.as_array().expect("array");
    assert_eq!(rows.len(), 10);
    assert_eq!(
        rows[2],
        json!({"team_id": 3, "name": "Red Bull", "points": 860, "drivers": 2})
    );
    assert_eq!(
        ints(&body, "team_id"),
        sql_ints(&s, "SELECT team_id FROM team_standings ORDER BY team_id")
    );

    check_selective(
        &s,
        "team_standings",
        "team_id",
        "points=gt.300",
        "points > 300",
    )
    .await;
    let (_, body) = get_json(&s, "/team_standings?select=name&order=points.desc&limit=1").await;
    assert_eq!(body, json!([{"name": "Red Bull"}]));
    // A view follows its tables.
    s.exec("DELETE FROM driver WHERE driver_id = 1");
    let (_, body) = get_json(&s, "/team_standings?select=drivers&team_id=eq.1").await;
    assert_eq!(body, json!([{"drivers": 1}]));
    let r = s
        .get("/team_standings")
        .header("Range", "0-1")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(header(&r, "content-range"), "0-1/10");
}

async fn openapi_document(b: Backend) {
    let s = TestServer::start(b).await;
    // The demo's tables and view.
    let names = [
        ("employee", "table"),
        ("team", "table"),
        ("driver", "table"),
        ("posts", "table"),
        ("people", "table"),
        ("team_standings", "view"),
    ];
    let mut docs = Vec::new();
    for url in [s.url("/"), s.root_url("/openapi.json"), s.url("")] {
        let r = s.client.get(&url).send().await.expect("request");
        assert_eq!(r.status().as_u16(), 200, "{url}");
        let ct = header(&r, "content-type");
        assert!(ct.contains("json"), "{url}: {ct}");
        let doc: Value = r.json().await.expect("json");
        assert_eq!(doc["openapi"], "3.1.0", "{url}");
        let paths = doc["paths"].as_object().expect("paths");
        for (name, kind) in &names {
            assert!(
                paths.contains_key(&format!("/api/{name}")),
                "{url}: no path for {name}"
            );
            let item = paths
                .keys()
                .any(|p| p.starts_with(&format!("/api/{name}/")));
            // (a view has one when it shows its table's key: team_standings)
            assert_eq!(
                item,
                *kind == "table" || *name == "team_standings",
                "{url}: item path for {name} ({kind})"
            );
        }
        // Views offer only reads.
        let view = &paths["/api/team_standings"];
        assert!(view.get("get").is_some());
        assert!(
            view.get("post").is_none()
                && view.get("patch").is_none()
                && view.get("delete").is_none()
        );
        assert!(paths["/api/team"].get("post").is_some());
        assert!(doc["components"]["schemas"]["team"]["properties"]["name"].is_object());
        docs.push(doc);
    }
    assert_eq!(docs[0], docs[1]);
    assert_eq!(docs[0], docs[2]);
}

async fn health_routes(b: Backend) {
    let s = TestServer::start(b).await;
    for (path, status) in [("/live", "live"), ("/ready", "ready")] {
        let r = s
            .client
            .get(s.root_url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 200, "{path}");
        assert!(header(&r, "content-type").starts_with("application/json"));
        assert_eq!(
            r.json::<Value>().await.expect("json"),
            json!({"status": status})
        );
    }
}

async fn max_rows_limits_reads(b: Backend) {
    let s = TestServer::start_with(b, |c| c.rest.max_rows = 5).await;
    let (status, body) = get_json(&s, "/people?select=id&order=id").await;
    assert_eq!(status, 200);
    assert_eq!(ints(&body, "id"), vec![1, 2, 3, 4, 5]);
    let (_, body) = get_json(&s, "/people?select=id&order=id&limit=3").await;
    assert_eq!(ints(&body, "id"), vec![1, 2, 3]);
    let (_, body) = get_json(&s, "/people?select=id&order=id&limit=50&offset=10").await;
    assert_eq!(ints(&body, "id"), vec![11, 12, 13, 14, 15]);
    let r = s
        .get("/people?select=id")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(header(&r, "content-range"), "0-4/200");
    let r = s
        .get("/people?select=id")
        .header("Range", "0-99")
        .send()
        .await
        .expect("request");
    assert_eq!(
        r.json::<Value>()
            .await
            .expect("json")
            .as_array()
            .map(Vec::len),
        Some(5)
    );
    // at every level: the related rows of a to-many embed too, a to-one one untouched
    s.exec(
        "INSERT INTO driver (driver_id, name, points, team_id) VALUES (101, 'R1', 0, 1), (102, 'R2', 0, 1), (103, 'R3', 0, 1), (104, 'R4', 0, 1)",
    );
    let (_, body) = get_json(
        &s,
        "/team?select=team_id,driver(driver_id)&team_id=eq.1&driver.limit=9",
    )
    .await;
    let drivers = s.int("SELECT count(*) FROM driver WHERE team_id = 1");
    assert!(drivers > 5);
    assert_eq!(body[0]["driver"].as_array().map(Vec::len), Some(5));
    let (_, body) = get_json(&s, "/driver?select=driver_id,team(name)&driver_id=eq.1").await;
    assert!(body[0]["team"]["name"].is_string(), "{body}");
}

async fn percent_encoded_values(b: Backend) {
    let s = TestServer::start(b).await;
    let (status, body) = get_json(&s, "/team?select=team_id&name=eq.Red%20Bull").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!([{"team_id": 3}]));
    let (_, body) = get_json(&s, "/team?select=team_id&name=eq.Aston%20Martin").await;
    assert_eq!(body, json!([{"team_id": 5}]));
    // Encoded operator separators and keys decode too.
    let (_, body) = get_json(&s, "/team?select=team_id&%6Eame=eq%2EHaas").await;
    assert_eq!(body, json!([{"team_id": 10}]));
    // Non-ASCII, percent-encoded UTF-8.
    s.exec("INSERT INTO team (team_id, name, points) VALUES (11, 'Citroën', 1)");
    let (_, body) = get_json(&s, "/team?select=team_id&name=eq.Citro%C3%ABn").await;
    assert_eq!(body, json!([{"team_id": 11}]));
    let (_, body) = get_json(&s, "/team?select=name&team_id=eq.11").await;
    assert_eq!(body, json!([{"name": "Citroën"}]));
    // An encoded `&` is part of the value, not a separator.
    s.exec("INSERT INTO team (team_id, name, points) VALUES (12, 'Rock & Roll', 2)");
    let (_, body) = get_json(&s, "/team?select=team_id&name=eq.Rock%20%26%20Roll").await;
    assert_eq!(body, json!([{"team_id": 12}]));
}

async fn new_table_becomes_reachable(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s.get("/gadgets").send().await.expect("request");
    assert_error(r, 404, "PGRST205").await;
    s.exec(
        "CREATE TABLE gadgets (id INTEGER PRIMARY KEY, label TEXT NOT NULL);
             INSERT INTO gadgets VALUES (1, 'sprocket'), (2, 'widget');",
    );
    let body = wait_until_served(&s, "/gadgets?order=id").await;
    assert_eq!(
        body,
        json!([{"id": 1, "label": "sprocket"}, {"id": 2, "label": "widget"}])
    );
    // Item URL and the OpenAPI document know it too.
    let (status, body) = get_json(&s, "/gadgets/2").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"id": 2, "label": "widget"}));
    let (_, doc) = get_json(&s, "/").await;
    assert!(doc["paths"].get("/api/gadgets").is_some());
}

/// JSON paths in `select=`, filters and `order=` (`->` gives JSON, `->>` text, as PostgreSQL).
async fn json_paths(b: Backend) {
    let s = TestServer::start(b).await;
    s.exec(
        r#"CREATE TABLE docs (id INTEGER PRIMARY KEY, data JSONB, label TEXT);
           INSERT INTO docs VALUES
             (1, '{"a": {"b": "x"}, "n": 5, "tags": ["t1", "t2"], "$k": 1}', 'one'),
             (2, '{"a": {"b": "y"}, "n": 12, "tags": ["t3"]}', 'two'),
             (3, '{"n": null}', 'three');"#,
    );
    wait_until_served(&s, "/docs").await;
    let (status, body) = get_json(
        &s,
        "/docs?select=id,data->a->>b,n:data->n,first:data->tags->0,last:data->tags->-1,text:data->>n,data->tags&order=id",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["b"], json!("x"));
    assert_eq!(body[0]["n"], json!(5));
    assert_eq!(body[0]["first"], json!("t1"));
    assert_eq!(body[0]["last"], json!("t2"), "index -1 counts from the end");
    assert_eq!(body[0]["text"], json!("5"), "->> gives text, as PostgreSQL");
    assert_eq!(
        body[0]["tags"],
        json!(["t1", "t2"]),
        "the key of a path is its last field"
    );
    assert_eq!(body[1]["n"], json!(12));
    assert_eq!(body[2]["b"], Value::Null);
    assert_eq!(body[2]["first"], Value::Null);
    // Filters: ->> compares as text on both backends; -> compares JSON.
    let (_, body) = get_json(&s, "/docs?select=id&data->>n=eq.12").await;
    assert_eq!(body, json!([{"id": 2}]));
    let (_, body) = get_json(&s, "/docs?select=id&data->a->>b=in.(x,y)&order=id").await;
    assert_eq!(body, json!([{"id": 1}, {"id": 2}]));
    let (_, body) = get_json(&s, "/docs?select=id&data->tags->0=eq.\"t3\"").await;
    assert_eq!(body, json!([{"id": 2}]));
    let (_, body) = get_json(
        &s,
        "/docs?select=id&or=(data->>n.eq.5,label.eq.three)&order=id",
    )
    .await;
    assert_eq!(body, json!([{"id": 1}, {"id": 3}]));
    let (_, body) = get_json(&s, "/docs?select=id&data->>$k=eq.1").await;
    assert_eq!(
        body,
        json!([{"id": 1}]),
        "a key starting with $ is a key, not a path"
    );
    // Ordering by a path (text order under ->>; nulls last ascending).
    let (_, body) = get_json(&s, "/docs?select=id&order=data->a->>b.desc.nullslast").await;
    assert_eq!(body, json!([{"id": 2}, {"id": 1}, {"id": 3}]));
    // A path with `->>` before the end, an unknown column: 400 / 400.
    let r = s
        .get("/docs?select=data->>a->b")
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "PGRST100").await;
    let r = s.get("/docs?select=nope->a").send().await.expect("request");
    assert_error(r, 400, "PGRST204").await;
    // A path into a column that is not JSON: PostgreSQL reads it as JSON first (as PostgREST:
    // a text is a JSON string, with no key `a`); SQLite's JSON functions refuse text that does
    // not parse.
    let r = s
        .get("/docs?select=label->a&order=id")
        .send()
        .await
        .expect("request");
    if b == Backend::Postgres {
        let body: Value = r.json().await.expect("json");
        assert_eq!(body, json!([{"a": null}, {"a": null}, {"a": null}]));
    } else {
        assert_error(r, 400, "22P02").await;
    }
}

/// `rest.server_timing`: each table answer names its stages and their durations in
/// `Server-Timing` under PostgREST's names, before the `total` every answer has (errors and
/// the default configuration carry the total only); the OpenAPI document and `OPTIONS` name
/// theirs.
async fn server_timing_names_the_stages(b: Backend) {
    let s = TestServer::start_with(b, |c| c.rest.server_timing = true).await;
    let names = |timing: &str| -> Vec<String> {
        timing
            .split(", ")
            .map(|stage| {
                let (name, dur) = stage.split_once(";dur=").expect("name;dur=ms");
                assert!(dur.parse::<f64>().is_ok_and(|ms| ms >= 0.0), "{timing}");
                name.to_string()
            })
            .collect()
    };
    let r = s.get("/").send().await.expect("openapi");
    assert_eq!(
        names(&header(&r, "server-timing")),
        ["jwt", "parse", "plan", "response", "total"]
    );
    let r = s
        .client
        .request(reqwest::Method::OPTIONS, s.url("/team"))
        .send()
        .await
        .expect("options");
    assert_eq!(
        names(&header(&r, "server-timing")),
        ["jwt", "parse", "response", "total"]
    );
    for r in [
        s.get("/team?select=name&order=team_id")
            .send()
            .await
            .expect("read"),
        s.patch("/team?team_id=eq.1", json!({"points": 1}))
            .send()
            .await
            .expect("write"),
    ] {
        assert!(r.status().is_success(), "{}", r.status());
        let timing = header(&r, "server-timing");
        let names: Vec<&str> = timing
            .split(", ")
            .map(|stage| {
                let (name, dur) = stage.split_once(";dur=").expect("name;dur=ms");
                assert!(dur.parse::<f64>().is_ok_and(|ms| ms >= 0.0), "{timing}");
                name
            })
            .collect();
        assert_eq!(
            names,
            ["jwt", "parse", "plan", "transaction", "response", "total"],
            "{timing}"
        );
    }
    let r = s.get("/nope").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 404);
    assert!(header(&r, "server-timing").starts_with("total;dur="));
    let plain = TestServer::start(b).await;
    let r = plain.get("/team").send().await.expect("request");
    assert!(header(&r, "server-timing").starts_with("total;dur="));
}

/// `OPTIONS` on a resource answers 200, no body, and `Allow`: the methods it takes, as the
/// OpenAPI document describes them (a table's collection all but PUT, its item URL PUT and no
/// POST; a view those its database passes through — PostgreSQL's simple view all, SQLite's
/// none but reads —; the root its reads), narrowed to the role's grants; an unknown table is
/// 404, one the role has no grant on is refused as its GET is.
async fn options_lists_the_methods_allowed(b: Backend) {
    let setup = "CREATE TABLE keyless (note text); \
                 CREATE VIEW team_names AS SELECT team_id, name FROM team;";
    let s = TestServer::start_prepared(
        b,
        tempfile::tempdir().expect("tempdir"),
        rowgate::config::Config::default(),
        setup,
        |_| {},
    )
    .await;
    let allow = |path: &'static str| {
        let s = &s;
        async move {
            let r = s
                .client
                .request(reqwest::Method::OPTIONS, s.url(path))
                .send()
                .await
                .expect("options");
            let status = r.status().as_u16();
            let allow = r
                .headers()
                .get("allow")
                .map(|v| v.to_str().expect("text").to_string());
            assert_eq!(header(&r, "content-length"), "0", "{path}");
            (status, allow)
        }
    };
    let all = Some("OPTIONS,GET,HEAD,POST,PATCH,DELETE".to_string());
    assert_eq!(allow("/team").await, (200, all.clone()));
    assert_eq!(allow("/keyless").await, (200, all.clone()));
    assert_eq!(
        allow("/team/1").await,
        (200, Some("OPTIONS,GET,HEAD,PUT,PATCH,DELETE".into()))
    );
    let view = match b {
        Backend::Postgres => all,
        Backend::Sqlite => Some("OPTIONS,GET,HEAD".into()),
    };
    assert_eq!(allow("/team_names").await, (200, view));
    assert_eq!(allow("/").await, (200, Some("OPTIONS,GET,HEAD".into())));
    let r = s
        .client
        .request(reqwest::Method::OPTIONS, s.url("/nope"))
        .send()
        .await
        .expect("options");
    assert_error(r, 404, "PGRST205").await;

    let toml = r#"
[[grants]]
role = "anon"
tables = ["team"]
ops = ["select", "update"]
"#;
    let narrow = TestServer::start_toml(b, toml, &[]).await;
    let options = |path: &str| {
        narrow
            .client
            .request(reqwest::Method::OPTIONS, narrow.url(path))
            .send()
    };
    let r = options("/team").await.expect("options");
    assert_eq!(header(&r, "allow"), "OPTIONS,GET,HEAD,PATCH");
    let r = options("/driver").await.expect("options");
    assert_error(r, 401, "RG401").await;
}

/// A collection's read names its canonical URL in `Content-Location`, as PostgREST's: the
/// query's parameters sorted by name, encoded alike; item URLs and writes have none.
async fn reads_name_their_canonical_location(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .get("/team?team_id=lt.3&select=name,team_id&order=team_id")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        header(&r, "content-location"),
        "/api/team?order=team_id&select=name%2Cteam_id&team_id=lt.3"
    );
    let r = s.get("/team").send().await.expect("get");
    assert_eq!(header(&r, "content-location"), "/api/team");
    let r = s.get("/team/1").send().await.expect("get");
    assert!(r.headers().get("content-location").is_none());
    let r = s
        .patch("/team?team_id=eq.1", json!({"points": 1}))
        .send()
        .await
        .expect("patch");
    assert!(r.headers().get("content-location").is_none());
}

/// The app is a service: called without a socket it answers what it answers over one, byte
/// for byte (reads, writes, errors), and the write is in the database.
async fn the_app_answers_as_a_service(b: Backend) {
    let s = TestServer::start(b).await;
    let path = "/team?select=team_id,name&order=team_id&limit=3";
    let (status, headers, body) = s.call("GET", path, "").await;
    let over_the_socket = s.get(path).send().await.expect("get");
    assert_eq!(status, over_the_socket.status().as_u16());
    assert_eq!(
        headers.get("content-range"),
        over_the_socket.headers().get("content-range")
    );
    assert_eq!(body, over_the_socket.bytes().await.expect("body"));

    let (status, headers, body) = s
        .call(
            "POST",
            "/team?select=name",
            r#"{"team_id": 900, "name": "Service"}"#,
        )
        .await;
    assert_eq!(status, 201, "{body:?}");
    assert_eq!(
        headers.get("content-range").map(|v| v.as_bytes()),
        Some(&b"*/*"[..]),
        "{headers:?}"
    );
    let (status, body) = get_json(&s, "/team?team_id=eq.900&select=name").await;
    assert_eq!((status, body), (200, json!([{"name": "Service"}])));

    let (status, _, body) = s.call("GET", "/nope", "").await;
    assert_eq!(status, 404);
    let error: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(error["code"], "PGRST205");
}

/// `Accept: application/vnd.pgrst.array+json;nulls=stripped` (and the singular object's): the
/// rows without their null members, said so in `Content-Type`, as PostgREST.
async fn nulls_stripped(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = TestServer::start_prepared(
        b,
        dir,
        rowgate::config::Config::default(),
        "INSERT INTO driver (driver_id, name, points) VALUES (90, 'Free Agent', 0)",
        |_| {},
    )
    .await;
    let path =
        "/driver?select=driver_id,name,team_id,team(name)&driver_id=in.(1,90)&order=driver_id";
    let (_, plain) = get_json(&s, path).await;
    assert_eq!(plain[1]["team_id"], Value::Null, "{plain}");
    let r = s
        .get(path)
        .header("accept", "application/vnd.pgrst.array+json;nulls=stripped")
        .send()
        .await
        .expect("get");
    assert_eq!(
        header(&r, "content-type"),
        "application/vnd.pgrst.array+json;nulls=stripped; charset=utf-8"
    );
    let body: Value = r.json().await.expect("json");
    assert_eq!(body[0], plain[0], "no nulls there: as it was");
    assert_eq!(body[1], json!({"driver_id": 90, "name": "Free Agent"}));
    let r = s
        .get("/driver?select=driver_id,team_id&driver_id=eq.90")
        .header("accept", "application/vnd.pgrst.object+json;nulls=stripped")
        .send()
        .await
        .expect("get");
    assert_eq!(
        header(&r, "content-type"),
        "application/vnd.pgrst.object+json;nulls=stripped; charset=utf-8"
    );
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"driver_id": 90})
    );
}

backend_tests!(
    nulls_stripped,
    the_app_answers_as_a_service,
    server_timing_names_the_stages,
    options_lists_the_methods_allowed,
    reads_name_their_canonical_location,
    json_paths,
    select_columns_alias_cast_star,
    comparison_operators_with_and_without_not,
    like_wildcards_and_case,
    in_with_quoted_values,
    is_true_false_null_on_booleans,
    eq_true_on_boolean_column,
    logic_trees,
    ordering,
    limit_and_offset,
    range_header_and_counts,
    offset_beyond_count_is_416,
    singular_object_accept,
    csv_output,
    head_requests,
    item_urls_and_etags,
    views_are_readable,
    openapi_document,
    health_routes,
    max_rows_limits_reads,
    percent_encoded_values,
    new_table_becomes_reachable,
);
