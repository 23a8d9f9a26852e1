//! People's accounts (issue 42): Supabase Auth's API at `/auth/v1`, driven by the real
//! supabase-js client (clients/js/supabase_auth.mjs) on both backends. On PostgreSQL the
//! accounts live in Supabase's `auth.users` and its siblings and a row-level security policy
//! (`owner = auth.uid()`) decides what each person reads; on SQLite a `[[grants]]` row filter
//! (`owner=eq.@sub`) does. Tokens are signed with the project's JWT secret, as Supabase's, so
//! the project's anon and service-role keys work beside them.

mod common;

use common::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const SECRET: &str = "super-secret-jwt-token-with-at-least-32-characters-long";

/// (the grants are SQLite's: on PostgreSQL the database's own decide)
const CONFIG: &str = r#"
[rest]
prefix = "/rest/v1"

[accounts]
enabled = true
issuer = "supabase"
# a reused refresh token ends its session at once (the default forgives 10 s)
refresh_reuse_interval_s = 0
# cheap hashes for the test (the defaults are OWASP's 19 MiB, 2 passes)
argon2_memory_kib = 1024
argon2_iterations = 1

[[auth.external]]
issuer = "supabase"
secret_file = "jwt.secret"
"#;

const SQLITE_GRANTS: &str = r#"
[[grants]]
role = "authenticated"
tables = ["notes"]
ops = ["select", "insert"]
filter = "owner=eq.@sub"

[[grants]]
role = "authenticated"
tables = ["vault"]
ops = ["select"]
filter = "level=eq.@aal"
"#;

/// (`vault` is read only by a session that passed a second factor)
const SQLITE_SCHEMA: &str =
    "CREATE TABLE notes (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, body TEXT NOT NULL);
     CREATE TABLE vault (id INTEGER PRIMARY KEY, level TEXT NOT NULL, body TEXT NOT NULL);
     INSERT INTO vault VALUES (1, 'aal2', 'after a second factor');";

const POSTGRES_SCHEMA: &str = r#"
CREATE TABLE notes (id int PRIMARY KEY, owner uuid NOT NULL, body text NOT NULL);
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON notes TO authenticated
  USING (owner = auth.uid()) WITH CHECK (owner = auth.uid());
GRANT SELECT, INSERT ON notes TO authenticated;
CREATE TABLE vault (id int PRIMARY KEY, level text NOT NULL, body text NOT NULL);
INSERT INTO vault VALUES (1, 'aal2', 'after a second factor');
ALTER TABLE vault ENABLE ROW LEVEL SECURITY;
CREATE POLICY second_factor ON vault TO authenticated USING (auth.jwt() ->> 'aal' = 'aal2');
GRANT SELECT ON vault TO authenticated;
"#;

/// A key of the project for `role` (Supabase's anon and service-role keys carry no `sub`).
fn key(role: &str) -> String {
    let now = jsonwebtoken::get_current_timestamp();
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"iss": "supabase", "role": role, "iat": now, "exp": now + 3600}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("sign")
}

async fn server(backend: Backend) -> TestServer {
    server_with(backend, "").await
}

/// A server whose configuration has `more` at the end of `[accounts]`.
async fn server_with(backend: Backend, more: &str) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("jwt.secret"), SECRET).expect("secret");
    let postgres = matches!(backend, Backend::Postgres);
    let config = CONFIG.replace(
        "argon2_iterations = 1\n",
        &format!("argon2_iterations = 1\n{more}\n"),
    );
    let toml = if postgres {
        config
    } else {
        format!("{config}{SQLITE_GRANTS}")
    };
    let config = write_config(dir.path(), &toml, &[]).expect("config");
    let setup = if postgres {
        format!(
            "{}\n{POSTGRES_SCHEMA}",
            rowgate::db::supabase_compat::statements(None)
        )
    } else {
        SQLITE_SCHEMA.to_string()
    };
    TestServer::start_prepared(backend, dir, config, &setup, move |c| {
        c.auth.database_roles = postgres;
    })
    .await
}

/// What `script` of clients/js printed, run by Node with `env`.
async fn node<const N: usize>(script: &'static str, env: [(&'static str, String); N]) -> Value {
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_client_with(std::path::Path::new("node"), js_clients(), script, &env)
    })
    .await
    .expect("client")
}

