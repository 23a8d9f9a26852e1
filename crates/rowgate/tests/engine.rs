//! One engine under every front end (issue 40): the same operations through PostgREST's `/api`,
//! RPC, duality views, ORDS and ORDS's batch load, and realtime's document feeds, on SQLite and
//! PostgreSQL, see the same rows, the same schema change handled the same way, and (PostgreSQL)
//! the same `db.pre_request` hook told the same request.

mod common;

use common::ws::next;
use common::*;
use serde_json::{json, Value};

/// `[db]`: no polling (a schema change is found by the request that meets it), and the
/// pre-request hook a test names.
fn db(pre_request: &str) -> String {
    let hook = if pre_request.is_empty() {
        String::new()
    } else {
        format!("pre_request = \"{pre_request}\"\n")
    };
    format!("[db]\nschema_poll_ms = 3600000\n{hook}")
}

const CONFIG: &str = r#"
[ords]
sql_roles = ["analyst"]

[realtime]
tables = ["team"]
poll_ms = 100

[[grants]]
role = "watcher"
tables = ["team"]
ops = ["select"]

[[grants]]
role = "anon"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]
functions = ["*"]

[[resources]]
path = "/teams/{id}/name"
sql = "SELECT name FROM team WHERE team_id = :id"
roles = ["anon"]

[[duality_views]]
name = "team_dv"
table = "team"
document = "_id:team_id,name,points"
insert = ["team"]
update = ["team"]
delete = ["team"]
"#;

async fn server(b: Backend, setup: &str, pre_request: &str) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = format!("{}{CONFIG}", db(pre_request));
    let config = write_config(dir.path(), &toml, &[]).expect("config");
    TestServer::start_prepared(b, dir, config, setup, |_| {}).await
}

