//! Writes: POST (single, bulk, columns=, return=, upserts, missing=default), PATCH, PUT, DELETE,
//! max-affected, If-Match, singular writes, form bodies, read-only views and concurrency.

mod common;
use common::*;
use serde_json::{json, Value};

const OBJECT: &str = "application/vnd.pgrst.object+json";
const REPR: &str = "return=representation";

fn count(s: &TestServer, sql: &str) -> i64 {
    s.int(sql)
}

/// `(team_id, name, points)` of every team, in id order.
fn teams(s: &TestServer) -> Vec<(i64, String, i64)> {
    s.rows("SELECT team_id, name, points FROM team ORDER BY team_id")
        .into_iter()
        .map(|r| (int(&r[0]), text(&r[1]), int(&r[2])))
        .collect()
}

fn int(cell: &Option<String>) -> i64 {
    cell.as_deref()
        .and_then(|v| v.parse().ok())
        .expect("integer")
}

fn text(cell: &Option<String>) -> String {
    cell.clone().expect("text")
}

fn team(s: &TestServer, id: i64) -> Option<(String, i64)> {
    s.rows(&format!(
        "SELECT name, points FROM team WHERE team_id = {id}"
    ))
    .first()
    .map(|r| (text(&r[0]), int(&r[1])))
}

fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().expect("ascii").to_string())
}

/// The rows of a JSON array sorted by `key`.
fn sorted(body: Value, key: &str) -> Vec<Value> {
    let mut rows = body
        .as_array()
        .unwrap_or_else(|| panic!("array: {body}"))
        .clone();
    rows.sort_by_key(|r| r[key].as_i64());
    rows
}

async fn empty_body(r: reqwest::Response) {
    let bytes = r.bytes().await.expect("body");
    assert!(
        bytes.is_empty(),
        "expected no body, got {:?}",
        String::from_utf8_lossy(&bytes)
    );
}

