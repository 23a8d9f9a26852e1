//! The ORDS front end through a real server, the same bodies on SQLite and PostgreSQL: AutoREST
//! collections in ORDS's envelope with their links and pages, items with links and ETags,
//! `q=` filter objects, writes (POST, PUT, DELETE of an item and of a filtered collection),
//! the token endpoint under the schema, duality views, and errors in ORDS's shape.

mod common;

use common::*;
use serde_json::{json, Value};

const CONFIG: &str = r#"
[realtime]
tables = ["team", "driver"]

[ords]
schema = "hr"
sql_roles = ["analyst"]
sql_write_roles = ["dba"]

[[grants]]
role = "anon"
tables = ["*"]
ops = ["select"]

[[grants]]
role = "writer"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]

# an ORDS module's handler, as a custom resource under the schema alias
[[resources]]
path = "/ords/hr/demo/teams/{id}/drivers"
sql = "SELECT driver_id, name FROM driver WHERE team_id = :id ORDER BY driver_id"
roles = ["anon"]

[[duality_views]]
name = "team_dv"
table = "team"
document = "_id:team_id,name,points,driver(driverId:driver_id,name,points)"
insert = ["team", "driver"]
update = ["team", "driver"]
delete = ["team"]
nocheck = ["driver.points"]
"#;

async fn server(b: Backend) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), CONFIG, &[]).expect("config");
    TestServer::start_prepared(b, dir, config, "", |_| {}).await
}

fn ords(s: &TestServer, path: &str) -> String {
    s.root_url(&format!("/ords/hr{path}"))
}

async fn get(s: &TestServer, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let r = s.client.get(ords(s, path)).send().await.expect("get");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.expect("text"))
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn rels(links: &Value) -> Vec<&str> {
    links
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["rel"].as_str().expect("rel"))
        .collect()
}

/// An ORDS error: the status, ORDS's code and type.
fn assert_ords_error(status: u16, text: &str, expected: u16, code: &str) {
    assert_eq!(status, expected, "{text}");
    let body = json_of(text);
    assert_eq!(body["code"], code, "{text}");
    assert_eq!(
        body["type"],
        format!("tag:oracle.com,2020:error/{code}").as_str()
    );
    assert!(body["instance"]
        .as_str()
        .is_some_and(|i| i.starts_with("tag:oracle.com,2020:ecid/")));
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
}