/// A request's status and JSON body (null when empty).
async fn answer(r: reqwest::RequestBuilder) -> (u16, Value) {
    let r = r.send().await.expect("send");
    let status = r.status().as_u16();
    let text = r.text().await.expect("text");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The names of teams `ids`, read through `/api`.
async fn names(s: &TestServer, ids: &str) -> Vec<String> {
    let (status, body) = get_json(
        s,
        &format!("/team?team_id=in.({ids})&select=name&order=team_id"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .expect("rows")
        .iter()
        .map(|r| r["name"].as_str().expect("name").to_string())
        .collect()
}

/// Reads, inserts, updates and deletes through each front end that offers them see and leave
/// the same rows; a table dropped behind the server's back is 404 through each, not a stale
/// plan's error.
async fn every_front_end_reads_and_writes_the_same_rows(b: Backend) {
    let s = server(
        b,
        "CREATE TABLE scratch (id INTEGER PRIMARY KEY);
         CREATE TABLE scratch2 (id INTEGER PRIMARY KEY);",
        "",
    )
    .await;
    let ords = |path: &str| s.root_url(&format!("/ords/rowgate{path}"));
    // the same row, read four ways
    let (_, rest) = get_json(&s, "/team?team_id=eq.1&select=name").await;
    let (_, item) = answer(s.client.get(ords("/team/1"))).await;
    let (_, document) = get_json(&s, "/team_dv/1").await;
    let (_, ords_document) = answer(s.client.get(ords("/team_dv/1"))).await;
    assert_eq!(rest, json!([{"name": "Mercedes"}]));
    // a realtime follower of the view's documents, read as a GET reads them
    let mut follower = ws::follow(s.addr, "team_dv", None).await;
    let (status, resource) = answer(s.client.get(s.root_url("/teams/1/name"))).await;
    assert_eq!(status, 200, "{resource}");
    assert_eq!(
        [
            &item["name"],
            &document["name"],
            &ords_document["name"],
            &resource[0]["name"]
        ],
        [&json!("Mercedes"); 4]
    );

    // an insert through each
    let (status, body) = answer(s.post(
        "/team",
        json!({"team_id": 901, "name": "Rest", "points": 0}),
    ))
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = answer(
        s.client
            .post(ords("/team/"))
            .json(&json!({"team_id": 902, "name": "Ords", "points": 0})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, report) = answer(
        s.client
            .post(ords("/team/batchload"))
            .header("content-type", "text/csv")
            .body("TEAM_ID,NAME,POINTS\n903,Batch,0\n"),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert!(
        report.as_str().is_some_and(|r| r.contains("SUCCESS")),
        "{report}"
    );
    let (status, body) = answer(s.post(
        "/team_dv",
        json!({"_id": 904, "name": "Document", "points": 0}),
    ))
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        names(&s, "901,902,903,904").await,
        ["Rest", "Ords", "Batch", "Document"]
    );
    // the follower was sent each new document, as a GET of it reads it
    for id in 901..=904 {
        let event = next(&mut follower).await;
        let (_, document) = get_json(&s, &format!("/team_dv/{id}")).await;
        assert_eq!(
            (&event["op"], &event["key"], &event["row"]),
            (&json!("insert"), &json!({"_id": id}), &document),
            "{event}"
        );
    }

    // updates and deletes
    let (status, _) = answer(s.patch("/team?team_id=eq.901", json!({"name": "Rest 2"}))).await;
    assert_eq!(status, 204);
    let (status, body) = answer(
        s.client
            .put(ords("/team/902"))
            .json(&json!({"team_id": 902, "name": "Ords 2", "points": 1})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = answer(
        s.client
            .patch(s.url("/team_dv/904"))
            .json(&json!({"name": "Document 2"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        names(&s, "901,902,903,904").await,
        ["Rest 2", "Ords 2", "Batch", "Document 2"]
    );
    let (status, _) = answer(s.delete("/team?team_id=eq.901")).await;
    assert_eq!(status, 204);
    let (status, _) = answer(s.client.delete(ords("/team/902"))).await;
    assert_eq!(status, 200);
    let (status, _) = answer(s.client.delete(s.url("/team_dv/904"))).await;
    assert_eq!(status, 204);
    assert_eq!(names(&s, "901,902,903,904").await, ["Batch"]);

    // a table the schema cache still lists, dropped: each front end plans again on the
    // reloaded schema and answers that it is not there
    let (status, _) = get_json(&s, "/scratch").await;
    assert_eq!(status, 200);
    s.exec("DROP TABLE scratch");
    let (status, body) = get_json(&s, "/scratch").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("PGRST205")),
        "{body}"
    );
    let (status, body) = answer(s.client.get(ords("/scratch2/"))).await;
    assert_eq!(status, 200, "{body}");
    s.exec("DROP TABLE scratch2");
    let (status, body) = answer(s.client.get(ords("/scratch2/"))).await;
    assert_eq!(
        (status, body["cause"]["code"].as_str()),
        (404, Some("PGRST205")),
        "{body}"
    );
}

backend_tests!(every_front_end_reads_and_writes_the_same_rows);

/// `db.pre_request` runs in every front end's transactions, after the request's settings: a hook
/// that refuses with what the database was told (`request.method`, `request.path`, the role
/// from `request.jwt.claims`) answers the same through `/api` (a table, a document, a call), a
/// custom resource and ORDS (a collection, an item, a document, a write, a batch load,
/// REST-enabled SQL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pre_request_runs_and_sees_the_request_in_every_front_end() {
    let setup = r#"
CREATE SCHEMA hooks;
CREATE TABLE hooks.switch (refuse boolean NOT NULL);
INSERT INTO hooks.switch VALUES (false);
CREATE FUNCTION team_count() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM team $$;
CREATE FUNCTION hooks.echo() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  -- a realtime document read tells the database the GET it stands for, and who reads
  IF (SELECT refuse FROM hooks.switch)
     AND current_setting('request.jwt.claims')::json ->> 'role' = 'watcher' THEN
    RAISE SQLSTATE 'PT403' USING MESSAGE = current_setting('request.method') || ' '
      || current_setting('request.path');
  END IF;
  IF current_setting('request.headers', true)::json ->> 'x-echo' = 'yes' THEN
    RAISE SQLSTATE 'PT409' USING MESSAGE = current_setting('request.method') || ' '
      || current_setting('request.path') || ' '
      || (current_setting('request.jwt.claims')::json ->> 'role');
  END IF;
END $$;
"#;
    let s = server(Backend::Postgres, setup, "hooks.echo").await;
    // without the header the hook lets every request through
    let (status, _) = get_json(&s, "/team?team_id=eq.1").await;
    assert_eq!(status, 200);
    let cases: Vec<(reqwest::RequestBuilder, &str)> = vec![
        (s.get("/team?team_id=eq.1"), "GET /api/team"),
        (
            s.post("/team", json!({"team_id": 950, "name": "X", "points": 0})),
            "POST /api/team",
        ),
        (s.get("/team_dv/1"), "GET /api/team_dv/1"),
        (s.get("/rpc/team_count"), "GET /api/rpc/team_count"),
        (
            s.client.get(s.root_url("/teams/1/name")),
            "GET /teams/1/name",
        ),
        (
            s.client.get(s.root_url("/ords/rowgate/team/")),
            "GET /ords/rowgate/team/",
        ),
        (
            s.client.get(s.root_url("/ords/rowgate/team/1")),
            "GET /ords/rowgate/team/1",
        ),
        (
            s.client.get(s.root_url("/ords/rowgate/team_dv/1")),
            "GET /ords/rowgate/team_dv/1",
        ),
        (
            s.client
                .post(s.root_url("/ords/rowgate/team/"))
                .json(&json!({"team_id": 951, "name": "Y", "points": 0})),
            "POST /ords/rowgate/team/",
        ),
    ];
    for (request, seen) in cases {
        let (status, body) = answer(request.header("x-echo", "yes")).await;
        assert_eq!(status, 409, "{seen}: {body}");
        assert_eq!(body["message"], format!("{seen} anon"), "{body}");
    }
    // REST-enabled SQL (an analyst's) reports the statement the hook refused
    let (_, token) = client_token(&s, "analyst", "analyst").await;
    let (status, report) = answer(
        s.client
            .post(s.root_url("/ords/rowgate/_/sql"))
            .bearer_auth(&token)
            .header("content-type", "application/sql")
            .header("x-echo", "yes")
            .body("SELECT 1 AS one"),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert!(
        report
            .to_string()
            .contains("POST /ords/rowgate/_/sql analyst"),
        "{report}"
    );
    // a batch load reports the batch the hook refused, and loads nothing
    let (status, report) = answer(
        s.client
            .post(s.root_url("/ords/rowgate/team/batchload"))
            .header("content-type", "text/csv")
            .header("x-echo", "yes")
            .body("team_id,name,points\n952,Z,0\n"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        report
            .as_str()
            .is_some_and(|r| r.contains("#ERROR Row 1: POST /ords/rowgate/team/batchload anon")),
        "{report}"
    );
    assert_eq!(
        s.int("SELECT count(*) FROM team WHERE team_id IN (950, 951, 952)"),
        0
    );

    // realtime document reads run the hook as the subscriber: the watcher's are refused once
    // the switch is on, the anonymous follower's are not
    let (_, watcher_token) = client_token(&s, "watcher", "watcher").await;
    let mut watcher = ws::follow(s.addr, "team_dv", Some(&watcher_token)).await;
    let mut anonymous = ws::follow(s.addr, "team_dv", None).await;
    let rename = |name: &str| s.patch("/team?team_id=eq.1", json!({ "name": name }));
    assert_eq!(answer(rename("Seen")).await.0, 204);
    for socket in [&mut watcher, &mut anonymous] {
        let event = next(socket).await;
        assert_eq!(event["row"]["name"], "Seen", "{event}");
    }
    s.exec("UPDATE hooks.switch SET refuse = true");
    assert_eq!(answer(rename("Refused")).await.0, 204);
    let event = next(&mut anonymous).await;
    assert_eq!(event["row"]["name"], "Refused", "{event}");
    assert_eq!(answer(rename("Last")).await.0, 204);
    let event = next(&mut anonymous).await;
    assert_eq!(event["row"]["name"], "Last", "{event}");
    // (the first change was read for every feed before the second was dispatched)
    let pending = tokio::time::timeout(std::time::Duration::from_millis(300), async {
        next(&mut watcher).await
    })
    .await;
    assert!(pending.is_err(), "the hook refused: {pending:?}");
}
