//! Security through a real server, on both backends: the OAuth2 token endpoint (RFC 6749 answers,
//! rate limits), every kind of bad bearer token, an authorization matrix (route × method ×
//! role, the exact status of each cell), row filters that keep owners apart for reads, updates,
//! deletes, inserts and upserts, column grants, the OpenAPI document per role, and resources
//! limited to roles with token-claim parameters.

mod common;

use base64::Engine as _;
use common::{client_token, token_request, write_config, Backend, TestServer};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[grants]]
role = "anon"
tables = ["team"]
ops = ["select"]

[[grants]]
role = "reader"
tables = ["team", "posts"]
ops = ["select"]

[[grants]]
role = "reader"
tables = ["employee"]
ops = ["select"]
read_columns = ["emp_no", "first_name", "last_name"]

[[grants]]
role = "writer"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]

[[grants]]
role = "editor"
tables = ["team"]
ops = ["select", "update"]
write_columns = ["points"]

[[grants]]
role = "owner"
tables = ["notes"]
ops = ["select", "insert", "update", "delete"]
filter = "owner=eq.@sub"

[[resources]]
path = "/me"
shape = "value"
sql = "SELECT :who"
params.who = { from = "claim", claim = "sub" }
roles = ["owner", "writer"]
"#;

struct Setup {
    s: TestServer,
    /// Bearer tokens by role (and the two owners).
    reader: String,
    writer: String,
    editor: String,
    alice: String,
    alice_id: String,
    bob: String,
}

/// A server with CONFIG, a `notes` table, and a client (and token) per role.
async fn setup(b: Backend) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), CONFIG, &[]).expect("config");
    let s = TestServer::start_in(b, dir, config, |_| {}).await;
    s.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, body TEXT NOT NULL);");
    let (_, writer) = client_token(&s, "w", "writer").await;
    // The new table reaches the schema cache.
    for _ in 0..100 {
        let r = s
            .get("/notes")
            .bearer_auth(&writer)
            .send()
            .await
            .expect("request");
        if r.status() == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, reader) = client_token(&s, "r", "reader").await;
    let (_, editor) = client_token(&s, "e", "editor").await;
    let (alice_id, alice) = client_token(&s, "alice", "owner").await;
    let (bob_id, bob) = client_token(&s, "bob", "owner").await;
    s.exec(&format!(
        "INSERT INTO notes (id, owner, body) VALUES (1, '{alice_id}', 'alice 1'), \
         (2, '{alice_id}', 'alice 2'), (3, '{bob_id}', 'bob 1')"
    ));
    Setup {
        s,
        reader,
        writer,
        editor,
        alice,
        alice_id,
        bob,
    }
}

/// The token endpoint: Basic and form client authentication, the RFC 6749 answers and errors,
/// and the failed-attempt limit.
async fn token_endpoint(b: Backend) {
    let s = TestServer::start(b).await;
    let issued = rowgate::auth::clients::add(&s.app.db, &s.app.auth.secrets, "app", "writer", 600)
        .await
        .expect("add");
    let (id, secret) = (issued.client_id.as_str(), issued.client_secret.as_str());
    assert!(secret.len() >= 43, "at least 256 bits, base64url");
    // HTTP Basic.
    let r = token_request(&s, id, secret).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["expires_in"], 600);
    let token = body["access_token"].as_str().expect("token");
    // The claims: sub, role, iss, aud, iat, exp.
    let payload = token.split('.').nth(1).expect("payload");
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64"),
    )
    .expect("claims");
    assert_eq!(claims["sub"], id);
    assert_eq!(claims["role"], "writer");
    assert_eq!(claims["iss"], "rowgate");
    assert_eq!(claims["aud"], "rowgate");
    assert_eq!(
        claims["exp"].as_u64().expect("exp") - claims["iat"].as_u64().expect("iat"),
        600
    );
    // Form fields, with a scope.
    let url = s.root_url("/oauth/token");
    let form = |pairs: &[(&str, &str)]| s.client.post(&url).form(pairs).send();
    let r = form(&[
        ("grant_type", "client_credentials"),
        ("client_id", id),
        ("client_secret", secret),
        ("scope", "read"),
    ])
    .await
    .expect("request");
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.expect("json")["scope"], "read");
    // Errors.
    let oauth_error = |r: reqwest::Response, status: u16, error: &'static str| async move {
        assert_eq!(r.status().as_u16(), status);
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"], error, "{body}");
        assert!(body["error_description"].is_string());
    };
    let r = form(&[("client_id", id), ("client_secret", secret)])
        .await
        .expect("r");
    oauth_error(r, 400, "invalid_request").await;
    let r = form(&[
        ("grant_type", "password"),
        ("client_id", id),
        ("client_secret", secret),
    ])
    .await
    .expect("r");
    oauth_error(r, 400, "unsupported_grant_type").await;
    let r = s
        .client
        .post(&url)
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials"), ("client_id", id)])
        .send()
        .await
        .expect("r");
    oauth_error(r, 400, "invalid_request").await;
    let r = s
        .client
        .post(&url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("r");
    oauth_error(r, 400, "invalid_request").await;
    let r = s.client.get(&url).send().await.expect("r");
    oauth_error(r, 405, "invalid_request").await;
    let r = token_request(&s, id, "wrong").await;
    assert_eq!(r.headers()["www-authenticate"], "Basic realm=\"rowgate\"");
    oauth_error(r, 401, "invalid_client").await;
    let r = form(&[
        ("grant_type", "client_credentials"),
        ("client_id", "nobody"),
        ("client_secret", "x"),
    ])
    .await
    .expect("r");
    oauth_error(r, 401, "invalid_client").await;
    // Ten failures a minute per client: then 429, even with the right secret.
    for _ in 0..9 {
        let _ = token_request(&s, id, "wrong").await;
    }
    let r = token_request(&s, id, secret).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    // One address may fail ten times as often (clients behind a proxy share it), then it waits.
    let other = rowgate::auth::clients::add(&s.app.db, &s.app.auth.secrets, "other", "writer", 60)
        .await
        .expect("add");
    assert_eq!(
        token_request(&s, &other.client_id, &other.client_secret)
            .await
            .status(),
        200
    );
    for i in 0..90 {
        let _ = token_request(&s, &format!("guess-{i}"), "x").await;
    }
    let r = token_request(&s, &other.client_id, &other.client_secret).await;
    assert_eq!(r.status(), 429);
}

