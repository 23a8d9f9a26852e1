//! Resource embedding (PostgREST's semantics) through a real server, the same bodies on SQLite
//! and PostgreSQL: to-one objects, to-many arrays, many-to-many through a junction, nesting,
//! aliases, hints, `!inner`, `rel=is.null`, the embeds' own filters, order and limits, counts,
//! grants inside embeds, and PostgREST's errors when no relationship or several fit.

mod common;

use common::*;
use serde_json::{json, Value};

/// Another relationship between `team` and a new table, twice (ambiguous), and a
/// many-to-many through a junction whose primary key holds both foreign keys.
const SETUP: &str = "
CREATE TABLE duel (
    id   INTEGER PRIMARY KEY,
    home INTEGER REFERENCES team(team_id),
    away INTEGER REFERENCES team(team_id)
);
INSERT INTO duel VALUES (1, 1, 2), (2, 3, 1);
CREATE TABLE sponsor (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE team_sponsor (
    team_id    INTEGER REFERENCES team(team_id),
    sponsor_id INTEGER REFERENCES sponsor(id),
    PRIMARY KEY (team_id, sponsor_id)
);
INSERT INTO sponsor VALUES (1, 'Oil'), (2, 'Tea'), (3, 'Nobody');
INSERT INTO team_sponsor VALUES (1, 1), (1, 2), (2, 2);
INSERT INTO team VALUES (11, 'Lonely', 0);
CREATE VIEW pilots AS SELECT driver_id AS id, name AS pilot, team_id AS squad FROM driver;
CREATE TABLE seat (
    id        INTEGER PRIMARY KEY,
    driver_id INTEGER UNIQUE REFERENCES driver(driver_id),
    number    INTEGER
);
INSERT INTO seat VALUES (1, 1, 44), (2, 5, 1);
CREATE VIEW brands AS SELECT id AS brand_id, name AS brand FROM sponsor;
CREATE TABLE staff (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE dept (id INTEGER PRIMARY KEY, head_id INTEGER REFERENCES staff(id));
ALTER TABLE staff ADD COLUMN dept_id INTEGER REFERENCES dept(id);
";

async fn server(b: Backend) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    TestServer::start_prepared(b, dir, rowgate::config::Config::default(), SETUP, |_| {}).await
}

async fn ok(s: &TestServer, path: &str) -> Value {
    let (status, body) = get_json(s, path).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Many-to-one: an object; one-to-many: an array (`[]` when nothing relates); aliases; nesting
/// several levels deep, back and forth.
async fn to_one_and_to_many(b: Backend) {
    let s = server(b).await;
    assert_eq!(
        ok(
            &s,
            "/driver?select=name,team(name)&driver_id=lte.2&order=driver_id"
        )
        .await,
        json!([
            {"name": "Lewis Hamilton", "team": {"name": "Mercedes"}},
            {"name": "George Russell", "team": {"name": "Mercedes"}}
        ])
    );
    assert_eq!(
        ok(
            &s,
            "/team?select=name,driver(name,points)&team_id=in.(2,11)&order=team_id"
        )
        .await,
        json!([
            {"name": "Ferrari", "driver": [
                {"name": "Charles Leclerc", "points": 206},
                {"name": "Carlos Sainz", "points": 200}
            ]},
            {"name": "Lonely", "driver": []}
        ])
    );
    // an alias, the embed before the columns, and three levels
    assert_eq!(
        ok(
            &s,
            "/driver?select=crew:team(name,mates:driver(name)),driver_id&driver_id=eq.5"
        )
        .await,
        json!([{
            "crew": {"name": "Red Bull", "mates": [
                {"name": "Max Verstappen"}, {"name": "Sergio Perez"}
            ]},
            "driver_id": 5
        }])
    );
    // the foreign-key column names the relationship too
    assert_eq!(
        ok(&s, "/driver?select=team_id(name)&driver_id=eq.3").await,
        json!([{"team_id": {"name": "Ferrari"}}])
    );
    // an item URL with an embed
    let r = s
        .get("/team/4?select=name,driver(driver_id)")
        .header("accept", "application/vnd.pgrst.object+json")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("json");
    assert_eq!(
        body,
        json!({"name": "McLaren", "driver": [{"driver_id": 7}, {"driver_id": 8}]})
    );
}

/// Many-to-many through the junction, both ways.
async fn many_to_many(b: Backend) {
    let s = server(b).await;
    assert_eq!(
        ok(&s, "/team?select=name,sponsor(name)&team_id=in.(1,2,3)&order=team_id&sponsor.order=name.desc").await,
        json!([
            {"name": "Mercedes", "sponsor": [{"name": "Tea"}, {"name": "Oil"}]},
            {"name": "Ferrari", "sponsor": [{"name": "Tea"}]},
            {"name": "Red Bull", "sponsor": []}
        ])
    );
    assert_eq!(
        ok(
            &s,
            "/sponsor?select=name,team(team_id)&order=id&team.order=team_id"
        )
        .await,
        json!([
            {"name": "Oil", "team": [{"team_id": 1}]},
            {"name": "Tea", "team": [{"team_id": 1}, {"team_id": 2}]},
            {"name": "Nobody", "team": []}
        ])
    );
}

/// An embed's own filters, `or`, order, limit and offset apply to its rows, not its parents.
async fn embed_parameters(b: Backend) {
    let s = server(b).await;
    let path = "/team?select=team_id,driver(name)&team_id=lte.3&order=team_id\
                &driver.points=gt.200&driver.order=points.desc";
    assert_eq!(
        ok(&s, path).await,
        json!([
            {"team_id": 1, "driver": [{"name": "Lewis Hamilton"}]},
            {"team_id": 2, "driver": [{"name": "Charles Leclerc"}]},
            {"team_id": 3, "driver": [{"name": "Max Verstappen"}, {"name": "Sergio Perez"}]}
        ])
    );
    let path = "/team?select=team_id,driver(driver_id)&team_id=eq.3\
                &driver.order=driver_id.desc&driver.limit=1&driver.offset=1";
    assert_eq!(
        ok(&s, path).await,
        json!([{"team_id": 3, "driver": [{"driver_id": 5}]}])
    );
    let path = "/team?select=team_id,driver(driver_id)&team_id=eq.1\
                &driver.or=(driver_id.eq.2,points.gt.1000)";
    assert_eq!(
        ok(&s, path).await,
        json!([{"team_id": 1, "driver": [{"driver_id": 2}]}])
    );
    // a to-one embed filtered out is null
    assert_eq!(
        ok(&s, "/driver?select=driver_id,team(name)&driver_id=in.(1,3)&order=driver_id&team.name=eq.Ferrari").await,
        json!([
            {"driver_id": 1, "team": null},
            {"driver_id": 3, "team": {"name": "Ferrari"}}
        ])
    );
    // a bad column inside an embed is the embed's table's 400
    let (status, body) = get_json(&s, "/team?select=driver(nope)").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("PGRST204")),
        "{body}"
    );
    let (status, body) = get_json(&s, "/team?select=driver(name)&driver.nope=eq.1").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("PGRST204")),
        "{body}"
    );
}

