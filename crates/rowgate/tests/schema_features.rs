//! What PostgREST reads off the database's schema, through a real server: writes through
//! views PostgreSQL can write through (and 405 for those it cannot), a view's key taken from
//! its table, computed columns (functions of a row, granted as functions), the exposed schemas
//! as the search path, GET calling a VOLATILE function read-only, and a missing table named by
//! a function's own SQL answered as the database's error.

mod common;

use common::{assert_error, write_config, Backend, TestServer};
use serde_json::{json, Value};

const VIEWS: &str = r#"
CREATE VIEW team_names AS SELECT team_id, name FROM team;
CREATE VIEW team_lineup AS
  SELECT t.team_id, t.name, d.driver_id, d.name AS driver FROM team t LEFT JOIN driver d ON d.team_id = t.team_id;
CREATE RULE team_lineup_insert AS ON INSERT TO team_lineup DO INSTEAD
  INSERT INTO team (team_id, name) VALUES (new.team_id, new.name)
  RETURNING team_id, name, NULL::integer, NULL::text;
CREATE VIEW team_totals AS SELECT team_id, sum(points) AS total FROM team GROUP BY team_id;
CREATE FUNCTION shout(team) RETURNS text LANGUAGE sql STABLE AS $$ SELECT upper($1.name) $$;
CREATE FUNCTION hidden_len(team) RETURNS integer LANGUAGE sql STABLE AS $$ SELECT length($1.name) $$;
CREATE FUNCTION team_count() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM team $$;
CREATE FUNCTION reset_points() RETURNS void LANGUAGE sql AS $$ UPDATE team SET points = 0 $$;
CREATE FUNCTION broken() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN (SELECT count(*) FROM no_such_table); END $$;
CREATE FUNCTION crew(team) RETURNS SETOF driver LANGUAGE sql STABLE AS $$ SELECT * FROM driver WHERE team_id = $1.team_id $$;
CREATE FUNCTION employer(driver) RETURNS SETOF team ROWS 1 LANGUAGE sql STABLE AS $$ SELECT * FROM team WHERE team_id = $1.team_id $$;
CREATE FUNCTION rivals(team) RETURNS SETOF team LANGUAGE sql STABLE AS $$ SELECT * FROM team WHERE team_id <> $1.team_id $$;
"#;

/// Every table to anon; of the functions, those the tests call (not `hidden_len`, `rivals`).
const GRANTS: &str = r#"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]
functions = ["shout", "team_count", "reset_points", "broken", "crew", "employer"]
"#;

/// Anon reads every table and calls every function.
const READS_AND_CALLS: &str = r#"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select"]
functions = ["*"]
"#;

async fn start(b: Backend, setup: &str, toml: &str) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), toml, &[]).expect("config");
    TestServer::start_prepared(b, dir, config, setup, |_| {}).await
}

/// A GET's status and JSON body.
async fn get(s: &TestServer, path: &str) -> (u16, Value) {
    json_of(s.get(path).send().await.expect("get")).await
}

async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A simple view takes inserts, updates, upserts and deletes as its table would (PostgreSQL
/// writes through it), with its table's key for `Location` and PUT; a view it cannot write
/// through answers 405 naming the methods it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_writes_through_views() {
    let s = start(Backend::Postgres, VIEWS, GRANTS).await;
    let r = s
        .post("/team_names", json!({"team_id": 90, "name": "Viewed"}))
        .header("prefer", "return=headers-only")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(r.headers()["location"], "/api/team_names?team_id=eq.90");
    assert_eq!(s.int("SELECT count(*) FROM team WHERE name = 'Viewed'"), 1);
    let (status, body) = json_of(
        s.patch("/team_names?team_id=eq.90", json!({"name": "Renamed"}))
            .header("prefer", "return=representation")
            .send()
            .await
            .expect("patch"),
    )
    .await;
    assert_eq!(
        (status, body),
        (200, json!([{"team_id": 90, "name": "Renamed"}]))
    );
    // the key came from the table: PUT to an item URL upserts
    let r = s
        .put("/team_names/91", json!({"name": "Put"}))
        .send()
        .await
        .expect("put");
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(s.int("SELECT count(*) FROM team WHERE team_id = 91"), 1);
    let r = s
        .delete("/team_names?team_id=gte.90")
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(s.int("SELECT count(*) FROM team WHERE team_id >= 90"), 0);
    // a join's view has both tables' keys; a NULL one (an outer join's) is `is.null`, as
    // PostgREST writes the Location
    let r = s
        .post("/team_lineup", json!({"team_id": 93, "name": "Lined"}))
        .header("prefer", "return=headers-only")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        r.headers()["location"],
        "/api/team_lineup?team_id=eq.93&driver_id=is.null"
    );

    let teams = s.int("SELECT count(*) FROM team");
    let r = s
        .post("/team_totals", json!({"team_id": 92, "total": 1}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.headers()["allow"], "GET, HEAD");
    assert_error(r, 405, "RG405").await;
    let r = s
        .delete("/team_totals?team_id=eq.1")
        .send()
        .await
        .expect("delete");
    assert_error(r, 405, "RG405").await;
    assert_eq!(s.int("SELECT count(*) FROM team"), teams, "nothing written");
}

/// SQLite views are read; a view showing its table's key has that key (item URLs), as on
/// PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_views_are_read_only_with_their_tables_keys() {
    let s = start(
        Backend::Sqlite,
        "CREATE VIEW team_names AS SELECT team_id, name FROM team;",
        GRANTS,
    )
    .await;
    let (status, body) = get(&s, "/team_names/1").await;
    assert_eq!(status, 200);
    assert_eq!(body["team_id"], 1);
    let r = s
        .post("/team_names", json!({"team_id": 90, "name": "X"}))
        .send()
        .await
        .expect("post");
    assert_error(r, 405, "RG405").await;
}

/// A function taking a table's row is a computed column of it: read, filtered and ordered
/// when named, left out of `*`, and only for roles granted the function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_computed_columns() {
    let s = start(Backend::Postgres, VIEWS, GRANTS).await;
    let (status, body) = get(&s, "/team?select=team_id,shout&team_id=lte.2&order=team_id").await;
    assert_eq!(status, 200);
    let (_, plain) = get(&s, "/team?select=team_id,name&team_id=lte.2&order=team_id").await;
    let upper = |i: usize| plain[i]["name"].as_str().expect("name").to_uppercase();
    assert_eq!(
        body,
        json!([
            {"team_id": 1, "shout": upper(0)},
            {"team_id": 2, "shout": upper(1)}
        ])
    );
    // a filter and an order on it, and `*` without it
    let first = upper(0);
    let (_, body) = get(&s, &format!("/team?shout=eq.{first}&order=shout.desc")).await;
    let rows = body.as_array().expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["team_id"], 1);
    assert!(rows[0].get("shout").is_none(), "{body}");
    // in an embedded resource too
    let (status, body) = get(&s, "/driver?select=driver_id,team(shout)&driver_id=eq.1").await;
    assert_eq!(status, 200, "{body}");
    assert!(body[0]["team"]["shout"].is_string(), "{body}");
    // a function the role was not granted is no column of it
    let r = s
        .get("/team?select=team_id,hidden_len")
        .send()
        .await
        .expect("get");
    assert_error(r, 400, "PGRST204").await;
    let r = s
        .patch("/team?hidden_len=gt.0", json!({"points": 1}))
        .send()
        .await
        .expect("patch");
    assert_error(r, 400, "PGRST204").await;

    // writes filter on it and return it, as functions of the written row
    let (status, body) = json_of(
        s.patch(
            &format!("/team?shout=eq.{first}&select=team_id,shout,loud:shout"),
            json!({"points": 7}),
        )
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("patch"),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            200,
            json!([{"team_id": 1, "shout": first.clone(), "loud": first.clone()}])
        )
    );
    assert_eq!(s.int("SELECT points FROM team WHERE team_id = 1"), 7);
    let (status, body) = json_of(
        s.post(
            "/team?select=shout",
            json!({"team_id": 95, "name": "quiet"}),
        )
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("post"),
    )
    .await;
    assert_eq!((status, body), (201, json!([{"shout": "QUIET"}])));
    let r = s
        .delete("/team?shout=eq.QUIET&or=(shout.eq.NONE,team_id.eq.95)")
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(s.int("SELECT count(*) FROM team WHERE team_id = 95"), 0);
}