/// A collection: ORDS's envelope (keys in ORDS's order), pages of `limit` rows in key order with
/// `hasMore`, each item with its `self` link, and the collection's links.
async fn collections_come_in_the_ords_envelope(b: Backend) {
    let s = server(b).await;
    let (status, _, text) = get(&s, "/team/?limit=3").await;
    assert_eq!(status, 200, "{text}");
    let positions: Vec<usize> = [
        "\"items\"",
        "\"hasMore\"",
        "\"limit\"",
        "\"offset\"",
        "\"count\"",
        "\"links\"",
    ]
    .iter()
    .map(|k| text.rfind(k).expect(k))
    .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
    let page = json_of(&text);
    assert_eq!(
        (
            &page["hasMore"],
            &page["limit"],
            &page["offset"],
            &page["count"]
        ),
        (&json!(true), &json!(3), &json!(0), &json!(3))
    );
    let base = format!("http://{}/ords/hr/team/", s.addr);
    assert_eq!(page["items"][0]["team_id"], 1);
    assert_eq!(page["items"][0]["name"], "Mercedes");
    assert_eq!(
        page["items"][0]["links"],
        json!([{"rel": "self", "href": format!("{base}1")}])
    );
    assert_eq!(
        rels(&page["links"]),
        vec!["self", "edit", "describedby", "first", "next"]
    );
    assert_eq!(page["links"][3]["href"], format!("{base}?limit=3").as_str());
    assert_eq!(
        page["links"][4]["href"],
        format!("{base}?offset=3&limit=3").as_str()
    );
    assert_eq!(
        page["links"][2]["href"],
        format!("http://{}/ords/hr/metadata-catalog/team/", s.addr).as_str()
    );
    // the last page
    let (_, _, text) = get(&s, "/team/?limit=3&offset=9").await;
    let page = json_of(&text);
    assert_eq!(
        (&page["hasMore"], &page["count"]),
        (&json!(false), &json!(1))
    );
    assert_eq!(page["items"][0]["team_id"], 10);
    assert_eq!(
        rels(&page["links"]),
        vec!["self", "edit", "describedby", "first", "prev"]
    );
    // the default page is 25 rows
    let (_, _, text) = get(&s, "/employee/").await;
    let page = json_of(&text);
    assert_eq!(
        (&page["count"], &page["limit"], &page["hasMore"]),
        (&json!(25), &json!(25), &json!(true))
    );
    // bad paging and unknown objects, in ORDS's shape
    let (status, _, text) = get(&s, "/team/?limit=abc").await;
    assert_ords_error(status, &text, 400, "BadRequest");
    let (status, _, text) = get(&s, "/nope/").await;
    assert_ords_error(status, &text, 404, "NotFound");
    let r = s
        .client
        .get(s.root_url("/ords/other/team/"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 404);
}

/// An item: the row (lower-case keys, dates in RFC 3339 UTC) then its links; the same `ETag`
/// as `/api`'s, and 304 for it.
async fn items_have_links_and_etags(b: Backend) {
    let s = server(b).await;
    let (status, headers, text) = get(&s, "/team/3").await;
    assert_eq!(status, 200, "{text}");
    let item = json_of(&text);
    let base = format!("http://{}/ords/hr/", s.addr);
    assert_eq!(
        (&item["team_id"], &item["name"]),
        (&json!(3), &json!("Red Bull"))
    );
    assert_eq!(
        item["links"],
        json!([
            {"rel": "self", "href": format!("{base}team/3")},
            {"rel": "edit", "href": format!("{base}team/3")},
            {"rel": "describedby", "href": format!("{base}metadata-catalog/team/item")},
            {"rel": "collection", "href": format!("{base}team/")}
        ])
    );
    let api = s.get("/team/3").send().await.expect("api");
    assert_eq!(
        headers["etag"],
        api.headers()["etag"],
        "one ETag for the row"
    );
    let r = s
        .client
        .get(ords(&s, "/team/3"))
        .header("If-None-Match", headers["etag"].clone())
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 304);
    let (_, _, text) = get(&s, "/race/1").await;
    assert_eq!(json_of(&text)["race_date"], "2022-03-20T00:00:00Z");
    let (status, _, text) = get(&s, "/team/99").await;
    assert_ords_error(status, &text, 404, "NotFound");
    let r = s
        .client
        .patch(ords(&s, "/team/3"))
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD, PUT, DELETE");
}

