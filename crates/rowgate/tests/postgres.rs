//! The PostgreSQL side that exists so far, against a real cluster started from the installed
//! binaries: the demo data loaded with COPY (the same rows as the SQLite demo), and
//! `rowgate demo init --db postgres://…` from the command line.

mod common;

use common::postgres::{cluster, new_database};
use tokio_postgres::NoTls;

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_data_in_postgres_matches_sqlite() {
    let url = new_database();
    let summary = rowgate::demo::postgres::init(&url, 500)
        .await
        .expect("demo init");
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = rowgate::demo::init(&dir.path().join("d.db"), 500, None).expect("sqlite demo");
    assert_eq!(summary, sqlite, "same tables, same row counts");

    let pg = connect(&url).await;
    let lite = rusqlite::Connection::open(dir.path().join("d.db")).expect("open");
    // Every person, field by field (dates as text in SQLite, typed in PostgreSQL).
    let rows = pg
        .query(
            "SELECT id, first_name, last_name, city, to_char(birth_date, 'YYYY-MM-DD'), \
             to_char(created_at, 'YYYY-MM-DD\"T\"HH24:MI:SS') FROM people ORDER BY id",
            &[],
        )
        .await
        .expect("people");
    let mut stmt = lite
        .prepare("SELECT id, first_name, last_name, city, birth_date, created_at FROM people ORDER BY id")
        .expect("prepare");
    let expected: Vec<(i64, String, String, String, String, String)> = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let got: Vec<(i64, String, String, String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                i64::from(r.get::<_, i32>(0)),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
            )
        })
        .collect();
    assert_eq!(got, expected);
    // Text that needs COPY escaping arrived intact, NULLs stayed NULL.
    let (pg_ext, lite_ext): (Option<String>, Option<String>) = (
        pg.query_one(
            "SELECT phone_ext FROM employee WHERE phone_ext IS NULL LIMIT 1",
            &[],
        )
        .await
        .map(|r| r.get(0))
        .expect("a NULL phone_ext"),
        lite.query_row(
            "SELECT phone_ext FROM employee WHERE phone_ext IS NULL LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("a NULL phone_ext"),
    );
    assert_eq!(pg_ext, lite_ext);
    let bodies: Vec<String> = pg
        .query("SELECT body FROM posts ORDER BY id", &[])
        .await
        .expect("posts")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut stmt = lite
        .prepare("SELECT body FROM posts ORDER BY id")
        .expect("prepare");
    let lite_bodies: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("bodies");
    assert_eq!(bodies, lite_bodies);
    // Identity keys continue after the loaded ones; the view and foreign key work.
    let id: i32 = pg
        .query_one(
            "INSERT INTO team (name) VALUES ('Sauber') RETURNING team_id",
            &[],
        )
        .await
        .expect("insert")
        .get(0);
    assert_eq!(id, 11);
    let standings = pg
        .query_one("SELECT drivers FROM team_standings WHERE team_id = 1", &[])
        .await
        .expect("view");
    assert_eq!(standings.get::<_, i64>(0), 2);
    let err = pg
        .execute(
            "INSERT INTO driver (name, team_id) VALUES ('Ghost', 999)",
            &[],
        )
        .await
        .expect_err("foreign key");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION)
    );
    // Loading again replaces the demo tables.
    let again = rowgate::demo::postgres::init(&url, 20)
        .await
        .expect("reload");
    assert_eq!(again.tables.last(), Some(&("people", 20)));
}

