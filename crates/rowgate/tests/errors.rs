//! Bad input: every error is a JSON `{code, message, details, hint}` with the right 4xx status,
//! never a 5xx. A representative set of error bodies is snapshotted.

mod common;
use common::*;
use serde_json::{json, Value};

/// Asserts the PostgREST error shape: exactly `code`, `message`, `details`, `hint`, where
/// details and hint are strings or null.
fn assert_shape(body: &Value) {
    let obj = body
        .as_object()
        .unwrap_or_else(|| panic!("error body is not an object: {body}"));
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "details", "hint", "message"], "{body}");
    assert!(
        body["code"].is_string() && body["message"].is_string(),
        "{body}"
    );
    assert!(
        body["details"].is_string() || body["details"].is_null(),
        "{body}"
    );
    assert!(body["hint"].is_string() || body["hint"].is_null(), "{body}");
}

/// `assert_error` plus the exact shape.
async fn error(r: reqwest::Response, status: u16, code: &str) -> Value {
    let body = assert_error(r, status, code).await;
    assert_shape(&body);
    body
}

/// Any 4xx with a JSON error body (for inputs where several 4xx answers are reasonable).
async fn client_error(r: reqwest::Response, what: &str) -> Value {
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    assert!(
        (400..500).contains(&status),
        "{what}: status {status}, body {text}"
    );
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
    assert_shape(&body);
    body
}

/// Not a server error: 2xx, or a 4xx with a JSON error body.
async fn not_server_error(r: reqwest::Response, what: &str) -> u16 {
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    assert!(status < 500, "{what}: status {status}, body {text}");
    if status >= 400 {
        let body: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
        assert_shape(&body);
    }
    status
}

fn details(body: &Value) -> String {
    body["details"].as_str().unwrap_or_default().to_string()
}

fn team_count(s: &TestServer) -> i64 {
    s.int("SELECT count(*) FROM team")
}

/// A snapshot of an error whose details come from the database: one per backend.
fn db_error_snapshot(b: Backend, name: &str, body: &Value) {
    match b {
        Backend::Sqlite => insta::assert_json_snapshot!(name, body),
        Backend::Postgres => insta::with_settings!({ snapshot_suffix => "postgres" }, {
            insta::assert_json_snapshot!(name, body)
        }),
    }
}

async fn unknown_table(b: Backend) {
    let s = TestServer::start(b).await;
    let body = error(
        s.get("/nope").send().await.expect("request"),
        404,
        "PGRST205",
    )
    .await;
    assert!(
        body["message"].as_str().unwrap_or("").contains("nope"),
        "{body}"
    );
    // (named with its schema: `main` on SQLite, `public` on PostgreSQL)
    db_error_snapshot(b, "unknown_table", &body);
    // A near miss gets a hint.
    let body = error(
        s.get("/Team").send().await.expect("request"),
        404,
        "PGRST205",
    )
    .await;
    assert!(
        body["hint"].as_str().unwrap_or("").contains("team"),
        "{body}"
    );
    db_error_snapshot(b, "unknown_table_hint", &body);
    // close enough (three letters in four), and not (PostgREST's fuzzy match)
    for (path, hint) in [
        ("/drivre", Some("driver")),
        ("/teem", Some("team")),
        ("/txxm", None),
    ] {
        let body = error(s.get(path).send().await.expect("request"), 404, "PGRST205").await;
        let got = body["hint"]
            .as_str()
            .map(|h| h.rsplit('.').next().unwrap_or(h).trim_end_matches('\''));
        assert_eq!(got, hint, "{path}: {body}");
    }
    // Every method.
    error(
        s.post("/nope", json!({"a": 1}))
            .send()
            .await
            .expect("request"),
        404,
        "PGRST205",
    )
    .await;
    error(
        s.patch("/nope", json!({"a": 1}))
            .send()
            .await
            .expect("request"),
        404,
        "PGRST205",
    )
    .await;
    error(
        s.delete("/nope").send().await.expect("request"),
        404,
        "PGRST205",
    )
    .await;
    error(
        s.get("/nope/1").send().await.expect("request"),
        404,
        "PGRST205",
    )
    .await;
    // sqlite internals are not exposed.
    error(
        s.get("/sqlite_schema").send().await.expect("request"),
        404,
        "PGRST205",
    )
    .await;
}