/// `q=` filter objects: operators, `$or`, `$orderby`, names matched whatever their case.
async fn filter_objects_select_and_order(b: Backend) {
    let s = server(b).await;
    let names = |q: &str| {
        let url = format!("{}?q={}", ords(&s, "/team/"), urlencode(q));
        let client = s.client.clone();
        async move {
            let r = client.get(url).send().await.expect("get");
            let status = r.status().as_u16();
            let text = r.text().await.expect("text");
            assert_eq!(status, 200, "{text}");
            json_of(&text)["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|i| i["name"].as_str().expect("name").to_string())
                .collect::<Vec<String>>()
        }
    };
    assert_eq!(
        names(r#"{"points":{"$gt":400},"$orderby":{"points":"DESC"}}"#).await,
        vec!["Red Bull", "Mercedes", "Ferrari"]
    );
    assert_eq!(names(r#"{"NAME":"Ferrari"}"#).await, vec!["Ferrari"]);
    assert_eq!(
        names(r#"{"name":{"$instr":"Bull"}}"#).await,
        vec!["Red Bull"]
    );
    assert_eq!(
        names(
            r#"{"$or":[{"name":"Ferrari"},{"team_id":{"$in":[1,3]}}],"$orderby":{"team_id":"ASC"}}"#
        )
        .await,
        vec!["Mercedes", "Ferrari", "Red Bull"]
    );
    assert_eq!(
        names(r#"{"team_id":{"$between":[2,3]}}"#).await,
        vec!["Ferrari", "Red Bull"]
    );
    for bad in [r#"{"points":{"$gtt":1}}"#, "{nope", r#"{"nope":1}"#] {
        let url = format!("{}?q={}", ords(&s, "/team/"), urlencode(bad));
        let r = s.client.get(url).send().await.expect("get");
        let status = r.status().as_u16();
        assert_ords_error(status, &r.text().await.expect("text"), 400, "BadRequest");
    }
}

fn urlencode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A DELETE as `bearer`: the status and the JSON answer.
async fn delete(s: &TestServer, url: &str, bearer: &str) -> (u16, Value) {
    let r = s
        .client
        .delete(url)
        .bearer_auth(bearer)
        .send()
        .await
        .expect("delete");
    let status = r.status().as_u16();
    (status, r.json().await.expect("json"))
}

/// Writes as ORDS answers them, with a token from the schema's own token endpoint: POST 201
/// with `Location`, `Content-Location`, `ETag` and the row with its links; PUT 200; DELETE of an
/// item and of a filtered collection `{"rowsDeleted":N}`; anonymous writes 401.
async fn writes_answer_as_ords(b: Backend) {
    let s = server(b).await;
    let issued = rowgate::auth::clients::add(&s.app.db, &s.app.auth.secrets, "k6", "writer", 3600)
        .await
        .expect("client");
    let r = s
        .client
        .post(ords(&s, "/oauth/token"))
        .basic_auth(&issued.client_id, Some(&issued.client_secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .expect("token");
    assert_eq!(r.status(), 200);
    let token: Value = r.json().await.expect("json");
    assert_eq!(token["token_type"], "bearer");
    assert_eq!(token["expires_in"], 3600);
    let bearer = token["access_token"].as_str().expect("token").to_string();
    let r = s
        .client
        .post(ords(&s, "/team/"))
        .json(&json!({"team_id": 40, "name": "Lotus", "points": 3}))
        .send()
        .await
        .expect("post");
    let status = r.status().as_u16();
    assert_ords_error(status, &r.text().await.expect("text"), 401, "Unauthorized");
    let r = s
        .client
        .post(ords(&s, "/team/"))
        .bearer_auth(&bearer)
        .json(&json!({"team_id": 40, "name": "Lotus", "points": 3}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 201);
    let url = format!("http://{}/ords/hr/team/40", s.addr);
    assert_eq!(r.headers()["location"], url.as_str());
    assert_eq!(r.headers()["content-location"], url.as_str());
    assert!(r.headers().contains_key("etag"));
    let row: Value = r.json().await.expect("json");
    assert_eq!(
        (&row["name"], &row["links"][0]["href"]),
        (&json!("Lotus"), &json!(url))
    );
    let r = s
        .client
        .put(&url)
        .bearer_auth(&bearer)
        .json(&json!({"name": "Lotus F1", "points": 4}))
        .send()
        .await
        .expect("put");
    assert_eq!(r.status(), 200, "an update");
    let row: Value = r.json().await.expect("json");
    assert_eq!(
        (&row["team_id"], &row["name"]),
        (&json!(40), &json!("Lotus F1"))
    );
    let r = s
        .client
        .put(format!("http://{}/ords/hr/team/41", s.addr))
        .bearer_auth(&bearer)
        .json(&json!({"name": "Tyrrell", "points": 0}))
        .send()
        .await
        .expect("put");
    assert_eq!(r.status(), 201, "an insert");
    assert_eq!(
        delete(&s, &url, &bearer).await,
        (200, json!({"rowsDeleted": 1}))
    );
    let (status, _, _) = get(&s, "/team/40").await;
    assert_eq!(status, 404);
    // a filtered collection
    let q = urlencode(r#"{"emp_no":{"$gte":100}}"#);
    let before = s.int("SELECT count(*) FROM employee WHERE emp_no >= 100");
    assert!(before > 1, "rows to delete");
    let filtered = format!("{}?q={q}", ords(&s, "/employee/"));
    assert_eq!(
        delete(&s, &filtered, &bearer).await,
        (200, json!({"rowsDeleted": before}))
    );
    assert_eq!(
        s.int("SELECT count(*) FROM employee WHERE emp_no >= 100"),
        0
    );
    let (status, body) = delete(&s, &ords(&s, "/employee/"), &bearer).await;
    assert_ords_error(status, &body.to_string(), 400, "BadRequest");
}

/// Duality views under ORDS: documents with `_metadata` and links, `q=` on document fields, PUT
/// checked against the body's etag (stale: 412).
async fn duality_views_under_ords(b: Backend) {
    let s = server(b).await;
    let (status, headers, text) = get(&s, "/team_dv/2").await;
    assert_eq!(status, 200, "{text}");
    let mut document = json_of(&text);
    let etag = document["_metadata"]["etag"]
        .as_str()
        .expect("etag")
        .to_string();
    assert_eq!(headers["etag"], format!("\"{etag}\"").as_str());
    // asof: the change-log position the document reflects, as ORDS's 16 hex digits
    let asof = |d: &Value| {
        let text = d["_metadata"]["asof"].as_str().expect("asof").to_string();
        assert_eq!(text.len(), 16, "{d}");
        u64::from_str_radix(&text, 16).expect("hex")
    };
    let before = asof(&document);
    assert_eq!(
        rels(&document["links"]),
        vec!["self", "edit", "describedby", "collection"]
    );
    let q = urlencode(r#"{"name":"Ferrari"}"#);
    let (_, _, text) = get(&s, &format!("/team_dv/?q={q}")).await;
    let page = json_of(&text);
    assert_eq!(page["count"], 1);
    assert_eq!(page["items"][0]["_id"], 2);
    let (_, bearer) = client_token(&s, "dv", "writer").await;
    document.as_object_mut().expect("object").remove("links");
    document["name"] = json!("Scuderia Ferrari");
    let put = |body: Value| {
        s.client
            .put(ords(&s, "/team_dv/2"))
            .bearer_auth(&bearer)
            .json(&body)
            .send()
    };
    let r = put(document.clone()).await.expect("put");
    assert_eq!(r.status(), 200);
    let written: Value = r.json().await.expect("json");
    assert_eq!(written["name"], "Scuderia Ferrari");
    // once the change is read from the log, later documents reflect it
    let mut moved = false;
    for _ in 0..50 {
        let (_, _, text) = get(&s, "/team_dv/2").await;
        if asof(&json_of(&text)) > before {
            moved = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(moved, "the write moved the log on");
    assert_ne!(written["_metadata"]["etag"], etag.as_str());
    // the same body again: its etag is stale now
    let r = put(document).await.expect("put");
    let status = r.status().as_u16();
    assert_ords_error(
        status,
        &r.text().await.expect("text"),
        412,
        "PreconditionFailed",
    );
}

/// `POST …/batchload`: CSV rows (header names whatever their case, empty fields NULL) in
/// batches, and ORDS's plain-text report; a failing batch stops the load, the batches before it
/// stay.
async fn batchload_reports_as_ords(b: Backend) {
    let s = server(b).await;
    let (_, bearer) = client_token(&s, "bl", "writer").await;
    let load_into = |object: &str, csv: &'static str| {
        s.client
            .post(format!(
                "{}?batchRows=2",
                ords(&s, &format!("/{object}/batchload"))
            ))
            .bearer_auth(&bearer)
            .header("Content-Type", "text/csv")
            .body(csv)
            .send()
    };
    let load = |csv: &'static str| load_into("team", csv);
    let r = load("TEAM_ID,NAME,POINTS\n50,Brabham,0\n51,Tyrrell,12\n52,Ligier,3\n")
        .await
        .expect("batchload");
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .expect("type")
        .starts_with("text/plain"));
    let report = r.text().await.expect("text");
    assert!(
        report.contains("#INFO Number of rows processed: 3\n"),
        "{report}"
    );
    assert!(
        report.contains("#INFO Number of rows in error: 0\n"),
        "{report}"
    );
    assert!(
        report.ends_with("SUCCESS: Processed without errors\n"),
        "{report}"
    );
    assert_eq!(s.int("SELECT points FROM team WHERE team_id = 51"), 12);
    let r = load_into(
        "driver",
        "driver_id,name,points,team_id\n70,Jo Siffert,0,\n",
    )
    .await
    .expect("batchload");
    let report = r.text().await.expect("text");
    assert!(
        report.ends_with("SUCCESS: Processed without errors\n"),
        "{report}"
    );
    assert_eq!(
        s.int("SELECT count(*) FROM driver WHERE driver_id = 70 AND team_id IS NULL"),
        1,
        "an empty field is NULL"
    );
    // the second batch repeats a key: the first stays, the load stops there
    let r = load("team_id,name\n60,March\n61,Arrows\n62,Minardi\n50,Again\n")
        .await
        .expect("batchload");
    assert_eq!(r.status(), 200);
    let report = r.text().await.expect("text");
    assert!(report.starts_with("#ERROR Rows 3-4: "), "{report}");
    assert!(
        report.contains("#INFO Number of rows processed: 2\n"),
        "{report}"
    );
    assert!(
        report.contains("#INFO Number of rows in error: 2\n"),
        "{report}"
    );
    assert!(
        report.ends_with("ERROR: Processed with errors\n"),
        "{report}"
    );
    assert_eq!(
        s.int("SELECT count(*) FROM team WHERE team_id IN (60, 61, 62)"),
        2
    );
    let r = load("nope\n1\n").await.expect("batchload");
    let status = r.status().as_u16();
    assert_ords_error(status, &r.text().await.expect("text"), 400, "BadRequest");
}

/// The metadata catalog lists what the role may read and describes each object: its primary
/// key and members with ORDS's type names.
async fn the_metadata_catalog_describes_objects(b: Backend) {
    let s = server(b).await;
    let base = format!("http://{}/ords/hr/", s.addr);
    let (status, _, text) = get(&s, "/metadata-catalog/").await;
    assert_eq!(status, 200, "{text}");
    let catalog = json_of(&text);
    let names: Vec<&str> = catalog["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["name"].as_str().expect("name"))
        .collect();
    for name in ["team", "driver", "race", "team_dv"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let team = catalog["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["name"] == "team")
        .expect("team");
    assert_eq!(team["links"][0]["href"], format!("{base}team/").as_str());
    assert_eq!(catalog["count"], names.len());
    let (status, _, text) = get(&s, "/metadata-catalog/race/").await;
    assert_eq!(status, 200, "{text}");
    let race = json_of(&text);
    assert_eq!(race["primarykey"], json!(["race_id"]));
    let members = &race["members"];
    assert_eq!(members[0], json!({"name": "race_id", "type": "NUMBER"}));
    assert_eq!(members[1], json!({"name": "name", "type": "VARCHAR2"}));
    assert_eq!(members[3], json!({"name": "race_date", "type": "DATE"}));
    let (status, _, text) = get(&s, "/metadata-catalog/team_dv/item").await;
    assert_eq!(status, 200, "{text}");
    let dv = json_of(&text);
    assert_eq!(dv["primarykey"], json!(["_id"]));
    assert_eq!(
        dv["members"],
        json!([
            {"name": "_id", "type": "NUMBER"},
            {"name": "_metadata", "type": "OBJECT"},
            {"name": "name", "type": "VARCHAR2"},
            {"name": "points", "type": "NUMBER"},
            {"name": "driver", "type": "ARRAY"}
        ])
    );
    assert_eq!(
        dv["links"][1]["href"],
        format!("{base}metadata-catalog/team_dv/item").as_str()
    );
    let (status, _, text) = get(&s, "/metadata-catalog/nope/").await;
    assert_ords_error(status, &text, 404, "NotFound");
    // the OpenAPI document of one object: its ORDS endpoints, the methods the role may use
    let (status, headers, text) = get(&s, "/open-api-catalog/team/").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "application/openapi+json");
    let api = json_of(&text);
    assert_eq!(
        api["servers"][0]["url"],
        format!("http://{}/ords/hr", s.addr).as_str()
    );
    let paths = &api["paths"];
    assert!(paths["/team/"]["get"].is_object(), "{paths}");
    assert!(paths["/team/"]["post"].is_null(), "anon may not insert");
    let rows = &paths["/team/"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    assert!(
        rows["properties"]["items"]["items"]["properties"]["team_id"].is_object(),
        "{rows}"
    );
    let (_, writer) = client_token(&s, "oa", "writer").await;
    let r = s
        .client
        .get(ords(&s, "/open-api-catalog/team/"))
        .bearer_auth(writer)
        .send()
        .await
        .expect("get");
    let api: Value = r.json().await.expect("json");
    for (path, method) in [
        ("/team/", "post"),
        ("/team/{id}", "put"),
        ("/team/{id}", "delete"),
    ] {
        assert!(api["paths"][path][method].is_object(), "{path} {method}");
    }
}

/// A custom resource declared under `/ords/{schema}/` answers there (ORDS modules map to
/// resources).
async fn modules_map_to_custom_resources(b: Backend) {
    let s = server(b).await;
    let (status, _, text) = get(&s, "/demo/teams/2/drivers").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        json_of(&text),
        json!([{"driver_id": 3, "name": "Charles Leclerc"}, {"driver_id": 4, "name": "Carlos Sainz"}])
    );
}

/// REST-enabled SQL: only for the configured roles, queries for them all, writes for the write
/// roles; ORDS's answer shape; what would write or change the session refused or undone.
async fn rest_enabled_sql(b: Backend) {
    let s = server(b).await;
    let url = ords(&s, "/_/sql");
    let run = |token: Option<String>, body: &'static str, media: &'static str| {
        let mut request = s.client.post(&url).header("Content-Type", media).body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let r = request.send().await.expect("sql");
            let status = r.status().as_u16();
            (status, r.text().await.expect("text"))
        }
    };
    let (status, text) = run(None, "select 1", "application/sql").await;
    assert_ords_error(status, &text, 401, "Unauthorized");
    let (_, writer) = client_token(&s, "w", "writer").await;
    let (status, text) = run(Some(writer), "select 1", "application/sql").await;
    assert_ords_error(status, &text, 403, "Forbidden");
    let (_, analyst) = client_token(&s, "a", "analyst").await;
    let (status, text) = run(
        Some(analyst.clone()),
        "select team_id, name from team where team_id <= 2 order by team_id;\n select count(*) as n from driver",
        "application/sql",
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let answer = json_of(&text);
    let first = &answer["items"][0];
    assert_eq!(
        (&first["statementId"], &first["statementType"]),
        (&json!(1), &json!("query"))
    );
    assert_eq!(
        first["resultSet"]["items"],
        json!([{"team_id": 1, "name": "Mercedes"}, {"team_id": 2, "name": "Ferrari"}])
    );
    assert_eq!(
        (&first["resultSet"]["count"], &first["resultSet"]["hasMore"]),
        (&json!(2), &json!(false))
    );
    assert_eq!(first["resultSet"]["metadata"][1]["columnName"], "name");
    assert_eq!(answer["items"][1]["resultSet"]["items"], json!([{"n": 20}]));
    // paging through the JSON form
    let (_, text) = run(
        Some(analyst.clone()),
        r#"{"statementText":"select team_id from team order by team_id","limit":3,"offset":1}"#,
        "application/json",
    )
    .await;
    let set = &json_of(&text)["items"][0]["resultSet"];
    assert_eq!(
        set["items"],
        json!([{"team_id": 2}, {"team_id": 3}, {"team_id": 4}])
    );
    assert_eq!((&set["hasMore"], &set["offset"]), (&json!(true), &json!(1)));
    // a reader's writes are refused, or fail in its read-only transaction: nothing changes
    let (_, text) = run(
        Some(analyst.clone()),
        "delete from driver; with gone as (delete from driver returning 1) select * from gone; set default_transaction_read_only = off",
        "application/sql",
    )
    .await;
    let answer = json_of(&text);
    for item in answer["items"].as_array().expect("items") {
        assert!(item["errorCode"].is_string(), "{item}");
    }
    assert_eq!(s.int("SELECT count(*) FROM driver"), 20);
    // a write role writes; temporary objects and session control stay refused
    let (_, dba) = client_token(&s, "d", "dba").await;
    let (_, text) = run(
        Some(dba),
        "insert into team (team_id, name, points) values (70, 'Hesketh', 0); update team set points = 5 where team_id >= 70; create temp table scratch (a int); begin",
        "application/sql",
    )
    .await;
    let answer = json_of(&text);
    assert_eq!(answer["items"][0]["statementType"], "dml");
    assert_eq!(
        answer["items"][0]["response"],
        json!(["\n1 row inserted.\n\n"])
    );
    assert_eq!(answer["items"][1]["result"], 1);
    assert!(answer["items"][2]["errorCode"].is_string(), "{text}");
    assert!(answer["items"][3]["errorCode"].is_string(), "{text}");
    assert_eq!(s.int("SELECT points FROM team WHERE team_id = 70"), 5);
    if b == Backend::Postgres {
        // what a query sets for the session is undone when it ends (RESET ALL)
        for _ in 0..4 {
            run(
                Some(analyst.clone()),
                "select set_config('default_transaction_read_only', 'off', false)",
                "application/sql",
            )
            .await;
        }
        let (_, text) = run(
            Some(analyst),
            "select current_setting('default_transaction_read_only') as ro",
            "application/sql",
        )
        .await;
        assert_eq!(
            json_of(&text)["items"][0]["resultSet"]["items"],
            json!([{"ro": "on"}])
        );
    }
}

backend_tests!(
    rest_enabled_sql,
    modules_map_to_custom_resources,
    the_metadata_catalog_describes_objects,
    batchload_reports_as_ords,
    collections_come_in_the_ords_envelope,
    items_have_links_and_etags,
    filter_objects_select_and_order,
    writes_answer_as_ords,
    duality_views_under_ords,
);