/// GET may call a VOLATILE function, read-only: one that reads answers, one that writes fails
/// (405 `25006`) and writes nothing. A table missing in a function's own SQL is the
/// database's error (404 `42P01`), not a stale schema cache's 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_volatile_functions_by_get_and_missing_tables() {
    let s = start(Backend::Postgres, VIEWS, GRANTS).await;
    let teams = s.int("SELECT count(*) FROM team");
    let (status, body) = get(&s, "/rpc/team_count").await;
    assert_eq!((status, body), (200, json!(teams)));
    let points = s.int("SELECT sum(points) FROM team");
    let r = s.get("/rpc/reset_points").send().await.expect("get");
    assert_error(r, 405, "25006").await;
    assert_eq!(s.int("SELECT sum(points) FROM team"), points);
    let r = s.post("/rpc/broken", json!({})).send().await.expect("post");
    let body = assert_error(r, 404, "42P01").await;
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("no_such_table")),
        "{body}"
    );
}

/// The exposed schemas are the search path, then `db.extra_search_path` (public by default),
/// as PostgREST sets it: a function naming a table of its schema unqualified finds it, and one
/// calling an extension's function unqualified finds it in an extra schema named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_search_path_is_the_exposed_schemas() {
    let setup = r#"
CREATE SCHEMA api;
CREATE SCHEMA ext;
CREATE TABLE api.notes (id integer PRIMARY KEY, body text);
INSERT INTO api.notes VALUES (1, 'a'), (2, 'b');
CREATE FUNCTION api.note_count() RETURNS bigint LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN (SELECT count(*) FROM notes); END $$;
CREATE FUNCTION ext.twice(integer) RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT $1 * 2 $$;
CREATE FUNCTION api.doubled() RETURNS integer LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN twice(21); END $$;
"#;
    let toml = r#"
[db]
schemas = "api"
extra_search_path = "public, ext"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select"]
functions = ["*"]
"#;
    let s = start(Backend::Postgres, setup, toml).await;
    let (status, body) = get(&s, "/rpc/note_count").await;
    assert_eq!((status, body), (200, json!(2)));
    let (status, body) = get(&s, "/notes?select=id").await;
    assert_eq!((status, body), (200, json!([{"id": 1}, {"id": 2}])));
    let (status, body) = get(&s, "/rpc/doubled").await;
    assert_eq!((status, body), (200, json!(42)));
    // without `ext` on the path, the extension's function is not found (PostgreSQL's 42883,
    // a function that does not fit what it is given)
    let plain = start(
        Backend::Postgres,
        setup,
        &toml.replace("extra_search_path = \"public, ext\"\n", ""),
    )
    .await;
    let r = plain.get("/rpc/doubled").send().await.expect("get");
    let body = assert_error(r, 400, "PGRST100").await;
    assert!(
        body["details"]
            .as_str()
            .is_some_and(|d| d.contains("twice(integer) does not exist")),
        "{body}"
    );
}

/// Views over tables of a schema that is not exposed relate as their tables do (PostgREST's
/// private schema behind API views): both ways, with the views' own column names, whatever
/// the subqueries in their expressions select.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_views_over_unexposed_tables_embed() {
    let setup = r#"
CREATE SCHEMA private;
CREATE TABLE private.writers (id integer PRIMARY KEY, name text);
CREATE TABLE private.works (id integer PRIMARY KEY, title text,
                            writer_id integer REFERENCES private.writers (id));
INSERT INTO private.writers VALUES (1, 'Ann'), (2, 'Bo');
INSERT INTO private.works VALUES (1, 'One', 1), (2, 'Two', 1), (3, 'Three', 2);
CREATE VIEW writers AS SELECT id, name FROM private.writers;
CREATE VIEW works AS SELECT id, title, writer_id AS author FROM private.works;
CREATE VIEW writer_counts AS SELECT id, name,
  (SELECT count(*) FROM (SELECT id FROM private.works w WHERE w.writer_id = writers.id) _) AS n
  FROM private.writers;
"#;
    let s = start(Backend::Postgres, setup, GRANTS).await;
    // a column named like one of a subquery in its expressions is still the view's own
    let (status, body) = get(&s, "/writer_counts?select=name,n,works(title)&id=eq.2").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([{"name": "Bo", "n": 1, "works": [{"title": "Three"}]}])
    );
    let (status, body) = get(&s, "/works?select=title,writers(name)&order=id").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([
            {"title": "One", "writers": {"name": "Ann"}},
            {"title": "Two", "writers": {"name": "Ann"}},
            {"title": "Three", "writers": {"name": "Bo"}}
        ])
    );
    let (status, body) = get(
        &s,
        "/writers?select=name,works(title)&id=eq.1&works.order=id",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([{"name": "Ann", "works": [{"title": "One"}, {"title": "Two"}]}])
    );
}

/// A function of a row returning rows of a table is a relationship embedded by its name
/// (PostgREST's computed relationship): `SETOF` an array, `ROWS 1` an object, with filters,
/// order and `!inner` as any embed, for roles granted the function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_computed_relationships() {
    let s = start(Backend::Postgres, VIEWS, GRANTS).await;
    let (status, by_key) = get(
        &s,
        "/team?select=name,c:driver(name)&team_id=lte.2&order=team_id&c.order=driver_id",
    )
    .await;
    assert_eq!(status, 200);
    let (status, computed) = get(
        &s,
        "/team?select=name,c:crew(name)&team_id=lte.2&order=team_id&c.order=driver_id",
    )
    .await;
    assert_eq!(status, 200, "{computed}");
    assert_eq!(computed, by_key);
    assert!(by_key[0]["c"].as_array().is_some_and(|a| !a.is_empty()));
    let (status, body) = get(
        &s,
        "/driver?select=driver_id,employer(team_id)&driver_id=eq.1",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let team = s.int("SELECT team_id FROM driver WHERE driver_id = 1");
    assert_eq!(
        body,
        json!([{"driver_id": 1, "employer": {"team_id": team}}])
    );
    // !inner with a filter on it: only the teams that have such a driver
    let name = by_key[0]["c"][0]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let (status, body) = json_of(
        s.get("/team?select=name,crew!inner(name)")
            .query(&[("crew.name", format!("eq.{name}"))])
            .send()
            .await
            .expect("get"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([{"name": by_key[0]["name"], "crew": [{"name": name}]}])
    );
    // a function the role was not granted relates nothing
    let r = s
        .get("/team?select=name,rivals(name)")
        .send()
        .await
        .expect("get");
    assert_error(r, 400, "PGRST200").await;
}

/// `Prefer: timezone=…` writes timestamps with time zone in that zone (the transaction's
/// `TimeZone`, as PostgREST), listed in `Preference-Applied`; a zone PostgreSQL does not know
/// is its 400 `22023`. A function call sees the request (`request.method`, `request.path`,
/// `request.headers`, `request.cookies`) as under PostgREST, and so do a write's defaults and
/// triggers (`request.jwt.claims`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_time_zones_and_request_settings() {
    let setup = r#"
CREATE TABLE stamps (id integer PRIMARY KEY, t timestamptz,
  author text DEFAULT (current_setting('request.jwt.claims', true)::json ->> 'role'),
  method text);
CREATE FUNCTION stamp_method() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN NEW.method = current_setting('request.method', true); RETURN NEW; END $$;
CREATE TRIGGER stamp_method BEFORE INSERT ON stamps FOR EACH ROW EXECUTE FUNCTION stamp_method();
INSERT INTO stamps VALUES (1, '2023-10-18 12:37:59.611+00');
CREATE FUNCTION seen() RETURNS json LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'method', current_setting('request.method', true),
    'path', current_setting('request.path', true),
    'header', current_setting('request.headers', true)::json ->> 'x-test',
    'cookie', current_setting('request.cookies', true)::json ->> 'sid') $$;
