//! Functions as RPC through a real server: custom resources declared as functions on both
//! backends (arguments from the body and the query string, a set of rows filtered, ordered,
//! paged, counted and shaped with `select`, PostgREST's `PGRST202`), and PostgreSQL's own
//! functions (overloads and defaults, volatility deciding GET and the transaction, scalars,
//! sets, rows, `OUT` parameters, `void`, arrays, a single unnamed JSON parameter,
//! `Prefer: params=single-object`, embedding from returned rows, grants).

mod common;

use common::{assert_error, write_config, Backend, TestServer, FUNCTION_RESOURCES};
use serde_json::{json, Value};

/// Functions declared as custom resources besides [`FUNCTION_RESOURCES`]: one that writes, one
/// for writers only.
const CONFIG: &str = r#"
[[resources]]
roles = ["*"]
function = "rename_team"
shape = "row"
sql = "UPDATE team SET name = :name WHERE team_id = :id RETURNING team_id, name"
params.id = { type = "int" }
params.name = {}

[[resources]]
roles = ["*"]
function = "zero_points_upto"
sql = "UPDATE team SET points = 0 WHERE team_id <= :n RETURNING team_id"
params.n = { type = "int" }

[[resources]]
roles = ["writer"]
function = "writers_only"
shape = "value"
sql = "SELECT 1"

[[grants]]
role = "anon"
tables = ["*"]
ops = ["select"]
"#;

async fn start(b: Backend, setup: &str, toml: &str) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), toml, &[]).expect("config");
    TestServer::start_prepared(b, dir, config, setup, |_| {}).await
}

/// A server with [`CONFIG`]'s and [`FUNCTION_RESOURCES`]'s functions.
async fn functions_server(b: Backend) -> TestServer {
    start(b, "", &format!("{CONFIG}{FUNCTION_RESOURCES}")).await
}

async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A resource function answers POST with a JSON object of arguments and GET with them in the
/// query string; a missing or mistyped argument is refused naming it.
async fn resource_functions_take_arguments_by_name(b: Backend) {
    let s = functions_server(b).await;
    let (status, body) = json_of(
        s.post("/rpc/add_them", json!({"a": 1, "b": 2}))
            .send()
            .await
            .expect("post"),
    )
    .await;
    assert_eq!((status, body), (200, json!(3)));
    let (status, body) = json_of(s.get("/rpc/add_them?a=40&b=2").send().await.expect("get")).await;
    assert_eq!((status, body), (200, json!(42)));
    let missing = assert_error(
        s.post("/rpc/add_them", json!({"a": 1}))
            .send()
            .await
            .expect("post"),
        400,
        "RG110",
    )
    .await;
    assert!(
        missing["message"]
            .as_str()
            .unwrap_or_default()
            .contains('b'),
        "{missing}"
    );
    assert_error(
        s.get("/rpc/add_them?a=x&b=1").send().await.expect("get"),
        400,
        "RG111",
    )
    .await;
    let r = s
        .client
        .put(s.url("/rpc/add_them"))
        .json(&json!({}))
        .send()
        .await
        .expect("put");
    assert_eq!(r.headers()["allow"], "GET, HEAD, POST");
    let body = assert_error(r, 405, "PGRST101").await;
    assert_eq!(body["message"], "Cannot use the PUT method on RPC");
}

/// A function returning rows takes filters, order, limits, `select` and counts as a table.
async fn resource_function_rows_read_as_a_table(b: Backend) {
    let s = functions_server(b).await;
    let r = s
        .get("/rpc/drivers_above?min_points=100&select=name,points&points=lt.300&order=points.desc&limit=2")
        .header("prefer", "count=exact")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["content-range"], "0-1/7");
    let (status, body) = json_of(r).await;
    assert_eq!(status, 206);
    assert_eq!(
        body,
        json!([{"name": "Sergio Perez", "points": 285}, {"name": "Lewis Hamilton", "points": 234}])
    );
    // POST: the arguments in the body, the modifiers in the query string
    let (status, body) = json_of(
        s.post(
            "/rpc/drivers_above?select=name&name=like.*Norris",
            json!({"min_points": 100}),
        )
        .send()
        .await
        .expect("post"),
    )
    .await;
    assert_eq!((status, body), (200, json!([{"name": "Lando Norris"}])));
    // an unknown column is refused as on a table
    assert_error(
        s.get("/rpc/drivers_above?select=nope")
            .send()
            .await
            .expect("get"),
        400,
        "PGRST204",
    )
    .await;
    // a scalar takes no modifiers
    assert_error(
        s.get("/rpc/add_them?a=1&b=1&limit=1")
            .send()
            .await
            .expect("get"),
        400,
        "PGRST100",
    )
    .await;
}