/// Signs `claims` with the server's own key (as the server would, or would not).
fn sign(s: &TestServer, alg: Algorithm, claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(alg),
        claims,
        &EncodingKey::from_secret(&s.app.auth.secrets.jwt_key),
    )
    .expect("sign")
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Every bad token answers 401 with `WWW-Authenticate: Bearer error="invalid_token"`, and a
/// valid one works; the anonymous role, refused, gets a plain `Bearer` challenge.
async fn bad_tokens(b: Backend) {
    let t = setup(b).await;
    let s = &t.s;
    let claims = |f: &dyn Fn(&mut Value)| {
        let clients = s.app.auth.clients.load();
        let alice = clients.values().find(|c| c.name == "alice").expect("alice");
        let mut c = json!({"sub": alice.client_id, "role": "owner", "iss": "rowgate",
            "aud": "rowgate", "iat": now(), "exp": now() + 300, "gen": 1});
        f(&mut c);
        c
    };
    let good = sign(s, Algorithm::HS256, &claims(&|_| {}));
    let r = s.get("/notes").bearer_auth(&good).send().await.expect("r");
    assert_eq!(r.status(), 200);
    // Within the 60 s clock skew an expired token still works.
    let late = sign(
        s,
        Algorithm::HS256,
        &claims(&|c| c["exp"] = json!(now() - 30)),
    );
    assert_eq!(
        s.get("/notes")
            .bearer_auth(&late)
            .send()
            .await
            .expect("r")
            .status(),
        200
    );
    let none = format!(
        "{}.{}.",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims(&|_| {}).to_string())
    );
    let mut flipped = good.clone().into_bytes();
    let last = flipped.len() - 2;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).expect("ascii");
    let hs384 = sign(s, Algorithm::HS384, &claims(&|_| {}));
    // Properly signed, but its header makes an unknown extension critical (RFC 7515 §4.1.11).
    let critical = {
        let mut header = Header::new(Algorithm::HS256);
        header.crit = Some(vec!["exp-ext".into()]);
        jsonwebtoken::encode(
            &header,
            &claims(&|_| {}),
            &EncodingKey::from_secret(&s.app.auth.secrets.jwt_key),
        )
        .expect("sign")
    };
    let cases: Vec<(&str, Option<String>)> = vec![
        (
            "unknown critical extension",
            Some(format!("Bearer {critical}")),
        ),
        ("Bearer alone", Some("Bearer".into())),
        ("Bearer and spaces", Some("Bearer   ".into())),
        ("Basic", Some("Basic YWxhZGRpbjpvcGVuc2VzYW1l".into())),
        ("garbage", Some("Bearer not.a.jwt".into())),
        ("alg none", Some(format!("Bearer {none}"))),
        ("another algorithm", Some(format!("Bearer {hs384}"))),
        (
            "expired beyond skew",
            Some(format!(
                "Bearer {}",
                sign(
                    s,
                    Algorithm::HS256,
                    &claims(&|c| c["exp"] = json!(now() - 120))
                )
            )),
        ),
        (
            "nbf in the future",
            Some(format!(
                "Bearer {}",
                sign(
                    s,
                    Algorithm::HS256,
                    &claims(&|c| c["nbf"] = json!(now() + 300))
                )
            )),
        ),
        (
            "wrong audience",
            Some(format!(
                "Bearer {}",
                sign(s, Algorithm::HS256, &claims(&|c| c["aud"] = json!("other")))
            )),
        ),
        (
            "wrong issuer",
            Some(format!(
                "Bearer {}",
                sign(s, Algorithm::HS256, &claims(&|c| c["iss"] = json!("other")))
            )),
        ),
        (
            "no exp",
            Some(format!(
                "Bearer {}",
                sign(
                    s,
                    Algorithm::HS256,
                    &claims(&|c| {
                        c.as_object_mut().expect("o").remove("exp");
                    })
                )
            )),
        ),
        (
            "unknown client",
            Some(format!(
                "Bearer {}",
                sign(
                    s,
                    Algorithm::HS256,
                    &claims(&|c| c["sub"] = json!("nobody"))
                )
            )),
        ),
        (
            "role not the client's",
            Some(format!(
                "Bearer {}",
                sign(
                    s,
                    Algorithm::HS256,
                    &claims(&|c| c["role"] = json!("writer"))
                )
            )),
        ),
        ("flipped signature bit", Some(format!("Bearer {flipped}"))),
        (
            "16 KiB token",
            Some(format!(
                "Bearer {}",
                sign(
                    s,
                    Algorithm::HS256,
                    &claims(&|c| c["pad"] = json!("x".repeat(16 * 1024)))
                )
            )),
        ),
        (
            "signed with another key",
            Some(format!(
                "Bearer {}",
                jsonwebtoken::encode(
                    &Header::new(Algorithm::HS256),
                    &claims(&|_| {}),
                    &EncodingKey::from_secret(&[7u8; 32])
                )
                .expect("sign")
            )),
        ),
    ];
    let mut cases = cases;
    cases.push(("two parts", Some("Bearer eyJhbGciOiJIUzI1NiJ9.e30".into())));
    cases.push((
        "issued in the future",
        Some(format!(
            "Bearer {}",
            sign(
                s,
                Algorithm::HS256,
                &claims(&|c| c["iat"] = json!(now() + 300))
            )
        )),
    ));
    // PostgREST's words where it has them: `PGRST303` for claims that fail
    let worded = |what: &str| match what {
        "expired beyond skew" => Some(("PGRST303", "JWT expired")),
        "nbf in the future" => Some(("PGRST303", "JWT not yet valid")),
        "wrong audience" => Some(("PGRST303", "JWT not in audience")),
        "issued in the future" => Some(("PGRST303", "JWT issued at future")),
        "two parts" => Some(("PGRST301", "Expected 3 parts in JWT; got 2")),
        "garbage" => Some(("PGRST301", "JWT cryptographic operation failed")),
        "alg none" | "another algorithm" => {
            Some(("PGRST301", "Wrong or unsupported encoding algorithm"))
        }
        "signed with another key" | "flipped signature bit" => {
            Some(("PGRST301", "No suitable key or wrong key type"))
        }
        _ => None,
    };
    for (what, header) in cases {
        let mut req = s.get("/notes");
        if let Some(h) = header {
            req = req.header("authorization", h);
        }
        let r = req.send().await.expect("request");
        assert_eq!(r.status(), 401, "{what}");
        assert_eq!(
            r.headers()["www-authenticate"],
            "Bearer error=\"invalid_token\"",
            "{what}"
        );
        let body: Value = r.json().await.expect("json");
        let (code, message) = worded(what).unwrap_or(("PGRST301", "invalid bearer token"));
        assert_eq!(body["code"], code, "{what}: {body}");
        assert_eq!(body["message"], message, "{what}: {body}");
        assert!(body["details"].is_string(), "{what}: {body}");
    }
    // No token at all on something anon may not read: 401 with a plain challenge.
    let r = s.get("/notes").send().await.expect("r");
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    // A bad token is refused even where anon may read.
    let r = s
        .get("/team")
        .header("authorization", "Bearer x.y.z")
        .send()
        .await
        .expect("r");
    assert_eq!(r.status(), 401);
}