/// `!inner` keeps only parents with related rows (the embed's filters applied), and the count
/// agrees; `rel=is.null` keeps those without, `rel=not.is.null` those with.
async fn inner_and_presence(b: Backend) {
    let s = server(b).await;
    let path = "/team?select=team_id,driver!inner(name)&driver.points=gt.230&order=team_id";
    let r = s
        .get(path)
        .header("prefer", "count=exact")
        .send()
        .await
        .expect("get");
    assert_eq!(
        r.headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok()),
        Some("0-1/2")
    );
    let body: Value = r.json().await.expect("json");
    assert_eq!(
        body,
        json!([
            {"team_id": 1, "driver": [{"name": "Lewis Hamilton"}]},
            {"team_id": 3, "driver": [{"name": "Max Verstappen"}, {"name": "Sergio Perez"}]}
        ])
    );
    assert_eq!(
        ok(&s, "/team?select=team_id,driver()&driver=is.null").await,
        json!([{"team_id": 11}])
    );
    // an embed that only filters, and nothing else selected: empty objects, as PostgREST
    assert_eq!(
        ok(&s, "/team?select=driver()&driver=is.null").await,
        json!([{}])
    );
    // the presence of related rows tested in a logic tree, each embed under its own filters
    let expected: Vec<Value> = s
        .ints(
            "SELECT team_id FROM team t WHERE EXISTS (SELECT 1 FROM driver d WHERE d.team_id = t.team_id AND d.points > 400) OR EXISTS (SELECT 1 FROM team_sponsor ts JOIN sponsor sp ON sp.id = ts.sponsor_id WHERE ts.team_id = t.team_id AND sp.name = 'Tea') ORDER BY team_id",
        )
        .into_iter()
        .map(|id| json!({ "team_id": id }))
        .collect();
    assert!(expected.len() >= 2, "{expected:?}");
    let path = "/team?select=team_id,driver(),sponsor()&driver.points=gt.400&sponsor.name=eq.Tea&or=(driver.not.is.null,sponsor.not.is.null)&order=team_id";
    assert_eq!(ok(&s, path).await, Value::Array(expected.clone()));
    let r = s
        .get(path)
        .header("prefer", "count=exact")
        .send()
        .await
        .expect("get");
    assert_eq!(
        r.headers()["content-range"],
        format!("0-{}/{}", expected.len() - 1, expected.len()).as_str()
    );
    let none = ok(
        &s,
        "/team?select=team_id,sponsor()&and=(sponsor.is.null,team_id.lte.2)&order=team_id",
    )
    .await;
    let unsponsored = s.ints(
        "SELECT team_id FROM team t WHERE team_id <= 2 AND NOT EXISTS (SELECT 1 FROM team_sponsor ts WHERE ts.team_id = t.team_id) ORDER BY team_id",
    );
    assert_eq!(
        none,
        Value::Array(
            unsponsored
                .into_iter()
                .map(|id| json!({ "team_id": id }))
                .collect()
        )
    );
    // embeds of nothing but embeds of nothing show nothing either, at any depth
    assert_eq!(
        ok(&s, "/team?select=team_id,driver(team())&team_id=eq.1").await,
        json!([{"team_id": 1}])
    );
    // a relation embedded under an alias is named by it in parameters
    let (status, body) = get_json(
        &s,
        "/team?select=team_id,crew:driver(name)&driver.order=name&team_id=eq.1",
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("PGRST108")),
        "{body}"
    );
    assert_eq!(
        body["hint"],
        "Change 'driver' to 'crew' in filters, orders or limits."
    );
    // parameters of an embed that select= does not have: PostgREST's 400
    for path in [
        "/team?select=name&driver.points=gt.1",
        "/team?select=name,driver(name)&driver.team.limit=1",
        "/team?select=name&sponsor.order=name",
    ] {
        let (status, body) = get_json(&s, path).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("PGRST108")),
            "{path}: {body}"
        );
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("is not an embedded resource in this request")),
            "{body}"
        );
    }
    let body = ok(
        &s,
        "/team?select=team_id,sponsor(id)&sponsor=not.is.null&order=team_id",
    )
    .await;
    assert_eq!(
        body,
        json!([
            {"team_id": 1, "sponsor": [{"id": 1}, {"id": 2}]},
            {"team_id": 2, "sponsor": [{"id": 2}]}
        ])
    );
}