/// Team 1's name, as `[{"name": …}]`.
async fn first_team_name(s: &TestServer) -> Value {
    let r = s
        .get("/team?team_id=eq.1&select=name")
        .send()
        .await
        .expect("get");
    json_of(r).await.1
}

/// A resource function whose SQL writes answers POST only, and its write commits.
async fn resource_function_that_writes(b: Backend) {
    let s = functions_server(b).await;
    let r = s
        .get("/rpc/rename_team?id=1&name=X")
        .send()
        .await
        .expect("get");
    assert_error(r, 405, "PGRST117").await;
    let (status, body) = json_of(
        s.post(
            "/rpc/rename_team",
            json!({"id": 1, "name": "Silver Arrows"}),
        )
        .send()
        .await
        .expect("post"),
    )
    .await;
    assert_eq!(
        (status, body),
        (200, json!({"team_id": 1, "name": "Silver Arrows"}))
    );
    let team = first_team_name(&s).await;
    assert_eq!(team, json!([{"name": "Silver Arrows"}]));
}

/// `Prefer: handling=strict, max-affected=N` on a writing call counts the rows it returns
/// (PostgREST's PGRST124, the call rolled back) and needs a set of them (PGRST128).
async fn function_call_max_affected(b: Backend) {
    let s = functions_server(b).await;
    let strict = |n: u64| format!("handling=strict, max-affected={n}");
    let r = s
        .post("/rpc/zero_points_upto", json!({"n": 5}))
        .header("prefer", strict(2))
        .send()
        .await
        .expect("post");
    let body = assert_error(r, 400, "PGRST124").await;
    assert_eq!(body["details"], "The query affects 5 rows", "{body}");
    assert_eq!(s.int("SELECT count(*) FROM team WHERE points = 0"), 0);
    let r = s
        .post("/rpc/zero_points_upto", json!({"n": 2}))
        .header("prefer", strict(2))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 200);
    assert_eq!(s.int("SELECT count(*) FROM team WHERE points = 0"), 2);
    let r = s
        .post("/rpc/rename_team", json!({"id": 1, "name": "Strict"}))
        .header("prefer", strict(1))
        .send()
        .await
        .expect("post");
    assert_error(r, 400, "PGRST128").await;
}

/// A writing function call honours `Prefer: tx=rollback` where `rest.tx_end` allows it: its
/// answer as usual, nothing kept.
async fn function_call_rolled_back(b: Backend) {
    let s = start(
        b,
        "",
        &format!("[rest]\ntx_end = \"commit-allow-override\"\n{CONFIG}{FUNCTION_RESOURCES}"),
    )
    .await;
    let r = s
        .post("/rpc/rename_team", json!({"id": 1, "name": "Never Kept"}))
        .header("prefer", "tx=rollback")
        .send()
        .await
        .expect("post");
    let (status, body) = json_of(r).await;
    assert_eq!(
        (status, &body["name"]),
        (200, &json!("Never Kept")),
        "{body}"
    );
    let team = first_team_name(&s).await;
    assert_ne!(team, json!([{"name": "Never Kept"}]));
}

/// An unknown function or argument answers PostgREST's 404 `PGRST202`, with a hint; a function
/// the role may not call is refused.
async fn unknown_functions_and_roles(b: Backend) {
    let s = functions_server(b).await;
    let body = assert_error(
        s.post("/rpc/add_themm", json!({}))
            .send()
            .await
            .expect("post"),
        404,
        "PGRST202",
    )
    .await;
    assert_eq!(
        body["message"],
        "Could not find the function public.add_themm without parameters in the schema cache"
    );
    assert_eq!(
        body["hint"],
        "Perhaps you meant to call the function public.add_them"
    );
    let body = assert_error(
        s.post("/rpc/add_them", json!({"a": 1, "c": 2}))
            .send()
            .await
            .expect("post"),
        404,
        "PGRST202",
    )
    .await;
    assert_eq!(
        body["hint"],
        "Perhaps you meant to call the function public.add_them(a, b)"
    );
    let (_, doc) = json_of(s.get("/").send().await.expect("openapi")).await;
    let add = &doc["paths"]["/api/rpc/add_them"];
    assert_eq!(add["get"]["parameters"][0]["in"], "query", "{add}");
    assert!(add["post"]["requestBody"].is_object(), "{add}");
    assert!(
        doc["paths"]["/api/rpc/writers_only"].is_null(),
        "not for anon"
    );
    assert_error(
        s.post("/rpc/writers_only", json!({}))
            .send()
            .await
            .expect("post"),
        401,
        "RG401",
    )
    .await;
}

