//! JSON-relational duality views through a real server, the same bodies on SQLite and
//! PostgreSQL: documents over `team` and its drivers, `_metadata.etag` (the `nocheck` fields left
//! out), an item's `ETag` and 304, filters and order by document fields, and the refusals;
//! writes (POST, PUT, PATCH as JSON Merge Patch, DELETE) checked against the etag, as the
//! view's permissions allow, the lost-update case included.

mod common;

use common::*;
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[duality_views]]
name = "team_dv"
table = "team"
document = "_id:team_id,name,points,driver(driverId:driver_id,name,points)"
insert = ["team", "driver"]
update = ["team", "driver"]
delete = ["team"]
nocheck = ["driver.points"]

[[duality_views]]
name = "driver_dv"
table = "driver"
document = "_id:driver_id,name,points,...team(teamId:team_id,team:name),race:driver_race_map(driverRaceMapId:driver_race_map_id,...race(raceId:race_id,name),finalPosition:position)"
insert = ["driver", "race"]
update = ["driver", "race"]
delete = ["driver"]
nocheck = ["team", "race", "race.race"]

[[duality_views]]
name = "race_dv"
table = "race"
document = "_id:race_id,name,laps,date:race_date,podium,result:driver_race_map(driverRaceMapId:driver_race_map_id,position,...driver(driverId:driver_id,name))"
insert = ["race", "result"]
update = ["race", "result"]
delete = ["race", "result"]
noupdate = ["laps"]
nocheck = ["podium"]

[[duality_views]]
name = "team_ro"
table = "team"
document = "_id:team_id,name"
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