/// No relationship: 400 `PGRST200` with PostgREST's words and a "Perhaps you meant" hint,
/// before an unknown column the select names too (PostgREST's order); several: 300
/// `PGRST201` with the candidates in `details`; a hint (constraint or column) picks one.
async fn relationship_errors_and_hints(b: Backend) {
    let s = server(b).await;
    let (status, body) = get_json(&s, "/team?select=name,drivers(name)").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "PGRST200");
    let (status, both) = get_json(&s, "/team?select=nope,drivers(name)").await;
    assert_eq!((status, &both), (400, &body));
    let (status, body_column) = get_json(&s, "/team?select=nope,driver(name)").await;
    assert_eq!((status, &body_column["code"]), (400, &json!("PGRST204")));
    assert_eq!(
        body["message"],
        "Could not find a relationship between 'team' and 'drivers' in the schema cache"
    );
    assert!(
        body["details"].as_str().is_some_and(|d| d
            .starts_with("Searched for a foreign key relationship between 'team' and 'drivers'")),
        "{body}"
    );
    assert_eq!(
        body["hint"],
        "Perhaps you meant 'driver' instead of 'drivers'."
    );

    // the candidates in PostgREST's order: to-many, to-one, then through junctions
    let (status, body) = get_json(&s, "/staff?select=id,dept(id)").await;
    assert_eq!(status, 300, "{body}");
    let cardinalities: Vec<&str> = body["details"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| c["cardinality"].as_str().expect("cardinality"))
        .collect();
    assert_eq!(cardinalities, ["one-to-many", "many-to-one"], "{body}");

    let (status, body) = get_json(&s, "/duel?select=id,team(name)").await;
    assert_eq!(status, 300, "{body}");
    assert_eq!(body["code"], "PGRST201");
    assert_eq!(
        body["message"],
        "Could not embed because more than one relationship was found for 'duel' and 'team'"
    );
    let details = body["details"].as_array().expect("details list");
    assert_eq!(details.len(), 2, "{body}");
    assert_eq!(details[0]["cardinality"], "many-to-one");
    assert_eq!(details[0]["embedding"], "duel with team");
    assert_eq!(
        details[0]["relationship"],
        "duel_away_fkey using duel(away) and team(team_id)"
    );
    assert_eq!(
        body["hint"],
        "Try changing 'team' to one of the following: 'team!duel_away_fkey', 'team!duel_home_fkey'. Find the desired relationship in the 'details' key."
    );
    assert_eq!(
        ok(
            &s,
            "/duel?select=id,home:team!duel_home_fkey(name),away:team!away(name)&order=id"
        )
        .await,
        json!([
            {"id": 1, "home": {"name": "Mercedes"}, "away": {"name": "Ferrari"}},
            {"id": 2, "home": {"name": "Red Bull"}, "away": {"name": "Mercedes"}}
        ])
    );
    let (status, body) = get_json(&s, "/duel?select=id,team!nothing(name)").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("PGRST200")),
        "{body}"
    );
    assert!(
        body["details"]
            .as_str()
            .is_some_and(|d| d.contains("using the hint 'nothing'")),
        "{body}"
    );
}