/// PostgreSQL functions for the tests below.
const FUNCTIONS: &str = r#"
CREATE FUNCTION add_ints(a integer, b integer DEFAULT 10) RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT a + b $$;
CREATE FUNCTION add_ints(a integer, b integer, c integer) RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT a + b + c $$;
CREATE FUNCTION team_drivers(tid integer) RETURNS SETOF driver LANGUAGE sql STABLE AS $$ SELECT * FROM driver WHERE team_id = tid $$;
CREATE FUNCTION bump_points(tid integer, by integer) RETURNS team LANGUAGE sql AS $$ UPDATE team SET points = points + by WHERE team_id = tid RETURNING * $$;
CREATE FUNCTION echo_json(jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$ SELECT $1 $$;
CREATE FUNCTION one_object(payload json) RETURNS json LANGUAGE sql IMMUTABLE AS $$ SELECT payload $$;
CREATE FUNCTION noop() RETURNS void LANGUAGE sql AS $$ $$;
CREATE FUNCTION up_to(n integer) RETURNS SETOF integer LANGUAGE sql IMMUTABLE AS $$ SELECT generate_series(1, n) $$;
CREATE FUNCTION driver_stats(OUT total bigint, OUT best integer) LANGUAGE sql STABLE AS $$ SELECT count(*), max(points) FROM driver $$;
CREATE FUNCTION sum_all(xs integer[]) RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT sum(x)::int FROM unnest(xs) x $$;
CREATE FUNCTION standings() RETURNS TABLE(team text, total integer) LANGUAGE sql STABLE AS $$ SELECT name, points FROM team $$;
CREATE FUNCTION plus_one(n integer, OUT n_plus_one integer) LANGUAGE sql IMMUTABLE AS $$ SELECT n + 1 $$;
CREATE FUNCTION bumped(INOUT n integer) LANGUAGE sql IMMUTABLE AS $$ SELECT n + 1 $$;
CREATE FUNCTION team_names() RETURNS TABLE(team text) LANGUAGE sql STABLE AS $$ SELECT name FROM team ORDER BY team_id LIMIT 2 $$;
CREATE FUNCTION whoami() RETURNS json LANGUAGE sql STABLE AS $$ SELECT current_setting('request.jwt.claims', true)::json $$;
CREATE FUNCTION sneaky() RETURNS integer LANGUAGE plpgsql STABLE AS $$ BEGIN UPDATE team SET points = 0; RETURN 1; END $$;
"#;

const GRANTS: &str = r#"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select"]
functions = ["*"]
"#;

/// PostgreSQL's functions by name: overloads picked by the arguments given, defaults filling
/// the rest, GET for stable and immutable functions, POST for all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_functions_are_called_by_argument_names() {
    let s = start(Backend::Postgres, FUNCTIONS, GRANTS).await;
    let call = |path: &str, body: Value| s.post(path, body).send();
    let (status, body) = json_of(
        call("/rpc/add_ints", json!({"a": 1, "b": 2}))
            .await
            .expect("post"),
    )
    .await;
    assert_eq!((status, body), (200, json!(3)));
    let r = s.get("/rpc/add_ints?a=1").send().await.expect("get");
    // one value is the first of one row, as PostgREST answers it
    assert_eq!(r.headers()["content-range"], "0-0/*");
    let (_, body) = json_of(r).await;
    assert_eq!(body, json!(11), "the default fills b");
    let r = s
        .get("/rpc/add_ints?a=1")
        .header("prefer", "count=exact")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["content-range"], "0-0/1");
    let (_, body) = json_of(
        call("/rpc/add_ints", json!({"a": 1, "b": 2, "c": 3}))
            .await
            .expect("post"),
    )
    .await;
    assert_eq!(body, json!(6), "the overload with c");
    let (_, body) = json_of(
        call("/rpc/sum_all", json!({"xs": [1, 2, 3]}))
            .await
            .expect("post"),
    )
    .await;
    assert_eq!(body, json!(6), "a JSON array into integer[]");
    let (_, body) = json_of(s.get("/rpc/up_to?n=3").send().await.expect("get")).await;
    assert_eq!(body, json!([1, 2, 3]));
    let (_, body) = json_of(s.get("/rpc/driver_stats").send().await.expect("get")).await;
    assert_eq!(body, json!({"total": 20, "best": 575}));
    // one OUT (or INOUT) parameter, one RETURNS TABLE column: rows too, as PostgREST's
    let (_, body) = json_of(s.get("/rpc/plus_one?n=5").send().await.expect("get")).await;
    assert_eq!(body, json!({"n_plus_one": 6}));
    let (_, body) = json_of(s.get("/rpc/bumped?n=2").send().await.expect("get")).await;
    assert_eq!(body, json!({"n": 3}));
    let (_, body) = json_of(s.get("/rpc/team_names?limit=1").send().await.expect("get")).await;
    assert_eq!(body, json!([{"team": "Mercedes"}]));
    let (_, body) = json_of(
        s.get("/rpc/standings?total=gt.400&order=total.desc&select=team")
            .send()
            .await
            .expect("get"),
    )
    .await;
    assert_eq!(
        body,
        json!([{"team": "Red Bull"}, {"team": "Mercedes"}, {"team": "Ferrari"}])
    );
    let r = call("/rpc/noop", json!({})).await.expect("post");
    assert_eq!(r.status().as_u16(), 204);
    // the whole body to a single unnamed JSON parameter, or with params=single-object
    let (_, body) = json_of(
        call("/rpc/echo_json", json!({"x": [1, {"y": null}]}))
            .await
            .expect("post"),
    )
    .await;
    assert_eq!(body, json!({"x": [1, {"y": null}]}));
    let (_, body) = json_of(
        s.post("/rpc/one_object", json!({"k": 1}))
            .header("prefer", "params=single-object")
            .send()
            .await
            .expect("post"),
    )
    .await;
    assert_eq!(body, json!({"k": 1}));
    // the caller's claims, as PostgREST sets them (Supabase's auth.uid() reads them)
    let (_, body) = json_of(s.get("/rpc/whoami").send().await.expect("get")).await;
    assert_eq!(body["role"], "anon", "{body}");
    let (_, token) = common::client_token(&s, "fn-caller", "anon").await;
    let (_, body) = json_of(
        s.post("/rpc/whoami", json!({}))
            .bearer_auth(&token)
            .send()
            .await
            .expect("post"),
    )
    .await;
    assert!(
        body["sub"].as_str().is_some_and(|sub| !sub.is_empty()),
        "{body}"
    );
    assert_eq!(body["role"], "anon");
    // bad arguments: an unknown name, a value of the wrong type
    let body = assert_error(
        call("/rpc/add_ints", json!({"x": 1})).await.expect("post"),
        404,
        "PGRST202",
    )
    .await;
    assert_eq!(
        body["message"],
        "Could not find the function public.add_ints(x) in the schema cache"
    );
    assert_eq!(
        body["hint"],
        "Perhaps you meant to call the function public.add_ints(a, b)"
    );
    assert_error(
        s.get("/rpc/add_ints?a=abc").send().await.expect("get"),
        400,
        "22P02",
    )
    .await;
}

