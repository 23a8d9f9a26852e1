//! The OpenAPI document describes what the server takes, on both backends: a request the
//! document calls valid is accepted and one it calls invalid is refused (what schemathesis
//! checks), shown here on the parts that carry it: typed item keys, filter patterns per column
//! type, CHECK bounds, write bodies closed to unknown columns, an error response on every
//! operation, the security schemes Swagger UI authorizes with, and keys noted as PostgREST
//! notes them.

mod common;

use common::{Backend, TestServer};
use serde_json::{json, Value};

async fn document(s: &TestServer) -> Value {
    s.get("/")
        .send()
        .await
        .expect("openapi")
        .json()
        .await
        .expect("json")
}

/// The pattern of `param` among an operation's parameters, compiled.
fn pattern(operation: &Value, param: &str) -> regex::Regex {
    let found = operation["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == param)
        .unwrap_or_else(|| panic!("no parameter {param} in {operation}"));
    regex::Regex::new(found["schema"]["pattern"].as_str().expect("a pattern")).expect("regex")
}

async fn the_document_describes_what_the_server_takes(b: Backend) {
    let s = TestServer::start(b).await;
    let doc = document(&s).await;
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["apikey"]["in"], "header");
    // every operation has the error envelope for what it does not list
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("operations") {
            assert!(
                operation["responses"]["default"].is_object(),
                "{method} {path} lists no default response"
            );
        }
    }
    // an integer key is typed as one (and a key that is not one is refused)
    let key = &doc["paths"]["/api/team/{key}"]["get"]["parameters"][0]["schema"];
    assert_eq!(key["type"], "integer");
    let status = s.get("/team/abc").send().await.expect("get").status();
    assert_eq!(status, 400);
    // keys described as PostgREST does (clients read these notes), the declared type in format
    let driver = &doc["components"]["schemas"]["driver"]["properties"];
    assert_eq!(
        driver["driver_id"]["description"],
        "Note:\nThis is a Primary Key.<pk/>"
    );
    assert_eq!(
        driver["team_id"]["description"],
        "Note:\nThis is a Foreign Key to `team.team_id`.<fk table='team' column='team_id'/>"
    );
    assert_eq!(
        driver["team_id"]["format"].as_str().map(str::to_lowercase),
        Some("integer".to_string())
    );
    assert!(
        driver["name"]["description"].is_null(),
        "{}",
        driver["name"]
    );
    // a CHECK constraint's bound
    let salary = &doc["components"]["schemas"]["employee"]["properties"]["salary"];
    assert_eq!(salary["exclusiveMinimum"], 0.0, "{salary}");
    // filters: the pattern takes what the server takes and refuses what it refuses
    let read = &doc["paths"]["/api/team"]["get"];
    let points = pattern(read, "points");
    for (value, valid) in [
        ("gt.5", true),
        ("in.(1,2)", true),
        ("is.null", true),
        ("5", false),
        ("eq.x", false),
    ] {
        assert_eq!(points.is_match(value), valid, "points={value}");
        let status = s
            .get(&format!("/team?points={value}"))
            .send()
            .await
            .expect("get")
            .status();
        assert_eq!(status.is_success(), valid, "points={value}: {status}");
    }
    let select = pattern(read, "select");
    assert!(select.is_match("name,points") && !select.is_match("nope"));
    // a write body is closed to unknown columns, as the server is
    let post = &doc["paths"]["/api/team"]["post"]["requestBody"]["content"]["application/json"];
    assert_eq!(post["schema"]["oneOf"][0]["additionalProperties"], false);
    let status = s
        .post("/team", serde_json::json!({"name": "X", "nope": 1}))
        .send()
        .await
        .expect("post")
        .status();
    assert_eq!(status, 400);
    // an array's objects all have the same keys: each optional column in all or in none
    let same_keys = &post["schema"]["oneOf"][1]["allOf"];
    assert!(
        same_keys
            .as_array()
            .expect("allOf")
            .iter()
            .any(|k| k["anyOf"][0]["items"]["required"] == json!(["points"])),
        "{same_keys}"
    );
    for (rows, created) in [
        (json!([{"name": "Same A"}, {"name": "Same B"}]), true),
        (
            json!([{"name": "Differ A"}, {"name": "Differ B", "points": 1}]),
            false,
        ),
    ] {
        let status = s.post("/team", rows).send().await.expect("post").status();
        assert_eq!(status.is_success(), created, "{status}");
    }
    // SQLite's rowid is assigned for a null key; PostgreSQL's identity column refuses a null
    let team_id = &post["schema"]["oneOf"][0]["properties"]["team_id"];
    let rowid = b == Backend::Sqlite;
    assert_eq!(
        team_id["type"] == json!(["integer", "null"]),
        rowid,
        "{team_id}"
    );
    let status = s
        .post("/team", json!({"team_id": null, "name": "Null Key"}))
        .send()
        .await
        .expect("post")
        .status();
    assert_eq!(status.is_success(), rowid, "{status}");
}

backend_tests!(the_document_describes_what_the_server_takes);
