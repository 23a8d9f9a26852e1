//! The admin console at `/_/`: its API through HTTP on both backends (who may use it, the
//! clients it manages, the configuration and findings, the statistics, the access log's recent
//! lines, its pages and their headers), and the whole console in headless Chromium (Debian's,
//! driven by playwright-core from `clients/js/console.mjs`), screenshots kept in
//! `target/console-screenshots/`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use rowgate::config::{AccessLogFormat, Config};
use serde_json::{json, Value};

/// A server whose `admin` role may use the console and whose `writer` may only write, with
/// the access log in a file.
async fn server(b: Backend) -> TestServer {
    TestServer::start_with(b, |c: &mut Config| {
        c.grants = vec![grant_everything("admin"), grant_everything("writer")];
        c.access_log.format = AccessLogFormat::Json;
        // beside the server's secret, in its own folder
        let dir = c.auth.secret_file.parent().expect("the server's folder");
        c.access_log.path = dir.join("access.log");
    })
    .await
}

/// A request to the console's API with `token` (none: anonymous).
fn api(
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    let r = s
        .client
        .request(method, s.root_url(&format!("/_/api/{path}")));
    match token {
        Some(token) => r.bearer_auth(token),
        None => r,
    }
}

async fn json_of(r: reqwest::Response, status: u16) -> Value {
    let got = r.status().as_u16();
    let text = r.text().await.expect("body");
    assert_eq!(got, status, "{text}");
    serde_json::from_str(&text).expect("json")
}