/// Rows a function returns embed their relationships and count; a VOLATILE function answers
/// POST only and its write commits; a STABLE one runs read-only, so it cannot write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_function_rows_volatility_and_grants() {
    let s = start(Backend::Postgres, FUNCTIONS, GRANTS).await;
    let r = s
        .get("/rpc/team_drivers?tid=3&select=name,team(name)&order=points.desc")
        .header("prefer", "count=exact")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["content-range"], "0-1/2");
    // a Range header pages a GET only (RFC 9110 §14.2): a POST ignores it
    let posted = s
        .post("/rpc/team_drivers?select=name", json!({"tid": 3}))
        .header("prefer", "count=exact")
        .header("range", "1-1")
        .send()
        .await
        .expect("post");
    assert_eq!(posted.status().as_u16(), 200);
    assert_eq!(posted.headers()["content-range"], "0-1/2");
    let paged = s
        .get("/rpc/team_drivers?tid=3&select=name")
        .header("range", "1-1")
        .send()
        .await
        .expect("get");
    assert_eq!(paged.headers()["content-range"], "1-1/*");
    let (_, body) = json_of(r).await;
    assert_eq!(
        body,
        json!([
            {"name": "Max Verstappen", "team": {"name": "Red Bull"}},
            {"name": "Sergio Perez", "team": {"name": "Red Bull"}}
        ])
    );
    let r = s
        .get("/rpc/bump_points?tid=1&by=5")
        .send()
        .await
        .expect("get");
    // as PostgREST: the GET runs it in a read-only transaction, where its UPDATE fails
    assert_error(r, 405, "25006").await;
    let before = s.int("SELECT points FROM team WHERE team_id = 1");
    let (status, body) = json_of(
        s.post("/rpc/bump_points", json!({"tid": 1, "by": 5}))
            .send()
            .await
            .expect("post"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["points"], before + 5);
    assert_eq!(
        s.int("SELECT points FROM team WHERE team_id = 1"),
        before + 5
    );
    let r = s.post("/rpc/sneaky", json!({})).send().await.expect("post");
    assert_ne!(r.status().as_u16(), 200, "a STABLE function may not write");
    assert_eq!(s.int("SELECT count(*) FROM team WHERE points = 0"), 0);

    // OpenAPI lists them: GET only where the function does not write
    let (_, doc) = json_of(s.get("/").send().await.expect("openapi")).await;
    let paths = &doc["paths"];
    assert!(
        paths["/api/rpc/add_ints"]["get"]["parameters"].is_array(),
        "{paths}"
    );
    assert_eq!(
        paths["/api/rpc/add_ints"]["post"]["requestBody"]["content"]["application/json"]["schema"]
            ["required"],
        json!(["a"])
    );
    assert!(paths["/api/rpc/bump_points"]["post"].is_object());
    assert!(paths["/api/rpc/bump_points"]["get"].is_null());

    // grants: only the functions named
    let only = r#"
[[grants]]
role = "anon"
tables = ["team"]
ops = ["select"]
functions = ["add_ints"]
"#;
    let s = start(Backend::Postgres, FUNCTIONS, only).await;
    let (status, _) = json_of(s.get("/rpc/add_ints?a=1&b=1").send().await.expect("get")).await;
    assert_eq!(status, 200);
    assert_error(
        s.get("/rpc/up_to?n=1").send().await.expect("get"),
        401,
        "RG401",
    )
    .await;
    // the returned rows' embeds still need their tables' grants
    let s = start(
        Backend::Postgres,
        FUNCTIONS,
        &only
            .replace("add_ints", "team_drivers")
            .replace("[\"team\"]", "[\"driver\"]"),
    )
    .await;
    assert_error(
        s.get("/rpc/team_drivers?tid=3&select=name,team(name)")
            .send()
            .await
            .expect("get"),
        401,
        "RG401",
    )
    .await;
}