async fn unknown_columns(b: Backend) {
    let s = TestServer::start(b).await;
    let body = error(
        s.get("/team?select=team_id,nope")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    assert!(
        body["message"].as_str().unwrap_or("").contains("nope"),
        "{body}"
    );
    insta::assert_json_snapshot!("unknown_column_select", body);
    for path in [
        "/team?nope=eq.1",
        "/team?order=nope.desc",
        "/team?or=(name.eq.Haas,nope.eq.1)",
        "/team?and=(name.eq.Haas,or(nope.eq.1))",
        "/team?select=alias:nope",
        "/team?select=nope::text",
        "/team/1?select=nope",
    ] {
        error(s.get(path).send().await.expect("request"), 400, "PGRST204").await;
    }
    // Write bodies and write parameters; nothing is written.
    let body = error(
        s.post("/team", json!({"name": "X", "nope": 1}))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    insta::assert_json_snapshot!("unknown_column_body", body);
    error(
        s.patch("/team?team_id=eq.1", json!({"nope": 1}))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    error(
        s.patch("/team?nope=eq.1", json!({"points": 1}))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    error(
        s.delete("/team?nope=eq.1").send().await.expect("request"),
        400,
        "PGRST204",
    )
    .await;
    error(
        s.post("/team?columns=name,nope", json!({"name": "X"}))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    error(
        s.post("/team?on_conflict=nope", json!({"name": "X"}))
            .header("Prefer", "resolution=merge-duplicates")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    error(
        s.post("/team?select=nope", json!({"name": "X"}))
            .header("Prefer", "return=representation")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    error(
        s.put("/team/1", json!({"team_id": 1, "name": "X", "nope": 0}))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    assert_eq!(team_count(&s), 10);
    let points = s.int("SELECT points FROM team WHERE team_id = 1");
    assert_eq!(points, 409);
}

async fn malformed_query_strings(b: Backend) {
    let s = TestServer::start(b).await;
    // (path, a fragment the details must mention)
    let cases: &[(&str, &str)] = &[
        ("/team?points=eq", "eq"),
        ("/team?points=eq5", "eq5"),
        ("/team?points=foo.1", "foo"),
        ("/team?points=", "operator"),
        ("/team?points=in.1,2", "in."),
        ("/team?points=in.(1,2", ")"),
        ("/team?points=is.maybe", "maybe"),
        ("/team?points=eq(some).{1}", "some"),
        ("/team?or=(points.eq.1", ")"),
        ("/team?or=points.eq.1", "("),
        ("/team?or=(points.eq.1))", ")"),
        ("/team?or=()", "empty"),
        ("/team?or=(points)", "points"),
        ("/team?limit=abc", "abc"),
        ("/team?limit=1.5", "1.5"),
        ("/team?offset=x", "x"),
        ("/team?limit=99999999999999999999999", "large"),
        ("/team?order=name.sideways", "sideways"),
        ("/team?order=", "empty"),
        ("/team?select=name,", ","),
        ("/team?select=name::", "type"),
        ("/team?select=*,driver(*", ")"),
        ("/team?select=*,driver!inner", "("),
        ("/team?%22unterminated=eq.1", "unterminated"),
    ];
    // (an empty `select=` is every column, as PostgREST reads it)
    let (status, rows) = get_json(&s, "/team?select=&limit=1").await;
    assert_eq!(status, 200);
    assert!(
        rows[0]["name"].is_string() && rows[0]["points"].is_number(),
        "{rows}"
    );
    for (path, fragment) in cases {
        let r = s.get(path).send().await.expect("request");
        let body = error(r, 400, "PGRST100").await;
        let text = format!("{} {}", body["message"], details(&body));
        assert!(
            text.contains(fragment),
            "{path}: {fragment:?} not in {body}"
        );
    }
    // a negative limit is a range nothing satisfies, as PostgREST answers it
    let body = error(
        s.get("/team?limit=-1").send().await.expect("request"),
        416,
        "PGRST103",
    )
    .await;
    assert_eq!(
        body["details"], "Limit should be greater than or equal to zero.",
        "{body}"
    );
    let body = error(
        s.get("/team?points=foo.1").send().await.expect("request"),
        400,
        "PGRST100",
    )
    .await;
    insta::assert_json_snapshot!("unknown_operator", body);
    let body = error(
        s.get("/team?or=(points.eq.1,name.eq.Haas")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST100",
    )
    .await;
    insta::assert_json_snapshot!("unbalanced_parentheses", body);
    let body = error(
        s.get("/team?limit=abc").send().await.expect("request"),
        400,
        "PGRST100",
    )
    .await;
    insta::assert_json_snapshot!("bad_limit", body);
    // Writes parse their query string too, before writing anything.
    error(
        s.patch("/team?points=foo.1", json!({"points": 0}))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST100",
    )
    .await;
    error(
        s.delete("/team?or=(points.eq.1")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST100",
    )
    .await;
    assert_eq!(team_count(&s), 10);
}

async fn bad_cast_type(b: Backend) {
    let s = TestServer::start(b).await;
    let body = error(
        s.get("/team?select=name::nope")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST100",
    )
    .await;
    assert!(
        body["message"].as_str().unwrap_or("").contains("nope"),
        "{body}"
    );
    insta::assert_json_snapshot!("bad_cast", body);
    error(
        s.get("/team?select=n:points::regclass")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST100",
    )
    .await;
}

async fn invalid_bodies(b: Backend) {
    let s = TestServer::start(b).await;
    let raw = |body: &'static str| {
        s.client
            .post(s.url("/team"))
            .header("Content-Type", "application/json")
            .body(body)
    };
    let body = error(
        raw(r#"{"name": "#).send().await.expect("request"),
        400,
        "PGRST102",
    )
    .await;
    insta::assert_json_snapshot!("invalid_json", body);
    let body = error(raw("").send().await.expect("request"), 400, "PGRST102").await;
    insta::assert_json_snapshot!("empty_body", body);
    error(raw("   \n").send().await.expect("request"), 400, "PGRST102").await;
    for scalar in [
        "42",
        "\"text\"",
        "null",
        "true",
        "[1, 2]",
        "[{\"name\": \"X\"}, 3]",
        "{\"name\": \"X\"} {}",
    ] {
        let r = raw(scalar).send().await.expect("request");
        let body = error(r, 400, "PGRST102").await;
        assert_shape(&body);
    }
    let body = error(
        raw("[1, 2]").send().await.expect("request"),
        400,
        "PGRST102",
    )
    .await;
    insta::assert_json_snapshot!("array_of_scalars", body);
    // Bulk rows with different keys.
    let body = error(
        s.post("/team", json!([{"name": "A", "points": 1}, {"name": "B"}]))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST102",
    )
    .await;
    insta::assert_json_snapshot!("mismatched_keys", body);
    error(
        s.post("/team", json!([{"name": "A"}, {"points": 1}]))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST102",
    )
    .await;
    // PATCH and PUT take one object (or an array of one, as PostgREST).
    error(
        s.patch("/team?team_id=eq.1", json!([{"points": 1}, {"points": 2}]))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST102",
    )
    .await;
    error(
        s.put(
            "/team/1",
            json!([{"team_id": 1, "name": "M"}, {"team_id": 1, "name": "N"}]),
        )
        .send()
        .await
        .expect("request"),
        400,
        "PGRST102",
    )
    .await;
    let r = s
        .client
        .patch(s.url("/team?team_id=eq.1"))
        .header("Content-Type", "application/json")
        .body("")
        .send()
        .await
        .expect("request");
    error(r, 400, "PGRST102").await;
    // Nesting beyond the JSON parser's limit is a 400, not a crash.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let r = s
        .client
        .post(s.url("/team"))
        .header("Content-Type", "application/json")
        .body(deep)
        .send()
        .await
        .expect("request");
    error(r, 400, "PGRST102").await;
    let r = raw(r#"{"name": "X", "points": 1e999}"#)
        .send()
        .await
        .expect("request");
    client_error(r, "number out of range").await;
    assert_eq!(team_count(&s), 10);
}

async fn unsupported_media_types(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .client
        .post(s.url("/team"))
        .header("Content-Type", "text/plain")
        .body(r#"{"name": "X"}"#)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 415);
    let body: Value = r.json().await.expect("json");
    assert_shape(&body);
    insta::assert_json_snapshot!("unsupported_content_type", body);
    let r = s
        .client
        .patch(s.url("/team?team_id=eq.1"))
        .header("Content-Type", "application/xml")
        .body("<points>1</points>")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 415);
    assert_eq!(team_count(&s), 10);

    let r = s
        .get("/team")
        .header("Accept", "image/png")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 406);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .starts_with("application/json"));
    let body: Value = r.json().await.expect("json");
    assert_shape(&body);
    insta::assert_json_snapshot!("not_acceptable", body);
    let r = s
        .get("/team/1")
        .header("Accept", "image/png")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 406);
    let r = s
        .get("/team")
        .header("Accept", "application/json;q=0")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 406);
    // A write that cannot answer in the accepted type changes nothing.
    let r = s
        .post("/team", json!({"name": "Unseen"}))
        .header("Accept", "image/png")
        .header("Prefer", "return=representation")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 406);
    assert_eq!(team_count(&s), 10);
}

async fn body_too_large(b: Backend) {
    let s = TestServer::start_with(b, |c| c.limits.body_bytes = 64).await;
    // Under the limit: fine.
    let r = s
        .post("/team", json!({"name": "Small"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    let big = json!([{"name": "x".repeat(100)}]);
    let r = s.post("/team", big).send().await.expect("request");
    assert_eq!(r.status().as_u16(), 413);
    let body: Value = r.json().await.expect("json");
    assert_shape(&body);
    insta::assert_json_snapshot!("payload_too_large", body);
    let r = s
        .patch("/team?team_id=eq.1", json!({"name": "y".repeat(200)}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(team_count(&s), 11);
    let name = s.rows("SELECT name FROM team WHERE team_id = 1")[0][0]
        .clone()
        .expect("name");
    assert_eq!(name, "Mercedes");
}

async fn constraint_violations(b: Backend) {
    let s = TestServer::start(b).await;
    let body = error(
        s.post("/team", json!({"points": 1}))
            .send()
            .await
            .expect("request"),
        400,
        "23502",
    )
    .await;
    db_error_snapshot(b, "not_null_violation", &body);
    error(
        s.patch("/team?team_id=eq.1", json!({"name": null}))
            .send()
            .await
            .expect("request"),
        400,
        "23502",
    )
    .await;

    let body = error(
        s.post("/driver", json!({"name": "Nobody", "team_id": 999}))
            .send()
            .await
            .expect("request"),
        409,
        "23503",
    )
    .await;
    db_error_snapshot(b, "foreign_key_violation", &body);
    error(
        s.delete("/team?team_id=eq.1")
            .send()
            .await
            .expect("request"),
        409,
        "23503",
    )
    .await;
    error(
        s.patch("/driver?driver_id=eq.1", json!({"team_id": 77}))
            .send()
            .await
            .expect("request"),
        409,
        "23503",
    )
    .await;

    let body = error(
        s.post("/team", json!({"name": "Ferrari"}))
            .send()
            .await
            .expect("request"),
        409,
        "23505",
    )
    .await;
    db_error_snapshot(b, "unique_violation", &body);
    error(
        s.patch("/team?team_id=eq.1", json!({"name": "Ferrari"}))
            .send()
            .await
            .expect("request"),
        409,
        "23505",
    )
    .await;
    error(
        s.post("/team", json!({"team_id": 1, "name": "Other"}))
            .send()
            .await
            .expect("request"),
        409,
        "23505",
    )
    .await;

    let body = error(
        s.patch("/employee?emp_no=eq.2", json!({"salary": -1}))
            .send()
            .await
            .expect("request"),
        400,
        "23514",
    )
    .await;
    db_error_snapshot(b, "check_violation", &body);
    let r = s
        .post(
            "/employee",
            json!({"first_name": "A", "last_name": "B", "hire_date": "2020-01-01", "dept_no": "600",
                   "job_code": "Eng", "job_grade": 1, "job_country": "USA", "salary": 0}),
        )
        .send()
        .await
        .expect("request");
    error(r, 400, "23514").await;

    // Nothing changed.
    assert_eq!(team_count(&s), 10);
    let driver_count = s.int("SELECT count(*) FROM driver");
    assert_eq!(driver_count, 20);
    let salary: f64 = s.rows("SELECT salary FROM employee WHERE emp_no = 2")[0][0]
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("salary");
    assert!((salary - 105_900.0).abs() < 1e-9);
}

async fn bad_range_header(b: Backend) {
    let s = TestServer::start(b).await;
    for range in ["abc", "0-x", "-5", "items=a-b", "1-2-3"] {
        let r = s
            .get("/team")
            .header("Range", range)
            .send()
            .await
            .expect("request");
        let body = client_error(r, range).await;
        assert_eq!(body["code"].as_str().map(|c| c.is_empty()), Some(false));
    }
    let r = s
        .get("/team")
        .header("Range", "abc")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.expect("json");
    insta::assert_json_snapshot!("bad_range", body);
    // End before start: not satisfiable.
    let r = s
        .get("/team")
        .header("Range", "5-2")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 416);
}

/// `rest.client_error_verbosity = "minimal"`: errors tell their code and message only, as
/// PostgREST's `client-error-verbosity`.
async fn minimal_error_verbosity(b: Backend) {
    let s = TestServer::start_with(b, |c| {
        c.rest.client_error_verbosity = rowgate::config::ErrorVerbosity::Minimal
    })
    .await;
    let r = s.get("/teamx").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 404);
    let body: Value = r.json().await.expect("json");
    let schema = match b {
        Backend::Sqlite => "main",
        Backend::Postgres => "public",
    };
    // (verbose, it would say which table was perhaps meant)
    assert_eq!(
        body,
        json!({"code": "PGRST205",
            "message": format!("Could not find the table '{schema}.teamx' in the schema cache")})
    );
}

async fn method_not_allowed(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post("/team/1", json!({"name": "X"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 405);
    let body: Value = r.json().await.expect("json");
    assert_shape(&body);
    insta::assert_json_snapshot!("post_to_item", body);
    assert_eq!(team_count(&s), 10);
    for (method, url) in [
        (reqwest::Method::PATCH, s.root_url("/openapi.json")),
        (reqwest::Method::DELETE, s.url("/")),
        (reqwest::Method::POST, s.url("/")),
    ] {
        let r = s
            .client
            .request(method.clone(), &url)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        assert_eq!(status, 405, "{method} {url}");
        // every 405 names the methods it allows (RFC 9110), in the header and in the details
        let allow = r
            .headers()
            .get("allow")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("{method} {url}: no Allow"))
            .to_string();
        assert!(allow.contains("GET"), "{method} {url}: {allow}");
        let body: Value = r.json().await.expect("json");
        assert_shape(&body);
        assert_eq!(
            body["details"],
            format!("allowed: {allow}"),
            "{method} {url}"
        );
    }
    // A view showing its table's key has that key, so item URLs (as PostgREST derives a
    // view's key); a view PostgreSQL cannot write through answers 405 to writes, naming the
    // methods it takes.
    let r = s.get("/team_standings/1").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["team_id"], 1);
    let r = s
        .patch("/team_standings/1", json!({"name": "X"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD");
}

async fn unknown_routes(b: Backend) {
    let s = TestServer::start(b).await;
    for url in [
        s.root_url("/nothing"),
        s.url("/team/1/extra"),
        s.root_url("/api2/team"),
        s.root_url("/"),
    ] {
        let r = s.client.get(&url).send().await.expect("request");
        assert_eq!(r.status().as_u16(), 404, "{url}");
        let body: Value = r.json().await.expect("json");
        assert_shape(&body);
    }
    let r = s
        .client
        .get(s.root_url("/nothing"))
        .send()
        .await
        .expect("request");
    insta::assert_json_snapshot!("unknown_route", r.json::<Value>().await.expect("json"));
}

async fn invalid_regular_expressions(b: Backend) {
    let s = TestServer::start(b).await;
    let body = error(
        s.get("/team?name=match.(").send().await.expect("request"),
        400,
        "PGRST100",
    )
    .await;
    db_error_snapshot(b, "invalid_regex", &body);
    for path in [
        "/team?name=imatch.[",
        "/team?name=match.a{2,1}",
        "/team?or=(name.match.*,points.gt.1)",
        "/team?name=not.match.(?P<",
        "/team?name=match(any).{ok,(}",
    ] {
        error(s.get(path).send().await.expect("request"), 400, "PGRST100").await;
    }
    // Invalid regex in a write's filter: 400 and nothing written.
    error(
        s.patch("/team?name=match.(", json!({"points": 0}))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST100",
    )
    .await;
    assert_eq!(team_count(&s), 10);
}

async fn oversized_regex_is_rejected(b: Backend) {
    let s = TestServer::start(b).await;
    // Compiles to more than the regex size limit.
    let r = s
        .get("/team?name=match.(a{1000}){1000}")
        .send()
        .await
        .expect("request");
    client_error(r, "huge regex").await;
    let r = s
        .get("/team?name=imatch.\\w{500}{500}")
        .send()
        .await
        .expect("request");
    client_error(r, "huge regex").await;
}

/// The parser's own ceiling (32 levels), with the configured limit raised to it.
async fn logic_nesting_limit(b: Backend) {
    let s = TestServer::start_with(b, |c| c.limits.max_filter_depth = 32).await;
    let nested = |depth: usize| {
        let mut v = "points.gt.1".to_string();
        for _ in 1..depth {
            v = format!("or({v})");
        }
        format!("/team?select=team_id&or=({v})")
    };
    // Within the limit: fine.
    let (status, body) = get_json(&s, &nested(30)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.as_array().map(Vec::len), Some(10));
    // Beyond it: 400.
    let body = error(
        s.get(&nested(40)).send().await.expect("request"),
        400,
        "PGRST100",
    )
    .await;
    assert!(
        body["hint"].as_str().unwrap_or("").contains("deep"),
        "{body}"
    );
    let body = error(
        s.get(&nested(5_000)).send().await.expect("request"),
        400,
        "PGRST100",
    )
    .await;
    assert_shape(&body);
    let unclosed = format!("/team?or=({}", "or(".repeat(5_000));
    error(
        s.get(&unclosed).send().await.expect("request"),
        400,
        "PGRST100",
    )
    .await;
}

async fn invalid_preferences_with_strict_handling(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .get("/team")
        .header("Prefer", "handling=strict, return=everything")
        .send()
        .await
        .expect("request");
    let body = error(r, 400, "PGRST122").await;
    assert!(details(&body).contains("return=everything"), "{body}");
    insta::assert_json_snapshot!("invalid_preference", body);
    // Lenient (default): ignored.
    let r = s
        .get("/team")
        .header("Prefer", "return=everything")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let r = s
        .post("/team", json!({"name": "Strict"}))
        .header("Prefer", "handling=strict, max-affected=lots")
        .send()
        .await
        .expect("request");
    error(r, 400, "PGRST122").await;
    assert_eq!(team_count(&s), 10);
}

async fn hostile_input_never_500(b: Backend) {
    let s = TestServer::start(b).await;
    // NUL bytes, percent-encoded, in values, column names, table names and select.
    not_server_error(
        s.get("/team?name=eq.%00").send().await.expect("request"),
        "NUL value",
    )
    .await;
    not_server_error(
        s.get("/team?name=in.(%00,a%00b)")
            .send()
            .await
            .expect("request"),
        "NUL list",
    )
    .await;
    not_server_error(
        s.get("/team?name=like.%00*").send().await.expect("request"),
        "NUL like",
    )
    .await;
    not_server_error(
        s.get("/team?name=match.%00").send().await.expect("request"),
        "NUL regex",
    )
    .await;
    client_error(
        s.get("/team?na%00me=eq.1").send().await.expect("request"),
        "NUL column",
    )
    .await;
    error(
        s.get("/team?%22na%00me%22=eq.1")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    client_error(
        s.get("/team?select=%00").send().await.expect("request"),
        "NUL select",
    )
    .await;
    client_error(
        s.get("/team?order=%00").send().await.expect("request"),
        "NUL order",
    )
    .await;
    error(
        s.get("/%00").send().await.expect("request"),
        404,
        "PGRST205",
    )
    .await;
    error(
        s.get("/te%00am").send().await.expect("request"),
        404,
        "PGRST205",
    )
    .await;
    not_server_error(s.get("/team/%00").send().await.expect("request"), "NUL key").await;
    let nul_body = not_server_error(
        s.post("/team", json!({"name": "nul\u{0}byte"}))
            .send()
            .await
            .expect("request"),
        "NUL body",
    )
    .await;
    error(
        s.post("/team", json!({"na\u{0}me": "x"}))
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    // Unicode.
    error(
        s.get("/t%C3%ABam").send().await.expect("request"),
        404,
        "PGRST205",
    )
    .await;
    error(
        s.get("/team?n%C3%A4me=eq.x").send().await.expect("request"),
        400,
        "PGRST204",
    )
    .await;
    let (status, body) = get_json(&s, "/team?name=eq.%F0%9F%8F%8E%EF%B8%8F").await;
    assert_eq!((status, body), (200, json!([])));
    let (status, body) = get_json(&s, "/team?name=ilike.*%C3%9F*").await;
    assert_eq!((status, body), (200, json!([])));
    // Invalid UTF-8 after percent-decoding.
    not_server_error(
        s.get("/team?name=eq.%FF%FE").send().await.expect("request"),
        "bad utf-8 value",
    )
    .await;
    not_server_error(
        s.get("/team?%FF=eq.1").send().await.expect("request"),
        "bad utf-8 key",
    )
    .await;
    not_server_error(
        s.get("/%FF%FE").send().await.expect("request"),
        "bad utf-8 table",
    )
    .await;
    // Quotes and SQL meta-characters are data, not SQL.
    let (status, body) = get_json(&s, "/team?name=eq.'%3B%20DROP%20TABLE%20team%3B--").await;
    assert_eq!((status, body), (200, json!([])));
    error(
        s.get("/team?select=%22name%22%22%3B%20DROP%20TABLE%20team%3B--%22")
            .send()
            .await
            .expect("request"),
        400,
        "PGRST204",
    )
    .await;
    assert_eq!(team_count(&s), if nul_body == 201 { 11 } else { 10 });
    // Hostile headers.
    not_server_error(
        s.get("/team")
            .header(
                "Prefer",
                "count=exact, return=minimal, x=".to_string() + &"y".repeat(4000),
            )
            .send()
            .await
            .expect("request"),
        "long Prefer",
    )
    .await;
    not_server_error(
        s.get("/team")
            .header("Accept", "*/*;q=nan, text/csv;q=-1")
            .send()
            .await
            .expect("request"),
        "odd Accept",
    )
    .await;
    not_server_error(
        s.get("/team?limit=18446744073709551615&offset=18446744073709551615")
            .send()
            .await
            .expect("request"),
        "huge limit",
    )
    .await;
}

/// Range bounds at the edge of u64 must not overflow.
async fn huge_range_header(b: Backend) {
    let s = TestServer::start(b).await;
    for range in [
        "0-18446744073709551615",
        "18446744073709551615-",
        "18446744073709551614-18446744073709551615",
    ] {
        let r = s.get("/team").header("Range", range).send().await;
        let r = r.unwrap_or_else(|e| panic!("Range {range}: no answer ({e})"));
        let status = not_server_error(r, range).await;
        if range.starts_with('0') {
            assert_eq!(status, 200, "{range}");
        }
    }
    let r = s
        .get("/team")
        .header("Range", "0-18446744073709551615")
        .send()
        .await
        .expect("request");
    assert_eq!(
        r.json::<Value>()
            .await
            .expect("json")
            .as_array()
            .map(Vec::len),
        Some(10)
    );
}

async fn very_long_query_strings(b: Backend) {
    let s = TestServer::start(b).await;
    let items: Vec<String> = (0..1_500).map(|i| format!("points.eq.{i}")).collect();
    let cases = [
        // A value longer than SQLite's LIKE pattern limit.
        (
            "60 KB like pattern",
            format!("/team?name=like.{}", "a".repeat(60_000)),
        ),
        // An `in` list with more elements than SQLite allows bound variables.
        (
            "40,001-element in list",
            format!("/people?select=id&id=in.({})", ",".repeat(40_000)),
        ),
        // Many filters: a WHERE clause deeper than SQLite's expression depth limit.
        (
            "1,500 filters",
            format!("/team?select=team_id{}", "&points=gt.0".repeat(1_500)),
        ),
        // A flat or= with many items.
        (
            "1,500-item or",
            format!("/team?select=team_id&or=({})", items.join(",")),
        ),
        // Many select items.
        (
            "5,000 select items",
            format!("/team?select={}", vec!["name"; 5_000].join(",")),
        ),
    ];
    let mut failures = Vec::new();
    for (what, path) in &cases {
        let r = s.get(path).send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        if status >= 500 {
            failures.push(format!("{what}: {status} {text}"));
        } else if status >= 400 {
            let body: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
            assert_shape(&body);
        }
    }
    assert!(
        failures.is_empty(),
        "server errors:\n{}",
        failures.join("\n")
    );
    // A URL beyond what the server accepts (and beyond what reqwest sends): a 4xx status line,
    // read off a raw connection.
    let status = common::raw_status(
        s.addr,
        &format!(
            "GET /api/team?name=eq.{} HTTP/1.1\r\nHost: x\r\n\r\n",
            "a".repeat(100_000)
        ),
    )
    .await;
    assert!((400..500).contains(&status), "100 KB URL: {status}");
}

/// Array, range and full-text operators exist only on PostgreSQL; on PostgreSQL, they and JSON
/// paths on columns of the wrong type are 400s too, never 500s.
async fn operators_on_the_wrong_backend_or_type(b: Backend) {
    let s = TestServer::start(b).await;
    let body = error(
        s.get("/team?name=cs.{a}").send().await.expect("request"),
        400,
        "PGRST100",
    )
    .await;
    if b == Backend::Sqlite {
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("only available on PostgreSQL")),
            "{body}"
        );
        error(
            s.get("/team?name=fts.x").send().await.expect("request"),
            400,
            "PGRST100",
        )
        .await;
    } else {
        // text is searched through to_tsvector
        let r = s
            .get("/team?name=plfts.ferrari")
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 200);
        let rows: Value = r.json().await.expect("json");
        assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    }
    for path in [
        "/team?period=adj.[1,2)",
        "/team?points=sl.[1,2)",
        "/team?select=name->%00",
        "/team?name=wfts(%00).x",
    ] {
        client_error(s.get(path).send().await.expect("request"), path).await;
    }
    // a path deeper than an item's, and an order by a to-many embed: PostgREST's codes
    let r = s.get("/team/1/extra").send().await.expect("request");
    let body = assert_error(r, 404, "PGRST125").await;
    assert_eq!(body["message"], "Invalid path specified in request URL");
    let r = s
        .get("/team?select=name,driver(name)&order=driver(name)")
        .send()
        .await
        .expect("request");
    let body = assert_error(r, 400, "PGRST118").await;
    assert_eq!(
        body["message"],
        "A related order on 'driver' is not possible"
    );
    // a JSON key is any characters but `(-:.,>)`, quotes too, as PostgREST reads it: nothing
    // is found under `'a'` in a number
    let (status, body) = common::get_json(&s, "/team?select=v:points->>'a'&limit=1").await;
    assert_eq!((status, body), (200, serde_json::json!([{"v": null}])));
    // JSON paths into columns that are not JSON: PostgreSQL reads them as JSON first (as
    // PostgREST; nothing is found there), SQLite refuses text that is not JSON
    for path in [
        "/team?name->>%22a%22%22b%22=eq.1",
        "/team?order=name->0.desc",
    ] {
        let r = s.get(path).send().await.expect("request");
        if b == Backend::Postgres {
            assert_eq!(r.status(), 200, "{path}");
        } else {
            client_error(r, path).await;
        }
    }
}

/// Configured limits: filter nesting, list length, open connections; each a clear answer.
async fn configured_limits(b: Backend) {
    let s = TestServer::start_with(b, |c| {
        c.limits.max_filter_depth = 2;
        c.limits.max_list_items = 3;
        c.limits.max_connections = 3;
    })
    .await;
    let ok = s
        .get("/team?or=(team_id.eq.1,and(points.gt.1,name.like.A*))")
        .send()
        .await
        .expect("r");
    assert_eq!(ok.status(), 200);
    let body = error(
        s.get("/team?or=(team_id.eq.1,and(points.gt.1,or(name.eq.a,name.eq.b)))")
            .send()
            .await
            .expect("r"),
        400,
        "RG102",
    )
    .await;
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("limit is 2")),
        "{body}"
    );
    assert_eq!(
        s.get("/team?team_id=in.(1,2,3)")
            .send()
            .await
            .expect("r")
            .status(),
        200
    );
    error(
        s.get("/team?team_id=in.(1,2,3,4)").send().await.expect("r"),
        400,
        "RG102",
    )
    .await;
    error(
        s.get("/team?name=like(any).{a,b,c,d}")
            .send()
            .await
            .expect("r"),
        400,
        "RG102",
    )
    .await;
    // Three idle connections are held; a fourth is answered 503 and closed.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            tokio::net::TcpStream::connect(s.addr)
                .await
                .expect("connect"),
        );
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let status = common::raw_status(s.addr, "GET /api/team HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, 503);
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(s.get("/team/1").send().await.expect("r").status(), 200);
}

backend_tests!(
    configured_limits,
    minimal_error_verbosity,
    operators_on_the_wrong_backend_or_type,
    unknown_table,
    unknown_columns,
    malformed_query_strings,
    bad_cast_type,
    invalid_bodies,
    unsupported_media_types,
    body_too_large,
    constraint_violations,
    bad_range_header,
    method_not_allowed,
    unknown_routes,
    invalid_regular_expressions,
    oversized_regex_is_rejected,
    logic_nesting_limit,
    invalid_preferences_with_strict_handling,
    hostile_input_never_500,
    huge_range_header,
    very_long_query_strings,
);
