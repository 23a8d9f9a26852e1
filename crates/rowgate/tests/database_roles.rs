//! The database's own security (issue 41): with `auth.database_roles`, each request's
//! transaction runs as the role its token names, so PostgreSQL's GRANTs and row-level security
//! policies decide what each caller sees and changes, through every front end: REST, RPC,
//! embedding, a duality view, ORDS and a custom resource. The schema is a Supabase app's
//! (`rowgate db supabase-compat`'s roles and `auth.uid()`), the tokens a Supabase project's
//! (HS256 with the project's JWT secret, `sub` a user's id).

mod common;

use common::ws::next;
use common::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const SECRET: &str = "super-secret-jwt-token-with-at-least-32-characters-long";
const A: &str = "00000000-0000-0000-0000-00000000000a";
const B: &str = "00000000-0000-0000-0000-00000000000b";

/// Notes with row-level security: a user reads and writes their own, and reads those of the
/// squads they belong to (a policy joining the membership table); the anonymous role reads
/// public notes; `vault` is granted to no role but the service role.
const SCHEMA: &str = r#"
CREATE TABLE squads (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE members (squad_id int REFERENCES squads, user_id uuid,
  PRIMARY KEY (squad_id, user_id));
CREATE TABLE notes (id int PRIMARY KEY, owner uuid NOT NULL DEFAULT auth.uid(),
  squad_id int REFERENCES squads, body text NOT NULL);
CREATE TABLE vault (id int PRIMARY KEY, secret text);
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON notes TO authenticated
  USING (owner = auth.uid()) WITH CHECK (owner = auth.uid());
CREATE POLICY squad_reads ON notes FOR SELECT TO authenticated
  USING (squad_id IN (SELECT squad_id FROM members WHERE user_id = auth.uid()));
CREATE POLICY public_reads ON notes FOR SELECT TO anon
  USING (squad_id IS NULL AND body LIKE 'public%');
GRANT SELECT ON squads, members TO anon, authenticated;
GRANT SELECT ON notes TO anon;
GRANT SELECT, INSERT, UPDATE, DELETE ON notes TO authenticated;
GRANT ALL ON squads, members, notes, vault TO service_role;
CREATE FUNCTION visible_notes() RETURNS bigint LANGUAGE sql STABLE
  AS $$ SELECT count(*) FROM notes $$;
CREATE FUNCTION all_notes() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER
  SET search_path = public AS $$ SELECT count(*) FROM notes $$;
CREATE FUNCTION whoami() RETURNS text LANGUAGE sql STABLE
  AS $$ SELECT current_user || ' ' || coalesce(auth.uid()::text, '-') $$;
GRANT EXECUTE ON FUNCTION whoami() TO anon;
INSERT INTO squads VALUES (1, 'red'), (2, 'blue');
INSERT INTO members VALUES (1, '00000000-0000-0000-0000-00000000000a'),
  (2, '00000000-0000-0000-0000-00000000000b');
INSERT INTO notes VALUES
  (1, '00000000-0000-0000-0000-00000000000a', NULL, 'a alone'),
  (2, '00000000-0000-0000-0000-00000000000a', 1, 'a in red'),
  (3, '00000000-0000-0000-0000-00000000000b', 2, 'b in blue'),
  (4, '00000000-0000-0000-0000-00000000000b', 1, 'b in red'),
  (5, '00000000-0000-0000-0000-00000000000b', NULL, 'public b');
INSERT INTO vault VALUES (1, 'the key');
"#;

/// (`auth.database_roles = true` is set once the database is PostgreSQL's.)
const CONFIG: &str = r#"
[rest]
prefix = "/rest/v1"

[realtime]
tables = ["notes"]
poll_ms = 100

[[auth.external]]
issuer = "supabase"
secret_file = "jwt.secret"

[[duality_views]]
name = "notes_dv"
table = "notes"
document = "_id:id,body"

[[resources]]
path = "/notes/count"
sql = "SELECT count(*) AS n FROM notes"
roles = ["authenticated"]
"#;

/// A Supabase token for `role` (and the user `sub`).
fn token(role: &str, sub: Option<&str>) -> String {
    let now = jsonwebtoken::get_current_timestamp();
    let mut claims = json!({"iss": "supabase", "role": role, "iat": now, "exp": now + 3600});
    if let Some(sub) = sub {
        claims["sub"] = json!(sub);
    }
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("sign")
}

/// The status and JSON body of `request` sent with `token` (none: anonymous).
async fn send(request: reqwest::RequestBuilder, token: Option<&str>) -> (u16, Value) {
    let request = match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    };
    let r = request.send().await.expect("send");
    let status = r.status().as_u16();
    let text = r.text().await.expect("text");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The `id`s of rows (or documents' `_id`s, or ORDS items' `id`s).
fn ids(rows: &Value, key: &str) -> Vec<i64> {
    rows.as_array()
        .unwrap_or_else(|| panic!("rows: {rows}"))
        .iter()
        .map(|r| r[key].as_i64().expect("id"))
        .collect()
}

async fn server() -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("jwt.secret"), SECRET).expect("secret");
    let config = write_config(dir.path(), CONFIG, &[]).expect("config");
    let setup = format!(
        "{}\n{SCHEMA}",
        rowgate::db::supabase_compat::statements(None)
    );
    TestServer::start_prepared(Backend::Postgres, dir, config, &setup, |c| {
        c.auth.database_roles = true
    })
    .await
}

