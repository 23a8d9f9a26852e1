//! Long-lived API keys (Supabase's anon and service-role keys) through a real server: a key is
//! a token of its client's role, accepted as a bearer token or in the `apikey` header as
//! Supabase's clients send it, valid for the days asked, and withdrawn with the client's secret
//! generation.

mod common;

use std::time::Duration;

use common::*;

const CONFIG: &str = r#"
[auth]
clients_poll_ms = 100

[[grants]]
role = "web"
tables = ["team"]
ops = ["select"]
"#;

async fn server(b: Backend) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), CONFIG, &[]).expect("config");
    TestServer::start_prepared(b, dir, config, "", |_| {}).await
}

async fn status_with(s: &TestServer, headers: &[(&str, &str)]) -> u16 {
    let mut request = s.get("/team?limit=1");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("get").status().as_u16()
}

async fn api_keys_act_as_their_role(b: Backend) {
    let s = server(b).await;
    rowgate::auth::clients::add(&s.app.db, &s.app.auth.secrets, "web", "web", 3600)
        .await
        .expect("client");
    let key = rowgate::auth::api_key(&s.app.db, &s.app.auth.tokens, "web", 3650)
        .await
        .expect("key");
    // ten years, not the hour of a client-credentials token
    let payload = key.split('.').nth(1).expect("payload");
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
            .expect("base64"),
    )
    .expect("claims");
    assert_eq!(
        claims["exp"].as_u64().expect("exp") - claims["iat"].as_u64().expect("iat"),
        3650 * 86_400
    );
    assert_eq!(claims["role"], "web");
    let bearer = format!("Bearer {key}");
    // the server learns of the new client within auth.clients_poll_ms
    for _ in 0..50 {
        if status_with(&s, &[("apikey", &key)]).await == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status_with(&s, &[]).await,
        401,
        "anonymous: nothing granted"
    );
    assert_eq!(
        status_with(&s, &[("apikey", &key)]).await,
        200,
        "apikey alone"
    );
    assert_eq!(
        status_with(&s, &[("apikey", &key), ("Authorization", &bearer)]).await,
        200,
        "as supabase-js sends it"
    );
    assert_eq!(status_with(&s, &[("apikey", "nope")]).await, 401);
    // a new secret generation, the old one retired: the key no longer works
    rowgate::auth::clients::rotate(&s.app.db, &s.app.auth.secrets, "web")
        .await
        .expect("rotate");
    rowgate::auth::clients::retire(&s.app.db, "web")
        .await
        .expect("retire");
    let mut refused = false;
    for _ in 0..50 {
        if status_with(&s, &[("apikey", &key)]).await == 401 {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "the withdrawn key is refused");
}

backend_tests!(api_keys_act_as_their_role);