async fn post_one_minimal(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post("/team", json!({"name": "Sauber", "points": 5}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    assert!(header(&r, "location").is_none());
    empty_body(r).await;
    assert_eq!(count(&s, "SELECT count(*) FROM team"), 11);
    let row = &s.rows("SELECT team_id, points FROM team WHERE name = 'Sauber'")[0];
    let (id, points) = (int(&row[0]), int(&row[1]));
    assert_eq!((id, points), (11, 5));

    // Explicit primary key and a charset parameter on the content type.
    let r = s
        .client
        .post(s.url("/team"))
        .header("Content-Type", "application/json; charset=utf-8")
        .body(r#"{"team_id": 50, "name": "Brawn", "points": 172}"#)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(team(&s, 50), Some(("Brawn".into(), 172)));
}

async fn post_array_is_one_transaction(b: Backend) {
    let s = TestServer::start(b).await;
    let rows = json!([
        {"first_name": "Ada", "last_name": "Lovelace", "city": "London", "birth_date": "1815-12-10", "created_at": "2024-01-01T00:00:00"},
        {"first_name": "Alan", "last_name": "Turing", "city": "London", "birth_date": "1912-06-23", "created_at": "2024-01-01T00:00:01"},
        {"first_name": "Grace", "last_name": "Hopper", "city": "New York", "birth_date": "1906-12-09", "created_at": "2024-01-01T00:00:02"}
    ]);
    let r = s.post("/people", rows).send().await.expect("request");
    assert_eq!(r.status().as_u16(), 201);
    empty_body(r).await;
    assert_eq!(count(&s, "SELECT count(*) FROM people"), 203);
    assert_eq!(
        count(&s, "SELECT count(*) FROM people WHERE id > 200 AND last_name IN ('Lovelace','Turing','Hopper')"),
        3
    );
    let city = text(&s.rows("SELECT city FROM people WHERE last_name = 'Hopper'")[0][0]);
    assert_eq!(city, "New York");

    // One row breaks UNIQUE: 409 and none of the rows are inserted.
    let before = teams(&s);
    let r = s
        .post(
            "/team",
            json!([
                {"name": "Bulk One", "points": 1},
                {"name": "Ferrari", "points": 2},
                {"name": "Bulk Three", "points": 3}
            ]),
        )
        .send()
        .await
        .expect("request");
    assert_error(r, 409, "23505").await;
    assert_eq!(teams(&s), before);

    // Same for a foreign key in the last row.
    let r = s
        .post(
            "/driver",
            json!([
                {"name": "Driver A", "team_id": 1},
                {"name": "Driver B", "team_id": 404}
            ]),
        )
        .send()
        .await
        .expect("request");
    assert_error(r, 409, "23503").await;
    assert_eq!(count(&s, "SELECT count(*) FROM driver"), 20);

    // The same keys in another order are fine without columns=.
    let r = s
        .post(
            "/team",
            json!([{"name": "Order One", "points": 1}, {"points": 2, "name": "Order Two"}]),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        count(&s, "SELECT points FROM team WHERE name = 'Order Two'"),
        2
    );
    s.exec("DELETE FROM team WHERE name LIKE 'Order %'");

    // An empty array inserts nothing and succeeds.
    let r = s.post("/team", json!([])).send().await.expect("request");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(teams(&s), before);
}

async fn post_columns_param_ignores_extra_keys(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post(
            "/team?columns=name,points",
            json!([
                {"name": "Col One", "points": 1, "extra": "ignored", "team_id": 77},
                {"points": 2, "name": "Col Two", "nonsense": [1, 2]}
            ]),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM team WHERE name IN ('Col One', 'Col Two')"
        ),
        2
    );
    assert_eq!(count(&s, "SELECT count(*) FROM team WHERE team_id = 77"), 0);
    assert_eq!(
        count(&s, "SELECT points FROM team WHERE name = 'Col Two'"),
        2
    );
}

async fn post_return_representation(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post("/team", json!({"name": "Sauber", "points": 5}))
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    assert!(header(&r, "content-type")
        .unwrap_or_default()
        .starts_with("application/json"));
    let body: Value = r.json().await.expect("json");
    let id = count(&s, "SELECT team_id FROM team WHERE name = 'Sauber'");
    assert_eq!(
        body,
        json!([{"team_id": id, "name": "Sauber", "points": 5}])
    );

    // select= shapes the returned rows; bulk returns every row.
    let r = s
        .post(
            "/team?select=name,pts:points",
            json!([{"name": "X1", "points": 1}, {"name": "X2", "points": 2}]),
        )
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    let mut rows = r
        .json::<Value>()
        .await
        .expect("json")
        .as_array()
        .expect("array")
        .clone();
    rows.sort_by_key(|r| r["pts"].as_i64());
    assert_eq!(
        rows,
        vec![
            json!({"name": "X1", "pts": 1}),
            json!({"name": "X2", "pts": 2})
        ]
    );

    // Defaults are visible in the representation.
    let r = s
        .post("/team", json!({"name": "Defaulted"}))
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body[0]["points"], 0);
    assert_eq!(body[0]["name"], "Defaulted");
}

async fn post_return_headers_only(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post("/team", json!({"name": "Sauber", "points": 5}))
        .header("Prefer", "return=headers-only")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    let id = count(&s, "SELECT team_id FROM team WHERE name = 'Sauber'");
    assert_eq!(
        header(&r, "location"),
        Some(format!("/api/team?team_id=eq.{id}"))
    );
    empty_body(r).await;
    // The Location is a working URL.
    let (status, body) = get_json(&s, &format!("/team?team_id=eq.{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!([{"team_id": id, "name": "Sauber", "points": 5}])
    );
}

async fn upsert_merge_duplicates(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post(
            "/team",
            json!([
                {"team_id": 1, "name": "Mercedes", "points": 999},
                {"team_id": 11, "name": "Sauber", "points": 4}
            ]),
        )
        .header(
            "Prefer",
            "resolution=merge-duplicates, return=representation",
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    let rows = sorted(r.json().await.expect("json"), "team_id");
    assert_eq!(
        rows,
        vec![
            json!({"team_id": 1, "name": "Mercedes", "points": 999}),
            json!({"team_id": 11, "name": "Sauber", "points": 4})
        ]
    );
    assert_eq!(team(&s, 1), Some(("Mercedes".into(), 999)));
    assert_eq!(team(&s, 11), Some(("Sauber".into(), 4)));
    assert_eq!(count(&s, "SELECT count(*) FROM team"), 11);

    // Every row there already: nothing created, 200 (an empty body too), as PostgREST
    for body in [
        json!([{"team_id": 11, "name": "Sauber", "points": 5}]),
        json!([]),
    ] {
        let r = s
            .post("/team", body)
            .header("Prefer", "resolution=merge-duplicates")
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 200);
    }
    assert_eq!(team(&s, 11), Some(("Sauber".into(), 5)));

    // Without a resolution the same body conflicts.
    let r = s
        .post(
            "/team",
            json!({"team_id": 1, "name": "Mercedes", "points": 1}),
        )
        .send()
        .await
        .expect("request");
    assert_error(r, 409, "23505").await;
    assert_eq!(team(&s, 1), Some(("Mercedes".into(), 999)));
}

async fn upsert_ignore_duplicates(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post(
            "/team",
            json!([
                {"team_id": 2, "name": "Scuderia Ferrari", "points": 0},
                {"team_id": 12, "name": "Brawn", "points": 172}
            ]),
        )
        .header("Prefer", REPR)
        .header("Prefer", "resolution=ignore-duplicates")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    // applied in PostgREST's order, whatever the request's
    assert_eq!(
        header(&r, "preference-applied").as_deref(),
        Some("resolution=ignore-duplicates, return=representation")
    );
    // Only the inserted row comes back.
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!([{"team_id": 12, "name": "Brawn", "points": 172}])
    );
    assert_eq!(team(&s, 2), Some(("Ferrari".into(), 406)));
    assert_eq!(team(&s, 12), Some(("Brawn".into(), 172)));
    // a row of defaults (an empty form, `{}`) upserted: the database's own refusal of the
    // missing name, on SQLite too (its grammar has no upsert after DEFAULT VALUES: it was a 500)
    for (content_type, body) in [
        ("application/x-www-form-urlencoded", ""),
        ("application/json", "{}"),
    ] {
        for resolution in ["ignore-duplicates", "merge-duplicates"] {
            let r = s
                .client
                .post(s.url("/driver"))
                .header("Content-Type", content_type)
                .header("Prefer", format!("resolution={resolution}, {REPR}"))
                .body(body)
                .send()
                .await
                .expect("request");
            assert_error(r, 400, "23502").await;
        }
    }
}

async fn upsert_on_conflict_column(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post(
            "/team?on_conflict=name",
            json!({"name": "Ferrari", "points": 1}),
        )
        .header("Prefer", "resolution=merge-duplicates")
        .send()
        .await
        .expect("request");
    // the row named was there: merged, nothing created
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(team(&s, 2), Some(("Ferrari".into(), 1)));
    assert_eq!(count(&s, "SELECT count(*) FROM team"), 10);

    let r = s
        .post(
            "/team?on_conflict=name",
            json!([{"name": "Haas", "points": 500}, {"name": "Andretti", "points": 3}]),
        )
        .header("Prefer", "resolution=ignore-duplicates")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(team(&s, 10), Some(("Haas".into(), 12)));
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM team WHERE name = 'Andretti' AND points = 3"
        ),
        1
    );
}