/// Rotation keeps the old secret (and its tokens) working until `retire`; revocation stops
/// every token of the client. The running server notices without a restart.
async fn rotation_and_revocation(b: Backend) {
    let s = TestServer::start_with(b, |c| {
        c.grants = vec![rowgate::config::GrantConfig {
            role: "writer".into(),
            tables: vec!["*".into()],
            ops: vec!["select".into()],
            read_columns: None,
            write_columns: None,
            filter: None,
            functions: Vec::new(),
        }];
    })
    .await;
    let db = &s.app.db;
    let secrets = &s.app.auth.secrets;
    let first = rowgate::auth::clients::add(db, secrets, "svc", "writer", 600)
        .await
        .expect("add");
    let token_of = |secret: String| {
        let id = first.client_id.clone();
        let s = &s;
        async move {
            let r = token_request(s, &id, &secret).await;
            let status = r.status().as_u16();
            let body: Value = r.json().await.expect("json");
            (
                status,
                body["access_token"].as_str().unwrap_or("").to_string(),
            )
        }
    };
    let (status, old_token) = token_of(first.client_secret.clone()).await;
    assert_eq!(status, 200);
    let works = |token: String| {
        let s = &s;
        async move {
            s.get("/team/1")
                .bearer_auth(token)
                .send()
                .await
                .expect("r")
                .status()
                .as_u16()
        }
    };
    let second = rowgate::auth::clients::rotate(db, secrets, "svc")
        .await
        .expect("rotate");
    assert_eq!(second.client_id, first.client_id);
    // Both secrets and the old token work during the rotation.
    let (status, new_token) = token_of(second.client_secret.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(token_of(first.client_secret.clone()).await.0, 200);
    s.app.auth.refresh_clients(db).await.expect("refresh");
    assert_eq!(works(old_token.clone()).await, 200);
    assert_eq!(works(new_token.clone()).await, 200);
    // Retired: the old secret and the token from before the rotation stop working.
    rowgate::auth::clients::retire(db, "svc")
        .await
        .expect("retire");
    wait_for(|| works(old_token.clone()), 401).await;
    assert_eq!(token_of(first.client_secret.clone()).await.0, 401);
    assert_eq!(works(new_token.clone()).await, 200);
    // Revoked: everything stops, by the server's own polling.
    rowgate::auth::clients::revoke(db, "svc")
        .await
        .expect("revoke");
    wait_for(|| works(new_token.clone()), 401).await;
    assert_eq!(token_of(second.client_secret.clone()).await.0, 401);
    // Unknown names are errors.
    assert!(rowgate::auth::clients::revoke(db, "nobody").await.is_err());
    assert!(
        rowgate::auth::clients::add(db, secrets, "svc", "writer", 60)
            .await
            .is_err()
    );
}

/// Polls `f` until it gives `want` (the server re-reads clients every 100 ms here).
async fn wait_for<F, Fut>(f: F, want: u16)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = u16>,
{
    let mut last = 0;
    for _ in 0..50 {
        last = f().await;
        if last == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("wanted {want}, last {last}");
}

/// Route × method × role, the exact status of each cell.
async fn authorization_matrix(b: Backend) {
    let t = setup(b).await;
    let s = &t.s;
    // (method, path, body, [anon, reader, writer, editor, owner])
    let cells: Vec<(&str, &str, Option<Value>, [u16; 5])> = vec![
        ("GET", "/team", None, [200, 200, 200, 200, 403]),
        ("GET", "/team/1", None, [200, 200, 200, 200, 403]),
        ("HEAD", "/team", None, [200, 200, 200, 200, 403]),
        (
            "POST",
            "/team",
            Some(json!({"name": "Matrix Racing", "points": 1})),
            [401, 403, 201, 403, 403],
        ),
        (
            "PATCH",
            "/team?team_id=eq.10",
            Some(json!({"points": 2})),
            [401, 403, 204, 204, 403],
        ),
        (
            "PATCH",
            "/team?team_id=eq.10",
            Some(json!({"name": "X"})),
            [401, 403, 204, 403, 403],
        ),
        (
            "PUT",
            "/team/10",
            Some(json!({"team_id": 10, "name": "Y", "points": 3})),
            [401, 403, 204, 403, 403],
        ),
        (
            "DELETE",
            "/team?team_id=eq.999",
            None,
            [401, 403, 204, 403, 403],
        ),
        (
            "GET",
            "/employee?select=emp_no&limit=1",
            None,
            [401, 200, 200, 403, 403],
        ),
        (
            "GET",
            "/employee?select=salary&limit=1",
            None,
            [401, 400, 200, 403, 403],
        ),
        (
            "GET",
            "/employee?salary=gt.0&limit=1",
            None,
            [401, 400, 200, 403, 403],
        ),
        ("GET", "/posts?limit=1", None, [401, 200, 200, 403, 403]),
        (
            "DELETE",
            "/posts?id=eq.999",
            None,
            [401, 403, 204, 403, 403],
        ),
        ("GET", "/notes", None, [401, 403, 200, 403, 200]),
        (
            "POST",
            "/notes",
            Some(json!({"id": 50, "owner": "w", "body": "b"})),
            [401, 403, 201, 403, 403],
        ),
        ("GET", "/team_standings", None, [401, 403, 200, 403, 403]),
        ("GET", "/nope", None, [404, 404, 404, 404, 404]),
        ("GET", "/", None, [200, 200, 200, 200, 200]),
    ];
    let roles: [(&str, Option<&str>); 5] = [
        ("anon", None),
        ("reader", Some(&t.reader)),
        ("writer", Some(&t.writer)),
        ("editor", Some(&t.editor)),
        ("owner", Some(&t.alice)),
    ];
    let mut wrong = Vec::new();
    for (method, path, body, want) in &cells {
        for (i, (role, token)) in roles.iter().enumerate() {
            let mut req = s
                .client
                .request(method.parse().expect("method"), s.url(path));
            if let Some(token) = token {
                req = req.bearer_auth(token);
            }
            if let Some(body) = body {
                req = req.json(body);
            }
            let got = req.send().await.expect("request").status().as_u16();
            if got != want[i] {
                wrong.push(format!(
                    "{method} {path} as {role}: {got}, want {}",
                    want[i]
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Resources limited to roles, with the token's `sub` as a parameter.
    let me = |token: Option<&str>| {
        let mut req = s.client.get(s.root_url("/me"));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        req.send()
    };
    assert_eq!(me(None).await.expect("r").status(), 401);
    assert_eq!(me(Some(&t.reader)).await.expect("r").status(), 403);
    let r = me(Some(&t.alice)).await.expect("r");
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.expect("json"), json!(t.alice_id));
    // Column grants: the reader sees three columns of employee.
    let r = s
        .get("/employee?limit=1")
        .bearer_auth(&t.reader)
        .send()
        .await
        .expect("r");
    let rows: Value = r.json().await.expect("json");
    let keys: Vec<&String> = rows[0].as_object().expect("row").keys().collect();
    assert_eq!(keys, ["emp_no", "first_name", "last_name"]);
    // The OpenAPI document lists what the role may use.
    let paths = |token: Option<&str>| {
        let mut req = s.get("/");
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        async move {
            let doc: Value = req.send().await.expect("r").json().await.expect("json");
            doc["paths"].clone()
        }
    };
    let anon = paths(None).await;
    assert!(anon.get("/api/team").is_some());
    assert!(anon.get("/api/employee").is_none());
    assert!(anon.get("/api/notes").is_none());
    assert!(anon.get("/me").is_none());
    assert!(anon["/api/team"].get("post").is_none());
    let reader = paths(Some(&t.reader)).await;
    assert!(reader.get("/api/employee").is_some());
    let writer = paths(Some(&t.writer)).await;
    assert!(writer["/api/team"].get("post").is_some());
    assert!(writer.get("/me").is_some());
    let doc: Value = s
        .get("/")
        .bearer_auth(&t.reader)
        .send()
        .await
        .expect("r")
        .json()
        .await
        .expect("json");
    let props = doc["components"]["schemas"]["employee"]["properties"]
        .as_object()
        .expect("props");
    assert_eq!(props.len(), 3, "{props:?}");
}

/// Owners share a table under `owner=eq.@sub`: neither can read, change, delete, take over or
/// create the other's rows, by any filter, item URL, upsert or PUT.
async fn row_filters_keep_owners_apart(b: Backend) {
    let t = setup(b).await;
    let s = &t.s;
    let send = |method: &str, path: &str, token: &str, prefer: &str, body: Option<Value>| {
        let mut req = s
            .client
            .request(method.parse().expect("method"), s.url(path))
            .bearer_auth(token);
        if !prefer.is_empty() {
            req = req.header("Prefer", prefer);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        req.send()
    };
    let ids = |v: Value| -> Vec<i64> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|r| r["id"].as_i64().expect("id"))
            .collect()
    };
    // Reads: only one's own rows, whatever the filter.
    for path in [
        "/notes?select=id&order=id",
        "/notes?select=id&order=id&or=(owner.neq.x,id.gt.0)",
        "/notes?select=id&order=id&not.and=(id.eq.0)",
    ] {
        let r = send("GET", path, &t.alice, "", None).await.expect("r");
        assert_eq!(ids(r.json().await.expect("json")), [1, 2], "{path}");
    }
    let r = send("GET", "/notes?select=id", &t.bob, "", None)
        .await
        .expect("r");
    assert_eq!(ids(r.json().await.expect("json")), [3]);
    let r = send("GET", "/notes?select=id", &t.alice, "count=exact", None)
        .await
        .expect("r");
    assert_eq!(r.headers()["content-range"], "0-1/2");
    // Writes as alice, in order: (method, path, Prefer, body, status, why).
    let alice = t.alice_id.as_str();
    let steps: Vec<(&str, &str, &str, Value, u16, &str)> = vec![
        (
            "GET",
            "/notes/3",
            "",
            Value::Null,
            404,
            "bob's row by its URL",
        ),
        (
            "PATCH",
            "/notes?id=eq.3",
            "",
            json!({"body": "mine now"}),
            204,
            "touches nothing",
        ),
        (
            "DELETE",
            "/notes?id=eq.3",
            "",
            Value::Null,
            204,
            "deletes nothing",
        ),
        (
            "PATCH",
            "/notes/1",
            "",
            json!({"owner": "bob"}),
            403,
            "moving a row out of reach",
        ),
        (
            "PATCH",
            "/notes/1",
            "",
            json!({"body": "edited"}),
            204,
            "one's own row",
        ),
        (
            "POST",
            "/notes",
            "",
            json!({"id": 10, "body": "new"}),
            201,
            "owner filled in",
        ),
        (
            "POST",
            "/notes",
            "",
            json!({"id": 11, "owner": "bob", "body": "x"}),
            403,
            "another owner",
        ),
        (
            "POST",
            "/notes",
            "",
            json!([{"id": 12, "owner": alice, "body": "ok"}, {"id": 13, "owner": "bob", "body": "x"}]),
            403,
            "one bad row refuses the batch",
        ),
        (
            "POST",
            "/notes",
            "resolution=merge-duplicates",
            json!({"id": 3, "body": "taken"}),
            403,
            "upsert onto bob's row",
        ),
        (
            "PUT",
            "/notes/3",
            "",
            json!({"id": 3, "body": "taken"}),
            403,
            "PUT onto bob's row",
        ),
        (
            "PUT",
            "/notes/2",
            "",
            json!({"id": 2, "body": "replaced"}),
            204,
            "PUT onto one's own",
        ),
    ];
    for (method, path, prefer, body, want, why) in steps {
        let body = (!body.is_null()).then_some(body);
        let got = send(method, path, &t.alice, prefer, body)
            .await
            .expect("r")
            .status();
        assert_eq!(got.as_u16(), want, "{method} {path}: {why}");
    }
    let column = |sql: &str| s.rows(sql)[0][0].clone().unwrap_or_default();
    assert_eq!(column("SELECT body FROM notes WHERE id = 3"), "bob 1");
    assert_eq!(column("SELECT owner FROM notes WHERE id = 1"), alice);
    assert_eq!(column("SELECT owner FROM notes WHERE id = 10"), alice);
    assert_eq!(column("SELECT body FROM notes WHERE id = 2"), "replaced");
    assert_eq!(
        s.int("SELECT count(*) FROM notes WHERE id IN (11, 12, 13)"),
        0
    );
}

/// `rowgate clients add|list|rotate|retire|revoke` from the command line, against the database
/// a config names, while a server is running on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_command_line() {
    let s = TestServer::start(Backend::Sqlite).await;
    let dir = s.dir.path();
    let toml = format!(
        "[db]\npath = {:?}\n[auth]\nsecret_file = \"rowgate.secret\"\n",
        s.db_path.display()
    );
    std::fs::write(dir.join("cli.toml"), toml).expect("config");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rowgate"))
            .current_dir(dir)
            .arg("clients")
            .args(args)
            .args(["--config", "cli.toml"])
            .output()
            .expect("run");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = run(&["add", "cli-app", "--role", "writer", "--json"]);
    assert!(ok, "{err}");
    let issued: Value = serde_json::from_str(out.trim()).expect("json");
    let (id, secret) = (
        issued["client_id"].as_str().expect("id"),
        issued["client_secret"].as_str().expect("secret"),
    );
    // The running server honours it without a restart.
    assert_eq!(token_request(&s, id, secret).await.status(), 200);
    let (ok, out, _) = run(&["list"]);
    assert!(ok && out.contains("cli-app") && out.contains("writer") && !out.contains(secret));
    let (ok, _, err) = run(&["add", "cli-app", "--role", "writer"]);
    assert!(!ok && err.contains("exists already"), "{err}");
    let (ok, out, _) = run(&["rotate", "cli-app"]);
    assert!(ok && out.contains("client_secret:"), "{out}");
    let (ok, _, _) = run(&["retire", "cli-app"]);
    assert!(ok);
    // The running server re-reads its clients every auth.clients_poll_ms.
    wait_for(
        || async { token_request(&s, id, secret).await.status().as_u16() },
        401,
    )
    .await;
    let (ok, _, _) = run(&["revoke", "cli-app"]);
    assert!(ok);
    let (ok, _, err) = run(&["revoke", "nobody"]);
    assert!(!ok && err.contains("no client named"), "{err}");
    // The table is not part of the API.
    let r = s.get("/_rowgate_clients").send().await.expect("r");
    assert_eq!(r.status(), 404);
}

/// Tokens of an outside issuer (EdDSA, keys from a JWKS file picked by `kid`): accepted with
/// their role claim; refused with an unknown `kid`, the wrong audience, or HS256 signed with the
/// issuer's public key as the HMAC secret (algorithm confusion).
async fn external_issuer(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let seed = [42u8; 32];
    let public = ed25519_dalek::SigningKey::from_bytes(&seed)
        .verifying_key()
        .to_bytes();
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1", "alg": "EdDSA",
        "use": "sig", "x": b64(&public)}]});
    std::fs::write(dir.path().join("jwks.json"), jwks.to_string()).expect("jwks");
    let toml = r#"
[[auth.external]]
issuer = "https://idp.example"
audience = "rowgate-api"
jwks_file = "jwks.json"
role_claim = "app_role"

[[grants]]
role = "reader"
tables = ["team"]
ops = ["select"]
"#;
    let config = write_config(dir.path(), toml, &[]).expect("config");
    let s = TestServer::start_in(b, dir, config, |_| {}).await;
    // PKCS#8 v1 DER of an Ed25519 private key (RFC 8410): fixed prefix, then the seed.
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    der.extend_from_slice(&seed);
    let key = EncodingKey::from_ed_der(&der);
    let claims = |aud: &str| {
        json!({"iss": "https://idp.example", "aud": aud, "sub": "user-7", "app_role": "reader",
            "exp": now() + 300})
    };
    let token = |kid: &str, aud: &str| {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(kid.to_string());
        jsonwebtoken::encode(&header, &claims(aud), &key).expect("sign")
    };
    let status = |token: String| {
        let s = &s;
        async move {
            s.get("/team/1")
                .bearer_auth(token)
                .send()
                .await
                .expect("r")
                .status()
                .as_u16()
        }
    };
    assert_eq!(status(token("k1", "rowgate-api")).await, 200);
    assert_eq!(status(token("k9", "rowgate-api")).await, 401, "unknown kid");
    assert_eq!(
        status(token("k1", "elsewhere")).await,
        401,
        "wrong audience"
    );
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let confused = jsonwebtoken::encode(
        &header,
        &claims("rowgate-api"),
        &EncodingKey::from_secret(&public),
    )
    .expect("sign");
    assert_eq!(status(confused).await, 401, "HS256 over the public key");
    // The anonymous role has no grant here.
    let r = s.get("/team/1").send().await.expect("r");
    assert_eq!(r.status(), 401);
}