#[test]
fn demo_init_command_accepts_a_postgres_url() {
    let url = new_database();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rowgate"))
        .args(["demo", "init", "--db", &url, "--people", "1000"])
        .output()
        .expect("demo init");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("people: 1000 rows"), "{text}");
    // The demo configuration's resources prepare on PostgreSQL too; a broken one does not.
    let check = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rowgate"))
            .args(["config", "check", "--db", &url])
            .args(extra)
            .output()
            .expect("config check")
    };
    let out = check(&["--demo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("7 custom resources (2 functions), 3 grants, checked against"),
        "{out:?}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("bad.toml"),
        "[[resources]]\nroles = [\"*\"]\npath = \"/x\"\nsql = \"SELECT nope FROM team\"\n",
    )
    .expect("write");
    let bad = dir.path().join("bad.toml");
    let out = check(&["--config", bad.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("column \"nope\" does not exist"),
        "{out:?}"
    );
    // A database that does not exist on the server: said in so many words (issue 13, item 18).
    let missing = cluster().url("no_such_database");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rowgate"))
        .args(["config", "check", "--demo", "--db", &missing])
        .output()
        .expect("config check");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("database \"no_such_database\" does not exist on that server")
            && err.contains("createdb")
            && err.contains(&format!("127.0.0.1:{}", cluster().port))
            && !err.contains("db error"),
        "{err}"
    );
    // A server that is not there: a clear error, not a hang.
    let dead = format!("postgres://postgres@127.0.0.1:{}/nope", cluster().port + 1);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rowgate"))
        .args(["demo", "init", "--db", &dead])
        .output()
        .expect("demo init");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect to PostgreSQL"));
}