/// Grants apply inside embeds: a related table the role may not read refuses the request, and
/// the role's row filter and columns apply to the embedded rows.
async fn grants_apply_inside_embeds(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        r#"
[[grants]]
role = "anon"
tables = ["driver"]
ops = ["select"]

[[grants]]
role = "anon"
tables = ["team"]
ops = ["select"]
read_columns = ["team_id", "name"]
filter = "team_id=eq.1"
"#,
        &[],
    )
    .expect("config");
    let s = TestServer::start_prepared(b, dir, config, SETUP, |_| {}).await;
    assert_eq!(
        ok(
            &s,
            "/driver?select=driver_id,team(name)&driver_id=in.(1,3)&order=driver_id"
        )
        .await,
        json!([
            {"driver_id": 1, "team": {"name": "Mercedes"}},
            {"driver_id": 3, "team": null}
        ])
    );
    let (status, body) = get_json(&s, "/driver?select=team(points)").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("PGRST204")),
        "{body}"
    );
    let (status, body) = get_json(&s, "/team?select=name,sponsor(name)").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("RG401")),
        "{body}"
    );
}

/// A to-one embed spread into its parent (`...team(…)`): its keys are the parent's, at every
/// level; a to-many one cannot be spread.
async fn spread_to_one(b: Backend) {
    let s = server(b).await;
    assert_eq!(
        ok(
            &s,
            "/driver?select=name,...team(team_name:name,points)&driver_id=in.(1,3)&order=driver_id"
        )
        .await,
        json!([
            {"name": "Lewis Hamilton", "team_name": "Mercedes", "points": 409},
            {"name": "Charles Leclerc", "team_name": "Ferrari", "points": 406}
        ])
    );
    assert_eq!(
        ok(
            &s,
            "/team?select=name,driver(name,...team(tp:points))&team_id=eq.1&driver.order=driver_id"
        )
        .await,
        json!([{"name": "Mercedes", "driver": [
            {"name": "Lewis Hamilton", "tp": 409},
            {"name": "George Russell", "tp": 409}
        ]}])
    );
    // a to-one spread inside a to-one spread: read through both, its keys the outermost's
    let (_, expected) = get_json(
        &s,
        "/driver_race_map?select=id:driver_race_map_id,driver(name,team(name))&order=driver_race_map_id&limit=3",
    )
    .await;
    let flat: Vec<Value> = expected
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            json!({"id": r["id"], "driver": r["driver"]["name"], "team": r["driver"]["team"]["name"]})
        })
        .collect();
    assert_eq!(
        ok(
            &s,
            "/driver_race_map?select=id:driver_race_map_id,...driver(driver:name,...team(team:name))&order=driver_race_map_id&limit=3"
        )
        .await,
        Value::Array(flat)
    );
    // a spread whose related row is filtered out gives nulls; a nested embed inside a spread
    assert_eq!(
        ok(
            &s,
            "/duel?select=id,...team!home(home:name,sponsor(name))&order=id&team.sponsor.order=id"
        )
        .await,
        json!([
            {"id": 1, "home": "Mercedes", "sponsor": [{"name": "Oil"}, {"name": "Tea"}]},
            {"id": 2, "home": "Red Bull", "sponsor": []}
        ])
    );
}

