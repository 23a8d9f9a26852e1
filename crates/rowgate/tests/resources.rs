//! Custom resources through a real server: every answer shape, parameter source and type, bad and
//! missing parameters, templates (escaping, load-time errors), transactions, timeouts, caching
//! headers, reload under traffic, OpenAPI, and the demo's three seed resources.

mod common;

use common::{assert_error, write_config, Backend, TestServer};
use serde_json::{json, Value};

/// A configuration exercising every shape and source over the demo tables.
const CONFIG: &str = r#"
[[resources]]
roles = ["*"]
path = "/hello"
shape = "value"
sql = "SELECT 'hello ' || :name"
params.name = { default = "world" }

[[resources]]
roles = ["*"]
path = "/teams"
sql = "SELECT team_id, name, points FROM team WHERE points >= :min ORDER BY team_id LIMIT :limit"
params.min = { type = "int", default = 0 }
params.limit = { type = "int", default = 100, min = 0, max = 1000 }

[[resources]]
roles = ["*"]
path = "/teams/{id}"
shape = "row"
sql = "SELECT team_id, name, points FROM team WHERE team_id = :id"
params.id = { type = "int" }

[[resources]]
roles = ["*"]
path = "/teams/{id}/drivers"
sql = "SELECT driver_id, name FROM driver WHERE team_id = :id ORDER BY driver_id"
params.id = { type = "int" }

[[resources]]
roles = ["*"]
path = "/all-teams-as-row"
shape = "row"
sql = "SELECT team_id FROM team"

[[resources]]
roles = ["*"]
path = "/echo"
method = ["GET", "POST"]
shape = "row"
sql = """SELECT :i AS i, :f AS f, :t AS t, :b AS b, :d AS d, :ts AS ts, :j AS j, :opt AS opt"""
params.i = { type = "int", from = "query" }
params.f = { type = "float", from = "query", default = 1.5 }
params.t = { type = "text", from = "query", default = "x" }
params.b = { type = "bool", from = "query", default = false }
params.d = { type = "date", from = "query", default = 2024-02-29 }
params.ts = { type = "timestamp", from = "query", default = "2024-02-29T12:00:00Z" }
params.j = { type = "json", from = "query", default = {} }
params.opt = { type = "text", from = "query", required = false }

[[resources]]
roles = ["*"]
path = "/teams/{id}/points"
method = "POST"
shape = "none"
sql = "UPDATE team SET points = points + :add WHERE team_id = :id"
params.id = { type = "int" }
params.add = { type = "int" }

[[resources]]
roles = ["*"]
path = "/teams/new"
method = "POST"
shape = "row"
sql = "INSERT INTO team (name, points) VALUES (:name, :points) RETURNING team_id, name, points"
params.name = { type = "text" }
params.points = { type = "int", default = 0 }

[[resources]]
roles = ["*"]
path = "/two-steps"
method = "POST"
shape = "none"
sql = [
  "INSERT INTO team (name, points) VALUES (:name, 0)",
  "INSERT INTO driver (name, points, team_id) VALUES (:driver, 0, :team)",
]
params.name = {}
params.driver = {}
params.team = { type = "int" }

[[resources]]
roles = ["*"]
path = "/blog"
sql = "SELECT id, title, body FROM posts ORDER BY id"
template = "templates/blog.html"
cache_control = "max-age=30"
etag = true

[[resources]]
roles = ["*"]
path = "/slow"
shape = "value"
sql = """WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"""
"#;

const BLOG: &str =
    "<ul>{% for p in rows %}<li id=\"{{ p.id }}\">{{ p.title }}</li>{% endfor %}</ul>\n";

async fn server(b: Backend) -> TestServer {
    TestServer::start_toml(b, CONFIG, &[("templates/blog.html", BLOG)]).await
}

