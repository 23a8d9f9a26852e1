//! Aggregate functions in `select=` (PostgREST's `count()`, `col.sum()`, `avg`, `min`, `max`)
//! through a real server on both backends: off by default (`PGRST123`), then counts and
//! aggregates with aliases and casts, grouped by the other selected columns (and by a to-one
//! embed), ordered and limited by group, inside to-many embeds (an empty one aggregates to
//! nulls and a zero count), and the places they are refused: spreads (`PGRST127`), an order
//! on a column not grouped (`42803`), what a write returns.

mod common;

use common::{assert_error, Backend, TestServer};
use serde_json::{json, Value};

const GRANTS: &str = r#"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]
"#;

async fn server(b: Backend, aggregates: bool) -> TestServer {
    let rest = if aggregates {
        "[rest]\naggregates = true\n"
    } else {
        ""
    };
    TestServer::start_toml(b, &format!("{rest}{GRANTS}"), &[]).await
}

async fn read(s: &TestServer, path: &str) -> Value {
    let r = s.get(path).send().await.expect("get");
    let status = r.status();
    let body: Value = r.json().await.expect("json");
    assert_eq!(status, 200, "{path}: {body}");
    body
}

async fn refused(s: &TestServer, path: &str, code: &str) -> Value {
    let r = s.get(path).send().await.expect("get");
    assert_error(r, 400, code).await
}

/// Off unless `rest.aggregates` is set, at the top and inside embeds.
async fn off_by_default(b: Backend) {
    let s = server(b, false).await;
    for path in [
        "/driver?select=points.sum()",
        "/driver?select=count()",
        "/team?select=name,driver(points.sum())",
    ] {
        let body = refused(&s, path, "PGRST123").await;
        assert_eq!(body["message"], "Use of aggregate functions is not allowed");
    }
    // the older count of rows is a column, as before
    assert_eq!(
        read(&s, "/driver?select=count").await,
        json!([{"count": 20}])
    );
}