"#;
    let grants = READS_AND_CALLS.replace(r#"ops = ["select"]"#, r#"ops = ["select", "insert"]"#);
    let s = start(Backend::Postgres, setup, &grants).await;
    let r = s
        .get("/stamps?select=t")
        .header("prefer", "handling=strict, timezone=America/Los_Angeles")
        .send()
        .await
        .expect("get");
    assert_eq!(
        r.headers()["preference-applied"],
        "handling=strict, timezone=America/Los_Angeles"
    );
    let (status, body) = json_of(r).await;
    assert_eq!(
        (status, body),
        (200, json!([{"t": "2023-10-18T05:37:59.611-07:00"}]))
    );
    let r = s
        .get("/stamps?select=t")
        .header("prefer", "timezone=Not/AZone")
        .send()
        .await
        .expect("get");
    assert_error(r, 400, "22023").await;
    let (status, body) = json_of(
        s.get("/rpc/seen")
            .header("x-test", "hello")
            .header("cookie", "sid=abc; other=1")
            .send()
            .await
            .expect("get"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"method": "GET", "path": "/api/rpc/seen", "header": "hello", "cookie": "abc"})
    );
    let r = s
        .post("/stamps?select=author,method", json!({"id": 2}))
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("post");
    assert_eq!(
        json_of(r).await,
        (201, json!([{"author": "anon", "method": "POST"}]))
    );
}

/// SQLite has no time zones: `timezone=` is neither honoured nor listed as applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_leaves_time_zones_alone() {
    let s = start(Backend::Sqlite, "", GRANTS).await;
    let r = s
        .get("/team?select=team_id&limit=1")
        .header("prefer", "timezone=America/Los_Angeles")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("preference-applied").is_none());
}

/// Several exposed schemas are PostgREST's profiles: the first by default, another by
/// `Accept-Profile` (reads) or `Content-Profile` (writes), named back in `Content-Profile`;
/// its functions find its tables unqualified; a schema not exposed is 406 `PGRST106`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schemas_as_profiles() {
    let setup = r#"
CREATE SCHEMA v1;
CREATE SCHEMA v2;
CREATE TABLE v1.parents (id integer PRIMARY KEY, name text);
CREATE TABLE v2.parents (id integer PRIMARY KEY, name text);
INSERT INTO v1.parents VALUES (1, 'one');
INSERT INTO v2.parents VALUES (2, 'two');
CREATE FUNCTION v2.parent_count() RETURNS bigint LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN (SELECT count(*) FROM parents); END $$;
"#;
    let toml = r#"
[db]
schemas = "v1,v2"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select", "insert"]
functions = ["*"]
"#;
    let s = start(Backend::Postgres, setup, toml).await;
    let r = s.get("/parents").send().await.expect("get");
    assert_eq!(r.headers()["content-profile"], "v1");
    assert_eq!(json_of(r).await, (200, json!([{"id": 1, "name": "one"}])));
    let r = s
        .get("/parents")
        .header("accept-profile", "v2")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["content-profile"], "v2");
    assert_eq!(json_of(r).await, (200, json!([{"id": 2, "name": "two"}])));
    let r = s
        .post("/parents", json!({"id": 3, "name": "three"}))
        .header("content-profile", "v2")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(s.int("SELECT count(*) FROM v2.parents"), 2);
    assert_eq!(s.int("SELECT count(*) FROM v1.parents"), 1);
    let r = s
        .get("/rpc/parent_count")
        .header("accept-profile", "v2")
        .send()
        .await
        .expect("get");
    assert_eq!(json_of(r).await, (200, json!(2)));
    // the OpenAPI document of a profile names it
    let r = s
        .get("/")
        .header("accept-profile", "v2")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["content-profile"], "v2");
    let r = s
        .get("/parents")
        .header("accept-profile", "v3")
        .send()
        .await
        .expect("get");
    let body = assert_error(r, 406, "PGRST106").await;
    assert_eq!(
        body["hint"],
        "Only the following schemas are exposed: v1, v2"
    );
}

/// One schema: no `Content-Profile`; SQLite takes any profile (supabase-js sends
/// `Accept-Profile: public`), having one namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_schema_has_no_profiles() {
    for b in [Backend::Sqlite, Backend::Postgres] {
        let s = start(b, "", GRANTS).await;
        let r = s
            .get("/team?select=team_id&limit=1")
            .header("accept-profile", "public")
            .send()
            .await
            .expect("get");
        assert_eq!(r.status().as_u16(), 200, "{b:?}");
        assert!(r.headers().get("content-profile").is_none(), "{b:?}");
    }
}

/// A table with a foreign key to itself: embedding it by its own name gives its children
/// (PostgREST's recursive one-to-many); the key's column names its parent; both nest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_references_embed_children_by_name_and_parents_by_column() {
    let setup = r#"
CREATE TABLE family (id integer PRIMARY KEY, name text, parent integer REFERENCES family (id));
INSERT INTO family VALUES (1, 'root', NULL), (2, 'kid one', 1), (3, 'kid two', 1), (4, 'grandkid', 2);
"#;
    for b in [Backend::Sqlite, Backend::Postgres] {
        let s = start(b, setup, GRANTS).await;
        let (status, body) = get(
            &s,
            "/family?select=name,family(name,family(name))&id=eq.1&family.order=id",
        )
        .await;
        assert_eq!(status, 200, "{b:?}: {body}");
        assert_eq!(
            body,
            json!([{"name": "root", "family": [
                {"name": "kid one", "family": [{"name": "grandkid"}]},
                {"name": "kid two", "family": []}
            ]}]),
            "{b:?}"
        );
        let (status, body) = get(&s, "/family?select=name,parent(name,parent(name))&id=eq.4").await;
        assert_eq!(status, 200, "{b:?}: {body}");
        assert_eq!(
            body,
            json!([{"name": "grandkid", "parent": {"name": "kid one", "parent": {"name": "root"}}}]),
            "{b:?}"
        );
    }
}

/// A function's value of a media type (a domain named after one, `xml`, `bytea`, a domain over
/// `bytea`: its bytes) is answered raw when `Accept` asks for that type before JSON (a
/// browser's `text/html` first, which nothing here is, passed over), JSON otherwise; a type it
/// does not have is 406.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_raw_values_by_media_type() {
    let setup = r#"