async fn missing_default(b: Backend) {
    let s = TestServer::start(b).await;
    // A missing key takes the column default (team.points DEFAULT 0).
    let r = s
        .post(
            "/team?columns=name,points",
            json!([{"name": "Md One"}, {"name": "Md Two", "points": 7}]),
        )
        .header("Prefer", "missing=default")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
    assert_eq!(
        count(&s, "SELECT points FROM team WHERE name = 'Md One'"),
        0
    );
    assert_eq!(
        count(&s, "SELECT points FROM team WHERE name = 'Md Two'"),
        7
    );

    // An explicit null is not missing: NOT NULL violation, nothing inserted.
    let r = s
        .post(
            "/team?columns=name,points",
            json!([{"name": "Md Three", "points": null}]),
        )
        .header("Prefer", "missing=default")
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "23502").await;
    // Without missing=default a missing key is null.
    let r = s
        .post("/team?columns=name,points", json!([{"name": "Md Four"}]))
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "23502").await;
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM team WHERE name IN ('Md Three', 'Md Four')"
        ),
        0
    );
}

async fn patch_with_filters(b: Backend) {
    let s = TestServer::start(b).await;
    let before = teams(&s);
    let r = s
        .patch("/team?team_id=in.(1,2)", json!({"points": 0}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    empty_body(r).await;
    let after = teams(&s);
    for (old, new) in before.iter().zip(&after) {
        if old.0 == 1 || old.0 == 2 {
            assert_eq!(new, &(old.0, old.1.clone(), 0));
        } else {
            assert_eq!(new, old);
        }
    }

    // return=representation: 200 with the updated rows.
    let r = s
        .patch("/team?points=gt.400", json!({"points": 401, "name": "Top"}))
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    // Only Red Bull (860) is above 400 now; name is UNIQUE so one row is all that can be set.
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!([{"team_id": 3, "name": "Top", "points": 401}])
    );

    let r = s
        .patch(
            "/team?select=team_id&team_id=in.(4,5)",
            json!({"points": 1}),
        )
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        sorted(r.json().await.expect("json"), "team_id"),
        vec![json!({"team_id": 4}), json!({"team_id": 5})]
    );

    // Nothing matches: 204, or 200 with [].
    let r = s
        .patch("/team?team_id=eq.999", json!({"points": 1}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    let r = s
        .patch("/team?team_id=eq.999", json!({"points": 1}))
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().await.expect("json"), json!([]));

    // Logic trees filter writes too.
    let r = s
        .patch(
            "/team?or=(team_id.eq.9,team_id.eq.10)",
            json!({"points": 77}),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(count(&s, "SELECT count(*) FROM team WHERE points = 77"), 2);
    assert_eq!(
        count(&s, "SELECT sum(team_id) FROM team WHERE points = 77"),
        19
    );
}

async fn patch_item_url(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .patch("/team/3", json!({"points": 1}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(team(&s, 3), Some(("Red Bull".into(), 1)));
    assert_eq!(team(&s, 4), Some(("McLaren".into(), 302)));
    let r = s
        .patch("/team/4", json!({"points": 2}))
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().await.expect("json");
    let row = if body.is_array() {
        body[0].clone()
    } else {
        body
    };
    assert_eq!(row, json!({"team_id": 4, "name": "McLaren", "points": 2}));
}

async fn put_filter_and_item_url(b: Backend) {
    let s = TestServer::start(b).await;
    // Replace an existing row by filter.
    let r = s
        .put(
            "/team?team_id=eq.5",
            json!({"team_id": 5, "name": "Aston Martin Aramco", "points": 281}),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    empty_body(r).await;
    assert_eq!(team(&s, 5), Some(("Aston Martin Aramco".into(), 281)));
    // Replace by item URL.
    let r = s
        .put(
            "/team/5",
            json!({"team_id": 5, "name": "Aston Martin", "points": 282}),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(team(&s, 5), Some(("Aston Martin".into(), 282)));
    // Insert when absent, by filter and by item URL.
    let r = s
        .put(
            "/team?team_id=eq.42",
            json!({"team_id": 42, "name": "Newcomer", "points": 0}),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(team(&s, 42), Some(("Newcomer".into(), 0)));
    let r = s
        .put(
            "/team/43",
            json!({"team_id": 43, "name": "Other", "points": 3}),
        )
        .send()
        .await
        .expect("request");
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(team(&s, 43), Some(("Other".into(), 3)));
    // with its representation, a row created is 201, one replaced 200
    for (id, status) in [(44, 201), (44, 200)] {
        let r = s
            .put(
                &format!("/team?team_id=eq.{id}"),
                json!({"team_id": id, "name": "Twice", "points": 1}),
            )
            .header("Prefer", REPR)
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), status);
    }
    s.exec("DELETE FROM team WHERE team_id = 44");
    assert_eq!(count(&s, "SELECT count(*) FROM team"), 12);

    // return=representation gives the row.
    let r = s
        .put(
            "/team?team_id=eq.6",
            json!({"team_id": 6, "name": "Alpine F1", "points": 121}),
        )
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!([{"team_id": 6, "name": "Alpine F1", "points": 121}])
    );

    // The key in the body must agree with the URL.
    let before = teams(&s);
    let r = s
        .put(
            "/team?team_id=eq.5",
            json!({"team_id": 6, "name": "Mismatch", "points": 0}),
        )
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "PGRST115").await;
    let r = s
        .put(
            "/team/5",
            json!({"team_id": 7, "name": "Mismatch", "points": 0}),
        )
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "PGRST115").await;
    assert_eq!(teams(&s), before);

    // The full primary key must be given with eq.
    for path in [
        "/team?name=eq.Ferrari",
        "/team",
        "/team?team_id=gt.5",
        "/team?team_id=eq.5&name=eq.x",
    ] {
        let r = s
            .put(path, json!({"team_id": 5, "name": "Nope", "points": 0}))
            .send()
            .await
            .expect("request");
        assert_error(r, 405, "PGRST105").await;
    }
    // and no limit or offset (PostgREST's PGRST114)
    for path in ["/team?team_id=eq.5&limit=1", "/team?team_id=eq.5&offset=1"] {
        let r = s
            .put(path, json!({"team_id": 5, "name": "Nope", "points": 0}))
            .send()
            .await
            .expect("request");
        let body = assert_error(r, 400, "PGRST114").await;
        assert_eq!(
            body["message"],
            "limit/offset querystring parameters are not allowed for PUT"
        );
    }
    assert_eq!(teams(&s), before);
}

async fn delete_with_filters(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .delete("/driver?team_id=eq.10")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    empty_body(r).await;
    assert_eq!(count(&s, "SELECT count(*) FROM driver"), 18);
    assert_eq!(
        count(&s, "SELECT count(*) FROM driver WHERE team_id = 10"),
        0
    );

    // return=representation: the deleted rows.
    let r = s
        .delete("/driver?team_id=eq.9")
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        sorted(r.json().await.expect("json"), "driver_id"),
        vec![
            json!({"driver_id": 17, "name": "Valtteri Bottas", "points": 10, "team_id": 9}),
            json!({"driver_id": 18, "name": "Zhou Guanyu", "points": 6, "team_id": 9})
        ]
    );
    assert_eq!(count(&s, "SELECT count(*) FROM driver"), 16);

    // Item URL.
    let r = s.delete("/driver/1").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        count(&s, "SELECT count(*) FROM driver WHERE driver_id = 1"),
        0
    );
    assert_eq!(count(&s, "SELECT count(*) FROM driver"), 15);

    // No filter: every row.
    let r = s.delete("/posts").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(count(&s, "SELECT count(*) FROM posts"), 0);

    // Nothing matches.
    let r = s
        .delete("/driver?driver_id=eq.999")
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().await.expect("json"), json!([]));
    assert_eq!(count(&s, "SELECT count(*) FROM driver"), 15);
}