/// The whole supabase-js run on `backend`; its results.
async fn supabase_js(backend: Backend) -> (TestServer, Value) {
    let s = server(backend).await;
    let results = node("supabase_auth.mjs", client_env(&s)).await;
    (s, results)
}

/// What the supabase-js scripts are told: the server and the project's two keys.
fn client_env(s: &TestServer) -> [(&'static str, String); 4] {
    [
        // (supabase-js builds its realtime client, which wants Node's WebSocket)
        ("NODE_OPTIONS", "--experimental-websocket".to_string()),
        ("ROWGATE_ROOT", s.root_url("")),
        ("ROWGATE_ANON_KEY", key("anon")),
        ("ROWGATE_SERVICE_KEY", key("service_role")),
    ]
}

/// What supabase-js must see on either backend.
fn check(r: &Value) {
    assert_eq!(
        r["signUp"],
        json!({"error": null, "email": "ann@example.com", "name": "Ann", "session": true,
               "role": "authenticated"}),
        "{r}"
    );
    assert_eq!(
        (&r["inserts"][0], &r["inserts"][1]),
        (&json!(201), &json!(201)),
        "{r}"
    );
    assert!(
        r["inserts"][2].as_u64().is_some_and(|s| s >= 400),
        "a note for someone else is refused: {r}"
    );
    assert_eq!(
        r["reads"],
        json!({"ann": ["ann's"], "bob": ["bob's"]}),
        "{r}"
    );
    // an unknown email and a wrong password: one answer
    assert_eq!(r["wrongPassword"], r["unknownEmail"], "{r}");
    assert_eq!(
        (&r["wrongPassword"]["status"], &r["wrongPassword"]["code"]),
        (&json!(400), &json!("invalid_credentials")),
        "{r}"
    );
    assert_eq!(r["signIn"], json!({"error": null, "session": true}), "{r}");
    assert_eq!(
        r["refresh"],
        json!({"error": null, "rotated": true, "sameUser": true}),
        "{r}"
    );
    assert_eq!(
        r["getUser"],
        json!({"error": null, "email": "ann@example.com"}),
        "{r}"
    );
    assert_eq!(r["readsAfterRefresh"], json!(["ann's"]), "{r}");
    // a replayed refresh token ends its session: the token that replaced it fails too
    assert_eq!(
        (
            &r["reuse"]["replay"]["status"],
            &r["reuse"]["replay"]["body"]["error_code"]
        ),
        (&json!(400), &json!("refresh_token_already_used")),
        "{r}"
    );
    assert_eq!(
        r["reuse"]["successor"]["body"]["error_code"],
        json!("refresh_token_not_found"),
        "{r}"
    );
    assert_eq!(r["updateUser"]["error"], Value::Null, "{r}");
    assert_eq!(
        r["updateUser"]["metadata"],
        json!({"name": "Ann", "city": "Oslo", "email_verified": true}),
        "{r}"
    );
    assert_eq!(
        (&r["samePassword"]["status"], &r["samePassword"]["code"]),
        (&json!(422), &json!("same_password")),
        "{r}"
    );
    assert_eq!(
        r["oldPassword"]["code"],
        json!("invalid_credentials"),
        "{r}"
    );
    assert_eq!(r["newPassword"], json!({"error": null}), "{r}");
    assert_eq!(r["signOut"], Value::Null, "{r}");
    for session in ["thisSession", "otherSession"] {
        assert_eq!(
            r["afterSignOut"][session]["body"]["error_code"],
            json!("refresh_token_not_found"),
            "{session}: {r}"
        );
    }
    assert_eq!(
        r["afterSignOut"]["getUser"]["name"],
        json!("AuthSessionMissingError"),
        "{r}"
    );
    let events: Vec<&str> = r["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for event in ["SIGNED_IN", "TOKEN_REFRESHED", "USER_UPDATED", "SIGNED_OUT"] {
        assert!(events.contains(&event), "{event} in {events:?}");
    }
    assert_eq!(
        (
            &r["weak"]["name"],
            &r["weak"]["status"],
            &r["weak"]["reasons"]
        ),
        (
            &json!("AuthWeakPasswordError"),
            &json!(422),
            &json!(["length"])
        ),
        "{r}"
    );
    assert_eq!(r["duplicate"]["code"], json!("user_already_exists"), "{r}");
    assert_eq!(r["badEmail"]["code"], json!("validation_failed"), "{r}");
    assert_eq!(
        (&r["malformed"]["status"], &r["malformed"]["body"]["code"]),
        (&json!(400), &json!("bad_json")),
        "{r}"
    );
    assert_eq!(r["oversized"]["code"], json!("validation_failed"), "{r}");
    assert_eq!(
        (&r["adminList"]["count"], &r["adminList"]["error"]),
        (&json!(1), &Value::Null),
        "{r}"
    );
    assert!(
        r["adminList"]["total"].as_u64().is_some_and(|n| n >= 2),
        "{r}"
    );
    assert_eq!(
        r["adminCreate"],
        json!({"error": null, "email": "made@example.com"}),
        "{r}"
    );
    assert_eq!(r["adminBan"], json!({"error": null, "banned": true}), "{r}");
    assert_eq!(r["bannedSignIn"]["code"], json!("user_banned"), "{r}");
    assert_eq!(r["adminDelete"], Value::Null, "{r}");
    assert_eq!(
        (&r["notAdmin"]["status"], &r["notAdmin"]["code"]),
        (&json!(403), &json!("not_admin")),
        "{r}"
    );
}

/// supabase-js against accounts on SQLite, a `[[grants]]` row filter on the user's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_supabase_js_accounts() {
    let (s, results) = supabase_js(Backend::Sqlite).await;
    check(&results);
    // refresh tokens are kept as hashes, never as themselves
    let tokens = s.rows("SELECT token FROM _rowgate_auth_refresh_tokens");
    assert!(!tokens.is_empty());
    for token in tokens {
        let token = token[0].clone().unwrap_or_default();
        assert!(
            token.len() == 64 && token.chars().all(|c| c.is_ascii_hexdigit()),
            "{token}"
        );
    }
    // passwords as Argon2id
    for hash in s.rows("SELECT encrypted_password FROM _rowgate_auth_users") {
        let hash = hash[0].clone().unwrap_or_default();
        assert!(hash.starts_with("$argon2id$v=19$m=1024,t=1,p=1$"), "{hash}");
    }
}