CREATE DOMAIN "text/plain" AS text;
CREATE FUNCTION hello() RETURNS "text/plain" LANGUAGE sql IMMUTABLE AS $$ SELECT 'Hello'::"text/plain" $$;
CREATE FUNCTION tag() RETURNS xml LANGUAGE sql IMMUTABLE AS $$ SELECT '<a/>'::xml $$;
CREATE FUNCTION blob() RETURNS bytea LANGUAGE sql IMMUTABLE AS $$ SELECT '\x00ff41'::bytea $$;
CREATE DOMAIN "image/png" AS bytea;
CREATE FUNCTION picture() RETURNS "image/png" LANGUAGE sql IMMUTABLE AS $$ SELECT '\x89504e47'::"image/png" $$;
CREATE SCHEMA media;
CREATE DOMAIN media."text/csv" AS text;
CREATE FUNCTION listing() RETURNS media."text/csv" LANGUAGE sql IMMUTABLE AS $$ SELECT 'a,b'::media."text/csv" $$;
"#;
    let s = start(Backend::Postgres, setup, READS_AND_CALLS).await;
    // a media type's domain of another schema
    let r = s
        .get("/rpc/listing")
        .header("accept", "text/csv")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    assert_eq!(r.text().await.expect("body"), "a,b");
    let raw = |path: &'static str, accept: &'static str| {
        let s = &s;
        async move {
            let r = s
                .get(path)
                .header("accept", accept)
                .send()
                .await
                .expect("get");
            let status = r.status().as_u16();
            let ct = r.headers()["content-type"]
                .to_str()
                .expect("ct")
                .to_string();
            (status, ct, r.bytes().await.expect("body").to_vec())
        }
    };
    assert_eq!(
        raw("/rpc/hello", "text/plain").await,
        (200, "text/plain; charset=utf-8".into(), b"Hello".to_vec())
    );
    assert_eq!(
        raw("/rpc/tag", "text/xml").await,
        (200, "text/xml; charset=utf-8".into(), b"<a/>".to_vec())
    );
    assert_eq!(
        raw("/rpc/blob", "application/octet-stream").await,
        (200, "application/octet-stream".into(), vec![0, 255, 65])
    );
    for accept in [
        "image/png",
        "image/png, */*",
        "text/html,application/xhtml+xml,application/xml;q=0.9,image/png,*/*;q=0.8",
    ] {
        assert_eq!(
            raw("/rpc/picture", accept).await,
            (200, "image/png".into(), vec![0x89, b'P', b'N', b'G']),
            "{accept}"
        );
    }
    let (status, ct, body) = raw("/rpc/picture", "application/json, image/png").await;
    assert_eq!((status, body), (200, b"\"\\\\x89504e47\"".to_vec()), "{ct}");
    let (status, ct, body) = raw("/rpc/hello", "application/json").await;
    assert_eq!((status, body), (200, b"\"Hello\"".to_vec()), "{ct}");
    let r = s
        .get("/rpc/hello")
        .header("accept", "text/xml")
        .send()
        .await
        .expect("get");
    assert_error(r, 406, "PGRST107").await;
}

/// A function or a write's trigger shapes the answer through `response.headers` and
/// `response.status` (PostgREST's settings): headers added or replacing Rowgate's (two
/// `Set-Cookie` both sent), the status replaced; settings not of their shape are 500
/// `PGRST111`/`PGRST112`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_response_settings() {
    let setup = r#"
CREATE FUNCTION refuse() RETURNS json LANGUAGE sql AS $$
  SELECT set_config('response.status', '403', true);
  SELECT json_build_object('message', 'no') $$;
CREATE FUNCTION cookies() RETURNS void LANGUAGE sql AS $$
  SELECT set_config('response.headers', '[{"Set-Cookie": "a=1; Path=/"}, {"Set-Cookie": "b=2"}, {"Cache-Control": "no-store"}]', true) $$;
CREATE FUNCTION bad_headers() RETURNS int LANGUAGE sql AS $$
  SELECT set_config('response.headers', '{"not": "an array"}', true); SELECT 1 $$;
CREATE FUNCTION bad_status() RETURNS int LANGUAGE sql AS $$
  SELECT set_config('response.status', 'teapot', true); SELECT 1 $$;
CREATE FUNCTION mark_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
  PERFORM set_config('response.headers', '[{"X-Written": "yes"}]', true); RETURN NEW; END $$;
CREATE TRIGGER mark BEFORE INSERT ON team FOR EACH ROW EXECUTE FUNCTION mark_write();
"#;
    let toml = r#"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select", "insert"]
functions = ["*"]
"#;
    let s = start(Backend::Postgres, setup, toml).await;
    let r = s.post("/rpc/refuse", json!({})).send().await.expect("post");
    assert_eq!(json_of(r).await, (403, json!({"message": "no"})));
    let r = s
        .post("/rpc/cookies", json!({}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 204);
    let cookies: Vec<&str> = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().expect("ascii"))
        .collect();
    assert_eq!(cookies, ["a=1; Path=/", "b=2"]);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let r = s
        .post("/rpc/bad_headers", json!({}))
        .send()
        .await
        .expect("post");
    assert_error(r, 500, "PGRST111").await;
    let r = s
        .post("/rpc/bad_status", json!({}))
        .send()
        .await
        .expect("post");
    assert_error(r, 500, "PGRST112").await;
    let r = s
        .post("/team", json!({"team_id": 95, "name": "Triggered"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(r.headers()["x-written"], "yes");
}

/// JSON paths into columns that are not JSON (a composite, an array) read them as JSON first,
/// as PostgREST: in `select`, filters and `order`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_json_paths_into_composites_and_arrays() {
    let setup = r#"
CREATE TYPE complex AS (r double precision, i double precision);
CREATE TABLE shapes (id integer PRIMARY KEY, c complex, xs integer[]);
INSERT INTO shapes VALUES (1, ROW(1.5, 2)::complex, '{10,20}'), (2, ROW(0.5, -1)::complex, '{30,40}');
"#;
    let s = start(Backend::Postgres, setup, GRANTS).await;
    let (status, body) = get(&s, "/shapes?select=id,i:c->i,second:xs->1&order=c->>r.desc").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([{"id": 1, "i": 2, "second": 20}, {"id": 2, "i": -1, "second": 40}])
    );
    let (status, body) = get(&s, "/shapes?select=id&xs->>0=eq.30").await;
    assert_eq!((status, body), (200, json!([{"id": 2}])));
}

/// A `VARIADIC` parameter takes an array, or a query string's repeated (or single) argument;
/// another parameter repeated in a query string takes its last value, as PostgREST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_variadic_parameters() {
    let setup = r#"
CREATE FUNCTION tags(VARIADIC v text[] DEFAULT '{}') RETURNS text[] LANGUAGE sql IMMUTABLE AS $$ SELECT v $$;
CREATE FUNCTION greet(name text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'Hello, ' || name $$;
"#;
    let s = start(Backend::Postgres, setup, READS_AND_CALLS).await;
    assert_eq!(get(&s, "/rpc/tags?v=a&v=b").await, (200, json!(["a", "b"])));
    assert_eq!(get(&s, "/rpc/tags?v=a").await, (200, json!(["a"])));
    assert_eq!(get(&s, "/rpc/tags").await, (200, json!([])));
    let r = s
        .post("/rpc/tags", json!({"v": ["x", "y"]}))
        .send()
        .await
        .expect("post");
    assert_eq!(json_of(r).await, (200, json!(["x", "y"])));
    assert_eq!(
        get(&s, "/rpc/greet?name=ignored&name=world").await,
        (200, json!("Hello, world"))
    );
}

/// A domain with implicit casts to and from JSON and from text (PostgREST's domain
/// representations) is read through its JSON cast (in `*`, named, renamed, embedded and under
/// a returned write), written through its JSON cast (POST, PATCH, PUT) and filtered through its
/// text cast; a column named with dashes is a plain name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_domain_representations() {
    let setup = r#"
CREATE DOMAIN hue AS integer CHECK (VALUE >= 0 AND VALUE <= 16777215);
CREATE FUNCTION hue(text) RETURNS hue LANGUAGE sql IMMUTABLE AS $$
  SELECT (('x' || lpad(CASE WHEN left($1, 1) = '#' THEN substr($1, 2) ELSE $1 END, 8, '0'))::bit(32)::int)::hue $$;