/// The schema cache read from pg_catalog describes the demo as the SQLite one does: the same
/// tables and views, columns in order, keys, foreign keys, nullability and JSON types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_cache_from_the_catalog_matches_sqlite() {
    let url = new_database();
    rowgate::demo::postgres::init(&url, 10)
        .await
        .expect("demo init");
    let pg = connect(&url).await;
    // Something outside the exposed schema stays out; a second schema can be exposed.
    pg.batch_execute(
        "CREATE SCHEMA hidden; CREATE TABLE hidden.secret (id int PRIMARY KEY);
         CREATE SCHEMA extra; CREATE TABLE extra.notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            team_id int REFERENCES public.team(team_id), body jsonb NOT NULL, tags text[],
            flag boolean DEFAULT false, total numeric(10,2), pair_a int, pair_b int,
            UNIQUE (pair_a, pair_b));",
    )
    .await
    .expect("ddl");
    let cache = rowgate::schema::postgres::introspect(&pg, &["public".to_string()])
        .await
        .expect("introspect");
    let dir = tempfile::tempdir().expect("tempdir");
    rowgate::demo::init(&dir.path().join("d.db"), 10, None).expect("sqlite demo");
    let lite = rowgate::schema::SchemaCache::introspect(
        &rusqlite::Connection::open(dir.path().join("d.db")).expect("open"),
    )
    .expect("sqlite introspect");
    let names = |c: &rowgate::schema::SchemaCache| c.tables.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&cache), names(&lite));
    for (name, pg_table) in &cache.tables {
        let lite_table = &lite.tables[name];
        assert_eq!(pg_table.is_view, lite_table.is_view, "{name}");
        assert_eq!(pg_table.primary_key, lite_table.primary_key, "{name}");
        let cols = |t: &rowgate::schema::Table| {
            t.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(cols(pg_table), cols(lite_table), "{name}");
        let fks = |t: &rowgate::schema::Table| {
            t.foreign_keys
                .iter()
                .map(|f| {
                    (
                        f.columns.clone(),
                        f.ref_table.clone(),
                        f.ref_columns.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(fks(pg_table), fks(lite_table), "{name}");
        if !pg_table.is_view {
            for (p, l) in pg_table.columns.iter().zip(&lite_table.columns) {
                assert_eq!(
                    (p.never_null, p.json_type, p.pk_position),
                    (l.never_null, l.json_type, l.pk_position),
                    "{name}.{}",
                    p.name
                );
            }
        }
    }
    assert!(
        cache
            .table("team")
            .expect("team")
            .column("team_id")
            .expect("id")
            .default
            .is_some(),
        "identity has a default"
    );
    // The second schema, exposed after public.
    let both =
        rowgate::schema::postgres::introspect(&pg, &["public".to_string(), "extra".to_string()])
            .await
            .expect("introspect");
    assert!(both.table("secret").is_none());
    let notes = both.table("notes").expect("notes");
    assert_eq!(notes.primary_key, vec!["id"]);
    assert_eq!(notes.foreign_keys.len(), 1);
    assert_eq!(notes.foreign_keys[0].ref_table, "team");
    let kind = |c: &str| {
        let col = notes.column(c).expect("column");
        (col.json_type, col.json_kind, col.nullable)
    };
    use rowgate::schema::JsonKind;
    assert_eq!(kind("id"), ("integer", JsonKind::Auto, false));
    assert_eq!(kind("body"), ("", JsonKind::Json, false));
    assert_eq!(kind("tags"), ("array", JsonKind::Auto, true));
    assert_eq!(kind("flag"), ("boolean", JsonKind::Bool, true));
    assert_eq!(kind("total"), ("number", JsonKind::Auto, true));
    assert_eq!(
        notes.column("flag").expect("flag").default.as_deref(),
        Some("false")
    );
    assert_eq!(
        notes.column("total").expect("total").decl_type,
        "numeric(10,2)"
    );
}

/// The REST API over PostgreSQL: the same requests as on SQLite, the same answers (reads, filters,
/// order, paging, counts, singular objects, CSV, item URLs and ETags, writes, constraint errors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_api_over_postgres() {
    use serde_json::{json, Value};
    let s = common::TestServer::start_postgres().await;
    let get = |path: &str| s.get(path).send();
    // The README example.
    let r = get("/employee?salary=gt.100000&order=salary.desc&select=first_name,last_name,salary")
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let rows: Vec<Value> = r.json().await.expect("json");
    assert!(rows.len() >= 10);
    assert!(rows
        .windows(2)
        .all(|w| w[0]["salary"].as_f64() >= w[1]["salary"].as_f64()));
    assert_eq!(rows[0].as_object().map(|o| o.len()), Some(3));
    // Item URL, ETag, 304; a timestamp comes out as PostgreSQL prints it.
    let r = get("/team/3").await.expect("request");
    assert_eq!(r.status(), 200);
    let tag = r.headers()["etag"].to_str().expect("etag").to_string();
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"team_id": 3, "name": "Red Bull", "points": 860})
    );
    let r = s
        .get("/team/3")
        .header("If-None-Match", &tag)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 304);
    let r = get("/employee/2?select=hire_date").await.expect("request");
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"hire_date": "1988-12-28T00:00:00"})
    );
    // Filters with text values parsed by PostgreSQL for the column's type; logic; paging; count.
    let r = s
        .get("/people?select=id&last_name=like.*a*&or=(city.like.L*,city.like.T*)&order=id&limit=3")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    let range = r.headers()["content-range"]
        .to_str()
        .expect("range")
        .to_string();
    let rows: Vec<Value> = r.json().await.expect("json");
    assert!(rows.len() == 3 && range.starts_with("0-2/"), "{range}");
    let (status, body) =
        common::get_json(&s, "/team?points=gte.400&select=team_id&order=team_id").await;
    assert_eq!(
        (status, body),
        (200, json!([{"team_id": 1}, {"team_id": 2}, {"team_id": 3}]))
    );
    let (status, body) = common::get_json(&s, "/team_standings?team_id=eq.1").await;
    assert_eq!((status, body[0]["drivers"].clone()), (200, json!(2)));
    // Singular object and CSV.
    let r = s
        .get("/team?team_id=eq.1")
        .header("Accept", "application/vnd.pgrst.object+json")
        .send()
        .await
        .expect("request");
    assert_eq!(r.json::<Value>().await.expect("json")["name"], "Mercedes");
    let r = s
        .get("/team?select=team_id,name&order=team_id&limit=2")
        .header("Accept", "text/csv")
        .send()
        .await
        .expect("request");
    assert_eq!(
        r.text().await.expect("csv"),
        "team_id,name\r\n1,Mercedes\r\n2,Ferrari\r\n"
    );
    // Writes: insert with representation, bulk, patch, delete, put.
    let r = s
        .post("/team", json!({"name": "Sauber", "points": 4}))
        .header("Prefer", "return=representation")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 201);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!([{"team_id": 11, "name": "Sauber", "points": 4}])
    );
    let r = s
        .post("/team", json!([{"name": "A"}, {"name": "B"}]))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 201);
    let r = s
        .patch("/team?name=eq.A", json!({"points": 7}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 204);
    let (_, body) = common::get_json(&s, "/team?name=eq.A&select=points").await;
    assert_eq!(body, json!([{"points": 7}]));
    let r = s
        .put(
            "/team/12",
            json!({"team_id": 12, "name": "A2", "points": 1}),
        )
        .send()
        .await
        .expect("request");
    assert!(r.status().is_success(), "{}", r.status());
    let r = s
        .delete("/team?name=in.(A2,B)")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 204);
    let (_, body) = common::get_json(&s, "/team?select=team_id&team_id=gt.10&order=team_id").await;
    assert_eq!(body, json!([{"team_id": 11}]));
    // Constraint errors as on SQLite; a value PostgreSQL cannot read for the column's type.
    common::assert_error(
        s.post("/team", json!({"name": "Sauber"}))
            .send()
            .await
            .expect("request"),
        409,
        "23505",
    )
    .await;
    common::assert_error(
        s.post("/driver", json!({"name": "Ghost", "team_id": 999}))
            .send()
            .await
            .expect("request"),
        409,
        "23503",
    )
    .await;
    common::assert_error(
        s.post("/team", json!({"points": 1}))
            .send()
            .await
            .expect("request"),
        400,
        "23502",
    )
    .await;
    common::assert_error(s.post("/employee", json!({"first_name": "a", "last_name": "b", "hire_date": "2020-01-01", "dept_no": "1", "job_code": "x", "job_grade": 1, "job_country": "x", "salary": -1})).send().await.expect("request"), 400, "23514").await;
    common::assert_error(
        get("/team?points=gt.lots").await.expect("request"),
        400,
        "22P02",
    )
    .await;
    // Strict max-affected rolls the change back.
    let r = s
        .patch("/team?points=lt.100", json!({"points": 0}))
        .header("Prefer", "max-affected=1, handling=strict")
        .send()
        .await
        .expect("request");
    common::assert_error(r, 400, "PGRST124").await;
    let (_, body) = common::get_json(&s, "/team?team_id=eq.10&select=points").await;
    assert_eq!(body, json!([{"points": 12}]));
    // Health.
    let r = s
        .client
        .get(s.root_url("/ready"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
}

/// `count=planned` takes PostgreSQL's row estimate; `count=estimated` too, but counts exactly
/// when the estimate is small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_and_estimated_counts() {
    let s = common::TestServer::start_postgres().await;
    let total = |prefer: &'static str, path: &'static str| {
        let req = s.get(path).header("Prefer", prefer);
        async move {
            let r = req.send().await.expect("request");
            let applied = r.headers()["preference-applied"]
                .to_str()
                .expect("applied")
                .to_string();
            let range = r.headers()["content-range"]
                .to_str()
                .expect("range")
                .to_string();
            let total: u64 = range
                .rsplit('/')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{range}"));
            (applied, total)
        }
    };
    // The demo was ANALYZEd: the planner knows the table has 200 rows.
    assert_eq!(
        total("count=planned", "/people?limit=1").await,
        ("count=planned".to_string(), 200)
    );
    // A filtered estimate is a number the planner made up, whatever it is.
    let (applied, _) = total("count=planned", "/people?last_name=like.K*&limit=1").await;
    assert_eq!(applied, "count=planned");
    // Small estimates are replaced by the exact count.
    let (_, exact) = total("count=exact", "/driver?team_id=eq.3").await;
    assert_eq!(exact, 2);
    assert_eq!(
        total("count=estimated", "/driver?team_id=eq.3").await,
        ("count=estimated".to_string(), 2)
    );
}