/// A to-many spread (PostgREST 13): each of the related rows' keys becomes an array in the
/// parent, in the embed's order, `[]` when nothing relates; a to-one spread inside it adds its
/// keys as arrays too. The same values as the embed's rows, column by column.
async fn spread_to_many(b: Backend) {
    let s = server(b).await;
    let rows = ok(
        &s,
        "/team?select=team_id,driver(name,points)&order=team_id&driver.order=driver_id.desc",
    )
    .await;
    let spread = ok(
        &s,
        "/team?select=team_id,...driver(driver:name,points)&order=team_id&driver.order=driver_id.desc",
    )
    .await;
    let column = |team: &Value, key: &str| {
        Value::Array(
            team["driver"]
                .as_array()
                .expect("drivers")
                .iter()
                .map(|d| d[key].clone())
                .collect(),
        )
    };
    let expected: Vec<Value> = rows
        .as_array()
        .expect("teams")
        .iter()
        .map(|t| {
            json!({"team_id": t["team_id"], "driver": column(t, "name"),
                "points": column(t, "points")})
        })
        .collect();
    assert_eq!(spread, Value::Array(expected));
    assert!(
        spread
            .as_array()
            .expect("teams")
            .iter()
            .any(|t| t["driver"].as_array().is_some_and(|d| d.len() > 1)),
        "{spread}"
    );
    // nothing related: empty arrays; a to-one spread inside: its keys as arrays
    assert_eq!(
        ok(
            &s,
            "/team?select=name,...driver(id:driver_id)&team_id=eq.999"
        )
        .await,
        json!([])
    );
    let body = ok(
        &s,
        "/team?select=team_id,...driver(d:driver_id,...team(t:name))&team_id=eq.1&driver.order=driver_id",
    )
    .await;
    assert_eq!(
        body,
        json!([{"team_id": 1, "d": [1, 2], "t": ["Mercedes", "Mercedes"]}])
    );
}

/// `order=` names the table's column even where an output key has its name
/// (`select=name:points&order=name` orders by the name, as PostgREST).
async fn order_by_a_column_an_alias_shadows(b: Backend) {
    let s = server(b).await;
    let by_name = ok(&s, "/team?select=points&order=name,team_id").await;
    let aliased = ok(&s, "/team?select=name:points&order=name,team_id").await;
    let points = |v: &Value, key: &str| -> Vec<Value> {
        v.as_array()
            .expect("rows")
            .iter()
            .map(|r| r[key].clone())
            .collect()
    };
    assert_eq!(points(&aliased, "name"), points(&by_name, "points"));
}

/// Rows ordered by a column of an embedded to-one resource (`order=team(name).desc`); a
/// to-many one, or one not embedded, cannot order them.
async fn order_by_a_to_one_embed(b: Backend) {
    let s = server(b).await;
    let body = ok(
        &s,
        "/driver?select=driver_id,team(name)&order=team(name).desc,driver_id&limit=3",
    )
    .await;
    assert_eq!(
        body,
        json!([
            {"driver_id": 13, "team": {"name": "Williams"}},
            {"driver_id": 14, "team": {"name": "Williams"}},
            {"driver_id": 5, "team": {"name": "Red Bull"}}
        ])
    );
    // under an alias, by a column not selected, inside an embed
    let path = "/team?select=team_id,driver(driver_id,t:team(name))&team_id=eq.1\
                &driver.order=t(points).asc,driver_id.desc";
    assert_eq!(
        ok(&s, path).await,
        json!([{"team_id": 1, "driver": [
            {"driver_id": 2, "t": {"name": "Mercedes"}},
            {"driver_id": 1, "t": {"name": "Mercedes"}}
        ]}])
    );
    for (path, code) in [
        (
            "/team?select=name,driver(name)&order=driver(name)",
            "PGRST118",
        ),
        ("/driver?select=name&order=team(name)", "PGRST108"),
        (
            "/driver?select=name,team(name)&order=team(nope)",
            "PGRST204",
        ),
    ] {
        let (status, body) = get_json(&s, path).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some(code)),
            "{path}: {body}"
        );
    }
}