/// supabase-js against accounts on PostgreSQL, in Supabase's `auth` tables, under a
/// row-level security policy on `auth.uid()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_supabase_js_accounts() {
    let (s, results) = supabase_js(Backend::Postgres).await;
    check(&results);
    // in Supabase's shapes: the users GoTrue would read, with their email identities
    assert_eq!(
        s.int(
            "SELECT count(*) FROM auth.users u JOIN auth.identities i ON i.user_id = u.id \
             AND i.provider = 'email' WHERE u.instance_id = '00000000-0000-0000-0000-000000000000' \
             AND u.aud = 'authenticated' AND u.email_confirmed_at IS NOT NULL"
        ),
        2,
        "ann and bob (the admin's account was deleted)"
    );
    assert_eq!(
        s.int("SELECT count(*) FROM auth.refresh_tokens WHERE length(token) <> 64"),
        0,
        "refresh tokens kept as hashes"
    );
}

/// A second factor (TOTP) through supabase-js on `backend`: what it must see.
async fn second_factor(backend: Backend) {
    let s = server(backend).await;
    let r = node("supabase_mfa.mjs", client_env(&s)).await;
    let level = |current: &str, next: &str, methods: &[&str]| json!({"error": null, "current": current, "next": next, "methods": methods});
    let refusal = |status: u16, code: &str| (json!(status), json!(code));
    let refused = |v: &Value| (v["status"].clone(), v["code"].clone());
    assert_eq!(
        r["before"],
        json!({"level": level("aal1", "aal1", &["password"]), "vault": []}),
        "{r}"
    );
    assert_eq!(
        r["enroll"],
        json!({"error": null, "type": "totp", "name": "phone", "qr": true,
               "issuer": "localhost", "label": "carol@example.com", "secretMatches": true,
               "period": 30, "digits": 6, "algorithm": "SHA1"}),
        "{r}"
    );
    assert_eq!(
        refused(&r["sameName"]),
        refusal(422, "mfa_factor_name_conflict"),
        "{r}"
    );
    assert_eq!(
        r["unverifiedListed"],
        json!({"all": [["phone", "unverified"]], "totp": 0}),
        "{r}"
    );
    assert_eq!(
        refused(&r["wrongCode"]),
        refusal(422, "mfa_verification_failed"),
        "{r}"
    );
    assert_eq!(r["challenge"]["type"], "totp", "{r}");
    let expires_in = r["challenge"]["expiresIn"].as_i64().unwrap_or(0);
    assert!((298..=301).contains(&expires_in), "{r}");
    assert_eq!(
        r["verify"],
        json!({"error": null, "aal": "aal2", "amr": ["totp", "password"]}),
        "{r}"
    );
    assert_eq!(
        r["after"],
        json!({"level": level("aal2", "aal2", &["totp", "password"]),
               "vault": ["after a second factor"]}),
        "{r}"
    );
    assert_eq!(
        refused(&r["replay"]),
        refusal(422, "mfa_verification_failed"),
        "{r}"
    );
    assert_eq!(
        r["refreshed"],
        json!({"error": null, "aal": "aal2", "vault": ["after a second factor"]}),
        "{r}"
    );
    assert_eq!(
        r["secondSignIn"],
        json!({"level": level("aal1", "aal2", &["password"]), "vault": []}),
        "{r}"
    );
    assert_eq!(
        refused(&r["enrollAtAal1"]),
        refusal(403, "insufficient_aal"),
        "{r}"
    );
    assert_eq!(
        refused(&r["unenrollAtAal1"]),
        refusal(422, "insufficient_aal"),
        "{r}"
    );
    assert_eq!(
        r["secondVerify"],
        json!({"error": null, "level": level("aal2", "aal2", &["totp", "password"])}),
        "{r}"
    );
    assert_eq!(
        refused(&r["badChallenge"]),
        refusal(400, "validation_failed"),
        "{r}"
    );
    assert_eq!(
        r["adminList"],
        json!({"error": null, "factors": [[true, "totp", "verified"]]}),
        "{r}"
    );
    assert_eq!(r["unenroll"], json!({"error": null, "id": true}), "{r}");
    assert_eq!(
        r["afterUnenroll"],
        json!({"level": level("aal1", "aal1", &["password"]), "vault": []}),
        "{r}"
    );
    assert_eq!(r["factorsLeft"], json!([]), "{r}");
    assert_eq!(
        refused(&r["unknownFactor"]),
        refusal(404, "mfa_factor_not_found"),
        "{r}"
    );
    assert_eq!(
        refused(&r["phone"]),
        refusal(422, "mfa_phone_enroll_not_enabled"),
        "{r}"
    );
    // what is left in the tables: no factor, no challenge (SQLite has no cascades), and every
    // session back at aal1
    let (factors, challenges, sessions) = match backend {
        Backend::Postgres => ("auth.mfa_factors", "auth.mfa_challenges", "auth.sessions"),
        Backend::Sqlite => (
            "_rowgate_auth_mfa_factors",
            "_rowgate_auth_mfa_challenges",
            "_rowgate_auth_sessions",
        ),
    };
    for table in [factors, challenges] {
        assert_eq!(
            s.int(&format!("SELECT count(*) FROM {table}")),
            0,
            "{table}"
        );
    }
    assert_eq!(
        s.int(&format!(
            "SELECT count(*) FROM {sessions} WHERE aal <> 'aal1' OR factor_id IS NOT NULL"
        )),
        0,
        "every session fell back to aal1 with the factor gone"
    );
}