/// Only the roles in `console.roles` get in: 401 without a token, 403 for another role; the
/// session lists what the admin's grants reach, tables, views and duality views alike.
async fn who_may_use_it(b: Backend) {
    let s = server(b).await;
    let (_, admin) = client_token(&s, "admin", "admin").await;
    let (_, writer) = client_token(&s, "writer", "writer").await;
    let r = api(&s, reqwest::Method::GET, "session", None)
        .send()
        .await
        .expect("anon");
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_error(r, 401, "RG401").await;
    let r = api(&s, reqwest::Method::GET, "clients", Some(&writer))
        .send()
        .await
        .expect("writer");
    assert_error(r, 403, "42501").await;
    let r = api(&s, reqwest::Method::GET, "session", Some("not.a.token"))
        .send()
        .await
        .expect("bad");
    assert_error(r, 401, "PGRST301").await;
    let session = json_of(
        api(&s, reqwest::Method::GET, "session", Some(&admin))
            .send()
            .await
            .expect("session"),
        200,
    )
    .await;
    assert_eq!(session["role"], "admin");
    assert_eq!(session["client"], "admin");
    assert_eq!(session["rest_prefix"], "/api");
    assert_eq!(session["access_log"], true);
    let team = session["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["name"] == "team")
        .expect("team listed");
    assert_eq!(team["kind"], "table");
    assert_eq!(team["key"], json!(["team_id"]));
    assert_eq!(team["ops"], json!(["select", "insert", "update", "delete"]));
    let columns: Vec<&str> = team["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert_eq!(columns, ["team_id", "name", "points"]);
    let r = api(&s, reqwest::Method::DELETE, "session", Some(&admin))
        .send()
        .await
        .expect("405");
    assert_eq!(r.headers()["allow"], "GET, HEAD");
    assert_error(r, 405, "PGRST117").await;
    let r = api(&s, reqwest::Method::GET, "nothing-here", Some(&admin))
        .send()
        .await
        .expect("404");
    assert_error(r, 404, "RG404").await;
}

/// Clients added, rotated, retired and revoked through the console behave as the CLI's: the
/// secret is in the answer once, the old one works until retired, and a revoked client's
/// tokens stop at once on the worker that revoked it.
async fn clients_managed(b: Backend) {
    let s = server(b).await;
    let (_, admin) = client_token(&s, "admin", "admin").await;
    let post = |path: &str| api(&s, reqwest::Method::POST, path, Some(&admin));
    let added = json_of(
        post("clients")
            .json(&json!({"name": "shop", "role": "writer", "ttl_s": 600}))
            .send()
            .await
            .expect("add"),
        201,
    )
    .await;
    assert_eq!(added["name"], "shop");
    let (id, first) = (
        added["client_id"].as_str().expect("id").to_string(),
        added["client_secret"].as_str().expect("secret").to_string(),
    );
    let r = token_request(&s, &id, &first).await;
    let token = json_of(r, 200).await;
    assert_eq!(token["expires_in"], 600);
    let listed = json_of(
        api(&s, reqwest::Method::GET, "clients", Some(&admin))
            .send()
            .await
            .expect("list"),
        200,
    )
    .await;
    let shop = listed
        .as_array()
        .expect("list")
        .iter()
        .find(|c| c["name"] == "shop")
        .expect("shop listed")
        .clone();
    assert_eq!(shop["role"], "writer");
    assert_eq!(shop["revoked"], false);
    let text = listed.to_string();
    assert!(
        !text.contains(&first) && !text.contains("secret_hash"),
        "{text}"
    );

    // the same name twice, and bodies the API does not take
    let r = post("clients")
        .json(&json!({"name": "shop", "role": "writer"}))
        .send()
        .await
        .expect("again");
    assert_error(r, 409, "23505").await;
    for body in [
        json!({"name": "", "role": "writer"}),
        json!({"name": "x", "role": " "}),
        json!({"name": "x"}),
        json!({"name": "x", "role": "writer", "ttl_s": 0}),
        json!({"name": "x", "role": "writer", "extra": 1}),
        json!({"name": "a\nb", "role": "writer"}),
        json!({"name": "x".repeat(101), "role": "writer"}),
    ] {
        let r = post("clients").json(&body).send().await.expect("bad body");
        assert_error(r, 400, "RG130").await;
    }
    let r = post("clients")
        .body("not json")
        .send()
        .await
        .expect("not json");
    assert_error(r, 400, "RG130").await;

    // rotate: both secrets work; retire: only the new one; revoke: none, and no token either
    let rotated = json_of(
        post("clients/shop/rotate").send().await.expect("rotate"),
        200,
    )
    .await;
    let second = rotated["client_secret"]
        .as_str()
        .expect("new secret")
        .to_string();
    assert_ne!(second, first);
    assert_eq!(token_request(&s, &id, &first).await.status(), 200);
    assert_eq!(token_request(&s, &id, &second).await.status(), 200);
    json_of(
        post("clients/shop/retire").send().await.expect("retire"),
        200,
    )
    .await;
    assert_eq!(token_request(&s, &id, &first).await.status(), 401);
    let fresh = json_of(token_request(&s, &id, &second).await, 200).await;
    let fresh = fresh["access_token"].as_str().expect("token").to_string();
    let r = s
        .client
        .post(s.url("/team"))
        .bearer_auth(&fresh)
        .json(&json!({"name": "Console", "points": 1}))
        .send()
        .await
        .expect("write");
    assert_eq!(r.status(), 201);
    json_of(
        post("clients/shop/revoke").send().await.expect("revoke"),
        200,
    )
    .await;
    assert_eq!(token_request(&s, &id, &second).await.status(), 401);
    let r = s
        .client
        .get(s.url("/team"))
        .bearer_auth(&fresh)
        .send()
        .await
        .expect("after revoke");
    assert_error(r, 401, "PGRST301").await;

    let r = post("clients/nobody/rotate").send().await.expect("unknown");
    assert_error(r, 404, "RG404").await;
    let r = post("clients/shop/explode")
        .send()
        .await
        .expect("unknown action");
    assert_error(r, 404, "RG404").await;
    let r = api(
        &s,
        reqwest::Method::GET,
        "clients/shop/rotate",
        Some(&admin),
    )
    .send()
    .await
    .expect("get");
    assert_error(r, 405, "PGRST117").await;
}

/// The configuration as the server runs it, with `config check`'s findings against its schema,
/// and the whole server's statistics.
async fn configuration_and_statistics(b: Backend) {
    let s = TestServer::start_with(b, |c: &mut Config| {
        c.grants = vec![grant_everything("admin")];
        // a grant naming a table that does not exist: an error finding
        let mut ghost = grant_everything("reader");
        ghost.tables = vec!["no_such_table".into()];
        c.grants.push(ghost);
    })
    .await;
    let (_, admin) = client_token(&s, "admin", "admin").await;
    let got = json_of(
        api(&s, reqwest::Method::GET, "config", Some(&admin))
            .send()
            .await
            .expect("config"),
        200,
    )
    .await;
    assert_eq!(got["config"]["console"]["roles"], json!(["admin"]));
    assert_eq!(got["config"]["grants"].as_array().map(Vec::len), Some(2));
    let findings = got["findings"].as_array().expect("findings");
    assert!(
        findings.iter().any(|f| f["severity"] == "error"
            && f["text"]
                .as_str()
                .is_some_and(|t| t.contains("no_such_table"))),
        "{findings:?}"
    );
    assert!(got["resources"].is_array());

    s.get("/team").send().await.expect("a request");
    let r = api(&s, reqwest::Method::GET, "metrics", Some(&admin))
        .send()
        .await
        .expect("metrics");
    assert_eq!(r.status(), 200);
    let text = r.text().await.expect("text");
    assert!(
        text.contains("rowgate_requests_total{route=\"table\",name=\"team\""),
        "{text}"
    );
    assert!(
        text.contains("rowgate_request_duration_seconds_bucket"),
        "{text}"
    );
}

/// The access log's recent lines, newest first, filtered without case; a bad limit is 400, and
/// with the access log off the console says so.
async fn recent_requests(b: Backend) {
    let s = server(b).await;
    let (_, admin) = client_token(&s, "admin", "admin").await;
    for i in 0..5 {
        s.get(&format!("/team?name=eq.Filtered{i}"))
            .send()
            .await
            .expect("get");
    }
    s.get("/driver?apikey=hidden-key")
        .send()
        .await
        .expect("get");
    // the writer is a thread of its own: wait until it has the last request's line
    let recent = |query: &'static str| {
        let request = api(&s, reqwest::Method::GET, query, Some(&admin));
        async move {
            let got = json_of(request.send().await.expect("requests"), 200).await;
            assert_eq!(got["enabled"], true);
            got["lines"].as_array().expect("lines").clone()
        }
    };
    for _ in 0..100 {
        // (the console's own requests for "apikey" are logged too)
        let lines = recent("requests?q=apikey").await;
        if lines.iter().any(|l| l.to_string().contains("/api/driver?")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lines = recent("requests?q=filtered&limit=3").await;
    let paths: Vec<String> = lines
        .iter()
        .map(|l| {
            let line: Value = serde_json::from_str(l.as_str().expect("line")).expect("json line");
            line["path"].as_str().expect("path").to_string()
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/api/team?name=eq.Filtered4",
            "/api/team?name=eq.Filtered3",
            "/api/team?name=eq.Filtered2"
        ]
    );
    let all = recent("requests?q=apikey").await;
    let text = Value::Array(all).to_string();
    assert!(
        text.contains("apikey=REDACTED") && !text.contains("hidden-key"),
        "{text}"
    );
    for limit in ["0", "1001", "x"] {
        let r = api(
            &s,
            reqwest::Method::GET,
            &format!("requests?limit={limit}"),
            Some(&admin),
        )
        .send()
        .await
        .expect("bad limit");
        assert_error(r, 400, "RG130").await;
    }

    let off = TestServer::start_with(b, |c: &mut Config| {
        c.grants = vec![grant_everything("admin")]
    })
    .await;
    let (_, admin) = client_token(&off, "admin", "admin").await;
    let got = json_of(
        api(&off, reqwest::Method::GET, "requests", Some(&admin))
            .send()
            .await
            .expect("off"),
        200,
    )
    .await;
    assert_eq!(got, json!({"enabled": false, "lines": []}));
}

/// The page and its files: compiled in, with an ETag (304 when it matches), `no-cache`, and a
/// content security policy that allows nothing from elsewhere; `/_` redirects; console off: 404.
async fn pages(b: Backend) {
    let s = TestServer::start(b).await;
    let page = s.client.get(s.root_url("/_/")).send().await.expect("page");
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(headers["cache-control"], "no-cache");
    assert_eq!(headers["x-frame-options"], "DENY");
    let csp = headers["content-security-policy"].to_str().expect("csp");
    assert!(
        csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let html = page.text().await.expect("html");
    assert!(html.contains("/_/assets/console.js"), "{html}");
    let tag = headers["etag"].to_str().expect("etag");
    let again = s
        .client
        .get(s.root_url("/_/"))
        .header("if-none-match", tag)
        .send()
        .await
        .expect("304");
    assert_eq!(again.status(), 304);
    for (path, kind) in [
        ("/_/assets/console.js", "text/javascript; charset=utf-8"),
        (
            "/_/assets/htm-preact-3.1.1.js",
            "text/javascript; charset=utf-8",
        ),
        ("/_/assets/console.css", "text/css; charset=utf-8"),
    ] {
        let r = s.client.get(s.root_url(path)).send().await.expect("asset");
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-type"], kind, "{path}");
        assert!(!r.bytes().await.expect("bytes").is_empty());
    }
    let r = s
        .client
        .get(s.root_url("/_/assets/nothing.js"))
        .send()
        .await
        .expect("missing");
    assert_error(r, 404, "RG404").await;
    let r = s.client.post(s.root_url("/_/")).send().await.expect("post");
    assert_error(r, 405, "PGRST117").await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let r = no_redirects
        .get(s.root_url("/_"))
        .send()
        .await
        .expect("redirect");
    assert_eq!(r.status(), 308);
    assert_eq!(r.headers()["location"], "/_/");

    let off = TestServer::start_with(b, |c: &mut Config| c.console.enabled = false).await;
    for path in ["/_/", "/_/api/session", "/_/assets/console.js"] {
        let r = off
            .client
            .get(off.root_url(path))
            .send()
            .await
            .expect("off");
        assert_error(r, 404, "RG404").await;
    }
}

/// With an address of its own, the console is served there only (the API beside it, for the
/// page); the main address answers 404 for `/_/` and serves the API as before.
async fn own_listener(b: Backend) {
    let s = TestServer::start_with(b, |c: &mut Config| {
        c.grants = vec![grant_everything("admin"), grant_everything("anon")];
        c.console.listen = "127.0.0.1:0".into();
    })
    .await;
    let console = format!("http://{}", s.console_addr.expect("the console's address"));
    let (_, admin) = client_token(&s, "admin", "admin").await;
    for path in ["/_/", "/_/assets/console.js", "/_/api/session"] {
        let r = s
            .client
            .get(s.root_url(path))
            .bearer_auth(&admin)
            .send()
            .await
            .expect("main");
        assert_error(r, 404, "RG404").await;
        let r = s
            .client
            .get(format!("{console}{path}"))
            .bearer_auth(&admin)
            .send()
            .await
            .expect("console");
        assert_eq!(r.status(), 200, "{path}");
    }
    // the page signs in and reads tables on its own origin
    let r = s
        .client
        .get(format!("{console}/api/team?select=name&limit=1"))
        .send()
        .await
        .expect("api");
    assert_eq!(r.status(), 200);
    let r = s
        .client
        .get(s.url("/team?select=name&limit=1"))
        .send()
        .await
        .expect("api");
    assert_eq!(r.status(), 200);
}

/// People's accounts from the console: added (confirmed; a taken address or a weak password
/// refused), listed and searched, signed out everywhere (their refresh token then fails),
/// banned (their sign-in refused) and let back in; other roles get 403, and with accounts
/// off the page's API answers 404.
async fn users_managed(b: Backend) {
    let s = TestServer::start_with(b, |c: &mut Config| {
        c.grants = vec![grant_everything("admin"), grant_everything("writer")];
        c.accounts.enabled = true;
        c.accounts.argon2_memory_kib = 1024;
        c.accounts.argon2_iterations = 1;
    })
    .await;
    let (_, admin) = client_token(&s, "admin", "admin").await;
    let (_, writer) = client_token(&s, "writer", "writer").await;
    let post = |path: &str| api(&s, reqwest::Method::POST, path, Some(&admin));
    let list = |query: &str| {
        api(
            &s,
            reqwest::Method::GET,
            &format!("users{query}"),
            Some(&admin),
        )
        .send()
    };
    assert_eq!(
        json_of(list("").await.expect("list"), 200).await["total"],
        0
    );
    for email in ["ann@example.com", "bob@example.com"] {
        let made = json_of(
            post("users")
                .json(&json!({"email": email, "password": "long enough 1"}))
                .send()
                .await
                .expect("add"),
            201,
        )
        .await;
        assert_eq!(made["email"], email);
        assert!(made["email_confirmed_at"].is_string(), "{made}");
    }
    let taken = post("users")
        .json(&json!({"email": "ANN@example.com", "password": "long enough 1"}))
        .send()
        .await
        .expect("add");
    assert_eq!(taken.status(), 409);
    let weak = post("users")
        .json(&json!({"email": "cid@example.com", "password": "short"}))
        .send()
        .await
        .expect("add");
    assert_eq!(weak.status(), 400);
    let found = json_of(list("?filter=ann").await.expect("list"), 200).await;
    assert_eq!(found["total"], 1);
    let ann = found["users"][0]["id"].as_str().expect("id").to_string();
    // signed in, then signed out everywhere from the console
    let sign_in = || {
        s.client
            .post(s.root_url("/auth/v1/token?grant_type=password"))
            .json(&json!({"email": "ann@example.com", "password": "long enough 1"}))
            .send()
    };
    // two sessions, listed with their clients; one ended, the other goes on
    let sign_in_as = |agent: &'static str| {
        s.client
            .post(s.root_url("/auth/v1/token?grant_type=password"))
            .header("user-agent", agent)
            .json(&json!({"email": "ann@example.com", "password": "long enough 1"}))
            .send()
    };
    let phone = json_of(sign_in_as("ann's phone").await.expect("sign in"), 200).await;
    let laptop = json_of(sign_in_as("ann's laptop").await.expect("sign in"), 200).await;
    let sessions = json_of(
        api(
            &s,
            reqwest::Method::GET,
            &format!("users/{ann}/sessions"),
            Some(&admin),
        )
        .send()
        .await
        .expect("sessions"),
        200,
    )
    .await;
    let listed: Vec<&str> = sessions["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|x| x["user_agent"].as_str())
        .collect();
    assert_eq!(listed, ["ann's laptop", "ann's phone"], "{sessions}");
    assert_eq!(sessions["sessions"][0]["method"], "password");
    let phone_session = sessions["sessions"][1]["id"]
        .as_str()
        .expect("id")
        .to_string();
    json_of(
        api(
            &s,
            reqwest::Method::DELETE,
            &format!("users/{ann}/sessions/{phone_session}"),
            Some(&admin),
        )
        .send()
        .await
        .expect("end"),
        200,
    )
    .await;
    let refresh_with = |token: &Value| {
        s.client
            .post(s.root_url("/auth/v1/token?grant_type=refresh_token"))
            .json(&json!({"refresh_token": token["refresh_token"]}))
            .send()
    };
    assert_eq!(
        refresh_with(&phone).await.expect("refresh").status(),
        400,
        "the ended session's token"
    );
    assert_eq!(
        refresh_with(&laptop).await.expect("refresh").status(),
        200,
        "the other session's"
    );
    let session = json_of(sign_in().await.expect("sign in"), 200).await;
    json_of(
        post(&format!("users/{ann}/sign-out"))
            .send()
            .await
            .expect("sign out"),
        200,
    )
    .await;
    let refresh = s
        .client
        .post(s.root_url("/auth/v1/token?grant_type=refresh_token"))
        .json(&json!({"refresh_token": session["refresh_token"]}))
        .send()
        .await
        .expect("refresh");
    assert_eq!(
        json_of(refresh, 400).await["error_code"],
        "refresh_token_not_found"
    );
    // banned, then let back in
    json_of(
        post(&format!("users/{ann}/ban")).send().await.expect("ban"),
        200,
    )
    .await;
    let listed = json_of(list("?filter=ann").await.expect("list"), 200).await;
    assert!(listed["users"][0]["banned_until"].is_string(), "{listed}");
    assert_eq!(
        json_of(sign_in().await.expect("sign in"), 400).await["error_code"],
        "user_banned"
    );
    json_of(
        post(&format!("users/{ann}/unban"))
            .send()
            .await
            .expect("unban"),
        200,
    )
    .await;
    json_of(sign_in().await.expect("sign in"), 200).await;
    let nothing = post("users/not-a-uuid/ban").send().await.expect("ban");
    assert_eq!(nothing.status(), 404);
    let other = api(&s, reqwest::Method::GET, "users", Some(&writer))
        .send()
        .await
        .expect("list");
    assert_eq!(other.status(), 403);
    // accounts off: the page's API says so
    let off = server(b).await;
    let (_, admin) = client_token(&off, "admin", "admin").await;
    let r = api(&off, reqwest::Method::GET, "users", Some(&admin))
        .send()
        .await
        .expect("list");
    assert_eq!(r.status(), 404);
}

backend_tests!(
    own_listener,
    who_may_use_it,
    clients_managed,
    users_managed,
    configuration_and_statistics,
    recent_requests,
    pages
);

/// Debian's Chromium (`CHROMIUM` names another), installed when missing and the tests run as
/// root.
fn chromium() -> PathBuf {
    match std::env::var("CHROMIUM") {
        Ok(path) => PathBuf::from(path),
        Err(_) => debian_program(&["/usr/bin/chromium"], "chromium"),
    }
}

/// The whole console in a real browser, on the demo's configuration with the access log on:
/// sign in (a wrong secret refused on the page), the dashboard's chart moving under load,
/// a table browsed, sorted, filtered and edited (the change read back through the API), a row
/// inserted and deleted, a
/// duality view's documents, a client added whose secret then gets a token, the findings, a
/// realtime event of a write made elsewhere, the log filtered, and the pages at a phone's
/// width without sideways scrolling. Screenshots: `target/console-screenshots/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_browser() {
    let chromium = chromium();
    let log = tempfile::NamedTempFile::new().expect("log file");
    let toml = format!(
        "{}\n[access_log]\nformat = \"json\"\npath = {:?}\n\
         [accounts]\nenabled = true\nargon2_memory_kib = 1024\nargon2_iterations = 1\n",
        rowgate::demo::CONFIG,
        log.path().display().to_string()
    );
    let s = TestServer::start_toml(Backend::Sqlite, &toml, rowgate::demo::FILES).await;
    let admin = rowgate::auth::clients::add(&s.app.db, &s.app.auth.secrets, "admin", "admin", 3600)
        .await
        .expect("admin client");
    s.app
        .auth
        .refresh_clients(&s.app.db)
        .await
        .expect("refresh");
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshots");
    // this run's screenshots only
    let _ = std::fs::remove_dir_all(&shots);
    let base = format!("http://{}", s.addr);
    let dir = js_clients().to_path_buf();
    let (id, secret, out) = (
        admin.client_id.clone(),
        admin.client_secret.clone(),
        shots.clone(),
    );
    let ran = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg("console.mjs")
            .args([&base, &id, &secret])
            .arg(&out)
            .env("CHROMIUM", chromium)
            .current_dir(dir)
            .output()
            .expect("node")
    })
    .await
    .expect("browser");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim()).expect("the script's JSON");
    assert_eq!(seen["failure"], Value::Null, "{seen:#}");
    assert_eq!(seen["pageErrors"], json!([]), "{seen:#}");
    assert_eq!(seen["failedRequests"], json!([]), "{seen:#}");
    assert!(
        seen["wrongSecret"]
            .as_str()
            .is_some_and(|t| t.contains("401")),
        "{seen:#}"
    );
    assert_eq!(seen["who"], "admin · admin");
    assert_eq!(seen["chartMoved"], true, "{seen:#}");
    let rate: f64 = seen["rate"]
        .as_str()
        .expect("rate")
        .replace(',', "")
        .parse()
        .expect("number");
    assert!(rate > 20.0, "{seen:#}");
    assert_eq!(seen["teamRows"], 10);
    assert_eq!(seen["firstByPointsDesc"], "Red Bull");
    assert_eq!(seen["saved"], "Row saved.");
    assert_eq!(seen["inserted"], 1);
    assert_eq!(seen["deleted"], true);
    assert_eq!(seen["documents"], 10);
    assert_eq!(seen["secretGone"], true);
    assert_eq!(
        seen["users"],
        json!({"added": "Account pat@example.com added.", "found": 1,
               "banned": "pat@example.com is banned.", "state": "banned", "sessions": 0}),
        "{seen:#}"
    );
    assert!(
        seen["findings"]
            .as_str()
            .is_some_and(|t| t.contains("No findings")),
        "{seen:#}"
    );
    assert_eq!(seen["writeStatus"], 204);
    assert!(
        seen["event"]
            .as_str()
            .is_some_and(|t| t.contains("McLaren") && t.contains("303")),
        "{seen:#}"
    );
    let lines = seen["logLines"].as_array().expect("log lines");
    assert!(
        !lines.is_empty()
            && lines
                .iter()
                .all(|l| l.as_str().is_some_and(|l| l.contains("McLaren")))
    );
    assert_eq!(
        seen["phoneOverflow"],
        json!({"dashboard": 0, "data": 0}),
        "{seen:#}"
    );

    // what the page did, read back through the API
    let (_, ferrari) = get_json(&s, "/team?name=eq.Ferrari&select=points").await;
    assert_eq!(ferrari, json!([{"points": 777}]));
    let (_, gone) = get_json(&s, "/team?name=eq.Console%20Racing").await;
    assert_eq!(gone, json!([]));
    let issued = json_of(
        token_request(
            &s,
            seen["issuedId"].as_str().expect("id"),
            seen["issuedSecret"].as_str().expect("secret"),
        )
        .await,
        200,
    )
    .await;
    assert!(issued["access_token"].is_string());
    for shot in [
        "dashboard",
        "data",
        "clients",
        "users",
        "realtime",
        "log",
        "phone-dashboard",
        "phone-data",
    ] {
        let file = shots.join(format!("{shot}.png"));
        assert!(
            std::fs::metadata(&file).is_ok_and(|m| m.len() > 1000),
            "{}",
            file.display()
        );
    }
}