/// Each caller sees and changes what the policies let its role and its `sub` see and change,
/// through REST, RPC, embedding, a duality view, ORDS and a custom resource; the service role
/// bypasses row-level security; a privilege the role lacks is PostgREST's `42501` (401
/// anonymous, 403 with a token); a role the database lacks is 401 `22023`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_policies_decide_on_every_path() {
    let s = server().await;
    let (a, b) = (
        token("authenticated", Some(A)),
        token("authenticated", Some(B)),
    );
    let service = token("service_role", None);
    let notes = |t: Option<&str>| {
        let s = &s;
        let t = t.map(str::to_string);
        async move {
            let (status, body) = send(s.get("/notes?select=id&order=id"), t.as_deref()).await;
            assert_eq!(status, 200, "{body}");
            ids(&body, "id")
        }
    };

    // reads: own notes, the squad's through the membership table, public ones for anon
    assert_eq!(notes(Some(&a)).await, [1, 2, 4]);
    assert_eq!(notes(Some(&b)).await, [3, 4, 5]);
    assert_eq!(notes(None).await, [5]);
    assert_eq!(notes(Some(&service)).await, [1, 2, 3, 4, 5]);

    // privileges: the anonymous role lacks them (401, as PostgREST), a user too (403)
    let (status, body) = send(s.get("/vault"), None).await;
    assert_eq!((status, &body["code"]), (401, &json!("42501")), "{body}");
    let (status, body) = send(s.get("/vault"), Some(&a)).await;
    assert_eq!((status, &body["code"]), (403, &json!("42501")), "{body}");
    let (status, body) = send(s.get("/vault?select=secret"), Some(&service)).await;
    assert_eq!(
        (status, &body),
        (200, &json!([{"secret": "the key"}])),
        "{body}"
    );
    let (status, body) = send(s.post("/notes", json!({"id": 9, "body": "x"})), None).await;
    assert_eq!((status, &body["code"]), (401, &json!("42501")), "{body}");

    // a role the database does not have
    let (status, body) = send(s.get("/notes"), Some(&token("nosuch", Some(A)))).await;
    assert_eq!((status, &body["code"]), (401, &json!("22023")), "{body}");

    // writes: only one's own rows change; a row for someone else is refused by WITH CHECK
    let (status, _) = send(
        s.patch("/notes?id=in.(1,3,4)", json!({"body": "edited"})),
        Some(&a),
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) = send(s.delete("/notes?id=in.(3,4,5)"), Some(&a)).await;
    assert_eq!(status, 204);
    assert_eq!(
        s.rows("SELECT id, body FROM notes ORDER BY id"),
        [
            [Some("1".into()), Some("edited".into())],
            [Some("2".into()), Some("a in red".into())],
            [Some("3".into()), Some("b in blue".into())],
            [Some("4".into()), Some("b in red".into())],
            [Some("5".into()), Some("public b".into())],
        ]
    );
    let (status, body) = send(
        s.post("/notes", json!({"id": 6, "body": "a's new"})),
        Some(&a),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        s.rows("SELECT owner::text FROM notes WHERE id = 6"),
        [[Some(A.to_string())]]
    );
    let forged = json!({"id": 7, "owner": B, "body": "forged"});
    let (status, body) = send(s.post("/notes", forged), Some(&a)).await;
    assert_eq!((status, &body["code"]), (403, &json!("42501")), "{body}");
    assert_eq!(s.int("SELECT count(*) FROM notes WHERE id = 7"), 0);

    // functions run as the caller, SECURITY DEFINER ones as their owner
    let (_, n) = send(s.get("/rpc/visible_notes"), Some(&a)).await;
    assert_eq!(n, json!(4));
    let (_, n) = send(s.get("/rpc/all_notes"), Some(&a)).await;
    assert_eq!(n, json!(6));
    let (_, who) = send(s.get("/rpc/whoami"), Some(&a)).await;
    assert_eq!(who, json!(format!("authenticated {A}")));
    let (_, who) = send(s.get("/rpc/whoami"), None).await;
    assert_eq!(who, json!("anon -"));

    // embedding: each squad's notes as the caller sees them
    let (status, body) = send(
        s.get("/squads?select=id,notes(id)&order=id&notes.order=id"),
        Some(&a),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([{"id": 1, "notes": [{"id": 2}, {"id": 4}]}, {"id": 2, "notes": []}])
    );

    // a duality view, ORDS and a custom resource: the same rows
    let (status, body) = send(s.get("/notes_dv?order=_id"), Some(&a)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body, "_id"), [1, 2, 4, 6]);
    let (status, body) = send(
        s.client
            .get(s.root_url("/ords/rowgate/notes/"))
            .query(&[("q", r#"{"$orderby":{"id":"ASC"}}"#)]),
        Some(&b),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body["items"], "id"), [3, 4, 5]);
    let (status, body) = send(s.client.get(s.root_url("/notes/count")), Some(&a)).await;
    assert_eq!((status, &body), (200, &json!([{"n": 4}])), "{body}");
}

/// Database roles are PostgreSQL's: a SQLite configuration asking for them does not start.
#[test]
fn sqlite_refuses_database_roles() {
    let mut config = rowgate::config::Config::default();
    config.db.path = "demo.db".into();
    config.auth.database_roles = true;
    let err = config.validate().expect_err("refused");
    assert!(
        format!("{err:#}").contains("auth.database_roles"),
        "{err:#}"
    );
}

/// `(op, id)` of each event on `socket` until it is silent for a moment.
async fn events_until_silent(socket: &mut ws::Socket) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    while let Ok(event) =
        tokio::time::timeout(std::time::Duration::from_millis(400), next(socket)).await
    {
        let op = event["op"].as_str().expect("op").to_string();
        out.push((op, event["key"]["id"].as_i64().expect("key")));
    }
    out
}