CREATE FUNCTION hue(json) RETURNS hue LANGUAGE sql IMMUTABLE AS $$ SELECT hue($1 #>> '{}') $$;
CREATE FUNCTION json(hue) RETURNS json LANGUAGE sql IMMUTABLE AS $$
  SELECT to_json('#' || upper(lpad(to_hex($1), 6, '0'))) $$;
CREATE CAST (hue AS json) WITH FUNCTION json(hue) AS IMPLICIT;
CREATE CAST (json AS hue) WITH FUNCTION hue(json) AS IMPLICIT;
CREATE CAST (text AS hue) WITH FUNCTION hue(text) AS IMPLICIT;
CREATE TABLE swatch (id integer PRIMARY KEY, "main-hue" hue, team_id integer REFERENCES team);
INSERT INTO swatch VALUES (1, 255, 1), (2, 65280, 2);
"#;
    let s = start(Backend::Postgres, setup, GRANTS).await;
    assert_eq!(
        get(&s, "/swatch?select=id,main-hue&order=id").await,
        (
            200,
            json!([{"id": 1, "main-hue": "#0000FF"}, {"id": 2, "main-hue": "#00FF00"}])
        )
    );
    // a filter's value goes through the text cast, in a list too; renamed and `*` formatted
    assert_eq!(
        get(&s, "/swatch?select=id,c:main-hue&main-hue=eq.00FF00").await,
        (200, json!([{"id": 2, "c": "#00FF00"}]))
    );
    let (_, body) = get(&s, "/swatch?main-hue=in.(0000FF,00FF00)&order=id").await;
    assert_eq!(body[0]["main-hue"], "#0000FF", "{body}");
    assert_eq!(body.as_array().map(Vec::len), Some(2));
    // embedded
    let (status, body) = get(&s, "/team?select=team_id,swatch(main-hue)&team_id=eq.1").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["swatch"], json!([{"main-hue": "#0000FF"}]));
    // written through the JSON cast, and answered formatted
    let r = s
        .post("/swatch", json!([{"id": 3, "main-hue": "#FF0000"}]))
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("post");
    assert_eq!(
        json_of(r).await,
        (
            201,
            json!([{"id": 3, "main-hue": "#FF0000", "team_id": null}])
        )
    );
    assert_eq!(
        s.int("SELECT \"main-hue\" FROM swatch WHERE id = 3"),
        16_711_680
    );
    let r = s
        .patch("/swatch?id=eq.3", json!({"main-hue": "#000010"}))
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("patch");
    assert_eq!(
        json_of(r).await,
        (
            200,
            json!([{"id": 3, "main-hue": "#000010", "team_id": null}])
        )
    );
    let r = s
        .put("/swatch?id=eq.4", json!({"id": 4, "main-hue": "#000001"}))
        .send()
        .await
        .expect("put");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(s.int("SELECT \"main-hue\" FROM swatch WHERE id = 4"), 1);
    // a value the cast refuses is the database's error, not a 500
    let r = s
        .patch("/swatch?id=eq.3", json!({"main-hue": "#GG"}))
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status().as_u16(), 400);
}

/// PATCH with `columns=` reads only those keys of the body (each must be a column), and with
/// `Prefer: missing=default` sets those the body lacks to their defaults, as PostgREST does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_takes_the_columns_named() {
    for b in [Backend::Sqlite, Backend::Postgres] {
        let setup =
            "CREATE TABLE note (id integer PRIMARY KEY, body text, \"n-th\" integer DEFAULT 7);
                     INSERT INTO note VALUES (1, 'old', 1);";
        let s = start(b, setup, GRANTS).await;
        let r = s
            .patch(
                "/note?id=eq.1&columns=body",
                json!({"body": "new", "n-th": 99, "nonsense": true}),
            )
            .header("prefer", "return=representation")
            .send()
            .await
            .expect("patch");
        assert_eq!(
            json_of(r).await,
            (200, json!([{"id": 1, "body": "new", "n-th": 1}])),
            "{b:?}"
        );
        let r = s
            .patch("/note?id=eq.1&columns=body,n-th", json!({"body": "newer"}))
            .header("prefer", "return=representation, missing=default")
            .send()
            .await
            .expect("patch");
        assert_eq!(
            json_of(r).await,
            (200, json!([{"id": 1, "body": "newer", "n-th": 7}])),
            "{b:?}"
        );
        let r = s
            .patch(
                "/note?id=eq.1&columns=body,helicopter",
                json!({"body": "x"}),
            )
            .send()
            .await
            .expect("patch");
        assert_error(r, 400, "PGRST204").await;
    }
}

/// An upsert into a table without a primary key (and no `on_conflict=`) has nothing to resolve
/// conflicts on: it is a plain insert, its resolution not listed as applied, as PostgREST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_upserts_are_inserts() {
    for b in [Backend::Sqlite, Backend::Postgres] {
        let s = start(b, "CREATE TABLE tally (a text, b text);", GRANTS).await;
        for _ in 0..2 {
            let r = s
                .post("/tally", json!({"a": "1", "b": "0"}))
                .header(
                    "prefer",
                    "resolution=merge-duplicates, return=representation",
                )
                .send()
                .await
                .expect("post");
            assert_eq!(
                r.headers()["preference-applied"],
                "return=representation",
                "{b:?}"
            );
            assert_eq!(json_of(r).await, (201, json!([{"a": "1", "b": "0"}])));
        }
        assert_eq!(s.int("SELECT count(*) FROM tally"), 2);
    }
}

/// A POST with a `text/plain` or `text/xml` body calls the function's one unnamed parameter of
/// that type with the body as it is (PostgREST's single unnamed parameter: `bytea` takes
/// `application/octet-stream`'s bytes; of overloads of one unnamed parameter a JSON body
/// goes to the json one); a function without
/// one is 404 `PGRST202` saying what was searched for. Every error names its code in
/// `Proxy-Status`, as PostgREST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unnamed_text_and_xml_parameters() {
    let setup = r#"
CREATE DOMAIN "text/plain" AS text;
CREATE FUNCTION echo_text(text) RETURNS "text/plain" LANGUAGE sql IMMUTABLE AS $$ SELECT $1::"text/plain" $$;
CREATE FUNCTION echo_xml(xml) RETURNS xml LANGUAGE sql IMMUTABLE AS $$ SELECT $1 $$;
CREATE FUNCTION takes_int(integer) RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT $1 $$;
CREATE FUNCTION echo(bytea) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$ SELECT $1 $$;
CREATE FUNCTION echo(text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'text: ' || $1 $$;
CREATE FUNCTION echo(json) RETURNS json LANGUAGE sql IMMUTABLE AS $$ SELECT json_build_object('json', $1) $$;
"#;
    let s = start(Backend::Postgres, setup, READS_AND_CALLS).await;
    let bytes: Vec<u8> = vec![0x89, 0, 0xff, b'\n', 0x80];
    let r = s
        .client
        .post(format!("{}/rpc/echo", s.base))
        .header("content-type", "application/octet-stream")
        .header("accept", "application/octet-stream")
        .body(bytes.clone())
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.bytes().await.expect("bytes").to_vec(), bytes);
    let r = s
        .post("/rpc/echo", json!({"a": 1}))
        .send()
        .await
        .expect("post");
    assert_eq!(json_of(r).await, (200, json!({"json": {"a": 1}})));
    for (function, media, body) in [
        ("echo_text", "text/plain", "plain, \"quoted\" \\ text"),
        ("echo_xml", "text/xml", "<note><to>Jane</to></note>"),
    ] {
        let r = s
            .client
            .post(format!("{}/rpc/{function}", s.base))
            .header("content-type", media)
            .header("accept", media)
            .body(body)
            .send()
            .await
            .expect("post");
        assert_eq!(r.status().as_u16(), 200, "{function}");
        assert_eq!(r.text().await.expect("text"), body);
    }
    let r = s
        .client
        .post(format!("{}/rpc/takes_int", s.base))
        .header("content-type", "text/plain")
        .body("7")
        .send()
        .await
        .expect("post");
    assert_eq!(r.headers()["proxy-status"], "Rowgate; error=PGRST202");
    let (status, body) = json_of(r).await;
    assert_eq!(status, 404);
    assert_eq!(
        body["details"],
        "Searched for the function public.takes_int with a single unnamed text parameter, but no matches were found in the schema cache."
    );
    // by name, it has no overload to suggest (its one parameter has none), and no function
    // of a name like it
    let r = s
        .post("/rpc/takes_int", json!({"x": 1, "y": 2}))
        .send()
        .await
        .expect("post");
    let body = assert_error(r, 404, "PGRST202").await;
    assert_eq!(body["hint"], Value::Null, "{body}");
}