/// Counts and aggregates, named by their function or an alias, cast before and after, grouped
/// by the other columns.
async fn counts_and_aggregates(b: Backend) {
    let s = server(b, true).await;
    assert_eq!(
        read(&s, "/driver?select=count()").await,
        json!([{"count": 20}])
    );
    assert_eq!(
        read(&s, "/driver?select=n:count()").await,
        json!([{"n": 20}])
    );
    assert_eq!(
        read(&s, "/driver?select=count()::text").await,
        json!([{"count": "20"}])
    );
    let total: i64 = s.int("SELECT sum(points) FROM driver");
    assert_eq!(
        read(&s, "/driver?select=points.sum()").await,
        json!([{"sum": total}])
    );
    assert_eq!(
        read(&s, "/driver?select=points.sum()::text").await,
        json!([{"sum": total.to_string()}])
    );
    // per team: the two drivers of Red Bull (575 and 285 points)
    let red_bull = read(
        &s,
        "/driver?select=points.sum(),points.avg(),points.max(),points.min(),points.count(),\
         n:count(),team_id&team_id=eq.3",
    )
    .await;
    assert_eq!(red_bull[0]["sum"], 860);
    assert_eq!(red_bull[0]["avg"].as_f64(), Some(430.0), "{red_bull}");
    assert_eq!(
        (
            &red_bull[0]["max"],
            &red_bull[0]["min"],
            &red_bull[0]["count"]
        ),
        (&json!(575), &json!(285), &json!(2))
    );
    assert_eq!(red_bull[0]["n"], 2);
    // grouped by every column without an aggregate, ordered and limited by group
    let by_team = read(
        &s,
        "/driver?select=t:team_id,total:points.sum()&order=team_id.desc&limit=2",
    )
    .await;
    assert_eq!(
        by_team,
        json!([{"t": 10, "total": 12}, {"t": 9, "total": 16}])
    );
    // a to-one embed groups as its foreign key does
    let with_team = read(
        &s,
        "/driver?select=team_id,total:points.sum(),team(name)&order=team_id&limit=1",
    )
    .await;
    assert_eq!(
        with_team,
        json!([{"team_id": 1, "total": 409, "team": {"name": "Mercedes"}}])
    );
    // a value out of a JSON column, cast before it is summed
    s.exec(r#"UPDATE race SET podium = '{"laps": 3}' WHERE race_id IN (1, 2)"#);
    assert_eq!(
        read(&s, "/race?select=podium->>laps::integer.sum()").await,
        json!([{"sum": 6}])
    );
}

/// Inside a to-many embed, per parent row: one aggregate row (of nulls and a zero count for a
/// parent without related rows), or one per group.
async fn aggregates_in_embeds(b: Backend) {
    let s = server(b, true).await;
    s.exec("INSERT INTO team (team_id, name, points) VALUES (50, 'Empty Racing', 0)");
    let teams = read(
        &s,
        "/team?select=name,driver(points.sum(),points.max(),n:count())&team_id=in.(3,50)&order=team_id",
    )
    .await;
    assert_eq!(
        teams,
        json!([
            {"name": "Red Bull", "driver": [{"sum": 860, "max": 575, "n": 2}]},
            {"name": "Empty Racing", "driver": [{"sum": null, "max": null, "n": 0}]}
        ])
    );
    let grouped = read(
        &s,
        "/team?select=name,driver(name,points.sum())&team_id=eq.3&driver.order=name",
    )
    .await;
    assert_eq!(
        grouped,
        json!([{"name": "Red Bull", "driver": [
            {"name": "Max Verstappen", "sum": 575},
            {"name": "Sergio Perez", "sum": 285}
        ]}])
    );
}

/// Aggregates in a to-one spread aggregate the parent's groups, as PostgREST's join does: the
/// spread's other items (a nested spread's too) group them; `count()` counts the group's rows;
/// the groups are ordered by a spread item's name.
async fn aggregates_in_to_one_spreads(b: Backend) {
    let s = server(b, true).await;
    // what the join gives: per team name, its drivers, their points and the team's points
    // counted once per driver
    let expected: Vec<Value> = s
        .rows(
            "SELECT t.name, count(*), sum(d.points), sum(t.points) FROM driver d JOIN team t ON t.team_id = d.team_id GROUP BY t.name ORDER BY t.name DESC",
        )
        .into_iter()
        .map(|r| {
            let n = |i: usize| -> i64 { r[i].as_deref().expect("n").parse().expect("int") };
            json!({"drivers": n(1), "driver_points": n(2), "team": r[0], "team_points": n(3)})
        })
        .collect();
    let got = read(
        &s,
        "/driver?select=drivers:count(),driver_points:points.sum(),...team(team:name,team_points:points.sum())&order=team(team).desc",
    )
    .await;
    assert_eq!(got, Value::Array(expected));
    // only aggregates: one group
    let total = s.int("SELECT sum(t.points) FROM driver d JOIN team t ON t.team_id = d.team_id");
    assert_eq!(
        read(&s, "/driver?select=...team(points.sum())").await,
        json!([{ "sum": total }])
    );
    // through a nested spread: per race, the points of its drivers' teams
    let first = s.int("SELECT min(race_id) FROM race");
    s.exec(&format!(
        "INSERT INTO driver_race_map (race_id, driver_id, position) VALUES ({first}, 1, 1), ({first}, 3, 2)"
    ));
    let nested = s.int(&format!(
        "SELECT sum(t.points) FROM driver_race_map m JOIN driver d ON d.driver_id = m.driver_id JOIN team t ON t.team_id = d.team_id WHERE m.race_id = {first}"
    ));
    assert_eq!(
        read(
            &s,
            &format!("/driver_race_map?select=race_id,...driver(...team(points.sum()))&race_id=eq.{first}")
        )
        .await,
        json!([{ "race_id": first, "sum": nested }])
    );
}

/// Where aggregates are refused: in a to-many spread, ordered by a column that is not grouped,
/// in what a write returns.
async fn where_aggregates_are_refused(b: Backend) {
    let s = server(b, true).await;
    let body = refused(&s, "/team?select=...driver(points.sum())", "PGRST127").await;
    assert!(body["details"]
        .as_str()
        .is_some_and(|d| d.contains("spread")));
    // a to-one spread with aggregates cannot group by an embedded resource (JSON)
    refused(
        &s,
        "/driver_race_map?select=...driver(points.sum(),team(name))",
        "PGRST127",
    )
    .await;
    // while a spread without aggregates beside them groups as its join does
    let teams = read(
        &s,
        "/driver?select=points.sum(),...team(name)&order=team(name)",
    )
    .await;
    assert_eq!(
        teams.as_array().map(Vec::len),
        Some(usize::try_from(s.int("SELECT count(DISTINCT team_id) FROM driver")).expect("n"))
    );
    let body = refused(
        &s,
        "/driver?select=team_id,points.sum()&order=name",
        "42803",
    )
    .await;
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("GROUP BY")),
        "{body}"
    );
    refused(
        &s,
        "/team?select=name,driver(team_id,points.sum())&driver.order=name",
        "42803",
    )
    .await;
    let r = s
        .post("/team", json!({"name": "Sum Racing", "points": 1}))
        .header("prefer", "return=representation")
        .query(&[("select", "points.sum()")])
        .send()
        .await
        .expect("post");
    assert_error(r, 400, "PGRST127").await;
    assert_eq!(
        s.int("SELECT count(*) FROM team WHERE name = 'Sum Racing'"),
        0
    );
    refused(&s, "/driver?select=points.median()", "PGRST100").await;
}

backend_tests!(
    off_by_default,
    counts_and_aggregates,
    aggregates_in_embeds,
    aggregates_in_to_one_spreads,
    where_aggregates_are_refused,
);