/// Tokens of an existing PostgREST or Supabase deployment keep working: HS256 signed with the
/// shared JWT secret (`secret_file`), Supabase's anon and service-role keys (`iss` "supabase",
/// no `aud`) with their role, PostgREST's tokens without `iss` with the role at a claim path;
/// refused: another secret, an expired token, `alg: none`, and a token claiming this server's
/// own issuer (it is checked as one of this server's, with this server's key).
async fn shared_secret_issuers(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = "super-secret-jwt-token-with-at-least-32-characters-long";
    std::fs::write(dir.path().join("jwt.secret"), format!("{secret}\n")).expect("secret");
    let toml = r#"
[[auth.external]]
issuer = "supabase"
secret_file = "jwt.secret"

[[auth.external]]
issuer = ""
secret_file = "jwt.secret"
role_claim = ".app_metadata.role"

[[grants]]
role = "anon"
tables = ["team"]
ops = ["select"]

[[grants]]
role = "service_role"
tables = ["team"]
ops = ["select", "insert", "update", "delete"]
"#;
    let config = write_config(dir.path(), toml, &[]).expect("config");
    let s = TestServer::start_in(b, dir, config, |_| {}).await;
    let sign = |claims: Value, key: &str| {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(key.as_bytes()),
        )
        .expect("sign")
    };
    let supabase = |role: &str| {
        json!({"iss": "supabase", "ref": "abcdefgh", "role": role, "iat": now(),
            "exp": now() + 3600})
    };
    let write = |token: String| {
        let s = &s;
        async move {
            s.patch("/team?team_id=eq.1", json!({"points": 1}))
                .header("apikey", token)
                .send()
                .await
                .expect("r")
                .status()
                .as_u16()
        }
    };
    // the anon key reads but may not write; the service-role key writes
    let r = s
        .get("/team/1")
        .header("apikey", sign(supabase("anon"), secret))
        .send()
        .await
        .expect("r");
    assert_eq!(r.status(), 200);
    assert_eq!(write(sign(supabase("anon"), secret)).await, 403);
    assert_eq!(write(sign(supabase("service_role"), secret)).await, 204);
    // PostgREST's token: no iss, the role at a path
    let postgrest = json!({"app_metadata": {"role": "service_role"}, "exp": now() + 60});
    assert_eq!(write(sign(postgrest, secret)).await, 204);
    // refused
    let other = "another-secret-that-is-also-at-least-32-characters";
    assert_eq!(write(sign(supabase("service_role"), other)).await, 401);
    let expired = json!({"iss": "supabase", "role": "service_role", "exp": now() - 600});
    assert_eq!(write(sign(expired, secret)).await, 401);
    let unsigned = format!(
        "{}.{}.",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(supabase("service_role").to_string())
    );
    assert_eq!(write(unsigned).await, 401);
    let posing = json!({"iss": "rowgate", "aud": "rowgate", "sub": "x", "role": "service_role",
        "gen": 1, "exp": now() + 60});
    assert_eq!(write(sign(posing, secret)).await, 401);
    // a token that never expires, unless the issuer says it may be one
    let forever = json!({"app_metadata": {"role": "service_role"}});
    assert_eq!(write(sign(forever, secret)).await, 401);
}