backend_tests!(
    function_call_max_affected,
    function_call_rolled_back,
    resource_functions_take_arguments_by_name,
    resource_function_rows_read_as_a_table,
    resource_function_that_writes,
    unknown_functions_and_roles,
);

/// Functions that raise the answer they choose, as PostgREST reads them.
const RAISING: &str = r#"
CREATE FUNCTION pay() RETURNS void LANGUAGE plpgsql AS $$
BEGIN RAISE SQLSTATE 'PT402' USING MESSAGE = 'Payment Required', DETAIL = 'Quota exceeded', HINT = 'Upgrade your plan'; END $$;
CREATE FUNCTION pay_wrong() RETURNS void LANGUAGE plpgsql AS $$
BEGIN RAISE SQLSTATE 'PT40A' USING MESSAGE = 'Wrong'; END $$;
CREATE FUNCTION choose(message text, detail text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF detail IS NULL THEN RAISE SQLSTATE 'PGRST' USING MESSAGE = message;
  ELSE RAISE SQLSTATE 'PGRST' USING MESSAGE = message, DETAIL = detail; END IF;
END $$;
"#;

/// Sends `request` on a fresh connection and returns the answer's head (status line and
/// headers) as text.
async fn raw_head(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).to_string();
    text.split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `RAISE SQLSTATE 'PTnnn'` answers status nnn with the message as its reason phrase and the
/// function's message, detail and hint in the body (500 when nnn is no status);
/// `RAISE SQLSTATE 'PGRST'` with JSON in MESSAGE and DETAIL chooses the body, status, reason
/// phrase and headers; 500 `PGRST121` says what is wrong with JSON that does not fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_functions_raise_the_answer_they_choose() {
    let s = start(Backend::Postgres, &format!("{FUNCTIONS}{RAISING}"), GRANTS).await;
    let r = s.post("/rpc/pay", json!({})).send().await.expect("post");
    assert_eq!(r.headers()["proxy-status"], "Rowgate; error=PT402");
    let (status, body) = json_of(r).await;
    assert_eq!(
        (status, body),
        (
            402,
            json!({"code": "PT402", "message": "Payment Required", "details": "Quota exceeded", "hint": "Upgrade your plan"})
        )
    );
    let head = raw_head(
        s.addr,
        "POST /api/rpc/pay HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{}",
    )
    .await;
    assert!(
        head.starts_with("HTTP/1.1 402 Payment Required\r\n"),
        "{head}"
    );
    let (status, body) = json_of(
        s.post("/rpc/pay_wrong", json!({}))
            .send()
            .await
            .expect("post"),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            500,
            json!({"code": "PT40A", "message": "Wrong", "details": null, "hint": null})
        )
    );

    let chosen = json!({
        "message": r#"{"code":"123","message":"ABC","details":"DEF","hint":"XYZ"}"#,
        "detail": r#"{"status":332,"status_text":"My Custom Status","headers":{"X-Header":"str"}}"#,
    });
    let r = s
        .post("/rpc/choose", chosen.clone())
        .send()
        .await
        .expect("post");
    assert_eq!(r.headers()["x-header"], "str");
    let (status, body) = json_of(r).await;
    assert_eq!(
        (status, body),
        (
            332,
            json!({"code": "123", "message": "ABC", "details": "DEF", "hint": "XYZ"})
        )
    );
    let request = format!(
        "POST /api/rpc/choose HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{chosen}",
        chosen.to_string().len()
    );
    let head = raw_head(s.addr, &request).await;
    assert!(
        head.starts_with("HTTP/1.1 332 My Custom Status\r\n"),
        "{head}"
    );

    for (message, detail, details) in [
        (
            "INVALID",
            Some("{}"),
            "Invalid JSON value for MESSAGE: 'INVALID'",
        ),
        (
            r#"{"code":"1","message":"m"}"#,
            None,
            "DETAIL is missing in the RAISE statement",
        ),
        (
            r#"{"code":"1","message":"m"}"#,
            Some("nope"),
            "Invalid JSON value for DETAIL: 'nope'",
        ),
        (
            r#"{"code":"1","message":"m"}"#,
            Some(r#"{"status":"x","headers":{}}"#),
            r#"Invalid JSON value for DETAIL: '{"status":"x","headers":{}}'"#,
        ),
    ] {
        let r = s
            .post("/rpc/choose", json!({"message": message, "detail": detail}))
            .send()
            .await
            .expect("post");
        let body = assert_error(r, 500, "PGRST121").await;
        assert_eq!(
            body["message"],
            "Could not parse JSON in the \"RAISE SQLSTATE 'PGRST'\" error"
        );
        assert_eq!(body["details"], details);
    }
}