/// `order=` orders a write's representation (a write's statement returns its rows in no
/// order): PATCH, DELETE with an embed, an insert with NULLs placed, and CSV.
async fn write_representations_are_ordered(b: Backend) {
    let s = TestServer::start(b).await;
    let names = |rows: &Value| -> Vec<String> {
        rows.as_array()
            .expect("rows")
            .iter()
            .map(|r| r["name"].as_str().expect("name").to_string())
            .collect()
    };
    let (_, expected) = get_json(&s, "/driver?team_id=lte.3&select=name&order=name.desc").await;
    let r = s
        .patch(
            "/driver?team_id=lte.3&select=name&order=name.desc",
            json!({"points": 1}),
        )
        .header("Prefer", REPR)
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status().as_u16(), 200);
    let patched: Value = r.json().await.expect("json");
    assert_eq!(names(&patched), names(&expected));
    assert_eq!(names(&patched).len(), 6);

    let r = s
        .delete("/driver?team_id=eq.9&select=driver_id,team(name)&order=driver_id.desc")
        .header("Prefer", REPR)
        .send()
        .await
        .expect("delete");
    let deleted: Value = r.json().await.expect("json");
    assert_eq!(
        deleted,
        json!([
            {"driver_id": 18, "team": {"name": "Alfa Romeo"}},
            {"driver_id": 17, "team": {"name": "Alfa Romeo"}}
        ])
    );

    let r = s
        .post(
            "/driver?select=name,team_id&order=team_id.desc.nullslast,name",
            json!([
                {"driver_id": 90, "name": "Zed", "team_id": null},
                {"driver_id": 91, "name": "Amy", "team_id": 1},
                {"driver_id": 92, "name": "Bob", "team_id": 2},
                {"driver_id": 93, "name": "Abe", "team_id": null}
            ]),
        )
        .header("Prefer", REPR)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!([
            {"name": "Bob", "team_id": 2},
            {"name": "Amy", "team_id": 1},
            {"name": "Abe", "team_id": null},
            {"name": "Zed", "team_id": null}
        ])
    );

    let r = s
        .delete("/driver?driver_id=gte.90&select=name&order=name")
        .header("Prefer", REPR)
        .header("Accept", "text/csv")
        .send()
        .await
        .expect("delete");
    let text = r.text().await.expect("csv");
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["name", "Abe", "Amy", "Bob", "Zed"]
    );
    // an embedded resource's column cannot order what a write returns
    let r = s
        .delete("/driver?driver_id=eq.1&select=name,team(name)&order=team(name)")
        .header("Prefer", REPR)
        .send()
        .await
        .expect("delete");
    assert_error(r, 400, "PGRST100").await;
    assert_eq!(
        count(&s, "SELECT count(*) FROM driver WHERE driver_id = 1"),
        1
    );
}

async fn max_affected_strict(b: Backend) {
    let s = TestServer::start(b).await;
    let before = teams(&s);
    let r = s
        .patch("/team?team_id=in.(1,2)", json!({"points": 0}))
        .header("Prefer", "handling=strict, max-affected=1")
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "PGRST124").await;
    assert_eq!(teams(&s), before);

    let r = s
        .delete("/driver?team_id=eq.1")
        .header("Prefer", "handling=strict")
        .header("Prefer", "max-affected=1")
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "PGRST124").await;
    assert_eq!(
        count(&s, "SELECT count(*) FROM driver WHERE team_id = 1"),
        2
    );

    // Within the limit: applied.
    let r = s
        .patch("/team?team_id=in.(1,2)", json!({"points": 0}))
        .header("Prefer", "handling=strict, max-affected=2")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(count(&s, "SELECT count(*) FROM team WHERE points = 0"), 2);

    // Lenient handling ignores max-affected.
    let r = s
        .patch("/team?team_id=in.(3,4)", json!({"points": 0}))
        .header("Prefer", "max-affected=1")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(count(&s, "SELECT count(*) FROM team WHERE points = 0"), 4);
}