/// With the event trigger of `rowgate db setup`, DDL reaches running servers through NOTIFY:
/// schema polling is off here, so nothing else could reveal the new table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_notifies_running_servers() {
    let s = common::TestServer::start_with(common::Backend::Postgres, |c| c.db.schema_poll_ms = 0)
        .await;
    let url = s.db_path.to_string_lossy().into_owned();
    rowgate::db::postgres::setup(&url).await.expect("db setup");
    assert_eq!(
        s.get("/gadgets").send().await.expect("request").status(),
        404
    );
    // The listener connects in the background: give the notice a few chances to arrive.
    let mut status = 0;
    for attempt in 0..50 {
        if attempt % 10 == 0 {
            s.exec(&format!("DROP TABLE IF EXISTS gadgets; CREATE TABLE gadgets (id int PRIMARY KEY, label text); INSERT INTO gadgets VALUES ({attempt}, 'x')"));
        }
        status = s
            .get("/gadgets")
            .send()
            .await
            .expect("request")
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200);
    // `db setup` from the command line, again (idempotent).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rowgate"))
        .args(["db", "setup", "--db", &url])
        .output()
        .expect("db setup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Custom resources on PostgreSQL are checked when they load, as on SQLite: SQL that does not
/// prepare (syntax, unknown table, a declared type that does not fit) and a GET whose SQL writes
/// are refused, naming the resource; a GET whose SQL writes behind a function call is stopped
/// by the read-only transaction reads run in (405, nothing written). (Every other resource test
/// runs on both backends in tests/resources.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_are_checked_on_postgres() {
    use serde_json::json;
    let s = common::TestServer::start_postgres().await;
    s.exec(
        "CREATE FUNCTION bump() RETURNS int LANGUAGE sql \
         AS 'UPDATE team SET points = points + 1 RETURNING 1'",
    );
    let load = |toml: &str| {
        let mut config = common::write_config(s.dir.path(), toml, &[]).expect("config");
        config.db.path = s.db_path.clone();
        config
    };
    let refused = |config: rowgate::config::Config| {
        let app = s.app.clone();
        async move {
            let err = app.reload_resources(&config).await.expect_err("refused");
            format!("{err:#}")
        }
    };
    let err = refused(load(
        r#"
[[resources]]
roles = ["*"]
path = "/typo"
sql = "SELEC 1"

[[resources]]
roles = ["*"]
path = "/nowhere"
sql = "SELECT * FROM nowhere"

[[resources]]
roles = ["*"]
path = "/mismatch"
sql = "SELECT * FROM team WHERE team_id = :name"
params.name = { type = "text" }
"#,
    ))
    .await;
    for words in [
        "resource /typo: the SQL does not prepare: syntax error",
        "resource /nowhere: the SQL does not prepare: relation \"nowhere\" does not exist",
        "resource /mismatch: the SQL does not prepare: operator does not exist: integer = text",
    ] {
        assert!(err.contains(words), "{words}: {err}");
    }
    let err = refused(load(
        "[[resources]]\nroles = [\"*\"]\npath = \"/wipe\"\nsql = \"WITH d AS (DELETE FROM team RETURNING 1) SELECT count(*) FROM d\"\n",
    ))
    .await;
    assert!(
        err.contains("resource /wipe: GET resources may only read"),
        "{err}"
    );

    let good = load(
        r#"
[[resources]]
roles = ["*"]
path = "/sneaky"
sql = "SELECT bump()"

[[resources]]
roles = ["*"]
path = "/bump"
method = "POST"
shape = "value"
sql = "SELECT bump()"

[[resources]]
roles = ["*"]
path = "/teams/{id}/drivers"
sql = "SELECT driver_id, name FROM driver WHERE team_id = :id ORDER BY driver_id"
params.id = { type = "int" }
"#,
    );
    assert_eq!(s.app.reload_resources(&good).await.expect("loads"), 3);
    let before = s.int("SELECT points FROM team WHERE team_id = 1");
    let r = s
        .client
        .get(s.root_url("/sneaky"))
        .send()
        .await
        .expect("request");
    common::assert_error(r, 405, "25006").await;
    assert_eq!(s.int("SELECT points FROM team WHERE team_id = 1"), before);
    let r = s
        .client
        .post(s.root_url("/bump"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.expect("json"), json!(1));
    assert_eq!(
        s.int("SELECT points FROM team WHERE team_id = 1"),
        before + 1
    );
    let r = s
        .client
        .get(s.root_url("/teams/2/drivers"))
        .send()
        .await
        .expect("request");
    assert_eq!(
        r.json::<serde_json::Value>().await.expect("json"),
        json!([{"driver_id": 3, "name": "Charles Leclerc"}, {"driver_id": 4, "name": "Carlos Sainz"}])
    );
}

/// What only PostgreSQL has: array, range and JSON containment operators and full-text search
/// (on `tsvector` columns and, through `to_tsvector`, on text), with and without a language,
/// inside logic trees too; arrays and ranges written to JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_only_operators() {
    use common::{get_json, wait_until_served};
    use serde_json::json;
    let s = common::TestServer::start_postgres().await;
    s.exec(
        "CREATE TABLE events (
           id int PRIMARY KEY, tags text[], period int4range, body text, doc tsvector, meta jsonb);
         INSERT INTO events VALUES
           (1, '{a,b}', '[1,5)', 'The fat cats sat on the mat', to_tsvector('english', 'fat cats'), '{\"k\": 1, \"x\": [1, 2]}'),
           (2, '{b,c}', '[5,10)', 'A rat ate the cheese', to_tsvector('english', 'rat cheese'), '{\"k\": 2}'),
           (3, '{}', '[20,30)', 'Fat rats and thin cats', to_tsvector('english', 'thin cats'), '{}');",
    );
    wait_until_served(&s, "/events").await;
    let ids = |body: serde_json::Value| -> Vec<i64> {
        body.as_array()
            .unwrap_or_else(|| panic!("array: {body}"))
            .iter()
            .map(|r| r["id"].as_i64().expect("id"))
            .collect()
    };
    let cases: &[(&str, &[i64])] = &[
        ("tags=cs.{b}", &[1, 2]),
        ("tags=cs.{a,b}", &[1]),
        ("tags=cd.{a,b,c}", &[1, 2, 3]),
        ("tags=ov.{a,c}", &[1, 2]),
        ("tags=not.ov.{a,c}", &[3]),
        ("period=ov.[4,6)", &[1, 2]),
        ("period=sl.[10,20)", &[1, 2]),
        ("period=sr.[10,20)", &[3]),
        ("period=nxr.[0,6)", &[1]),
        ("period=nxl.[5,7)", &[2, 3]),
        ("period=adj.[10,20)", &[2, 3]),
        ("period=cs.[6,7]", &[2]),
        ("meta=cs.{\"k\":1}", &[1]),
        ("meta=cd.{\"k\":2,\"z\":0}", &[2, 3]),
        ("body=fts.cheese", &[2]),
        ("body=fts(english).cat", &[1, 3]),
        ("body=fts(english).fat %26 rat", &[3]),
        ("body=plfts(english).fat cats", &[1, 3]),
        ("body=phfts(english).fat cats", &[1]),
        ("body=wfts(english).cats -rat", &[1]),
        ("body=not.fts(english).cheese", &[1, 3]),
        ("doc=fts.cat", &[1, 3]),
        ("doc=plfts(english).rats", &[2]),
        ("meta->>k=fts(simple).2", &[2]),
        ("or=(tags.cs.{c},period.sr.[10,20))", &[2, 3]),
        ("and=(period.ov.[0,100),body.wfts(english).cat)", &[1, 3]),
    ];
    for (filter, want) in cases {
        let (status, body) = get_json(&s, &format!("/events?select=id&order=id&{filter}")).await;
        assert_eq!(status, 200, "{filter}: {body}");
        assert_eq!(ids(body), *want, "{filter}");
    }
    // Arrays come out as JSON arrays, ranges as PostgreSQL prints them.
    let (_, body) = get_json(&s, "/events/1?select=tags,period,meta->x").await;
    assert_eq!(
        body,
        json!({"tags": ["a", "b"], "period": "[1,5)", "x": [1, 2]})
    );
    // A value PostgreSQL cannot read for the column's type, an unknown language: 400.
    let r = s
        .get("/events?period=ov.[5,1)")
        .send()
        .await
        .expect("request");
    common::assert_error(r, 400, "22000").await;
    let r = s.get("/events?tags=cs.nope").send().await.expect("request");
    common::assert_error(r, 400, "22P02").await;
    let r = s
        .get("/events?body=fts(klingon).cat")
        .send()
        .await
        .expect("request");
    common::assert_error(r, 400, "PGRST100").await;
}