/// TOTP second factors on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_second_factor() {
    second_factor(Backend::Sqlite).await;
}

/// TOTP second factors on PostgreSQL, in Supabase's `auth.mfa_factors` and
/// `auth.mfa_challenges`, a row-level security policy reading the token's `aal`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_second_factor() {
    second_factor(Backend::Postgres).await;
}

/// An existing Supabase project's people sign in with the passwords they have (bcrypt hashes
/// in `auth.users`), which are then replaced by Argon2id hashes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_supabase_bcrypt_accounts_sign_in() {
    let s = server(Backend::Postgres).await;
    let hash = bcrypt::hash("from supabase 1", 4).expect("bcrypt");
    s.exec(&format!(
        "INSERT INTO auth.users (instance_id, id, aud, role, email, encrypted_password, \
         email_confirmed_at, raw_app_meta_data, raw_user_meta_data, created_at, updated_at) \
         VALUES ('00000000-0000-0000-0000-000000000000', '11111111-1111-4111-8111-111111111111', \
         'authenticated', 'authenticated', 'old@example.com', '{hash}', now(), \
         '{{\"provider\":\"email\",\"providers\":[\"email\"]}}', '{{}}', now(), now())"
    ));
    let client = reqwest::Client::new();
    let sign_in = |password: &str| {
        client
            .post(s.root_url("/auth/v1/token?grant_type=password"))
            .json(&json!({"email": "old@example.com", "password": password}))
            .send()
    };
    let wrong = sign_in("not it").await.expect("send");
    assert_eq!(wrong.status(), 400);
    let right = sign_in("from supabase 1").await.expect("send");
    assert_eq!(right.status(), 200);
    let session: Value = right.json().await.expect("json");
    assert_eq!(
        session["user"]["id"],
        json!("11111111-1111-4111-8111-111111111111")
    );
    // the session's token reads as that user through the policy's auth.uid()
    s.exec(
        "INSERT INTO notes VALUES (1, '11111111-1111-4111-8111-111111111111', 'old note'), \
         (2, '22222222-2222-4222-8222-222222222222', 'not theirs')",
    );
    let notes: Value = client
        .get(s.root_url("/rest/v1/notes?select=body"))
        .bearer_auth(session["access_token"].as_str().expect("token"))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(notes, json!([{"body": "old note"}]));
    let stored =
        s.rows("SELECT encrypted_password FROM auth.users WHERE email = 'old@example.com'");
    let stored = stored[0][0].clone().unwrap_or_default();
    assert!(stored.starts_with("$argon2id$"), "rehashed: {stored}");
    assert_eq!(
        sign_in("from supabase 1").await.expect("send").status(),
        200
    );
}