async fn if_match_on_item_writes(b: Backend) {
    let s = TestServer::start(b).await;
    let etag = |r: &reqwest::Response| header(r, "etag").expect("etag");
    let tag = etag(&s.get("/team/3").send().await.expect("request"));

    let r = s
        .patch("/team/3", json!({"points": 900}))
        .header("If-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(team(&s, 3), Some(("Red Bull".into(), 900)));

    // The old ETag is stale now.
    let r = s
        .patch("/team/3", json!({"points": 1}))
        .header("If-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 412);
    let body: Value = r.json().await.expect("json error");
    assert!(
        body["code"].is_string() && body["message"].is_string(),
        "{body}"
    );
    assert_eq!(team(&s, 3), Some(("Red Bull".into(), 900)));

    // One of several tags matching is enough; `*` matches any existing row.
    let current = etag(&s.get("/team/3").send().await.expect("request"));
    let r = s
        .patch("/team/3", json!({"points": 901}))
        .header("If-Match", format!("\"nope\", {current}"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    let r = s
        .patch("/team/3", json!({"points": 902}))
        .header("If-Match", "*")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(team(&s, 3), Some(("Red Bull".into(), 902)));

    // DELETE: a change made elsewhere makes the ETag stale.
    let tag = etag(&s.get("/driver/4").send().await.expect("request"));
    s.exec("UPDATE driver SET points = 201 WHERE driver_id = 4");
    let r = s
        .delete("/driver/4")
        .header("If-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 412);
    assert_eq!(
        count(&s, "SELECT count(*) FROM driver WHERE driver_id = 4"),
        1
    );
    let tag = etag(&s.get("/driver/4").send().await.expect("request"));
    let r = s
        .delete("/driver/4")
        .header("If-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        count(&s, "SELECT count(*) FROM driver WHERE driver_id = 4"),
        0
    );

    // A row that is gone matches nothing.
    let r = s
        .delete("/driver/4")
        .header("If-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 412);
}

/// A PUT by filters on a composite key whose values hold commas: its If-Match is checked
/// against that row (the key values were once joined with commas and split again, which lost
/// the key filter and compared the ETag with some other row's).
async fn put_if_match_on_a_composite_key_with_commas(b: Backend) {
    let s = TestServer::start_prepared(
        b,
        tempfile::tempdir().expect("tempdir"),
        rowgate::config::Config::default(),
        "CREATE TABLE pairs (a text, b text, n integer, PRIMARY KEY (a, b));
         INSERT INTO pairs VALUES ('x,y', 'z', 1), ('a', 'b', 2);",
        |_| {},
    )
    .await;
    let etag = |r: &reqwest::Response| header(r, "etag").expect("etag");
    let other = etag(
        &s.get("/pairs?a=eq.a&b=eq.b")
            .header("Accept", "application/vnd.pgrst.object+json")
            .send()
            .await
            .expect("request"),
    );
    let mine = etag(
        &s.get("/pairs?a=eq.x,y&b=eq.z")
            .header("Accept", "application/vnd.pgrst.object+json")
            .send()
            .await
            .expect("request"),
    );
    assert_ne!(other, mine);
    let put = |tag: String, n: i64| {
        s.put(
            "/pairs?a=eq.x,y&b=eq.z",
            json!({"a": "x,y", "b": "z", "n": n}),
        )
        .header("If-Match", tag)
        .send()
    };
    let r = put(other, 10).await.expect("request");
    assert_eq!(r.status().as_u16(), 412);
    assert_eq!(count(&s, "SELECT count(*) FROM pairs WHERE n = 10"), 0);
    let r = put(mine, 11).await.expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        count(&s, "SELECT count(*) FROM pairs WHERE a = 'x,y' AND n = 11"),
        1
    );
}

async fn singular_write_rolls_back(b: Backend) {
    let s = TestServer::start(b).await;
    let before = teams(&s);
    let r = s
        .patch("/team?team_id=in.(1,2)", json!({"points": 0}))
        .header("Accept", OBJECT)
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_error(r, 406, "PGRST116").await;
    assert_eq!(teams(&s), before);

    let r = s
        .delete("/driver?team_id=eq.1")
        .header("Accept", OBJECT)
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_error(r, 406, "PGRST116").await;
    assert_eq!(count(&s, "SELECT count(*) FROM driver"), 20);

    let r = s
        .post("/team", json!([{"name": "S1"}, {"name": "S2"}]))
        .header("Accept", OBJECT)
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_error(r, 406, "PGRST116").await;
    assert_eq!(teams(&s), before);

    // Exactly one row: the object.
    let r = s
        .patch("/team?team_id=eq.1", json!({"points": 1}))
        .header("Accept", OBJECT)
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert!(header(&r, "content-type")
        .unwrap_or_default()
        .starts_with(OBJECT));
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"team_id": 1, "name": "Mercedes", "points": 1})
    );
    let r = s
        .post("/team", json!({"name": "Single"}))
        .header("Accept", OBJECT)
        .header("Prefer", REPR)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(r.json::<Value>().await.expect("json")["name"], "Single");
}

/// A singular `Accept` guards writes that return nothing too (PostgREST: 406, rolled back).
async fn singular_minimal_write_rolls_back(b: Backend) {
    let s = TestServer::start(b).await;
    let before = teams(&s);
    let drivers = count(&s, "SELECT count(*) FROM driver");
    let singular = |r: reqwest::RequestBuilder| r.header("Accept", OBJECT);
    for request in [
        s.patch("/team?team_id=lte.4", json!({"points": 0})),
        s.patch("/team?team_id=eq.999", json!({"points": 0})),
        s.post("/team", json!([{"name": "M1"}, {"name": "M2"}])),
        s.post("/team", json!([])),
        s.delete("/driver?team_id=in.(1,2,3)"),
        s.delete("/driver?team_id=eq.999"),
    ] {
        let r = singular(request).send().await.expect("request");
        let body = assert_error(r, 406, "PGRST116").await;
        assert!(
            body["details"].as_str().unwrap_or("").contains("rows"),
            "{body}"
        );
    }
    assert_eq!(teams(&s), before);
    assert_eq!(count(&s, "SELECT count(*) FROM driver"), drivers);
    // Exactly one row, nothing returned: 204, committed.
    let r = singular(s.patch("/team?team_id=eq.2", json!({"points": 7})))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(team(&s, 2).map(|t| t.1), Some(7));
}

async fn form_urlencoded_body(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .client
        .post(s.url("/team"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("name=Form+Team%21&points=3")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    // A form value is text; the column's type decides what is stored.
    let points = s.int("SELECT points FROM team WHERE name = 'Form Team!'");
    assert_eq!(points, 3);
    if b == Backend::Sqlite {
        let kind = s.rows("SELECT typeof(points) FROM team WHERE name = 'Form Team!'");
        assert_eq!(text(&kind[0][0]), "integer");
    }

    let r = s
        .client
        .patch(s.url("/team?team_id=eq.1"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("points=7")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(team(&s, 1), Some(("Mercedes".into(), 7)));
}

async fn views_are_read_only(b: Backend) {
    let s = TestServer::start(b).await;
    let before = teams(&s);
    let r = s
        .post("/team_standings", json!({"name": "X", "points": 1}))
        .send()
        .await
        .expect("request");
    // the code agrees with the status (issue 13, item 11)
    assert_error(r, 405, "RG405").await;
    let r = s
        .patch("/team_standings?team_id=eq.1", json!({"points": 1}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 405);
    let r = s
        .delete("/team_standings?team_id=eq.1")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 405);
    let r = s
        .put(
            "/team_standings?team_id=eq.1",
            json!({"team_id": 1, "name": "X", "points": 1, "drivers": 2}),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 405);
    let body: Value = r.json().await.expect("json error");
    assert!(body["code"].is_string(), "{body}");
    assert_eq!(teams(&s), before);
    assert_eq!(count(&s, "SELECT count(*) FROM driver"), 20);
}

async fn concurrent_posts(b: Backend) {
    let s = TestServer::start(b).await;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let client = s.client.clone();
        let url = s.url("/people?select=id,first_name");
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .header("Prefer", "return=representation")
                .json(&json!({
                    "first_name": format!("Conc{i}"), "last_name": "Current", "city": "Oslo",
                    "birth_date": "2000-01-01", "created_at": "2024-01-01T00:00:00"
                }))
                .send()
                .await
                .expect("request");
            assert_eq!(r.status().as_u16(), 201);
            let body: Value = r.json().await.expect("json");
            assert_eq!(body[0]["first_name"], format!("Conc{i}"));
            body[0]["id"].as_i64().expect("id")
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.expect("task"));
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 50, "distinct ids");
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM people WHERE last_name = 'Current'"
        ),
        50
    );
    assert_eq!(count(&s, "SELECT count(*) FROM people"), 250);
    for id in ids {
        let name = s
            .rows(&format!("SELECT first_name FROM people WHERE id = {id}"))
            .first()
            .map(|r| text(&r[0]))
            .expect("acknowledged row is present");
        assert!(name.starts_with("Conc"), "{name}");
    }
    // And the server sees them too.
    let (_, body) = get_json(&s, "/people?last_name=eq.Current&select=id").await;
    assert_eq!(body.as_array().map(Vec::len), Some(50));
}

/// In one group commit, failing writes must not take the successful ones down with them.
async fn concurrent_posts_with_failures(b: Backend) {
    let s = TestServer::start(b).await;
    let mut tasks = Vec::new();
    for i in 0..40 {
        let client = s.client.clone();
        let url = s.url("/team");
        // Every other request reuses an existing (UNIQUE) name.
        let name = if i % 2 == 0 {
            format!("Concurrent {i}")
        } else {
            "Ferrari".to_string()
        };
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .json(&json!({"name": name, "points": i}))
                .send()
                .await
                .expect("request");
            (i, r.status().as_u16())
        }));
    }
    for t in tasks {
        let (i, status) = t.await.expect("task");
        assert_eq!(status, if i % 2 == 0 { 201 } else { 409 }, "request {i}");
    }
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM team WHERE name LIKE 'Concurrent %'"
        ),
        20
    );
    assert_eq!(count(&s, "SELECT count(*) FROM team"), 30);
    assert_eq!(team(&s, 2), Some(("Ferrari".into(), 406)));
}