/// On a GET, as PostgREST reads it, a pair is an argument unless its value is a filter: the
/// same name can be both (`team_id=5&team_id=gt.2`), and a pair naming no parameter with a
/// plain value asks for a function that takes it (404 `PGRST202`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_get_pairs_are_arguments_unless_they_are_filters() {
    let setup = format!(
        "{FUNCTIONS}\nCREATE FUNCTION teams_below(team_id integer) RETURNS SETOF team LANGUAGE sql STABLE AS $$ SELECT * FROM team t WHERE t.team_id < $1 $$;"
    );
    let s = start(Backend::Postgres, &setup, GRANTS).await;
    let ids = |body: Value| -> Vec<i64> {
        body.as_array()
            .expect("rows")
            .iter()
            .map(|r| r["team_id"].as_i64().expect("id"))
            .collect()
    };
    let (status, body) = get_rows(
        &s,
        "/rpc/teams_below?team_id=5&team_id=gt.2&select=team_id&order=team_id",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(body), [3, 4]);
    let (_, body) = get_rows(
        &s,
        "/rpc/teams_below?team_id=5&team_id=not.gt.2&select=team_id&order=team_id",
    )
    .await;
    assert_eq!(ids(body), [1, 2]);
    let body = assert_error(
        s.get("/rpc/add_ints?a=1&b=2&other=plain")
            .send()
            .await
            .expect("get"),
        404,
        "PGRST202",
    )
    .await;
    assert_eq!(
        body["message"],
        "Could not find the function public.add_ints(a, b, other) in the schema cache"
    );
    assert_eq!(
        body["details"],
        "Searched for the function public.add_ints with parameters a, b, other, but no matches were found in the schema cache."
    );
    // the overload whose parameters are most like the call's
    assert_eq!(
        body["hint"],
        "Perhaps you meant to call the function public.add_ints(a, b, c)"
    );
    let body = assert_error(
        s.get("/rpc/add_ints?zzz=1").send().await.expect("get"),
        404,
        "PGRST202",
    )
    .await;
    assert_eq!(
        body["details"],
        "Searched for the function public.add_ints with parameter zzz, but no matches were found in the schema cache."
    );
}

async fn get_rows(s: &TestServer, path: &str) -> (u16, Value) {
    json_of(s.get(path).send().await.expect("get")).await
}