/// Bad input gets GoTrue's errors, in the envelope the client asks for, never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_in_gotrue_envelopes() {
    let s = server(Backend::Sqlite).await;
    let client = reqwest::Client::new();
    let post = |path: &str, body: &str, newer: bool| {
        let mut request = client
            .post(s.root_url(&format!("/auth/v1{path}")))
            .header("content-type", "application/json")
            .body(body.to_string());
        if newer {
            request = request.header("x-supabase-api-version", "2024-01-01");
        }
        request.send()
    };
    let cases: &[(&str, &str, u16, &str)] = &[
        ("/signup", "[1, 2]", 400, "bad_json"),
        ("/signup", "{\"email\": 5}", 400, "bad_json"),
        (
            "/signup",
            "{\"email\": \"x@example.com\"}",
            400,
            "validation_failed",
        ),
        ("/signup", "{}", 422, "anonymous_provider_disabled"),
        ("/token?grant_type=password", "{}", 400, "validation_failed"),
        ("/token?grant_type=magic", "{}", 400, "invalid_credentials"),
        (
            "/token?grant_type=refresh_token",
            "{}",
            400,
            "validation_failed",
        ),
        (
            "/token?grant_type=refresh_token",
            "{\"refresh_token\": \"never-issued\"}",
            400,
            "refresh_token_not_found",
        ),
        ("/logout", "", 401, "no_authorization"),
        // (no accounts.smtp_url here)
        (
            "/recover",
            "{\"email\": \"x@example.com\"}",
            422,
            "email_provider_disabled",
        ),
        ("/resend", "{}", 501, "not_implemented"),
        ("/nowhere", "{}", 404, "not_found"),
    ];
    for (path, body, status, code) in cases {
        let old = post(path, body, false).await.expect("send");
        assert_eq!(old.status().as_u16(), *status, "{path} {body}");
        assert_eq!(
            old.headers()["x-sb-error-code"].to_str().expect("code"),
            *code
        );
        let old: Value = old.json().await.expect("json");
        assert_eq!(
            (&old["code"], &old["error_code"]),
            (&json!(status), &json!(code)),
            "{path} {body}: {old}"
        );
        let new = post(path, body, true).await.expect("send");
        assert_eq!(
            new.headers()["x-supabase-api-version"]
                .to_str()
                .expect("version"),
            "2024-01-01"
        );
        let new: Value = new.json().await.expect("json");
        assert_eq!(new["code"], json!(code), "{path} {body}: {new}");
        assert!(new["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // a method the endpoint does not take
    let r = client
        .delete(s.root_url("/auth/v1/signup"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    // a token of another issuer is not a person's
    let r = client
        .get(s.root_url("/auth/v1/user"))
        .bearer_auth(key("service_role"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error_code"], json!("bad_jwt"));
}

/// A local SMTP sink (clients/smtp's aiosmtpd) writing each message it receives into a folder.
struct SmtpSink {
    port: u16,
    folder: tempfile::TempDir,
    process: std::process::Child,
}

impl SmtpSink {
    fn start() -> SmtpSink {
        use std::io::BufRead as _;
        let dir = venv("smtp");
        let folder = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut process = std::process::Command::new(dir.join(".venv/bin/python"))
            .arg("sink.py")
            .arg(port.to_string())
            .arg(folder.path())
            .current_dir(&dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the SMTP sink");
        let mut ready = String::new();
        std::io::BufReader::new(process.stdout.take().expect("stdout"))
            .read_line(&mut ready)
            .expect("the sink's first line");
        assert_eq!(ready.trim(), "ready", "the SMTP sink did not start");
        SmtpSink {
            port,
            folder,
            process,
        }
    }

    /// The messages received so far.
    fn count(&self) -> usize {
        std::fs::read_dir(self.folder.path())
            .expect("maildir")
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "eml"))
            .count()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Accounts confirmed by email through supabase-js, against a local SMTP sink: the code
/// confirms once, a magic link followed as a browser does lands in the app signed in, a
/// recovery leads to a new password, an old code is refused, and nothing tells who has an
/// account (a taken address at sign-up, an unknown one at recovery).
async fn emails(backend: Backend) {
    let sink = SmtpSink::start();
    let s = server_with(
        backend,
        &format!(
            "autoconfirm = false\nsmtp_url = \"smtp://127.0.0.1:{}\"\n\
             site_url = \"http://app.example.com/welcome\"\notp_exp_s = 2\nemail_every_s = 0\n\
             external_url = \"https://api.example.com\"",
            sink.port
        ),
    )
    .await;
    let env = [
        ("NODE_OPTIONS", "--experimental-websocket".to_string()),
        ("ROWGATE_ROOT", s.root_url("")),
        ("ROWGATE_ANON_KEY", key("anon")),
        ("ROWGATE_MAILDIR", sink.folder.path().display().to_string()),
    ];
    let r = node("supabase_auth_email.mjs", env).await;
    assert_eq!(
        r["signUp"],
        json!({"error": null, "session": null, "email": "cat@example.com", "confirmed": false,
               "identities": 1}),
        "{r}"
    );
    assert_eq!(
        r["confirmationMail"],
        json!({"subject": "Confirm Your Signup", "code": true, "link": true}),
        "{r}"
    );
    assert_eq!(
        r["beforeConfirming"]["code"],
        json!("email_not_confirmed"),
        "{r}"
    );
    assert_eq!(
        r["confirm"],
        json!({"error": null, "session": true, "confirmed": true}),
        "{r}"
    );
    assert_eq!(
        (&r["confirmAgain"]["status"], &r["confirmAgain"]["code"]),
        (&json!(403), &json!("otp_expired")),
        "a code is good once: {r}"
    );
    assert_eq!(r["signIn"], Value::Null, "{r}");
    assert_eq!(r["otp"], Value::Null, "{r}");
    assert_eq!(
        r["magicMail"],
        json!({"subject": "Your Magic Link", "code": true}),
        "{r}"
    );
    assert_eq!(
        r["magicLink"],
        json!({"status": 303, "toApp": true, "type": "magiclink", "tokenType": "bearer",
               "refresh": true, "user": "cat@example.com"}),
        "{r}"
    );
    assert_eq!(
        r["magicLinkAgain"],
        json!({"status": 303, "error": "access_denied", "code": "otp_expired"}),
        "a link is good once: {r}"
    );
    assert_eq!(r["unknownOtp"]["code"], json!("otp_disabled"), "{r}");
    assert_eq!(r["recover"], Value::Null, "{r}");
    assert_eq!(
        r["recoveryMail"],
        json!({"subject": "Reset Your Password", "code": true}),
        "{r}"
    );
    assert_eq!(
        r["recovered"],
        json!({"error": null, "session": true}),
        "{r}"
    );
    assert_eq!(r["newPassword"], Value::Null, "{r}");
    assert_eq!(r["signInNew"], Value::Null, "{r}");
    assert_eq!(r["recoverUnknown"], Value::Null, "the same answer: {r}");
    assert_eq!(
        r["emailChange"],
        json!({"error": null, "email": "cat@example.com", "newEmail": "kat@example.com"}),
        "{r}"
    );
    assert_eq!(
        r["changeMail"],
        json!({"subject": "Confirm Change Of Email", "code": true}),
        "{r}"
    );
    assert_eq!(
        r["moved"],
        json!({"error": null, "email": "kat@example.com"}),
        "{r}"
    );
    assert_eq!(r["signInMoved"], Value::Null, "{r}");
    assert_eq!(r["signInOld"]["code"], json!("invalid_credentials"), "{r}");
    assert_eq!(
        r["signUpTaken"],
        json!({"error": null, "session": null, "identities": []}),
        "{r}"
    );
    assert_eq!(
        (&r["expired"]["status"], &r["expired"]["code"]),
        (&json!(403), &json!("otp_expired")),
        "{r}"
    );
    // the confirmation, the magic link, the recovery, two changes of address and the late
    // code: no email for an unknown or taken address
    assert_eq!(r["mails"], json!({"sent": 6, "afterMagicLink": 5}), "{r}");
    assert_eq!(sink.count(), 6);
    let events: Vec<&str> = r["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        events.contains(&"recovering:PASSWORD_RECOVERY"),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_accounts_by_email() {
    emails(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_accounts_by_email() {
    emails(Backend::Postgres).await;
}

/// Failed sign-ins are counted per email and client address (and per address): ten wrong
/// passwords from one address block that address for the account, not the account's owner
/// signing in from another (the addresses told by a trusted proxy's X-Forwarded-For).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sign_ins_lock_no_one_else_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("jwt.secret"), SECRET).expect("secret");
    let config =
        write_config(dir.path(), &format!("{CONFIG}{SQLITE_GRANTS}"), &[]).expect("config");
    let s = TestServer::start_prepared(Backend::Sqlite, dir, config, SQLITE_SCHEMA, |c| {
        c.trusted_proxies = vec!["127.0.0.1".into()];
    })
    .await;
    let client = reqwest::Client::new();
    let signed = client
        .post(s.root_url("/auth/v1/signup"))
        .json(&json!({"email": "own@example.com", "password": "the right one 1"}))
        .send()
        .await
        .expect("sign up");
    assert_eq!(signed.status(), 200);
    let sign_in = |from: &'static str, password: &'static str| {
        client
            .post(s.root_url("/auth/v1/token?grant_type=password"))
            .header("x-forwarded-for", from)
            .json(&json!({"email": "own@example.com", "password": password}))
            .send()
    };
    for _ in 0..10 {
        assert_eq!(
            sign_in("10.0.0.1", "a guess").await.expect("send").status(),
            400
        );
    }
    let blocked = sign_in("10.0.0.1", "the right one 1").await.expect("send");
    assert_eq!(blocked.status(), 429);
    let body: Value = blocked.json().await.expect("json");
    assert_eq!(body["error_code"], json!("over_request_rate_limit"));
    // the owner, elsewhere
    assert_eq!(
        sign_in("10.0.0.2", "the right one 1")
            .await
            .expect("send")
            .status(),
        200
    );
}

/// Emailed links lead to `accounts.external_url`: a server that sends email refuses to start
/// without one (a link built from a request's Host header could be pointed elsewhere).
#[test]
fn email_needs_an_external_url() {
    let mut config = rowgate::config::Config::default();
    config.accounts.enabled = true;
    config.accounts.smtp_url = "smtp://127.0.0.1:25".into();
    let refused = config.validate().expect_err("no external_url").to_string();
    assert!(refused.contains("accounts.external_url"), "{refused}");
    config.accounts.external_url = "https://api.example.com".into();
    config.validate().expect("with one");
}