/// Realtime honours row-level security: each subscriber is sent a change only if its role,
/// with its claims, may see the row's image (the new row of an insert, both of an update, the
/// old of a delete) under the policies, the one joining the membership table included; a row
/// that moves out of what a user may see is a `leave`, one that moves in an `enter`; the
/// service role sees every change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_realtime_sends_what_the_policies_let_each_subscriber_see() {
    let s = server().await;
    let (a, b) = (
        token("authenticated", Some(A)),
        token("authenticated", Some(B)),
    );
    let service = token("service_role", None);
    let mut a_socket = ws::follow(s.addr, "notes", Some(&a)).await;
    let mut b_socket = ws::follow(s.addr, "notes", Some(&b)).await;
    let mut anon_socket = ws::follow(s.addr, "notes", None).await;
    let mut service_socket = ws::follow(s.addr, "notes", Some(&service)).await;
    s.exec(&format!(
        "INSERT INTO notes VALUES (10, '{A}', NULL, 'a new');
         INSERT INTO notes VALUES (11, '{B}', 1, 'b in red, seen by a');
         INSERT INTO notes VALUES (12, '{B}', NULL, 'public b again');
         UPDATE notes SET owner = '{B}' WHERE id = 10;
         DELETE FROM notes WHERE id = 11;"
    ));
    // the service role bypasses row-level security: every change
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let event = next(&mut service_socket).await;
        seen.push((
            event["op"].as_str().expect("op").to_string(),
            event["key"]["id"].as_i64().expect("key"),
        ));
    }
    let owned = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
        v.iter().map(|(op, id)| (op.to_string(), *id)).collect()
    };
    assert_eq!(
        seen,
        owned(&[
            ("insert", 10),
            ("insert", 11),
            ("insert", 12),
            ("update", 10),
            ("delete", 11)
        ])
    );
    // (each batch was queued for every subscriber before the service role's socket got it)
    assert_eq!(
        events_until_silent(&mut a_socket).await,
        owned(&[
            ("insert", 10),
            ("insert", 11),
            ("leave", 10),
            ("delete", 11)
        ])
    );
    assert_eq!(
        events_until_silent(&mut b_socket).await,
        owned(&[
            ("insert", 11),
            ("insert", 12),
            ("enter", 10),
            ("delete", 11)
        ])
    );
    assert_eq!(
        events_until_silent(&mut anon_socket).await,
        owned(&[("insert", 12)])
    );
}

