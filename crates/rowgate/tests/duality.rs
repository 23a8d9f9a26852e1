//! JSON-relational duality views through a real server, the same bodies on SQLite and
//! PostgreSQL: documents over `team` and its drivers, `_metadata.etag` (the `nocheck` fields left
//! out), an item's `ETag` and 304, filters and order by document fields, and the refusals.

mod common;

use common::*;
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[duality_views]]
name = "team_dv"
table = "team"
document = "_id:team_id,name,points,driver(driverId:driver_id,name,points)"
nocheck = ["driver.points"]

[[duality_views]]
name = "driver_dv"
table = "driver"
document = "_id:driver_id,name,points,...team(teamId:team_id,team:name),race:driver_race_map(driverRaceMapId:driver_race_map_id,...race(raceId:race_id,name),finalPosition:position)"

[[duality_views]]
name = "race_dv"
table = "race"
document = "_id:race_id,name,laps,date:race_date,podium,result:driver_race_map(driverRaceMapId:driver_race_map_id,position,...driver(driverId:driver_id,name))"
"#;

async fn server(b: Backend) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), CONFIG, &[]).expect("config");
    TestServer::start_prepared(b, dir, config, "", |_| {}).await
}

fn etag_of(document: &Value) -> String {
    let tag = document["_metadata"]["etag"].as_str().expect("etag");
    assert_eq!(tag.len(), 32, "{document}");
    assert!(tag
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
    tag.to_string()
}

/// Documents in the declared shape, `_metadata` after `_id`, filtered and ordered by document
/// fields; an item is one document whose `ETag` is its etag, and 304 when it has not changed.
async fn documents_are_read_like_tables(b: Backend) {
    let s = server(b).await;
    let r = s
        .get("/team_dv?_id=eq.2&driver.order=driver_id")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    let text = r.text().await.expect("text");
    assert!(
        text.starts_with(r#"[{"_id":2,"_metadata":{"etag":""#),
        "{text}"
    );
    let body: Value = serde_json::from_str(&text).expect("json");
    let tag = etag_of(&body[0]);
    assert_eq!(
        body,
        json!([{
            "_id": 2,
            "_metadata": {"etag": tag},
            "name": "Ferrari",
            "points": 406,
            "driver": [
                {"driverId": 3, "name": "Charles Leclerc", "points": 206},
                {"driverId": 4, "name": "Carlos Sainz", "points": 200}
            ]
        }])
    );
    let (status, body) = get_json(&s, "/team_dv?order=points.desc&limit=2&points=gt.300").await;
    assert_eq!(status, 200);
    let ids: Vec<i64> = body
        .as_array()
        .expect("array")
        .iter()
        .map(|d| d["_id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, vec![3, 1]);

    let r = s
        .get("/team_dv/2?driver.order=driver_id")
        .send()
        .await
        .expect("item");
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().expect("etag").to_string();
    let document: Value = r.json().await.expect("json");
    assert_eq!(etag, format!("\"{}\"", etag_of(&document)));
    assert_eq!(document["name"], "Ferrari");
    let r = s
        .get("/team_dv/2?driver.order=driver_id")
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("conditional");
    assert_eq!(r.status(), 304);
    let (status, body) = get_json(&s, "/team_dv/99").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("RG404")),
        "{body}"
    );
}

/// The etag changes with a checked field, not with a `nocheck` one.
async fn etags_follow_the_checked_fields(b: Backend) {
    let s = server(b).await;
    let tag = |s: &TestServer| {
        let url = s.url("/team_dv/1?driver.order=driver_id");
        let client = s.client.clone();
        async move {
            let r = client.get(url).send().await.expect("get");
            r.headers()["etag"].to_str().expect("etag").to_string()
        }
    };
    let first = tag(&s).await;
    let r = s
        .patch("/driver?driver_id=eq.1", json!({"points": 1000}))
        .send()
        .await
        .expect("patch");
    assert!(r.status().is_success());
    assert_eq!(tag(&s).await, first, "driver points are nocheck");
    let r = s
        .patch("/driver?driver_id=eq.1", json!({"name": "Sir Lewis"}))
        .send()
        .await
        .expect("patch");
    assert!(r.status().is_success());
    let renamed = tag(&s).await;
    assert_ne!(renamed, first, "a driver's name is checked");
    let r = s
        .patch("/team?team_id=eq.1", json!({"points": 1}))
        .send()
        .await
        .expect("patch");
    assert!(r.status().is_success());
    assert_ne!(tag(&s).await, renamed, "the team's points are checked");
}

/// What a duality view does not do (yet) is refused clearly.
async fn refusals(b: Backend) {
    let s = server(b).await;
    let r = s
        .post("/team_dv", json!({"_id": 50, "name": "X"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD");
    for (path, status, code) in [
        ("/team_dv?select=name", 400, "PGRST100"),
        ("/team_dv?nope=eq.1", 400, "PGRST204"),
        ("/team_dv?order=nope", 400, "PGRST204"),
    ] {
        let (got, body) = get_json(&s, path).await;
        assert_eq!(
            (got, body["code"].as_str()),
            (status, Some(code)),
            "{path}: {body}"
        );
    }
}

/// OpenAPI lists the views with their document schemas.
async fn openapi_describes_the_documents(b: Backend) {
    let s = server(b).await;
    let (status, doc) = get_json(&s, "/").await;
    assert_eq!(status, 200);
    assert!(
        doc["paths"]["/api/team_dv"]["get"].is_object(),
        "{}",
        doc["paths"]
    );
    assert!(doc["paths"]["/api/team_dv/{key}"]["get"].is_object());
    let schema = &doc["components"]["schemas"]["team_dv"]["properties"];
    assert_eq!(schema["_id"]["type"], "integer", "{schema}");
    assert_eq!(schema["_metadata"]["properties"]["etag"]["type"], "string");
    assert_eq!(schema["driver"]["type"], "array");
    assert_eq!(
        schema["driver"]["items"]["properties"]["driverId"]["type"], "integer",
        "{schema}"
    );
}

/// Oracle's car-racing example in the demo: a race result adds its points to the driver and
/// the team (the trigger), and the race, the driver and the team documents all show it.
async fn car_racing_documents(b: Backend) {
    let s = server(b).await;
    let (status, race) = get_json(&s, "/race_dv/1").await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            &race["name"],
            &race["laps"],
            &race["date"],
            &race["podium"],
            &race["result"]
        ),
        (
            &json!("Bahrain Grand Prix"),
            &json!(57),
            &json!("2022-03-20"),
            &json!({}),
            &json!([])
        )
    );
    let r = s
        .post(
            "/driver_race_map",
            json!({"race_id": 1, "driver_id": 3, "position": 1}),
        )
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 201);
    let (_, race) = get_json(&s, "/race_dv/1").await;
    assert_eq!(
        race["result"],
        json!([{"driverRaceMapId": 1, "position": 1, "driverId": 3, "name": "Charles Leclerc"}])
    );
    let (_, driver) = get_json(&s, "/driver_dv/3").await;
    let tag = etag_of(&driver);
    assert_eq!(
        driver,
        json!({
            "_id": 3, "_metadata": {"etag": tag}, "name": "Charles Leclerc", "points": 231,
            "teamId": 2, "team": "Ferrari",
            "race": [{"driverRaceMapId": 1, "raceId": 1, "name": "Bahrain Grand Prix", "finalPosition": 1}]
        })
    );
    let (_, team) = get_json(&s, "/team_dv/2").await;
    assert_eq!(team["points"], 431, "{team}");
}

backend_tests!(
    car_racing_documents,
    openapi_describes_the_documents,
    documents_are_read_like_tables,
    etags_follow_the_checked_fields,
    refusals,
);