/// A view showing one base column under two names relates through either (PostgREST's
/// issue 2459): each is a relationship, picked by its column as a hint, ambiguous without;
/// a view's column naming the parent in a table that references itself means the view's own
/// rows, not another view's over that table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_column_shown_twice_relates_twice() {
    let setup = r#"
CREATE TABLE shop (id integer PRIMARY KEY, name text);
CREATE TABLE sale (id integer PRIMARY KEY, shop_id integer REFERENCES shop);
INSERT INTO shop VALUES (1, 'one'); INSERT INTO sale VALUES (10, 1);
CREATE VIEW shops AS TABLE shop;
CREATE VIEW sales AS SELECT id, shop_id AS seller, shop_id AS buyer FROM sale;
"#;
    let s = start(Backend::Postgres, setup, GRANTS).await;
    for hint in ["seller", "buyer"] {
        assert_eq!(
            get(&s, &format!("/shops?select=name,sales!{hint}(id)")).await,
            (200, json!([{"name": "one", "sales": [{"id": 10}]}])),
            "{hint}"
        );
    }
    let (status, body) = get(&s, "/sales?select=id,shops!buyer(name)").await;
    assert_eq!(
        (status, body),
        (200, json!([{"id": 10, "shops": {"name": "one"}}]))
    );
    let r = s
        .get("/shops?select=name,sales(id)")
        .send()
        .await
        .expect("get");
    assert_error(r, 300, "PGRST201").await;

    // two views over a table that references itself: a view's column names its own parent,
    // not the other view's rows
    let setup = r#"
CREATE SCHEMA private;
CREATE TABLE private.node (id integer PRIMARY KEY, parent integer REFERENCES private.node, kind text);
INSERT INTO private.node VALUES (1, NULL, 'a'), (2, 1, 'a'), (3, 2, 'b');
CREATE VIEW node_a AS SELECT id, parent FROM private.node WHERE kind = 'a';
CREATE VIEW node_b AS SELECT id, parent FROM private.node WHERE kind = 'b';
"#;
    let s = start(Backend::Postgres, setup, GRANTS).await;
    let (status, body) = get(&s, "/node_a?select=id,parent(id)&id=eq.2").await;
    assert_eq!(
        (status, body),
        (200, json!([{"id": 2, "parent": {"id": 1}}]))
    );
}

/// A `text/csv` body inserts its lines (a header naming the columns, `NULL` for null), as
/// PostgREST reads one; lines of another number of fields are 400 `PGRST102`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_bodies_insert() {
    for b in [Backend::Sqlite, Backend::Postgres] {
        let s = start(b, "CREATE TABLE pair (a text, b text);", GRANTS).await;
        let post = |body: &'static str| {
            s.client
                .post(format!("{}/pair", s.base))
                .header("content-type", "text/csv")
                .header("prefer", "return=representation")
                .body(body)
                .send()
        };
        let r = post("a,b\nbar,\"baz, quoted\"\nNULL,foo")
            .await
            .expect("post");
        assert_eq!(
            json_of(r).await,
            (
                201,
                json!([{"a": "bar", "b": "baz, quoted"}, {"a": null, "b": "foo"}])
            ),
            "{b:?}"
        );
        let r = post("a,b\nfoo,bar\nbaz").await.expect("post");
        let body = assert_error(r, 400, "PGRST102").await;
        assert_eq!(body["message"], "All lines must have same number of fields");
        assert_eq!(s.int("SELECT count(*) FROM pair"), 2);
    }
}

/// A view over a table of an unexposed schema is a junction, as its table would be: the
/// many-to-many relationship runs through the view's columns (PostgREST's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_views_are_junctions() {
    let setup = r#"
CREATE SCHEMA private;
CREATE TABLE private.fan (id integer PRIMARY KEY, name text);
CREATE TABLE private.fan_team (fan_id integer REFERENCES private.fan(id), team_id integer REFERENCES team(team_id), PRIMARY KEY (fan_id, team_id));
INSERT INTO private.fan VALUES (1, 'Ann'), (2, 'Bo');
INSERT INTO private.fan_team VALUES (1, 1), (1, 3), (2, 3);
CREATE VIEW fans AS SELECT * FROM private.fan;
CREATE VIEW fan_team AS SELECT * FROM private.fan_team;
CREATE TABLE private.node (id integer PRIMARY KEY, parent_id integer REFERENCES private.node(id));
INSERT INTO private.node VALUES (1, NULL), (2, 1);
CREATE VIEW node AS SELECT * FROM private.node;
CREATE VIEW fans_again AS SELECT id, name FROM fans;
"#;
    let s = start(Backend::Postgres, setup, GRANTS).await;
    assert_eq!(
        get(
            &s,
            "/fans?select=name,team(team_id)&order=id&team.order=team_id"
        )
        .await,
        (
            200,
            json!([
                {"name": "Ann", "team": [{"team_id": 1}, {"team_id": 3}]},
                {"name": "Bo", "team": [{"team_id": 3}]}
            ])
        )
    );
    assert_eq!(
        get(
            &s,
            "/team?select=team_id,fans!fan_team(name)&team_id=eq.3&fans.order=id"
        )
        .await,
        (
            200,
            json!([{"team_id": 3, "fans": [{"name": "Ann"}, {"name": "Bo"}]}])
        )
    );
    // a view over a view relates as the view's table does
    assert_eq!(
        get(&s, "/fans_again?select=name,team(team_id)&id=eq.2").await,
        (200, json!([{"name": "Bo", "team": [{"team_id": 3}]}]))
    );
    // a view over a private self-referencing table: its foreign-key column names the parent
    assert_eq!(
        get(
            &s,
            "/node?select=id,parent_id(id),children:node!parent_id(id)&order=id"
        )
        .await,
        (
            200,
            json!([
                {"id": 1, "parent_id": null, "children": [{"id": 2}]},
                {"id": 2, "parent_id": {"id": 1}, "children": []}
            ])
        )
    );
}

/// A partitioned table is served as one table, its partitions not at all (PostgREST's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_partitions_are_their_table() {
    let setup = r#"
CREATE TABLE sale (id integer, year integer, amount integer, PRIMARY KEY (id, year)) PARTITION BY LIST (year);
CREATE TABLE sale_2024 PARTITION OF sale FOR VALUES IN (2024);
CREATE TABLE sale_other PARTITION OF sale DEFAULT;
INSERT INTO sale VALUES (1, 2024, 10), (2, 2025, 20);
"#;
    let s = start(Backend::Postgres, setup, GRANTS).await;
    assert_eq!(
        get(&s, "/sale?select=id,amount&order=id").await,
        (
            200,
            json!([{"id": 1, "amount": 10}, {"id": 2, "amount": 20}])
        )
    );
    let r = s.get("/sale_2024").send().await.expect("get");
    assert_error(r, 404, "PGRST205").await;
}

/// A full-text filter on a column of a domain over `tsvector` (or over such a domain) searches
/// it as the `tsvector` it is, where a text column goes through `to_tsvector` first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_full_text_search_through_domains() {
    let setup = r#"
CREATE DOMAIN searchable AS tsvector CHECK (VALUE IS NOT NULL);
CREATE DOMAIN nonempty_searchable AS searchable CHECK (VALUE <> '');
CREATE TABLE note (id integer PRIMARY KEY, body text, words searchable, more nonempty_searchable);
INSERT INTO note VALUES
  (1, 'the quick brown fox', to_tsvector('simple', 'the quick brown fox'), to_tsvector('simple', 'the quick brown fox')),
  (2, 'lazy dogs sleep', to_tsvector('simple', 'lazy dogs sleep'), to_tsvector('simple', 'lazy dogs sleep'));