/// A Supabase app moves as it is: through the real supabase-js client (clients/js's lock
/// file), users A and B with their own tokens, the project's anon and service-role keys, and
/// the database's policies: A reads, changes and deletes only what they let A, over REST, RPC
/// and embedding; a row for someone else is refused; A's realtime channel never receives B's
/// row; the service role sees everything; the anon key what the `anon` policies allow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_supabase_js_app_with_row_level_security() {
    let s = server().await;
    let env = [
        ("NODE_OPTIONS", "--experimental-websocket".to_string()),
        ("ROWGATE_ROOT", s.root_url("")),
        ("ROWGATE_ANON_KEY", token("anon", None)),
        ("ROWGATE_SERVICE_KEY", token("service_role", None)),
        ("ROWGATE_USER_A", token("authenticated", Some(A))),
        ("ROWGATE_USER_B", token("authenticated", Some(B))),
        ("ROWGATE_USER_A_ID", A.to_string()),
        ("ROWGATE_USER_B_ID", B.to_string()),
    ];
    let results = tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_client_with(
            std::path::Path::new("node"),
            js_clients(),
            "supabase_rls.mjs",
            &env,
        )
    })
    .await
    .expect("client");
    assert_eq!(
        results["notes"],
        json!({"a": [1, 2, 4], "b": [3, 4, 5], "anon": [5], "service": [1, 2, 3, 4, 5]}),
        "{results}"
    );
    assert_eq!(results["aUpdate"]["data"], json!([{"id": 1}]), "{results}");
    assert_eq!(results["aDelete"]["data"], json!([]), "{results}");
    assert_eq!(
        results["aInsert"]["data"],
        json!({"id": 6, "owner": A}),
        "{results}"
    );
    assert_eq!(
        (
            &results["aForged"]["status"],
            &results["aForged"]["error"]["code"]
        ),
        (&json!(403), &json!("42501")),
        "{results}"
    );
    assert_eq!(results["aRpc"]["data"], json!(4), "{results}");
    assert_eq!(
        results["aEmbed"]["data"],
        json!([{"id": 1, "notes": [{"id": 2}, {"id": 4}]}, {"id": 2, "notes": []}]),
        "{results}"
    );
    assert_eq!(
        (
            &results["anonVault"]["status"],
            &results["anonVault"]["error"]["code"]
        ),
        (&json!(401), &json!("42501")),
        "{results}"
    );
    assert_eq!(
        results["realtime"],
        json!({"eventType": "INSERT", "id": 21, "owner": A}),
        "{results}"
    );
}

/// What describes the API to a role shows what the database lets it do: the OpenAPI document
/// lists the tables the role has privileges on, with the methods they allow, and `OPTIONS`
/// answers the same methods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_openapi_and_options_show_the_roles_privileges() {
    let s = server().await;
    let a = token("authenticated", Some(A));
    let service = token("service_role", None);
    let methods = |doc: &Value, path: &str| -> Vec<String> {
        let mut found: Vec<String> = doc["paths"][path]
            .as_object()
            .map(|ops| ops.keys().cloned().collect())
            .unwrap_or_default();
        found.sort();
        found
    };
    let (status, anon_doc) = send(s.get("/"), None).await;
    assert_eq!(status, 200, "{anon_doc}");
    assert_eq!(methods(&anon_doc, "/rest/v1/notes"), ["get"]);
    assert!(
        anon_doc["paths"]["/rest/v1/vault"].is_null(),
        "no privilege"
    );
    assert!(anon_doc["paths"]["/rest/v1/rpc/whoami"].is_object());
    let (_, a_doc) = send(s.get("/"), Some(&a)).await;
    assert_eq!(
        methods(&a_doc, "/rest/v1/notes"),
        ["delete", "get", "patch", "post"]
    );
    assert!(a_doc["paths"]["/rest/v1/vault"].is_null(), "no privilege");
    let (_, service_doc) = send(s.get("/"), Some(&service)).await;
    assert!(service_doc["paths"]["/rest/v1/vault"].is_object());

    let allow = |token: Option<String>| {
        let s = &s;
        async move {
            let mut request = s.client.request(reqwest::Method::OPTIONS, s.url("/notes"));
            if let Some(t) = token {
                request = request.bearer_auth(t);
            }
            let r = request.send().await.expect("options");
            r.headers()["allow"].to_str().expect("allow").to_string()
        }
    };
    assert_eq!(allow(None).await, "OPTIONS,GET,HEAD");
    assert_eq!(
        allow(Some(a.clone())).await,
        "OPTIONS,GET,HEAD,POST,PATCH,DELETE"
    );
}