async fn representation_as_csv(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post(
            "/team?select=name,points",
            json!({"name": "Csv Team", "points": 9}),
        )
        .header("Prefer", REPR)
        .header("Accept", "text/csv")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    assert!(header(&r, "content-type")
        .unwrap_or_default()
        .starts_with("text/csv"));
    let text = r.text().await.expect("text");
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["name,points", "Csv Team,9"]
    );
}

/// A JSON string written to a JSON column is stored as JSON (quoted), by an insert and by a
/// PATCH alike (a PATCH used to bind it as bare text: refused by PostgreSQL's jsonb, stored as
/// invalid JSON by SQLite); a null leaves it null; a NOT NULL column set to null by a PATCH is
/// refused even when no row matches; select= and order= of a write name real columns.
async fn json_strings_and_write_checks(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .post(
            "/race",
            json!({"name": "Json GP", "laps": 3, "podium": "hello"}),
        )
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 201);
    let stored =
        |s: &TestServer| s.rows("SELECT podium FROM race WHERE name = 'Json GP'")[0][0].clone();
    assert_eq!(stored(&s).as_deref(), Some("\"hello\""));
    let r = s
        .patch("/race?name=eq.Json%20GP", json!({"podium": "bye"}))
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body[0]["podium"], "bye");
    assert_eq!(stored(&s).as_deref(), Some("\"bye\""));
    let r = s
        .patch("/team?team_id=eq.99999", json!({"name": null}))
        .send()
        .await
        .expect("patch");
    assert_error(r, 400, "23502").await;
    // an integer written with a fraction is an integer (JSON Schema's view); a real fraction
    // is refused
    let r = s
        .post("/team", json!({"name": "Float Racing", "points": 456.0}))
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body[0]["points"], 456);
    let r = s
        .post("/team", json!({"name": "Half Racing", "points": 456.5}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400);
    // an item key outside its column's range (64-bit here; 32-bit integer on PostgreSQL)
    let r = s
        .get("/team/99999999999999999999")
        .send()
        .await
        .expect("get");
    assert_error(r, 400, "PGRST100").await;
    for query in ["select=nope", "order=nope"] {
        let r = s
            .delete(&format!("/team?team_id=eq.99999&{query}"))
            .send()
            .await
            .expect("delete");
        assert_error(r, 400, "PGRST204").await;
    }
}

