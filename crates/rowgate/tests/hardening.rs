//! Regression tests for what an attack run and a new user's first hour found (issue 13): each
//! test names the item it covers. Real servers on real ports; raw sockets where HTTP framing is
//! the point.

mod common;
use common::*;
use serde_json::json;

/// Items 7 and 8: a column renamed or a table dropped behind the server's back (the schema cache
/// not yet reloaded) never yields wrong rows or a 500: the request is planned again on the
/// reloaded schema.
async fn stale_schema_is_reloaded_not_misread(b: Backend) {
    let s = TestServer::start_prepared(
        b,
        tempfile::tempdir().expect("tempdir"),
        rowgate::config::Config::default(),
        "CREATE TABLE codes (id integer PRIMARY KEY, code text);
         INSERT INTO codes VALUES (1, 'a'), (2, 'b'), (3, 'code');",
        |c| c.db.schema_poll_ms = 0,
    )
    .await;
    let (status, body) = get_json(&s, "/codes?select=id,code&order=id").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[2], json!({"id": 3, "code": "code"}));

    s.exec("ALTER TABLE codes RENAME COLUMN code TO code2");
    for path in [
        "/codes?select=id,code",
        "/codes?code=eq.code",
        "/codes?order=code",
    ] {
        let r = s.get(path).send().await.expect("request");
        assert_error(r, 400, "PGRST204").await;
    }
    let r = s
        .patch("/codes?code=eq.a", json!({"code": "z"}))
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "PGRST204").await;
    let (status, body) = get_json(&s, "/codes?select=id,code2&code2=eq.b").await;
    assert_eq!((status, body), (200, json!([{"id": 2, "code2": "b"}])));

    s.exec("DROP TABLE codes");
    let r = s.get("/codes").send().await.expect("request");
    assert_error(r, 404, "PGRST205").await;
    let r = s
        .post("/codes", json!({"id": 9, "code2": "x"}))
        .send()
        .await
        .expect("request");
    assert_error(r, 404, "PGRST205").await;
}

/// Item 10: a form body or query string that does not decode to UTF-8 is refused, not stored
/// with U+FFFD in place of the bytes.
async fn form_bodies_must_be_utf8(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .client
        .post(s.url("/team"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("name=%ff%fe&points=1")
        .send()
        .await
        .expect("request");
    let body = assert_error(r, 400, "PGRST102").await;
    assert!(body["message"].as_str().unwrap_or("").contains("UTF-8"));
    assert_eq!(
        s.int("SELECT count(*) FROM team WHERE points = 1 AND team_id > 10"),
        0
    );
    // A real U+FFFD, percent-encoded as UTF-8, is text like any other.
    let r = s
        .client
        .post(s.url("/team"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("name=%EF%BF%BD&points=1")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    let r = s.get("/team?name=eq.%ff").send().await.expect("request");
    assert_error(r, 400, "PGRST100").await;
}

backend_tests!(
    stale_schema_is_reloaded_not_misread,
    form_bodies_must_be_utf8
);