/// What a duality view does not do is refused clearly: a view without write permissions is
/// read-only (405), `select=` and unknown fields are 400.
async fn refusals(b: Backend) {
    let s = server(b).await;
    let r = s
        .post("/team_ro", json!({"_id": 50, "name": "X"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD");
    let r = s.delete("/team_dv").send().await.expect("delete");
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD, POST");
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
    // the writes the view allows
    for (path, method) in [
        ("/api/team_dv", "post"),
        ("/api/team_dv/{key}", "put"),
        ("/api/team_dv/{key}", "patch"),
        ("/api/team_dv/{key}", "delete"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{path} {method}");
    }
    assert!(
        doc["paths"]["/api/team_ro"]["post"].is_null(),
        "team_ro is read-only"
    );
    assert!(doc["paths"]["/api/team_ro/{key}"]["put"].is_null());
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

/// The document of `path`, its etag and its `ETag` header (which must agree).
async fn document(s: &TestServer, path: &str) -> (Value, String) {
    let r = s.get(path).send().await.expect("get");
    assert_eq!(r.status(), 200, "{path}");
    let header = r.headers()["etag"].to_str().expect("etag").to_string();
    let body: Value = r.json().await.expect("json");
    let tag = etag_of(&body);
    assert_eq!(header, format!("\"{tag}\""));
    (body, tag)
}

/// Sends a write and answers its status and JSON body (null when empty).
async fn write(r: reqwest::RequestBuilder) -> (u16, Value, reqwest::header::HeaderMap) {
    let r = r.send().await.expect("send");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.expect("text");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).expect("json")
    };
    (status, body, headers)
}

/// PUT replaces a whole document: the root row updated, an array's rows updated, moved from
/// another document, inserted (no key) as the view allows; the answer is the new document with
/// its new etag. The etag from the body's `_metadata` or `If-Match` must be current: a stale
/// one is 412 and changes nothing.
async fn documents_are_replaced_whole(b: Backend) {
    let s = server(b).await;
    let (mut team, tag) = document(&s, "/team_dv/2?driver.order=driver_id").await;
    let (mercedes_before, _) = document(&s, "/team_dv/1").await;
    team["name"] = json!("Scuderia Ferrari");
    team["driver"][0]["name"] = json!("Charles Marc Leclerc");
    // Lewis Hamilton moves from Mercedes (team 1); a new driver has no key yet
    let drivers = team["driver"].as_array_mut().expect("drivers");
    drivers.push(json!({"driverId": 1, "name": "Lewis Hamilton", "points": 234}));
    drivers.push(json!({"name": "Oliver Bearman", "points": 0}));
    let mercedes = json!({
        "_id": 1, "name": "Mercedes", "points": 409,
        "driver": [{"driverId": 2, "name": "George Russell", "points": 175}]
    });
    // Mercedes first lets Lewis go (its drivers may not be deleted, only moved)
    let (status, _, _) = write(s.put("/team_dv/1", mercedes.clone())).await;
    assert_eq!(status, 403, "team_dv may not delete driver rows");
    let (status, body, headers) = write(s.put("/team_dv/2", team.clone())).await;
    assert_eq!(status, 200, "{body}");
    let new_tag = etag_of(&body);
    assert_ne!(new_tag, tag);
    assert_eq!(headers["etag"], format!("\"{new_tag}\"").as_str());
    assert_eq!(body["name"], "Scuderia Ferrari");
    let names: Vec<&str> = body["driver"]
        .as_array()
        .expect("drivers")
        .iter()
        .map(|d| d["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names.len(), 4, "{body}");
    for name in [
        "Charles Marc Leclerc",
        "Carlos Sainz",
        "Lewis Hamilton",
        "Oliver Bearman",
    ] {
        assert!(names.contains(&name), "{name} in {body}");
    }
    let (now, _) = document(&s, "/team_dv/2").await;
    assert_eq!(now["_metadata"]["etag"], new_tag.as_str());
    let (mercedes_after, _) = document(&s, "/team_dv/1").await;
    assert_eq!(
        mercedes_after["driver"],
        json!([{"driverId": 2, "name": "George Russell", "points": 175}])
    );
    assert_ne!(mercedes_after["_metadata"], mercedes_before["_metadata"]);
    // the old etag is stale now: in the body, or in If-Match
    team["name"] = json!("Ferrari again");
    let (status, body, _) = write(s.put("/team_dv/2", team.clone())).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (412, Some("RG412")),
        "{body}"
    );
    team.as_object_mut().expect("object").remove("_metadata");
    let (status, _, _) = write(
        s.put("/team_dv/2", team.clone())
            .header("If-Match", format!("\"{tag}\"")),
    )
    .await;
    assert_eq!(status, 412);
    let (unchanged, _) = document(&s, "/team_dv/2").await;
    assert_eq!(unchanged["name"], "Scuderia Ferrari");
    // with the current etag it is taken
    let mut current = now.clone();
    current.as_object_mut().expect("object").remove("_metadata");
    current["name"] = json!("Ferrari again");
    let (status, body, _) = write(
        s.put("/team_dv/2", current)
            .header("If-Match", format!("\"{new_tag}\"")),
    )
    .await;
    assert_eq!(
        (status, &body["name"]),
        (200, &json!("Ferrari again")),
        "{body}"
    );
}

/// PATCH is a JSON Merge Patch: the fields given change, the others stay; an array given
/// replaces the array. Nested objects and spreads name the row they refer to by key.
async fn documents_are_merge_patched(b: Backend) {
    let s = server(b).await;
    let (before, _) = document(&s, "/team_dv/3?driver.order=driver_id").await;
    let (status, body, _) = write(
        s.patch("/team_dv/3", json!({"points": 999}))
            .header("Content-Type", "application/merge-patch+json"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["points"], 999);
    assert_eq!(body["name"], before["name"]);
    assert_eq!(body["driver"].as_array().map(Vec::len), Some(2));
    // a driver document moves the driver to another team by its teamId
    let (status, body, _) = write(s.patch("/driver_dv/5", json!({"teamId": 1}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["teamId"], &body["team"]),
        (&json!(1), &json!("Mercedes"))
    );
    let (red_bull, _) = document(&s, "/team_dv/3").await;
    assert_eq!(
        red_bull["driver"].as_array().map(Vec::len),
        Some(1),
        "{red_bull}"
    );
    // a race's results: rows inserted through the document (the trigger adds the points)
    let (status, body, _) = write(s.patch(
        "/race_dv/1",
        json!({"result": [{"position": 1, "driverId": 3}, {"position": 2, "driverId": 4}]}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"].as_array().map(Vec::len), Some(2), "{body}");
    let (leclerc, _) = document(&s, "/driver_dv/3").await;
    assert_eq!(leclerc["points"], 231, "{leclerc}");
    assert_eq!(leclerc["race"][0]["name"], "Bahrain Grand Prix");
    // the results replaced: one kept (by its key), one deleted
    let kept = body["result"][0]["driverRaceMapId"].clone();
    let (status, body, _) = write(s.patch(
        "/race_dv/1",
        json!({"result": [{"driverRaceMapId": kept, "position": 1, "driverId": 3}]}),
    ))
    .await;
    assert_eq!(
        (status, body["result"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{body}"
    );
}

/// POST inserts a document (its nested rows too) and answers 201 with its `Location`; without
/// an `_id` the key comes from the database. DELETE removes it with the nested rows the view
/// may delete.
async fn documents_are_inserted_and_deleted(b: Backend) {
    let s = server(b).await;
    let new = json!({
        "_id": 40, "name": "Rowgate Racing", "points": 0,
        "driver": [{"driverId": 40, "name": "Ada Lovelace", "points": 0}, {"name": "Grace Hopper", "points": 0}]
    });
    let (status, body, headers) = write(s.post("/team_dv", new)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(headers["location"], "/api/team_dv/40");
    assert_eq!(body["driver"].as_array().map(Vec::len), Some(2), "{body}");
    let (read, _) = document(&s, "/team_dv/40").await;
    assert_eq!(read, body);
    let (status, body, headers) =
        write(s.post("/team_dv", json!({"name": "Brabham", "points": 0}))).await;
    assert_eq!(status, 201, "{body}");
    let id = body["_id"].as_i64().expect("id");
    assert_eq!(headers["location"], format!("/api/team_dv/{id}").as_str());
    assert_eq!(body["driver"], json!([]));
    let (status, _, _) = write(s.delete(&format!("/team_dv/{id}"))).await;
    assert_eq!(status, 204);
    let (status, _) = get_json(&s, &format!("/team_dv/{id}")).await;
    assert_eq!(status, 404);
    // a race with its results, deleted with them (result rows may be deleted)
    let race = json!({
        "_id": 20, "name": "Monaco Grand Prix", "laps": 78, "date": "2022-05-29", "podium": {},
        "result": [{"position": 1, "driverId": 6}, {"position": 2, "driverId": 3}]
    });
    let (status, body, _) = write(s.post("/race_dv", race)).await;
    assert_eq!(status, 201, "{body}");
    let (_, tag) = document(&s, "/race_dv/20").await;
    let (status, _, _) = write(s.delete("/race_dv/20").header("If-Match", "\"0000\"")).await;
    assert_eq!(status, 412, "a stale etag keeps the document");
    let (status, _, _) = write(
        s.delete("/race_dv/20")
            .header("If-Match", format!("\"{tag}\"")),
    )
    .await;
    assert_eq!(status, 204);
    let (_, results) = get_json(&s, "/driver_race_map?race_id=eq.20").await;
    assert_eq!(results, json!([]));
    // a driver document may not be deleted while its results exist (race rows are not deletable
    // through driver_dv): the foreign key says so
    let (status, _) = get_json(&s, "/driver_dv/6").await;
    assert_eq!(status, 200);
    // a POST naming an _id that exists is a conflict, and the document stays as it was (its
    // nested rows were once taken over by the new document's)
    let (before, _) = document(&s, "/team_dv/1").await;
    let taken = json!({"_id": 1, "name": "Impostor", "points": 0, "driver": []});
    let (status, body, _) = write(s.post("/team_dv", taken)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "23505");
    let (after, _) = document(&s, "/team_dv/1").await;
    assert_eq!(after, before);
}

/// A change the view does not allow is refused with 403 naming it, and nothing changes: a
/// `noupdate` field, a table without the permission, rows left out that may not be deleted,
/// an `_id` other than the URL's, a field the document does not have.
async fn disallowed_changes_are_refused(b: Backend) {
    let s = server(b).await;
    let (race, _) = document(&s, "/race_dv/1").await;
    for (path, body, status, code, needle) in [
        ("/race_dv/1", json!({"laps": 99}), 403, "RG115", "'laps'"),
        (
            "/race_dv/1",
            json!({"laps": 57, "name": "Bahrain GP"}),
            200,
            "",
            "",
        ),
        (
            "/team_dv/1",
            json!({"driver": []}),
            403,
            "RG115",
            "deleting 'driver'",
        ),
        ("/team_dv/1", json!({"_id": 2}), 400, "PGRST115", "URL"),
        (
            "/team_dv/1",
            json!({"bogus": 1}),
            400,
            "PGRST102",
            "'bogus'",
        ),
        (
            "/team_dv/1",
            json!({"driver": [{"driverId": 1, "bogus": 1}]}),
            400,
            "PGRST102",
            "'bogus'",
        ),
        (
            "/team_dv/1",
            json!([{"name": "x"}]),
            400,
            "PGRST102",
            "one JSON object",
        ),
        (
            "/team_dv/99",
            json!({"name": "x"}),
            404,
            "RG404",
            "no document",
        ),
        (
            "/race_dv/1",
            json!({"result": [{"position": 1, "driverId": 3, "name": "Someone"}]}),
            403,
            "RG115",
            "'result.driver'",
        ),
    ] {
        let (got, answer, _) = write(s.patch(path, body.clone())).await;
        assert_eq!(got, status, "{path} {body}: {answer}");
        if status != 200 {
            assert_eq!(answer["code"], code, "{path} {body}: {answer}");
            assert!(
                answer["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(needle)
                    || answer["details"]
                        .as_str()
                        .unwrap_or_default()
                        .contains(needle),
                "{path} {body}: {answer}"
            );
        }
    }
    let (after, _) = document(&s, "/race_dv/1").await;
    assert_eq!(after["laps"], race["laps"]);
    assert_eq!(after["name"], "Bahrain GP");
    assert_eq!(
        after["result"],
        json!([]),
        "the refused result was not written"
    );
    let (mercedes, _) = document(&s, "/team_dv/1").await;
    assert_eq!(mercedes["driver"].as_array().map(Vec::len), Some(2));
    // a null for a NOT NULL column is refused even where the field would be left alone (a
    // NOCHECK field of a table the view does not update)
    let (driver, _) = document(&s, "/driver_dv/1").await;
    let body = json!({"teamId": driver["teamId"], "team": null});
    let (got, answer, _) = write(s.patch("/driver_dv/1", body.clone())).await;
    assert_eq!(got, 400, "{body}: {answer}");
    assert_eq!(answer["code"], "23502", "{answer}");
    assert!(answer["details"].to_string().contains("'team'"), "{answer}");
}

/// Two clients PUT the same document with the same etag at the same time: exactly one wins,
/// the other gets 412 (no lost update), on every backend.
async fn concurrent_writers_with_one_etag_one_wins(b: Backend) {
    let s = server(b).await;
    for round in 0..8 {
        let (team, _) = document(&s, "/team_dv/4?driver.order=driver_id").await;
        let mut a = team.clone();
        let mut b = team.clone();
        a["name"] = json!(format!("McLaren A{round}"));
        b["name"] = json!(format!("McLaren B{round}"));
        let (ra, rb) = tokio::join!(write(s.put("/team_dv/4", a)), write(s.put("/team_dv/4", b)));
        let mut statuses = [ra.0, rb.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 412], "round {round}: {} / {}", ra.1, rb.1);
        let winner = if ra.0 == 200 { ra.1 } else { rb.1 };
        let (now, _) = document(&s, "/team_dv/4?driver.order=driver_id").await;
        assert_eq!(now["name"], winner["name"]);
    }
}

/// The role's grants apply to every table a document write touches.
async fn grants_apply_to_every_table_written(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let grants = r#"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select"]

[[grants]]
role = "editor"
tables = ["*"]
ops = ["select"]

[[grants]]
role = "editor"
tables = ["team"]
ops = ["select", "update"]
"#;
    let config = write_config(dir.path(), &format!("{CONFIG}{grants}"), &[]).expect("config");
    let s = TestServer::start_prepared(b, dir, config, "", |_| {}).await;
    let (_, token) = client_token(&s, "editor", "editor").await;
    let (status, body, _) = write(s.patch("/team_dv/1", json!({"points": 1}))).await;
    assert_eq!(status, 401, "anonymous: {body}");
    let (status, body, _) = write(
        s.patch("/team_dv/1", json!({"points": 1}))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!((status, &body["points"]), (200, &json!(1)), "{body}");
    let (team, _) = document(&s, "/team_dv/1?driver.order=driver_id").await;
    let mut renamed = team.clone();
    renamed["driver"][0]["name"] = json!("Sir Lewis Hamilton");
    let (status, body, _) = write(s.put("/team_dv/1", renamed).bearer_auth(&token)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("42501")),
        "{body}"
    );
    let (still, _) = document(&s, "/team_dv/1?driver.order=driver_id").await;
    assert_eq!(still["driver"][0]["name"], "Lewis Hamilton");
}

/// A new document without a key (the database assigns it) has no nested rows, since they
/// would refer to it by its key: the OpenAPI document says so, and the server holds to it.
async fn keyless_documents_have_no_nested_rows(b: Backend) {
    let s = server(b).await;
    let doc: Value = s
        .get("/")
        .send()
        .await
        .expect("openapi")
        .json()
        .await
        .expect("json");
    let new_team = &doc["paths"]["/api/team_dv"]["post"]["requestBody"]["content"]
        ["application/json"]["schema"];
    assert_eq!(
        new_team["anyOf"][1]["properties"]["driver"]["maxItems"], 0,
        "{new_team}"
    );
    for (driver, created) in [(json!([]), true), (json!([{"driverId": 1}]), false)] {
        let status = s
            .post(
                "/team_dv",
                json!({"name": "Keyless", "points": 0, "driver": driver}),
            )
            .send()
            .await
            .expect("post")
            .status();
        assert_eq!(status.is_success(), created, "{status}");
    }
}

/// A document's body is read by the view's shape, and what it cannot hold is refused with 400
/// naming it: not one object, a member the document has no field for (the fields there as the
/// hint), rows that are not objects, an array member that is not an array, more rows than
/// `limits.max_document_rows`. A form is one object of strings; a field given a nested value
/// keeps its JSON text.
async fn document_bodies_follow_the_view(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let limited = format!("{CONFIG}\n[limits]\nmax_document_rows = 3\n");
    let config = write_config(dir.path(), &limited, &[]).expect("config");
    let s = TestServer::start_prepared(b, dir, config, "", |_| {}).await;
    let driver = |id: i64| json!({"driverId": id, "name": format!("D{id}"), "points": 0});
    for (body, code, needle) in [
        (json!([{"_id": 50}]), "PGRST102", "must be one JSON object"),
        (json!(7), "PGRST102", "must be one JSON object"),
        (
            json!({"_id": 50, "name": "X", "colour": "red"}),
            "PGRST102",
            "has no field 'colour' here",
        ),
        (
            json!({"_id": 50, "name": "X", "driver": [{"driverId": 50, "age": 3}]}),
            "PGRST102",
            "has no field 'age' here",
        ),
        (
            json!({"_id": 50, "name": "X", "driver": [[]]}),
            "PGRST102",
            "the rows of 'driver' must be objects",
        ),
        (
            json!({"_id": 50, "name": "X", "driver": "none"}),
            "PGRST102",
            "'driver' must be an array of objects",
        ),
        (
            json!({"_id": 50, "name": "X", "points": 0,
                   "driver": [driver(50), driver(51), driver(52), driver(53)]}),
            "RG102",
            "the document nests more than 3 rows",
        ),
    ] {
        let (status, answer, _) = write(s.post("/team_dv", body.clone())).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some(code)),
            "{body}: {answer}"
        );
        assert!(
            answer["message"].as_str().unwrap_or("").contains(needle),
            "{body}: {answer}"
        );
    }
    let (_, answer, _) = write(s.post("/team_dv", json!({"_id": 50, "colour": "red"}))).await;
    assert_eq!(
        answer["hint"], "the fields here: _id, name, points, driver",
        "{answer}"
    );
    // three rows are within the limit; nothing of the refused ones was written
    let (status, _) = get_json(&s, "/team_dv/50").await;
    assert_eq!(status, 404);
    let three = json!({"_id": 50, "name": "X", "points": 0,
                       "driver": [driver(50), driver(51), driver(52)]});
    let (status, answer, _) = write(s.post("/team_dv", three)).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        answer["driver"].as_array().map(Vec::len),
        Some(3),
        "{answer}"
    );
    // a form: one object of strings
    let r = s
        .client
        .post(s.url("/team_dv"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("_id=51&name=Form+Racing&points=7")
        .send()
        .await
        .expect("form");
    assert_eq!(r.status(), 201);
    let (form, _) = document(&s, "/team_dv/51").await;
    assert_eq!(
        (&form["name"], &form["points"]),
        (&json!("Form Racing"), &json!(7))
    );
    // a nested value given to a text field is its JSON text
    let (status, answer, _) = write(s.post(
        "/team_dv",
        json!({"_id": 52, "name": {"b": [1, {}], "a": null}, "points": 0}),
    ))
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["name"], r#"{"a":null,"b":[1,{}]}"#, "{answer}");
}

backend_tests!(
    document_bodies_follow_the_view,
    keyless_documents_have_no_nested_rows,
    documents_are_replaced_whole,
    documents_are_merge_patched,
    documents_are_inserted_and_deleted,
    disallowed_changes_are_refused,
    concurrent_writers_with_one_etag_one_wins,
    grants_apply_to_every_table_written,
    car_racing_documents,
    openapi_describes_the_documents,
    documents_are_read_like_tables,
    etags_follow_the_checked_fields,
    refusals,
);