/// Values inside an embed are written as at the top level: booleans, JSON (and text that is not
/// JSON), blobs as `\\x` hex, numbers and nulls; spread too.
async fn values_are_written_as_at_the_top_level(b: Backend) {
    let kit = match b {
        Backend::Sqlite => {
            "CREATE TABLE kit (id INTEGER PRIMARY KEY, team_id INTEGER REFERENCES team(team_id),
                 logo BLOB, spec JSON, active BOOLEAN, note TEXT);
             INSERT INTO kit VALUES (1, 1, x'01ff', '{\"a\": [1, 2]}', 1, NULL),
                                    (2, 1, NULL, 'not json', 0, 'x')"
        }
        Backend::Postgres => {
            "CREATE TABLE kit (id INTEGER PRIMARY KEY, team_id INTEGER REFERENCES team(team_id),
                 logo bytea, spec json, active boolean, note text);
             INSERT INTO kit VALUES (1, 1, '\\x01ff', '{\"a\": [1, 2]}', true, NULL),
                                    (2, 1, NULL, '\"not json\"', false, 'x')"
        }
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let setup = format!("{SETUP}{kit}");
    let s = TestServer::start_prepared(b, dir, rowgate::config::Config::default(), &setup, |_| {})
        .await;
    let top = ok(&s, "/kit?select=logo,spec,active,note&order=id").await;
    assert_eq!(
        top,
        json!([
            {"logo": "\\x01ff", "spec": {"a": [1, 2]}, "active": true, "note": null},
            {"logo": null, "spec": "not json", "active": false, "note": "x"}
        ])
    );
    let embedded = ok(
        &s,
        "/team?select=kit(logo,spec,active,note)&team_id=eq.1&kit.order=id",
    )
    .await;
    assert_eq!(embedded, json!([{"kit": top}]));
    let spread = ok(&s, "/kit?select=id,...team(points)&order=id&limit=1").await;
    assert_eq!(spread, json!([{"id": 1, "points": 409}]));
    let spread = ok(
        &s,
        "/team?select=kit(id,...team(name))&team_id=eq.1&kit.order=id&kit.limit=1",
    )
    .await;
    assert_eq!(spread, json!([{"kit": [{"id": 1, "name": "Mercedes"}]}]));
}

/// A write's representation embeds related rows (`insert().select('*, team(name)')`), after
/// POST, PATCH, PUT and DELETE, spreads and embed parameters included.
async fn writes_answer_with_embeds(b: Backend) {
    let s = server(b).await;
    let send = |r: reqwest::RequestBuilder| async move {
        let r = r
            .header("prefer", "return=representation")
            .send()
            .await
            .expect("send");
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.expect("json"))
    };
    let (status, body) = send(s.post(
        "/driver?select=name,team(name)",
        json!({"driver_id": 100, "name": "New", "team_id": 2}),
    ))
    .await;
    assert_eq!(
        (status, body),
        (201, json!([{"name": "New", "team": {"name": "Ferrari"}}]))
    );
    let (status, body) = send(s.patch(
        "/team?team_id=eq.2&select=name,driver(driver_id)&driver.order=driver_id.desc",
        json!({"points": 1}),
    ))
    .await;
    assert_eq!(
        (status, body),
        (
            200,
            json!([{"name": "Ferrari", "driver": [
                {"driver_id": 100}, {"driver_id": 4}, {"driver_id": 3}
            ]}])
        )
    );
    let (status, body) = send(s.put(
        "/team/11?select=team_id,sponsor(name)",
        json!({"team_id": 11, "name": "Lonely", "points": 5}),
    ))
    .await;
    assert_eq!((status, body), (200, json!({"team_id": 11, "sponsor": []})));
    let (status, body) =
        send(s.delete("/driver?driver_id=eq.100&select=name,...team(team:name)")).await;
    assert_eq!(
        (status, body),
        (200, json!([{"name": "New", "team": "Ferrari"}]))
    );
    let (status, body) = get_json(&s, "/driver?driver_id=eq.100").await;
    assert_eq!((status, body), (200, json!([])));
}