/// A call that writes, asked for a singular object: unless it returns exactly one row, 406
/// `PGRST116` and its writes are rolled back (as a table write's), whatever `tx=commit` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_singular_calls_roll_back_unless_one_row() {
    let setup = format!(
        "{FUNCTIONS}\nCREATE FUNCTION rename_teams(lo integer, hi integer, new_name text) RETURNS SETOF team LANGUAGE sql AS $$ UPDATE team SET name = new_name || team_id WHERE team_id BETWEEN lo AND hi RETURNING * $$;"
    );
    let s = start(Backend::Postgres, &setup, GRANTS).await;
    let singular = "application/vnd.pgrst.object+json";
    let r = s
        .post(
            "/rpc/rename_teams",
            json!({"lo": 1, "hi": 2, "new_name": "x"}),
        )
        .header("accept", singular)
        .header("prefer", "tx=commit")
        .send()
        .await
        .expect("post");
    let body = assert_error(r, 406, "PGRST116").await;
    assert_eq!(body["details"], "The result contains 2 rows");
    assert_eq!(
        s.int("SELECT count(*) FROM team WHERE name LIKE 'x%'"),
        0,
        "rolled back"
    );
    let r = s
        .post(
            "/rpc/rename_teams?select=team_id,name",
            json!({"lo": 1, "hi": 1, "new_name": "y"}),
        )
        .header("accept", singular)
        .send()
        .await
        .expect("post");
    let (status, body) = json_of(r).await;
    assert_eq!((status, body), (200, json!({"team_id": 1, "name": "y1"})));
    assert_eq!(s.int("SELECT count(*) FROM team WHERE name = 'y1'"), 1);
}

/// Several overloads fitting a call: the one taking exactly the arguments given, else 300
/// `PGRST203` naming the candidates; rows in a CSV body name arguments (a function of one
/// unnamed parameter takes a JSON or bytes body whole, not rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ambiguous_overloads() {
    let setup = format!(
        "{FUNCTIONS}
CREATE FUNCTION twin(arg integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'integer' $$;
CREATE FUNCTION twin(arg text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'text' $$;
CREATE FUNCTION twin(arg text, extra integer DEFAULT 0) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'two' $$;
CREATE FUNCTION whole(json) RETURNS json LANGUAGE sql IMMUTABLE AS $$ SELECT $1 $$;"
    );
    let s = start(Backend::Postgres, &setup, GRANTS).await;
    let body = assert_error(
        s.get("/rpc/twin?arg=1").send().await.expect("get"),
        300,
        "PGRST203",
    )
    .await;
    assert_eq!(
        body["message"],
        "Could not choose the best candidate function between: public.twin(arg => integer), public.twin(arg => text), public.twin(arg => text, extra => integer)"
    );
    // exactly the arguments of one of them
    let (status, body) = json_of(s.get("/rpc/twin?arg=1&extra=2").send().await.expect("get")).await;
    assert_eq!((status, body), (200, json!("two")));
    let r = s
        .post("/rpc/whole", json!({"k": 1}))
        .send()
        .await
        .expect("post");
    assert_eq!(json_of(r).await, (200, json!({"k": 1})));
    let r = s
        .client
        .post(s.url("/rpc/whole"))
        .header("content-type", "text/csv")
        .body("a,b\n1,2")
        .send()
        .await
        .expect("post");
    let body = assert_error(r, 404, "PGRST202").await;
    assert_eq!(
        body["message"],
        "Could not find the function public.whole(a, b) in the schema cache"
    );
}

/// A POST's arguments as PostgREST reads them: a form's repeated name is a `VARIADIC`
/// parameter's array (and the last value of another's), a JSON array of objects calls with the
/// first, `columns=` keeps only the keys it names; `character` and `bit` parameters take any
/// length (PostgreSQL prints them as if of length 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_post_arguments_as_postgrest_reads_them() {
    let setup = format!(
        "{FUNCTIONS}
CREATE FUNCTION words(VARIADIC w text[] DEFAULT '{{}}') RETURNS text[] LANGUAGE sql IMMUTABLE AS $$ SELECT w $$;
CREATE FUNCTION padded(c character, cs character[], b bit, bs bit[]) RETURNS TABLE(c text, cs text[], b text, bs text[])
  LANGUAGE sql IMMUTABLE AS $$ SELECT c::text, cs::text[], b::text, bs::text[] $$;"
    );
    let s = start(Backend::Postgres, &setup, GRANTS).await;
    let form = |path: &str, body: &str| {
        s.client
            .post(s.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_string())
            .send()
    };
    let (_, body) = json_of(form("/rpc/words", "w=hi&w=there").await.expect("post")).await;
    assert_eq!(body, json!(["hi", "there"]));
    let (_, body) = json_of(form("/rpc/words", "w=a&w=%22b%22&w=").await.expect("post")).await;
    assert_eq!(
        body,
        json!(["a", "\"b\"", ""]),
        "values as they are, quotes too"
    );
    // a function takes at most 100 arguments: a call naming more fits none, and only the
    // first hundred names are kept
    let many: Vec<String> = (0..150).map(|i| format!("k{i:03}=1")).collect();
    let (status, body) = json_of(form("/rpc/words", &many.join("&")).await.expect("post")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("PGRST202")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .ends_with("k099, …) in the schema cache"),
        "{body}"
    );
    assert_eq!(
        body["details"],
        "The call names more than 100 arguments, and a function takes at most that many."
    );
    let (_, body) = json_of(form("/rpc/add_ints", "a=1&a=5&b=2").await.expect("post")).await;
    assert_eq!(body, json!(7), "the last of a repeated name");
    let (status, body) = json_of(
        s.post("/rpc/add_ints", json!([{"a": 1, "b": 2}, {"a": 4, "b": 6}]))
            .send()
            .await
            .expect("post"),
    )
    .await;
    assert_eq!((status, body), (200, json!(3)));
    let (status, body) = json_of(
        s.post(
            "/rpc/add_ints?columns=a,b",
            json!({"a": 1, "b": 2, "c": 100}),
        )
        .send()
        .await
        .expect("post"),
    )
    .await;
    assert_eq!((status, body), (200, json!(3)), "c left out by columns=");
    let (status, body) = json_of(
        s.get("/rpc/padded?c=abcdefg&cs={abc,abcdefg}&b=101010&bs={101,101010}")
            .send()
            .await
            .expect("get"),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            200,
            json!([{"c": "abcdefg", "cs": ["abc", "abcdefg"], "b": "101010", "bs": ["101", "101010"]}])
        )
    );
}