/// What a value may be is checked before any row is touched: a CHECK bound (`laps > 0`) by a
/// PATCH whether or not a row matches; a date in ISO 8601 only (PostgreSQL reads `2024-01-02*`
/// as a date, and `01/02/2024` by its DateStyle), with PostgreSQL's special words on
/// PostgreSQL; a number as written (1923763560306917.0 was read one step off).
async fn values_checked_before_writing(b: Backend) {
    let s = TestServer::start(b).await;
    for filter in ["race_id=eq.99999", "race_id=eq.1"] {
        let r = s
            .patch(&format!("/race?{filter}"), json!({"laps": 0}))
            .send()
            .await
            .expect("patch");
        let body = assert_error(r, 400, "23514").await;
        assert!(body.to_string().contains("laps"), "{body}");
    }
    assert_eq!(count(&s, "SELECT count(*) FROM race WHERE laps <= 0"), 0);
    for (i, date) in ["2024-01-02*", "01/02/2024", "2024-02-30"]
        .into_iter()
        .enumerate()
    {
        let r = s
            .post(
                "/race",
                json!({"name": format!("Date GP {i}"), "laps": 3, "race_date": date}),
            )
            .send()
            .await
            .expect("post");
        let body: Value = r.json().await.expect("json");
        assert!(
            body["code"] == "22007" || body["code"] == "22008",
            "{date}: {body}"
        );
        let r = s
            .patch("/race?race_id=eq.1", json!({"race_date": date}))
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status(), 400, "{date}");
    }
    assert_eq!(
        count(&s, "SELECT count(*) FROM race WHERE name LIKE 'Date GP%'"),
        0
    );
    let r = s
        .post(
            "/race",
            json!({"name": "Forever GP", "laps": 3, "race_date": "infinity"}),
        )
        .send()
        .await
        .expect("post");
    let status = r.status().as_u16();
    match b {
        Backend::Postgres => assert_eq!(status, 201),
        Backend::Sqlite => assert_eq!(status, 400),
    }
    let salary = 1_923_763_560_306_917.0_f64;
    let r = s
        .post(
            "/employee",
            json!({"first_name": "Ada", "last_name": "Big", "hire_date": "2024-01-02T10:00:00",
                "dept_no": "600", "job_code": "VP", "job_grade": 2, "job_country": "USA",
                "salary": salary}),
        )
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body[0]["salary"].as_f64(), Some(salary), "{body}");
}

/// A PATCH or PUT body may be an array of one object, as PostgREST takes it; `[]` patches
/// nothing; an array of several is refused (PostgREST would apply some one of them).
async fn one_element_arrays(b: Backend) {
    let s = TestServer::start(b).await;
    let r = s
        .put(
            "/team?team_id=eq.70",
            json!([{"team_id": 70, "name": "Arr", "points": 1}]),
        )
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("put");
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(team(&s, 70), Some(("Arr".to_string(), 1)));
    let r = s
        .patch("/team?team_id=eq.70", json!([{"points": 2}]))
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body[0]["points"], 2);
    for empty in [json!([]), json!([{}]), json!({})] {
        let r = s
            .patch("/team?team_id=eq.70", empty.clone())
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status(), 204, "{empty}");
        assert_eq!(header(&r, "content-range").as_deref(), Some("*/*"));
    }
    assert_eq!(team(&s, 70), Some(("Arr".to_string(), 2)));
    for (method, body) in [
        ("PATCH", json!([{"points": 3}, {"points": 4}])),
        ("PUT", json!([])),
        (
            "PUT",
            json!([{"team_id": 70, "name": "A"}, {"team_id": 70, "name": "B"}]),
        ),
    ] {
        let write = match method {
            "PATCH" => s.patch("/team?team_id=eq.70", body.clone()),
            _ => s.put("/team?team_id=eq.70", body.clone()),
        };
        let r = write.send().await.expect("write");
        assert_error(r, 400, "PGRST102").await;
    }
    assert_eq!(team(&s, 70), Some(("Arr".to_string(), 2)));
}

/// A write's `Content-Range` as PostgREST's: an insert `*/*`, an update or delete `0-(n-1)/*`
/// (`*/*` when nothing matched), and `*/n` whenever `Prefer: count=exact` asks.
async fn write_content_ranges(b: Backend) {
    let s = TestServer::start(b).await;
    let counted = |r: reqwest::RequestBuilder| r.header("prefer", "count=exact");
    for (request, status, range) in [
        (
            s.post("/team", json!({"team_id": 71, "name": "Range A"})),
            201,
            "*/*",
        ),
        (
            counted(s.post(
                "/team",
                json!([{"team_id": 72, "name": "Range B"}, {"team_id": 73, "name": "Range C"}]),
            )),
            201,
            "*/2",
        ),
        (
            s.patch("/team?team_id=gte.71", json!({"points": 1})),
            204,
            "0-2/*",
        ),
        (
            counted(s.patch("/team?team_id=gte.71", json!({"points": 2}))),
            204,
            "*/3",
        ),
        (
            s.patch("/team?team_id=eq.999", json!({"points": 2})),
            204,
            "*/*",
        ),
        (counted(s.delete("/team?team_id=gte.72")), 204, "*/2"),
        // a delete says no range, as PostgREST
        (s.delete("/team?team_id=eq.71"), 204, "*/*"),
    ] {
        let r = request.send().await.expect("write");
        assert_eq!(
            (r.status().as_u16(), header(&r, "content-range").as_deref()),
            (status, Some(range))
        );
    }
}