"#;
    let s = start(Backend::Postgres, setup, GRANTS).await;
    for column in ["body", "words", "more"] {
        assert_eq!(
            get(&s, &format!("/note?select=id&{column}=fts(simple).fox")).await,
            (200, json!([{"id": 1}])),
            "{column}"
        );
        assert_eq!(
            get(
                &s,
                &format!("/note?select=id&{column}=not.wfts(simple).fox")
            )
            .await,
            (200, json!([{"id": 2}])),
            "{column}"
        );
    }
}

/// Media type handlers, as PostgREST reads them: an aggregate returning a domain named after a
/// media type answers a read whose `Accept` names it, over the read's rows (a table's own
/// handler only for its whole rows; one of `anyelement` for any); it may override
/// `application/json` for its table, never PostgREST's vendored types; its final function sees
/// the request and may set headers; only roles granted it reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_media_type_handlers() {
    let setup = r#"
CREATE DOMAIN "text/tab-separated-values" AS text;
CREATE FUNCTION tsv_step(state text, next team) RETURNS "text/tab-separated-values" LANGUAGE sql AS $$
  SELECT (state || next.team_id || E'\t' || next.name || E'\n')::"text/tab-separated-values" $$;
CREATE FUNCTION tsv_final(data "text/tab-separated-values") RETURNS "text/tab-separated-values" LANGUAGE sql AS $$
  SELECT set_config('response.headers', '[{"Content-Disposition": "attachment; filename=\"teams.tsv\""}]', true);
  SELECT (E'team_id\tname\n' || data)::"text/tab-separated-values" $$;
CREATE AGGREGATE tsv_agg(team) (initcond = '', stype = "text/tab-separated-values", sfunc = tsv_step, finalfunc = tsv_final);
CREATE DOMAIN "pg/outfunc" AS text;
CREATE FUNCTION outfunc_step(state text, next anyelement) RETURNS "pg/outfunc" LANGUAGE sql AS $$
  SELECT (state || next::text || E'\n')::"pg/outfunc" $$;
CREATE AGGREGATE outfunc_agg(anyelement) (initcond = '', stype = "pg/outfunc", sfunc = outfunc_step);
CREATE DOMAIN "application/json" AS json;
CREATE FUNCTION count_json(state "application/json", next race) RETURNS "application/json" LANGUAGE sql AS $$
  SELECT json_build_object('races', coalesce((state ->> 'races')::int, 0) + 1)::"application/json" $$;
CREATE AGGREGATE race_json(race) (initcond = '{}', stype = "application/json", sfunc = count_json);
CREATE DOMAIN "application/vnd.pgrst.object" AS json;
CREATE FUNCTION not_vendored(state "application/vnd.pgrst.object", next anyelement) RETURNS "application/vnd.pgrst.object" LANGUAGE sql AS $$
  SELECT '{"overridden": true}'::json::"application/vnd.pgrst.object" $$;
CREATE AGGREGATE not_vendored_agg(anyelement) (initcond = '{}', stype = "application/vnd.pgrst.object", sfunc = not_vendored);
CREATE DOMAIN "*/*" AS bytea;
CREATE FUNCTION any_step(state "*/*", next driver) RETURNS "*/*" LANGUAGE sql AS $$
  SELECT (state || convert_to(next.name || E'\n', 'UTF8'))::"*/*" $$;
CREATE FUNCTION any_final(data "*/*") RETURNS "*/*" LANGUAGE sql AS $$
  SELECT set_config('response.headers', json_build_array(json_build_object('Content-Type',
    current_setting('request.headers', true)::json ->> 'accept'))::text, true);
  SELECT data $$;
CREATE AGGREGATE any_agg(driver) (initcond = '', stype = "*/*", sfunc = any_step, finalfunc = any_final);
"#;
    let grants = r#"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select"]
functions = ["tsv_agg", "outfunc_agg", "race_json", "not_vendored_agg", "any_agg"]

[[grants]]
role = "reader"
tables = ["*"]
ops = ["select"]
"#;
    let s = start(Backend::Postgres, setup, grants).await;
    let read = |path: &str, accept: &str| s.get(path).header("accept", accept).send();
    let r = read(
        "/team?team_id=lte.2&order=team_id",
        "text/tab-separated-values",
    )
    .await
    .expect("get");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "text/tab-separated-values");
    assert_eq!(
        r.headers()["content-disposition"],
        "attachment; filename=\"teams.tsv\""
    );
    let (_, teams) = get(&s, "/team?team_id=lte.2&order=team_id&select=name").await;
    assert_eq!(
        r.text().await.expect("body"),
        format!(
            "team_id\tname\n1\t{}\n2\t{}\n",
            teams[0]["name"].as_str().expect("name"),
            teams[1]["name"].as_str().expect("name")
        )
    );
    // the table's own handler takes its whole rows only
    let r = read("/team?select=team_id", "text/tab-separated-values")
        .await
        .expect("get");
    assert_error(r, 406, "PGRST107").await;
    // a handler of any rows takes any select
    let r = read("/team?team_id=eq.1&select=team_id,points", "pg/outfunc")
        .await
        .expect("get");
    assert_eq!(r.headers()["content-type"], "pg/outfunc");
    let points = s.int("SELECT points FROM team WHERE team_id = 1");
    assert_eq!(r.text().await.expect("body"), format!("(1,{points})\n"));
    // application/json, overridden for one table
    let r = read("/race", "application/json").await.expect("get");
    let races = s.int("SELECT count(*) FROM race");
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({ "races": races })
    );
    let (status, body) = get(&s, "/team?team_id=eq.1&select=team_id").await;
    assert_eq!((status, body), (200, json!([{"team_id": 1}])));
    // PostgREST's vendored types are its own
    let r = read(
        "/team?team_id=eq.1&select=team_id",
        "application/vnd.pgrst.object",
    )
    .await
    .expect("get");
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"team_id": 1})
    );
    // a handler of any media type: its final function reads the request, sets the type
    let r = read("/driver?driver_id=eq.1&select=*", "magic/number")
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "magic/number");
    let name: String = s.rows("SELECT name FROM driver WHERE driver_id = 1")[0][0]
        .clone()
        .expect("name");
    assert_eq!(r.text().await.expect("body"), format!("{name}\n"));
    // a role not granted the aggregate has no such media type
    let (_, token) = common::client_token(&s, "plain-reader", "reader").await;
    let r = s
        .get("/team?team_id=lte.2")
        .header("accept", "text/tab-separated-values")
        .bearer_auth(&token)
        .send()
        .await
        .expect("get");
    assert_error(r, 406, "PGRST107").await;
}

/// A view whose subquery returns several rows fails as PostgREST answers it: 500 `21000` (the
/// view's fault, its text in the log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cardinality_violations_are_server_errors() {
    let setup = "CREATE VIEW bad_subquery AS SELECT * FROM team WHERE team_id = (SELECT team_id FROM team);";
    let s = start(Backend::Postgres, setup, GRANTS).await;
    let r = s.get("/bad_subquery").send().await.expect("get");
    let body = assert_error(r, 500, "21000").await;
    assert_eq!(
        body["message"],
        "the database raised an error; details are in the server log"
    );
}