/// Functions returning an anonymous `record` (or a set of them) answer the rows they hold as
/// objects; one returning a domain over a row type answers that row type's rows, embedding as
/// its table's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_and_row_domains() {
    let setup = format!(
        "{FUNCTIONS}
CREATE FUNCTION first_team() RETURNS record LANGUAGE sql STABLE AS $$ SELECT team_id, name FROM team ORDER BY team_id LIMIT 1 $$;
CREATE FUNCTION two_teams() RETURNS SETOF record LANGUAGE sql STABLE AS $$ SELECT team_id, name FROM team ORDER BY team_id LIMIT 2 $$;
CREATE DOMAIN team_row AS team;
CREATE FUNCTION team_as_domain(id integer) RETURNS SETOF team_row LANGUAGE sql STABLE AS $$ SELECT t::team_row FROM team t WHERE team_id = id $$;"
    );
    let s = start(Backend::Postgres, &setup, GRANTS).await;
    let names: Vec<Option<String>> = s
        .rows("SELECT name FROM team ORDER BY team_id LIMIT 2")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    let (_, body) = json_of(s.get("/rpc/first_team").send().await.expect("get")).await;
    assert_eq!(body, json!({"team_id": 1, "name": names[0]}));
    let (_, body) = json_of(s.get("/rpc/two_teams").send().await.expect("get")).await;
    assert_eq!(
        body,
        json!([{"team_id": 1, "name": names[0]}, {"team_id": 2, "name": names[1]}])
    );
    let (status, body) = json_of(
        s.get("/rpc/team_as_domain?id=1&select=name,driver(driver_id)&driver.order=driver_id")
            .send()
            .await
            .expect("get"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["name"], json!(names[0]));
    assert!(
        body[0]["driver"].as_array().is_some_and(|d| !d.is_empty()),
        "{body}"
    );
}

/// `db.settings` (PostgREST's `app.settings.*`): every function call's transaction starts with
/// them, so a function reads them with `current_setting`; a name that is not dotted is refused
/// when the configuration loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_app_settings() {
    let setup = format!(
        "{FUNCTIONS}\nCREATE FUNCTION app_host() RETURNS text LANGUAGE sql STABLE AS $$ SELECT current_setting('app.settings.app_host', true) $$;"
    );
    let config = format!("{GRANTS}\n[db.settings]\n\"app.settings.app_host\" = \"example.test\"\n");
    let s = start(Backend::Postgres, &setup, &config).await;
    let (status, body) = json_of(s.get("/rpc/app_host").send().await.expect("get")).await;
    assert_eq!((status, body), (200, json!("example.test")));
    let dir = tempfile::tempdir().expect("tempdir");
    let refused = write_config(dir.path(), "[db.settings]\nnodots = \"x\"\n", &[]);
    assert!(
        refused.is_err_and(|e| e.to_string().contains("not a dotted setting name")),
        "a name without a dot is refused"
    );
}