/// `require_exp = false` takes a shared-secret issuer's tokens without `exp` (PostgREST's
/// never-expiring tokens); an `exp` they carry still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_without_exp_when_the_issuer_allows_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = "reallyreallyreallyreallyverysafe";
    std::fs::write(dir.path().join("jwt.secret"), secret).expect("secret");
    let toml = r#"
[[auth.external]]
issuer = ""
secret_file = "jwt.secret"
require_exp = false

[[grants]]
role = "writer"
tables = ["team"]
ops = ["select", "update"]
"#;
    let config = write_config(dir.path(), toml, &[]).expect("config");
    let s = TestServer::start_in(Backend::Sqlite, dir, config, |_| {}).await;
    let status = |claims: Value| {
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .expect("sign");
        let s = &s;
        async move {
            s.patch("/team?team_id=eq.1", json!({"points": 1}))
                .bearer_auth(token)
                .send()
                .await
                .expect("r")
                .status()
                .as_u16()
        }
    };
    assert_eq!(status(json!({"role": "writer"})).await, 204);
    assert_eq!(
        status(json!({"role": "writer", "exp": now() - 600})).await,
        401
    );
}

/// A master secret shorter than 32 bytes is refused; a missing one is created, 32 random bytes
/// readable by the owner only, and the same file gives the same keys next time.
#[test]
fn master_secret_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = write_config(dir.path(), "", &[]).expect("config");
    config.auth.secret_file = dir.path().join("short.secret");
    std::fs::write(&config.auth.secret_file, "too short\n").expect("write");
    let err = rowgate::auth::Auth::new(&config).err().expect("refused");
    assert!(
        format!("{err:#}").contains("shorter than 32 bytes"),
        "{err:#}"
    );
    config.auth.secret_file = dir.path().join("new.secret");
    let first = rowgate::auth::Auth::new(&config).expect("created");
    let text = std::fs::read_to_string(&config.auth.secret_file).expect("file");
    assert!(text.trim().len() >= 43, "32 random bytes, base64url");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&config.auth.secret_file)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let again = rowgate::auth::Auth::new(&config).expect("read");
    assert_eq!(first.secrets.jwt_key, again.secrets.jwt_key);
    assert_ne!(first.secrets.jwt_key, first.secrets.pepper);
}