async fn get(s: &TestServer, path: &str) -> (u16, Value) {
    let r = s
        .client
        .get(s.root_url(path))
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn each_shape(b: Backend) {
    let s = server(b).await;
    // value
    assert_eq!(get(&s, "/hello").await, (200, json!("hello world")));
    assert_eq!(get(&s, "/hello?name=Ada").await, (200, json!("hello Ada")));
    // rows
    let (status, rows) = get(&s, "/teams?min=400").await;
    assert_eq!(status, 200);
    let rows = rows.as_array().expect("array").clone();
    assert!(!rows.is_empty());
    assert!(
        rows.iter()
            .all(|r| r["points"].as_i64().expect("points") >= 400),
        "{rows:?}"
    );
    assert_eq!(get(&s, "/teams?min=100000").await, (200, json!([])));
    // row: found, missing (404), several (406)
    let (status, row) = get(&s, "/teams/3").await;
    assert_eq!(status, 200);
    assert_eq!(row["team_id"], 3);
    let r = s
        .client
        .get(s.root_url("/teams/999"))
        .send()
        .await
        .expect("request");
    assert_error(r, 404, "RG404").await;
    let r = s
        .client
        .get(s.root_url("/all-teams-as-row"))
        .send()
        .await
        .expect("request");
    assert_error(r, 406, "PGRST116").await;
    // none: 204, and the write happened
    let before: i64 = s.int("SELECT points FROM team WHERE team_id = 2");
    let r = s
        .client
        .post(s.root_url("/teams/2/points"))
        .json(&json!({"add": 5}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(r.text().await.expect("body"), "");
    let after: i64 = s.int("SELECT points FROM team WHERE team_id = 2");
    assert_eq!(after, before + 5);
    // row from a write with RETURNING, body parameters with a default
    let r = s
        .client
        .post(s.root_url("/teams/new"))
        .json(&json!({"name": "Sauber"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let row: Value = r.json().await.expect("json");
    assert_eq!(row["name"], "Sauber");
    assert_eq!(row["points"], 0);
    // template
    let r = s
        .client
        .get(s.root_url("/blog"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    let html = r.text().await.expect("body");
    let titles: Vec<String> = s
        .rows("SELECT title FROM posts ORDER BY id")
        .into_iter()
        .map(|r| r[0].clone().expect("title"))
        .collect();
    assert!(!titles.is_empty());
    for t in &titles {
        let escaped = t
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#x27;")
            .replace('/', "&#x2f;");
        assert!(html.contains(&escaped), "{t} missing from {html}");
    }
}

async fn parameter_sources_and_types(b: Backend) {
    let s = server(b).await;
    // Defaults for everything but i.
    let (status, row) = get(&s, "/echo?i=7").await;
    assert_eq!(status, 200, "{row}");
    // SQLite returns what was bound (booleans as 0/1, JSON and timestamps as text); PostgreSQL
    // the declared types (bool, date, timestamptz in the session's time zone, jsonb).
    let want = if b == Backend::Postgres {
        json!({"i": 7, "f": 1.5, "t": "x", "b": false, "d": "2024-02-29", "ts": "2024-02-29T12:00:00+00:00", "j": {}, "opt": null})
    } else {
        json!({"i": 7, "f": 1.5, "t": "x", "b": 0, "d": "2024-02-29", "ts": "2024-02-29T12:00:00Z", "j": "{}", "opt": null})
    };
    assert_eq!(row, want);
    // Every type given in the query string.
    let (status, row) = get(
        &s,
        "/echo?i=-3&f=2.25&t=caf%C3%A9&b=yes&d=2000-01-31&ts=2000-01-31%2023:59:59.5%2B01:00&j=%5B1,%7B%22a%22:true%7D%5D&opt=here",
    )
    .await;
    assert_eq!(status, 200, "{row}");
    let want = if b == Backend::Postgres {
        json!({"i": -3, "f": 2.25, "t": "café", "b": true, "d": "2000-01-31", "ts": "2000-01-31T22:59:59.5+00:00", "j": [1, {"a": true}], "opt": "here"})
    } else {
        json!({"i": -3, "f": 2.25, "t": "café", "b": 1, "d": "2000-01-31", "ts": "2000-01-31 23:59:59.5+01:00", "j": "[1,{\"a\":true}]", "opt": "here"})
    };
    assert_eq!(row, want);
    // Path parameters.
    let (status, rows) = get(&s, "/teams/1/drivers").await;
    assert_eq!(status, 200);
    let drivers: i64 = s.int("SELECT count(*) FROM driver WHERE team_id = 1");
    assert_eq!(rows.as_array().map(Vec::len), Some(drivers as usize));
    // Percent-encoded path segment.
    let (status, _) = get(&s, "/teams/%33").await;
    assert_eq!(status, 200);
    // Body parameters: JSON types, strings for numbers, and a form body.
    let r = s
        .client
        .post(s.root_url("/teams/new"))
        .json(&json!({"name": "A", "points": "12"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.json::<Value>().await.expect("json")["points"], 12);
    let r = s
        .client
        .post(s.root_url("/teams/new"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("name=Form+Team&points=3")
        .send()
        .await
        .expect("request");
    let row: Value = r.json().await.expect("json");
    assert_eq!(
        (row["name"].clone(), row["points"].clone()),
        (json!("Form Team"), json!(3))
    );
    // GET on a GET+POST resource reads the query string; POST reads the query too (declared so).
    let r = s
        .client
        .post(s.root_url("/echo?i=1"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
}

async fn bad_and_missing_parameters(b: Backend) {
    let s = server(b).await;
    let cases = [
        ("/echo", 400, "RG110", "i"),
        ("/echo?i=abc", 400, "RG111", "i"),
        ("/echo?i=1.5", 400, "RG111", "i"),
        ("/echo?i=99999999999999999999", 400, "RG111", "i"),
        ("/echo?i=1&f=nan", 400, "RG111", "f"),
        ("/echo?i=1&b=maybe", 400, "RG111", "b"),
        ("/echo?i=1&d=2023-02-29", 400, "RG111", "d"),
        ("/echo?i=1&ts=yesterday", 400, "RG111", "ts"),
        ("/echo?i=1&j=%7Bnope", 400, "RG111", "j"),
        ("/teams/abc", 400, "RG111", "id"),
        ("/teams?min=lots", 400, "RG111", "min"),
        // a range, checked before the SQL runs (a negative LIMIT fails on PostgreSQL and means
        // none on SQLite)
        ("/teams?limit=-1", 400, "RG111", "limit"),
        ("/teams?limit=1001", 400, "RG111", "limit"),
    ];
    for (path, status, code, name) in cases {
        let r = s
            .client
            .get(s.root_url(path))
            .send()
            .await
            .expect("request");
        let body = assert_error(r, status, code).await;
        let text = body.to_string();
        assert!(
            body["message"].as_str().expect("message").contains(name),
            "{path}: {text}"
        );
    }
    let r = s
        .client
        .get(s.root_url("/teams?limit=-1"))
        .send()
        .await
        .expect("request");
    let body = assert_error(r, 400, "RG111").await;
    assert_eq!(body["message"], "parameter limit is out of range", "{body}");
    assert_eq!(
        body["hint"], "limit must be at least 0 and at most 1000",
        "{body}"
    );
    let (status, rows) = get(&s, "/teams?limit=1000").await;
    assert_eq!(status, 200, "{rows}");
    let (status, rows) = get(&s, "/teams?limit=0").await;
    assert_eq!((status, rows), (200, json!([])));
    // Body parameters: missing, mistyped, not an object, not JSON.
    for (body, code) in [
        (json!({"points": 1}), "RG110"),
        (json!({"name": "x", "points": 1.5}), "RG111"),
        (json!({"name": "x", "points": [1]}), "RG111"),
        (json!([{"name": "x"}]), "PGRST102"),
    ] {
        let r = s
            .client
            .post(s.root_url("/teams/new"))
            .json(&body)
            .send()
            .await
            .expect("request");
        assert_error(r, 400, code).await;
    }
    let r = s
        .client
        .post(s.root_url("/teams/new"))
        .header("content-type", "application/json")
        .body("{\"name\":")
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "PGRST102").await;
    // Hostile values are bound, never spliced.
    let (status, v) = get(&s, "/hello?name=x%27%3B%20DROP%20TABLE%20team%3B--").await;
    assert_eq!((status, v), (200, json!("hello x'; DROP TABLE team;--")));
    let n: i64 = s.int("SELECT count(*) FROM team");
    assert!(n > 0);
}

async fn methods_heads_and_caching(b: Backend) {
    let s = server(b).await;
    let r = s
        .client
        .delete(s.root_url("/hello"))
        .send()
        .await
        .expect("request");
    let body = assert_error(r, 405, "PGRST117").await;
    assert!(
        body["details"].as_str().expect("details").contains("GET"),
        "{body}"
    );
    let r = s
        .client
        .get(s.root_url("/teams/1/points"))
        .send()
        .await
        .expect("request");
    assert_error(r, 405, "PGRST117").await;
    let r = s
        .client
        .head(s.root_url("/hello"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.text().await.expect("body"), "");
    let r = s
        .client
        .get(s.root_url("/nothing-here"))
        .send()
        .await
        .expect("request");
    assert_error(r, 404, "RG404").await;
    // Cache-Control and a strong ETag; If-None-Match → 304.
    let r = s
        .client
        .get(s.root_url("/blog"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.headers()["cache-control"], "max-age=30");
    let tag = r.headers()["etag"].to_str().expect("etag").to_string();
    assert!(tag.starts_with('"') && tag.ends_with('"'), "{tag}");
    let r = s
        .client
        .get(s.root_url("/blog"))
        .header("If-None-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 304);
    s.exec("UPDATE posts SET title = 'changed' WHERE id = 1");
    let r = s
        .client
        .get(s.root_url("/blog"))
        .header("If-None-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_ne!(r.headers()["etag"].to_str().expect("etag"), tag);
}

/// `<script>` in a post title is escaped in an HTML template.
async fn html_is_escaped(b: Backend) {
    let s = server(b).await;
    s.exec(
        "INSERT INTO posts (title, body, author, created_at, updated_at) \
         VALUES ('<script>alert(\"x\")</script> & co', 'b', 'a', '2024-01-01', '2024-01-01')",
    );
    let html = s
        .client
        .get(s.root_url("/blog"))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    assert!(!html.contains("<script>"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;&#x2f;script&gt; &amp; co"),
        "{html}"
    );
}

/// The statements of one resource run in one transaction: a failing second statement undoes
/// the first.
async fn writes_are_one_transaction(b: Backend) {
    let s = server(b).await;
    let teams = |s: &TestServer| -> i64 { s.int("SELECT count(*) FROM team") };
    let before = teams(&s);
    let r = s
        .client
        .post(s.root_url("/two-steps"))
        .json(&json!({"name": "Orphan", "driver": "Nobody", "team": 9999}))
        .send()
        .await
        .expect("request");
    assert_error(r, 409, "23503").await;
    assert_eq!(teams(&s), before, "the first insert must be rolled back");
    let r = s
        .client
        .post(s.root_url("/two-steps"))
        .json(&json!({"name": "Kept", "driver": "Somebody", "team": 1}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(teams(&s), before + 1);
}

async fn statement_timeout_applies(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config =
        write_config(dir.path(), CONFIG, &[("templates/blog.html", BLOG)]).expect("config");
    let s = TestServer::start_in(b, dir, config, |c| c.db.statement_timeout_ms = 200).await;
    let r = s
        .client
        .get(s.root_url("/slow"))
        .send()
        .await
        .expect("request");
    assert_error(r, 504, "57014").await;
    // The server goes on serving.
    assert_eq!(get(&s, "/hello").await.0, 200);
}

async fn openapi_lists_resources(b: Backend) {
    let s = server(b).await;
    let (status, doc) = get(&s, "/openapi.json").await;
    assert_eq!(status, 200);
    let paths = &doc["paths"];
    let op = &paths["/teams/{id}"]["get"];
    assert_eq!(op["parameters"][0]["name"], "id");
    assert_eq!(op["parameters"][0]["in"], "path");
    assert_eq!(op["parameters"][0]["schema"]["type"], "integer");
    assert_eq!(
        op["responses"]["200"]["content"]["application/json"]["schema"]["type"],
        "object"
    );
    let echo = &paths["/echo"];
    assert!(
        echo["get"].is_object() && echo["post"].is_object(),
        "{echo}"
    );
    let new = &paths["/teams/new"]["post"];
    assert_eq!(
        new["requestBody"]["content"]["application/json"]["schema"]["required"],
        json!(["name"])
    );
    assert!(paths["/teams/{id}/points"]["post"]["responses"]["204"].is_object());
    // a parameter's range is stated
    let limit = paths["/teams"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "limit")
        .expect("limit")
        .clone();
    assert_eq!(
        (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
        (&json!(0), &json!(1000)),
        "{limit}"
    );
    assert!(paths["/blog"]["get"]["responses"]["200"]["content"]["text/html"].is_object());
    // The tables are still there.
    assert!(paths["/api/team"].is_object());
}

/// SIGHUP-style reload (the library call the signal handler makes) while clients keep asking:
/// no request fails, and the new set answers afterwards.
async fn reload_under_traffic(b: Backend) {
    let s = server(b).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (client, url, stop) = (s.client.clone(), s.root_url("/hello"), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut answered = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = client.get(&url).send().await.expect("request");
                let status = r.status().as_u16();
                let body: Value = r.json().await.expect("json");
                assert_eq!(status, 200, "{body}");
                assert!(
                    body == json!("hello world") || body == json!("bonjour world"),
                    "{body}"
                );
                answered += 1;
            }
            answered
        }));
    }
    let changed = CONFIG.replace("SELECT 'hello ' || :name", "SELECT 'bonjour ' || :name");
    let dir = s.dir.path().to_path_buf();
    for round in 0..11 {
        let text = if round % 2 == 0 {
            changed.as_str()
        } else {
            CONFIG
        };
        let mut config = write_config(&dir, text, &[]).expect("config");
        config.db.path = s.db_path.clone();
        let app = s.app.clone();
        let n = app.reload_resources(&config).await.expect("reload");
        assert!(n > 10);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for c in clients {
        total += c.await.expect("client");
    }
    assert!(total > 0);
    assert_eq!(get(&s, "/hello").await, (200, json!("bonjour world")));
    // A broken configuration is refused and the running set stays.
    let mut broken = write_config(
        &dir,
        &format!("{CONFIG}\n[[resources]]\nroles = [\"*\"]\npath = \"/x\"\nsql = \"SELEC 1\"\n"),
        &[],
    )
    .expect("config");
    broken.db.path = s.db_path.clone();
    let app = s.app.clone();
    let err = app.reload_resources(&broken).await.expect_err("must fail");
    assert!(format!("{err:#}").contains("resource /x"), "{err:#}");
    assert_eq!(get(&s, "/hello").await, (200, json!("bonjour world")));
}

/// Default deny, as for tables: a resource that names no roles answers 401 to the anonymous
/// role (and says why); `roles = ["anon"]` opens it to that role, `["*"]` to every role.
async fn resources_without_roles_are_closed(b: Backend) {
    let s = TestServer::start_toml(
        b,
        "[[resources]]\npath = \"/closed\"\nshape = \"value\"\nsql = \"SELECT 1\"\n\
         [[resources]]\nroles = [\"anon\"]\npath = \"/anon\"\nshape = \"value\"\nsql = \"SELECT 2\"\n\
         [[resources]]\nroles = [\"writer\"]\npath = \"/writers\"\nshape = \"value\"\nsql = \"SELECT 3\"\n",
        &[],
    )
    .await;
    let r = s
        .client
        .get(s.root_url("/closed"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 401);
    let body: Value = r.json().await.expect("json");
    assert!(
        body["details"]
            .as_str()
            .is_some_and(|d| d.contains("names no roles")),
        "{body}"
    );
    assert_eq!(get(&s, "/anon").await, (200, json!(2)));
    assert_eq!(get(&s, "/writers").await.0, 401);
}

/// The demo configuration built into the binary: RAD Server's /xyz and /data, TreeFrog's /blog.
async fn demo_resources(b: Backend) {
    let s = TestServer::start_with(b, |c| {
        let demo = rowgate::config::load(
            rowgate::config::Layer::Embedded {
                text: rowgate::demo::CONFIG,
                files: rowgate::demo::FILES,
            },
            |_| None,
            &[],
        )
        .expect("demo config");
        c.resources = demo.resources;
        c.dir = demo.dir;
    })
    .await;
    let (status, xyz) = get(&s, "/xyz").await;
    assert_eq!(status, 200);
    let text = xyz.as_str().expect("a JSON string");
    let re = regex::Regex::new(r"^xyz \d\d:\d\d:\d\d$").expect("regex");
    assert!(re.is_match(text), "{text}");
    let r = s
        .client
        .get(s.root_url("/data"))
        .send()
        .await
        .expect("request");
    assert_eq!(
        r.headers()["content-type"],
        "application/json; charset=utf-8"
    );
    let bytes = r.bytes().await.expect("body");
    let rows: Vec<Value> = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(rows.len(), 42);
    assert!(
        (9_000..=14_500).contains(&bytes.len()),
        "{} bytes",
        bytes.len()
    );
    assert_eq!(rows[0]["last_name"], "Nelson");
    let r = s
        .client
        .get(s.root_url("/blog"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    let html = r.text().await.expect("body");
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("Listing Blog"),
        "{html}"
    );
    let posts: i64 = s.int("SELECT count(*) FROM posts");
    assert_eq!(html.matches("<tr>\n    <td>").count() as i64, posts);
}

backend_tests!(
    openapi_lists_resources,
    each_shape,
    parameter_sources_and_types,
    bad_and_missing_parameters,
    methods_heads_and_caching,
    html_is_escaped,
    writes_are_one_transaction,
    statement_timeout_applies,
    reload_under_traffic,
    demo_resources,
    resources_without_roles_are_closed,
);

/// Runs a future to completion on a fresh runtime (from a plain #[test]).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A declaration, the files beside it, and words its error message must hold.
type BadCase = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

/// Configurations that must be refused when they load, each with the words the message needs.
#[test]
fn bad_declarations_are_refused_at_load() {
    let cases: &[BadCase] = &[
        (
            "path = \"/api/x\"\nsql = \"SELECT 1\"",
            &[],
            &["/api", "shadows"],
        ),
        ("path = \"/live\"\nsql = \"SELECT 1\"", &[], &["/live"]),
        // a range goes with a number, lower bound first, the default within
        (
            "path = \"/r\"\nsql = \"SELECT :t\"\nparams.t = { type = \"text\", min = 1 }",
            &[],
            &["parameter t", "min and max"],
        ),
        (
            "path = \"/r\"\nsql = \"SELECT :n\"\nparams.n = { type = \"int\", min = 5, max = 1 }",
            &[],
            &["parameter n", "min (5) is above max (1)"],
        ),
        (
            "path = \"/r\"\nsql = \"SELECT :n\"\nparams.n = { type = \"float\", default = 7.5, max = 1 }",
            &[],
            &["default of n", "out of range"],
        ),
        // ORDS modules live under the ORDS schema alias, clear of ORDS's own paths
        (
            "path = \"/ords/other/x\"\nsql = \"SELECT 1\"",
            &[],
            &["/ords", "shadows"],
        ),
        (
            "path = \"/ords/rowgate/oauth/x\"\nsql = \"SELECT 1\"",
            &[],
            &["/ords/rowgate/oauth"],
        ),
        (
            "path = \"/oauth/token\"\nsql = \"SELECT 1\"",
            &[],
            &["/oauth"],
        ),
        (
            "path = \"/realtime\"\nsql = \"SELECT 1\"",
            &[],
            &["/realtime"],
        ),
        (
            "path = \"/metrics\"\nsql = \"SELECT 1\"",
            &[],
            &["/metrics"],
        ),
        (
            "path = \"nope\"\nsql = \"SELECT 1\"",
            &[],
            &["start with '/'"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT :x\"",
            &[],
            &[":x", "neither declared"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT 1\"\nparams.x = {}",
            &[],
            &["x", "never uses"],
        ),
        (
            "path = \"/a/{id}\"\nsql = \"SELECT 1\"",
            &[],
            &["{id}", "never uses"],
        ),
        ("path = \"/a\"\nsql = \"SELECT ?\"", &[], &["positional"]),
        (
            "path = \"/a\"\nsql = \"SELEC 1\"",
            &[],
            &["does not prepare", "syntax error"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT * FROM no_such_table\"",
            &[],
            &["no such table"],
        ),
        (
            "path = \"/a\"\nsql = \"DELETE FROM team\"",
            &[],
            &["GET resources may only read"],
        ),
        (
            "path = \"/a\"\nmethod = \"BREW\"\nsql = \"SELECT 1\"",
            &[],
            &["BREW"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT :n\"\nparams.n = { type = \"int\", default = \"ten\" }",
            &[],
            &["default of n", "integer"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT :n\"\nparams.n = { type = \"integer\" }",
            &[],
            &["integer"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT :n\"\nparams.n = { from = \"body\" }",
            &[],
            &["GET requests have no body"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT 1\"\ntemplate = \"missing.html\"",
            &[],
            &["missing.html"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT 1\"\ntemplate = \"t.html\"",
            &[("t.html", "{% for x in rows %}")],
            &["t.html", "line"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT 1\"\nshape = \"rows\"\ntemplate = \"t.html\"",
            &[("t.html", "")],
            &["template"],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT 1\"\nshape = \"template\"",
            &[],
            &["template"],
        ),
        // names minijinja would only miss while rendering (issue 13, item 22)
        (
            "path = \"/a\"\nsql = \"SELECT 1\"\ntemplate = \"t.json\"",
            &[("t.json", "{{ rows|nosuchfilter }}")],
            &["t.json", "unknown filter \"nosuchfilter\""],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT 1\"\ntemplate = \"t.html\"",
            &[("t.html", "{% for r in rows %}{{ nosuch(r) }}{% endfor %}")],
            &["t.html", "unknown function \"nosuch\""],
        ),
        (
            "path = \"/a\"\nsql = \"SELECT 1\"\ntemplate = \"t.html\"",
            &[("t.html", "{% if rows is nosuchtest %}x{% endif %}")],
            &["t.html", "unknown test \"nosuchtest\""],
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    rowgate::demo::init(&db, 10, None).expect("demo");
    for (i, (decl, files, words)) in cases.iter().enumerate() {
        let sub = dir.path().join(format!("case{i}"));
        std::fs::create_dir_all(&sub).expect("dir");
        let toml = format!("[[resources]]\nroles = [\"*\"]\n{decl}\n");
        let outcome = write_config(&sub, &toml, files).and_then(|mut config| {
            config.db.path = db.clone();
            block_on(rowgate::cli::start(config)).map(|_| ())
        });
        let err = match outcome {
            Ok(()) => panic!("case {i} was accepted: {decl}"),
            Err(e) => format!("{e:#}"),
        };
        for w in *words {
            assert!(err.contains(w), "case {i} ({decl}): {w:?} not in {err}");
        }
    }
    // Two resources on one path and method.
    let sub = dir.path().join("dup");
    std::fs::create_dir_all(&sub).expect("dir");
    let toml = "[[resources]]\nroles = [\"*\"]\npath = \"/a\"\nsql = \"SELECT 1\"\n[[resources]]\nroles = [\"*\"]\npath = \"/a\"\nsql = \"SELECT 2\"\n";
    let mut config = write_config(&sub, toml, &[]).expect("config");
    config.db.path = db;
    let err = block_on(rowgate::cli::start(config))
        .map(|_| ())
        .expect_err("duplicate");
    assert!(format!("{err:#}").contains("declared twice"), "{err:#}");
}

/// `resources_dir`: more resources from a folder of TOML files, read in name order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_from_a_folder() {
    let toml = "resources_dir = \"more\"\n";
    let files = [
        (
            "more/a.toml",
            "[[resources]]\nroles = [\"*\"]\npath = \"/one\"\nshape = \"value\"\nsql = \"SELECT 1\"\n",
        ),
        (
            "more/b.toml",
            "[[resources]]\nroles = [\"*\"]\npath = \"/two\"\nshape = \"value\"\nsql = \"SELECT 2\"\n",
        ),
        ("more/notes.txt", "not a resource file"),
    ];
    let s = TestServer::start_toml(Backend::Sqlite, toml, &files).await;
    assert_eq!(get(&s, "/one").await, (200, json!(1)));
    assert_eq!(get(&s, "/two").await, (200, json!(2)));
}