/// `db.schemas` naming a schema outside the connection's search path: every statement names its
/// relation with the schema (reads, counts, writes, row-filter checks, realtime triggers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exposed_schema_outside_the_search_path() {
    use common::*;
    use serde_json::json;
    let dir = tempfile::tempdir().expect("tempdir");
    let setup = "CREATE SCHEMA api;
        CREATE TABLE api.notes (id serial PRIMARY KEY, body text NOT NULL, owner text);
        INSERT INTO api.notes (body, owner) VALUES ('one', 'a'), ('two', 'b');
        CREATE VIEW api.note_bodies AS SELECT id, body FROM api.notes;";
    let s = TestServer::start_prepared(
        Backend::Postgres,
        dir,
        rowgate::config::Config::default(),
        setup,
        |c| {
            c.db.schemas = "api".into();
            c.realtime.tables = vec!["notes".into()];
        },
    )
    .await;
    // The demo tables in public are not exposed any more.
    let (status, _) = get_json(&s, "/team").await;
    assert_eq!(status, 404);
    let r = s
        .get("/notes?select=body&order=id")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["content-range"].to_str().expect("ascii"),
        "0-1/2"
    );
    assert_eq!(
        r.json::<serde_json::Value>().await.expect("json"),
        json!([{"body": "one"}, {"body": "two"}])
    );
    let (status, body) = get_json(&s, "/note_bodies?id=eq.2").await;
    assert_eq!((status, body), (200, json!([{"id": 2, "body": "two"}])));
    let r = s
        .post("/notes", json!({"body": "three", "owner": "c"}))
        .header("Prefer", "return=representation")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 201);
    let r = s
        .patch("/notes?id=eq.1", json!({"body": "uno"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    let r = s
        .put("/notes/2", json!({"id": 2, "body": "dos", "owner": "b"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 204);
    let r = s.delete("/notes?id=eq.3").send().await.expect("request");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        s.rows("SELECT body FROM api.notes ORDER BY id"),
        vec![vec![Some("uno".to_string())], vec![Some("dos".to_string())]]
    );
    // The realtime trigger sits on api.notes.
    let triggers = s.int(
        "SELECT count(*) FROM pg_trigger WHERE tgname = 'rowgate_rt' AND tgrelid = 'api.notes'::regclass",
    );
    assert_eq!(triggers, 1);
}

/// An insert's body is bound as one JSON text and read with the table's row type
/// (`json_populate_recordset`, as PostgREST does): arrays go into array columns, objects into
/// jsonb, a JSON string into jsonb stays a string, ranges and numbers are read by their types;
/// `missing=default` leaves absent keys to the column defaults; bad values answer PostgreSQL's
/// code and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_bodies_are_read_with_the_tables_types() {
    use common::wait_until_served;
    use serde_json::json;
    let s = common::TestServer::start_postgres().await;
    s.exec(
        "CREATE TABLE gear (
           id int PRIMARY KEY, tags text[], counts int[], period int4range,
           meta jsonb, note text DEFAULT 'none', price numeric);",
    );
    wait_until_served(&s, "/gear").await;
    let r = s
        .post(
            "/gear",
            json!([
                {"id": 1, "tags": ["a", "b"], "counts": [1, 2], "period": "[1,5)",
                 "meta": {"k": [1, {"x": null}]}, "note": "first", "price": 1.25},
                {"id": 2, "tags": [], "counts": null, "period": null,
                 "meta": "just a string", "note": null, "price": 10}
            ]),
        )
        .header("Prefer", "return=representation")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 201);
    assert_eq!(
        r.json::<serde_json::Value>().await.expect("json"),
        json!([
            {"id": 1, "tags": ["a", "b"], "counts": [1, 2], "period": "[1,5)",
             "meta": {"k": [1, {"x": null}]}, "note": "first", "price": 1.25},
            {"id": 2, "tags": [], "counts": null, "period": null,
             "meta": "just a string", "note": null, "price": 10}
        ])
    );
    // missing=default: an absent key takes the column default
    let r = s
        .post(
            "/gear?columns=id,note",
            json!([{"id": 3}, {"id": 4, "note": "given"}]),
        )
        .header("Prefer", "return=representation,missing=default")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 201);
    let notes: Vec<serde_json::Value> = r
        .json::<Vec<serde_json::Value>>()
        .await
        .expect("json")
        .into_iter()
        .map(|row| row["note"].clone())
        .collect();
    assert_eq!(notes, vec![json!("none"), json!("given")]);
    // a value the column's type cannot read: PostgreSQL's code, and nothing stored
    let r = s
        .post(
            "/gear",
            json!([{"id": 5, "counts": [1]}, {"id": 6, "counts": ["x"]}]),
        )
        .send()
        .await
        .expect("request");
    common::assert_error(r, 400, "22P02").await;
    let (_, rows) = common::get_json(&s, "/gear?select=id&id=gt.4").await;
    assert_eq!(rows, json!([]));
}