/// `rest.tx_end` as PostgREST's `db-tx-end`: with an override allowed, `Prefer: tx=rollback`
/// answers the write as usual and keeps nothing (`tx=rollback` applied); without one, `tx=` is
/// ignored; `rollback` keeps nothing ever, unless `rollback-allow-override` and `tx=commit`.
async fn transaction_end(b: Backend) {
    for (end, prefer, kept, applied) in [
        ("commit", "tx=rollback", true, false),
        ("commit-allow-override", "tx=rollback", false, true),
        ("commit-allow-override", "tx=commit", true, true),
        ("rollback", "tx=commit", false, false),
        ("rollback-allow-override", "tx=commit", true, true),
        ("rollback-allow-override", "", false, false),
    ] {
        let s = TestServer::start_with(b, |c| {
            c.rest.tx_end = serde_json::from_value(json!(end)).expect("tx_end");
        })
        .await;
        let r = s
            .post("/team", json!({"team_id": 81, "name": "Maybe Racing"}))
            .header("prefer", format!("return=representation, {prefer}"))
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 201, "{end} {prefer}");
        assert_eq!(
            header(&r, "preference-applied").is_some_and(|h| h.contains(prefer) && applied),
            applied,
            "{end} {prefer}"
        );
        let body: Value = r.json().await.expect("json");
        assert_eq!(body[0]["name"], "Maybe Racing", "answered as usual");
        assert_eq!(team(&s, 81).is_some(), kept, "{end} {prefer}");
    }
}

/// Issue 39: a body of empty objects is rows of defaults, inserted by one statement however
/// many there are (a series of rows, `DEFAULT VALUES` for one), on both databases: every column
/// takes its default (SQLite writes a stand-in column with its own default), RETURNING gives
/// the rows, an upsert of them is as before; a nested cell is stored as the compact JSON text
/// it always was (keys in order, the last of a repeated key).
async fn rows_of_defaults(b: Backend) {
    let serial = match b {
        Backend::Sqlite => "INTEGER PRIMARY KEY",
        Backend::Postgres => "serial PRIMARY KEY",
    };
    let s = TestServer::start_prepared(
        b,
        tempfile::tempdir().expect("tempdir"),
        rowgate::config::Config::default(),
        &format!(
            "CREATE TABLE tick (id {serial}, label text DEFAULT 'new', code text UNIQUE,
                                n integer DEFAULT (2 + 3));
             CREATE TABLE loose (a text, b text DEFAULT 'b');"
        ),
        |_| {},
    )
    .await;
    let post = |path: &str, body: String, prefer: &str| {
        s.client
            .post(s.url(path))
            .header("Content-Type", "application/json")
            .header("Prefer", prefer.to_string())
            .body(body)
            .send()
    };
    let r = post("/tick", "[{},{},{}]".into(), REPR)
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 201);
    let row = |id: i64| json!({"id": id, "label": "new", "code": null, "n": 5});
    assert_eq!(
        sorted(r.json().await.expect("json"), "id"),
        vec![row(1), row(2), row(3)]
    );
    let r = post("/tick", "{}".into(), REPR).await.expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(r.json::<Value>().await.expect("json"), json!([row(4)]));
    // as an upsert: nothing conflicts, every row is written (merging them answers 200, as it
    // did when each was its own statement)
    for (resolution, status) in [("ignore-duplicates", 201), ("merge-duplicates", 200)] {
        let r = post(
            "/tick",
            "[{},{}]".into(),
            &format!("resolution={resolution}, {REPR}"),
        )
        .await
        .expect("post");
        assert_eq!(r.status().as_u16(), status, "{resolution}");
        let written: Vec<Value> = r.json().await.expect("json");
        assert_eq!(written.len(), 2, "{resolution}");
    }
    assert_eq!(count(&s, "SELECT count(*) FROM tick"), 8);
    // many: one statement
    let many = format!("[{}]", vec!["{}"; 50_000].join(","));
    let r = post("/tick", many, "return=minimal").await.expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM tick WHERE label = 'new' AND n = 5"
        ),
        50_008
    );
    assert_eq!(count(&s, "SELECT max(id) FROM tick"), 50_008);
    // a table whose first column has no default: null, the others their defaults
    let r = post("/loose", "[{},{}]".into(), REPR).await.expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!([{"a": null, "b": "b"}, {"a": null, "b": "b"}])
    );
    // a nested cell
    let r = post(
        "/tick",
        r#"[{"label": {"b": 1, "a": [1, 2.50, {"z": null, "y": "\u00e9"}], "b": 2}}]"#.into(),
        "return=minimal",
    )
    .await
    .expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        s.rows("SELECT label FROM tick WHERE id = 50009")[0][0].as_deref(),
        Some(r#"{"a":[1,2.5,{"y":"é","z":null}],"b":2}"#)
    );
}

backend_tests!(
    rows_of_defaults,
    transaction_end,
    write_content_ranges,
    one_element_arrays,
    values_checked_before_writing,
    json_strings_and_write_checks,
    post_one_minimal,
    post_array_is_one_transaction,
    post_columns_param_ignores_extra_keys,
    post_return_representation,
    post_return_headers_only,
    upsert_merge_duplicates,
    upsert_ignore_duplicates,
    upsert_on_conflict_column,
    missing_default,
    patch_with_filters,
    patch_item_url,
    put_filter_and_item_url,
    delete_with_filters,
    write_representations_are_ordered,
    max_affected_strict,
    if_match_on_item_writes,
    put_if_match_on_a_composite_key_with_commas,
    singular_write_rolls_back,
    singular_minimal_write_rolls_back,
    form_urlencoded_body,
    views_are_read_only,
    concurrent_posts,
    concurrent_posts_with_failures,
    representation_as_csv,
);