/// Processes starting together (a supervisor's workers) with no secret file yet: exactly one
/// creates it, and every one reads the same secret (once this failed with "File exists").
#[test]
fn master_secret_created_once_by_racing_starts() {
    for round in 0..20 {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = write_config(dir.path(), "", &[]).expect("config");
        config.auth.secret_file = dir.path().join(format!("race{round}.secret"));
        let config = std::sync::Arc::new(config);
        let keys: Vec<[u8; 32]> = (0..6)
            .map(|_| {
                let config = config.clone();
                std::thread::spawn(move || {
                    rowgate::auth::Auth::new(&config).map(|a| a.secrets.jwt_key)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().expect("thread").expect("secret"))
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]), "round {round}");
        let files = std::fs::read_dir(dir.path()).expect("dir").count();
        assert_eq!(files, 2, "rowgate.toml and the secret, no temporary left");
    }
}

/// Grants that do not compile are refused when the configuration loads.
#[test]
fn bad_grants_are_refused() {
    for (toml, words) in [
        ("[[grants]]\nrole = \"a\"\ntables = [\"t\"]\nops = [\"drop\"]\n", "unknown operation"),
        ("[[grants]]\nrole = \"a\"\ntables = [\"t\"]\nops = [\"select\"]\nfilter = \"owner=zz.1\"\n", "filter"),
        ("[[grants]]\nrole = \"a\"\ntables = [\"t\"]\nops = [\"select\"]\nfilter = \"select=a\"\n", "only filters"),
        ("[[grants]]\nrole = \"a\"\ntables = [\"t\", \"t\"]\nops = [\"select\"]\n", "twice"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = write_config(dir.path(), toml, &[]).expect("config");
        config.auth.secret_file = dir.path().join("s");
        let err = rowgate::auth::Auth::new(&config).err().expect("refused");
        assert!(format!("{err:#}").contains(words), "{words}: {err:#}");
    }
}

/// `/metrics`: readable from loopback by default; with `metrics.loopback = false` only by the
/// roles in `metrics.roles` (401 without a token, 403 with another role); 404 when disabled;
/// read-only; its counters move with the traffic.
async fn metrics_access(b: Backend) {
    let s = TestServer::start(b).await;
    let sample = |text: &str, series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{series} in {text}"))
    };
    let r = get_metrics(&s, None).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .expect("type")
        .starts_with("text/plain; version=0.0.4"));
    let before = r.text().await.expect("text");
    let ok_before = sample(&before, "rowgate_http_responses_total{class=\"2xx\"");
    let missing_before = sample(&before, "rowgate_http_responses_total{class=\"4xx\"");
    for _ in 0..5 {
        assert_eq!(
            s.get("/team?limit=1").send().await.expect("get").status(),
            200
        );
    }
    assert_eq!(s.get("/nope").send().await.expect("get").status(), 404);
    let after = get_metrics(&s, None).await.text().await.expect("text");
    assert!(sample(&after, "rowgate_http_responses_total{class=\"2xx\"") >= ok_before + 6.0);
    assert!(sample(&after, "rowgate_http_responses_total{class=\"4xx\"") > missing_before);
    assert!(sample(&after, "rowgate_http_connections_open") >= 1.0);
    assert!(sample(&after, "rowgate_process_resident_bytes") > 1e6);
    let r = s
        .client
        .post(s.root_url("/metrics"))
        .send()
        .await
        .expect("post");
    common::assert_error(r, 405, "PGRST117").await;
    s.stop().await;

    let dir = tempfile::tempdir().expect("tempdir");
    let toml = "[metrics]\nloopback = false\nroles = [\"writer\"]\n[[grants]]\nrole = \"anon\"\ntables = [\"team\"]\nops = [\"select\"]\n";
    let config = write_config(dir.path(), toml, &[]).expect("config");
    let s = TestServer::start_in(b, dir, config, |_| {}).await;
    let r = get_metrics(&s, None).await;
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    common::assert_error(r, 401, "RG401").await;
    let (_, reader) = client_token(&s, "r", "reader").await;
    let (_, writer) = client_token(&s, "w", "writer").await;
    let r = get_metrics(&s, Some(&reader)).await;
    common::assert_error(r, 403, "42501").await;
    let r = get_metrics(&s, Some(&writer)).await;
    assert_eq!(r.status(), 200);
    s.stop().await;

    let s = TestServer::start_with(b, |c| c.metrics.enabled = false).await;
    let r = get_metrics(&s, None).await;
    common::assert_error(r, 404, "RG404").await;
    s.stop().await;
}

/// `GET /metrics`, with a bearer token when given.
async fn get_metrics(s: &TestServer, token: Option<&str>) -> reqwest::Response {
    let mut request = s.client.get(s.root_url("/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("GET /metrics")
}

backend_tests!(
    shared_secret_issuers,
    metrics_access,
    external_issuer,
    token_endpoint,
    bad_tokens,
    rotation_and_revocation,
    authorization_matrix,
    row_filters_keep_owners_apart,
);