/// Views relate through the base columns they carry (renamed too), both ways: the demo's
/// `team_standings` (over `team`) and `pilots` (over `driver`, its columns renamed).
async fn views_relate_through_their_base_columns(b: Backend) {
    let s = server(b).await;
    assert_eq!(
        ok(
            &s,
            "/team_standings?select=name,driver(name)&team_id=eq.2&driver.order=driver_id"
        )
        .await,
        json!([{"name": "Ferrari", "driver": [{"name": "Charles Leclerc"}, {"name": "Carlos Sainz"}]}])
    );
    assert_eq!(
        ok(
            &s,
            "/driver?select=name,team_standings(drivers)&driver_id=eq.1"
        )
        .await,
        json!([{"name": "Lewis Hamilton", "team_standings": {"drivers": 2}}])
    );
    assert_eq!(
        ok(
            &s,
            "/team?select=name,pilots(pilot)&team_id=eq.1&pilots.order=id"
        )
        .await,
        json!([{"name": "Mercedes", "pilots": [{"pilot": "Lewis Hamilton"}, {"pilot": "George Russell"}]}])
    );
    assert_eq!(
        ok(
            &s,
            "/pilots?select=pilot,team(name),team_standings(points)&id=eq.3"
        )
        .await,
        json!([{"pilot": "Charles Leclerc", "team": {"name": "Ferrari"}, "team_standings": {"points": 406}}])
    );
    // many-to-many from a view, and to a view, through the junction of their tables
    assert_eq!(
        ok(
            &s,
            "/team?select=name,brands(brand)&team_id=eq.1&brands.order=brand_id"
        )
        .await,
        json!([{"name": "Mercedes", "brands": [{"brand": "Oil"}, {"brand": "Tea"}]}])
    );
    assert_eq!(
        ok(
            &s,
            "/brands?select=brand,team_standings(name)&brand_id=eq.2&team_standings.order=team_id"
        )
        .await,
        json!([{"brand": "Tea", "team_standings": [{"name": "Mercedes"}, {"name": "Ferrari"}]}])
    );
    // the tables themselves relate as before: no ambiguity with the views over them
    assert_eq!(
        ok(&s, "/driver?select=team_id(name)&driver_id=eq.3").await,
        json!([{"team_id": {"name": "Ferrari"}}])
    );
}

/// `rel(count)`: the number of related rows (its filters applied), as PostgREST answers it.
async fn related_counts(b: Backend) {
    let s = server(b).await;
    assert_eq!(
        ok(
            &s,
            "/team?select=name,driver(count)&team_id=in.(1,11)&order=team_id"
        )
        .await,
        json!([
            {"name": "Mercedes", "driver": [{"count": 2}]},
            {"name": "Lonely", "driver": [{"count": 0}]}
        ])
    );
    assert_eq!(
        ok(
            &s,
            "/team?select=name,driver(n:count)&team_id=eq.1&driver.points=gt.200"
        )
        .await,
        json!([{"name": "Mercedes", "driver": [{"n": 1}]}])
    );
    assert_eq!(
        ok(&s, "/driver?select=name,team(count)&driver_id=eq.1").await,
        json!([{"name": "Lewis Hamilton", "team": {"count": 1}}])
    );
    assert_eq!(
        ok(&s, "/team?select=name,sponsor(count)&team_id=eq.1").await,
        json!([{"name": "Mercedes", "sponsor": [{"count": 2}]}])
    );
}

/// A foreign key on a unique column relates one row to at most one, both ways: objects.
async fn one_to_one_through_a_unique_key(b: Backend) {
    let s = server(b).await;
    assert_eq!(
        ok(
            &s,
            "/driver?select=name,seat(number)&driver_id=in.(1,2)&order=driver_id"
        )
        .await,
        json!([
            {"name": "Lewis Hamilton", "seat": {"number": 44}},
            {"name": "George Russell", "seat": null}
        ])
    );
    assert_eq!(
        ok(&s, "/seat?select=number,driver(name)&id=eq.2").await,
        json!([{"number": 1, "driver": {"name": "Max Verstappen"}}])
    );
}

backend_tests!(
    one_to_one_through_a_unique_key,
    related_counts,
    views_relate_through_their_base_columns,
    writes_answer_with_embeds,
    values_are_written_as_at_the_top_level,
    order_by_a_to_one_embed,
    spread_to_one,
    spread_to_many,
    order_by_a_column_an_alias_shadows,
    to_one_and_to_many,
    many_to_many,
    embed_parameters,
    inner_and_presence,
    relationship_errors_and_hints,
    grants_apply_inside_embeds,
);