/// `Accept: application/vnd.pgrst.plan` answers a request's execution plan (PostgreSQL's
/// `EXPLAIN`, as JSON or text, with its options: a read's, a write's, rolled back, a call's)
/// when `rest.plan` allows it; otherwise, for an unknown option or on SQLite, the media type
/// is not available (406 `PGRST107`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_execution_plans() {
    let on = format!("{GRANTS}\n[rest]\nplan = true\n");
    let s = start(Backend::Postgres, VIEWS, &on).await;
    let explain = |path: &'static str, accept: &'static str| {
        let s = &s;
        async move {
            let r = s
                .get(path)
                .header("accept", accept)
                .send()
                .await
                .expect("get");
            let status = r.status().as_u16();
            let ct = r.headers()["content-type"]
                .to_str()
                .expect("ct")
                .to_string();
            (status, ct, r.text().await.expect("body"))
        }
    };
    let (status, ct, body) = explain(
        "/team?team_id=in.(1,2)&select=name,driver(name)",
        "application/vnd.pgrst.plan+json",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        ct,
        "application/vnd.pgrst.plan+json; for=\"application/json\"; charset=utf-8"
    );
    let plan: Value = serde_json::from_str(&body).expect("json");
    assert!(
        plan[0]["Plan"]["Total Cost"]
            .as_f64()
            .is_some_and(|c| c > 0.0),
        "{plan}"
    );
    let (status, ct, body) = explain("/team", "application/vnd.pgrst.plan").await;
    assert_eq!(status, 200);
    assert_eq!(
        ct,
        "application/vnd.pgrst.plan+text; for=\"application/json\"; charset=utf-8"
    );
    assert!(body.contains("Scan on team"), "{body}");
    let (_, ct, body) = explain(
        "/team?select=name",
        "application/vnd.pgrst.plan+json; for=\"text/csv\"; options=analyze|buffers",
    )
    .await;
    assert_eq!(
        ct,
        "application/vnd.pgrst.plan+json; for=\"text/csv\"; options=analyze|buffers; charset=utf-8"
    );
    assert!(
        body.contains("Actual Total Time") && body.contains("Shared Hit Blocks"),
        "{body}"
    );
    let (status, _, _) = explain(
        "/team",
        "application/vnd.pgrst.plan+json; options=everything",
    )
    .await;
    assert_eq!(status, 406);
    // a write's plan: analyzed, it runs, and is rolled back
    let before = s.int("SELECT points FROM team WHERE team_id = 1");
    let r = s
        .patch("/team?team_id=eq.1", json!({"points": before + 1}))
        .header("accept", "application/vnd.pgrst.plan+json; options=analyze")
        .header("prefer", "return=representation")
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status().as_u16(), 200);
    let plan: Value = r.json().await.expect("json");
    assert_eq!(plan[0]["Plan"]["Node Type"], "ModifyTable", "{plan}");
    assert_eq!(s.int("SELECT points FROM team WHERE team_id = 1"), before);
    // a function call's
    let r = s
        .get("/rpc/team_count")
        .header("accept", "application/vnd.pgrst.plan")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .is_ok_and(|t| t.starts_with("application/vnd.pgrst.plan+text")),
        "{:?}",
        r.headers()
    );
    s.stop().await;

    // off by default, and PostgreSQL's only
    let off = start(Backend::Postgres, "", GRANTS).await;
    let r = off
        .get("/team")
        .header("accept", "application/vnd.pgrst.plan+json")
        .send()
        .await
        .expect("get");
    assert_error(r, 406, "PGRST107").await;
    let sqlite = start(Backend::Sqlite, "", &on).await;
    let r = sqlite
        .get("/team")
        .header("accept", "application/vnd.pgrst.plan")
        .send()
        .await
        .expect("get");
    assert_error(r, 406, "PGRST107").await;
}

/// `db.prepared_statements = false` (a pooler in transaction mode): statements are unnamed,
/// none is kept on the connection (`pg_prepared_statements` stays empty), and reads, counts,
/// writes, CSV (empty too) and calls answer as with prepared ones, which are kept otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_without_prepared_statements() {
    let setup = "CREATE FUNCTION kept_statements() RETURNS bigint LANGUAGE sql VOLATILE \
                 AS $$ SELECT count(*) FROM pg_prepared_statements $$;";
    let grants = r#"
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]
functions = ["*"]
"#;
    let kept = |s: &TestServer| {
        let s = s
            .client
            .post(s.url("/rpc/kept_statements"))
            .json(&json!({}));
        async move { json_of(s.send().await.expect("post")).await }
    };
    let unprepared = start(
        Backend::Postgres,
        setup,
        &format!("[db]\npool_size = 1\nprepared_statements = false\n{grants}"),
    )
    .await;
    let s = &unprepared;
    let r = s
        .get("/team?select=name&team_id=eq.1")
        .header("prefer", "count=exact")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["content-range"], "0-0/1");
    assert_eq!(json_of(r).await, (200, json!([{"name": "Mercedes"}])));
    let r = s
        .post("/team", json!({"name": "Lotus"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 201);
    let r = s
        .patch("/team?name=eq.Lotus", json!({"points": 3}))
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status().as_u16(), 204);
    for (path, csv) in [
        (
            "/team?name=eq.Lotus&select=name,points",
            "name,points\r\nLotus,3\r\n",
        ),
        ("/team?team_id=eq.0&select=name", "name\r\n"),
    ] {
        let r = s
            .get(path)
            .header("accept", "text/csv")
            .send()
            .await
            .expect("csv");
        assert_eq!(r.text().await.expect("text"), csv, "{path}");
    }
    assert_eq!(kept(s).await, (200, json!(0)));

    let prepared = start(
        Backend::Postgres,
        setup,
        &format!("[db]\npool_size = 1\n{grants}"),
    )
    .await;
    let (status, _) = get(&prepared, "/team?select=name&team_id=eq.1").await;
    assert_eq!(status, 200);
    let (status, count) = kept(&prepared).await;
    assert_eq!(status, 200);
    assert!(count.as_i64().is_some_and(|n| n > 0), "{count}");
}

/// `db.pre_request` (PostgREST's `db-pre-request`): a function every API request's transaction
/// calls after its settings, reads and calls too; it sees the request and refuses it by
/// raising (its status and message), or adds headers to the answer. A function that cannot be
/// called fails the start, as does the setting on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pre_request_function() {
    let setup = r#"
CREATE SCHEMA hooks;
CREATE FUNCTION team_count() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM team $$;
CREATE FUNCTION hooks.check_request() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('request.headers', true)::json ->> 'x-banned' = 'yes' THEN
    RAISE SQLSTATE 'PT403' USING MESSAGE = 'banned', DETAIL = 'go away';
  END IF;
  PERFORM set_config('response.headers', '[{"X-Checked": "yes"}]', true);
END $$;
"#;
    let toml = format!("[db]\npre_request = \"hooks.check_request\"\n{READS_AND_CALLS}");
    let s = start(Backend::Postgres, setup, &toml).await;
    let r = s
        .get("/team?select=name&team_id=eq.1")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["x-checked"], "yes");
    assert_eq!(json_of(r).await, (200, json!([{"name": "Mercedes"}])));
    for path in ["/team", "/rpc/team_count"] {
        let r = s
            .get(path)
            .header("x-banned", "yes")
            .send()
            .await
            .expect("get");
        let body = assert_error(r, 403, "PT403").await;
        assert_eq!(body["message"], "banned", "{path}");
    }

    for (backend, name, expected) in [
        (
            Backend::Postgres,
            "hooks.nothing_here",
            "the function cannot be called",
        ),
        (Backend::Sqlite, "check_request", "needs PostgreSQL"),
    ] {
        let mut config = rowgate::config::Config::default();
        config.db.pre_request = name.into();
        config.db.path = match backend {
            Backend::Postgres => common::postgres::new_demo_database().await.into(),
            Backend::Sqlite => s.dir.path().join("missing.db"),
        };
        if backend == Backend::Sqlite {
            std::fs::write(&config.db.path, "").expect("empty file");
        }
        let failed = rowgate::cli::start(config).await.err().expect("refused");
        assert!(format!("{failed:#}").contains(expected), "{failed:#}");
    }
}
