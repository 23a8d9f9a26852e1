//! Rowgate on Citus (distributed PostgreSQL): a coordinator and two workers on loopback, the
//! demo's big tables distributed by their key, its small ones reference tables, and a tenant
//! schema (companies, their campaigns and ads, co-located by company; countries a reference
//! table). The same requests answer the same on Citus as on one PostgreSQL holding the same
//! rows, but for the few Citus refuses, which answer a 400 naming why; realtime sees every
//! change made on distributed and reference tables, once and in order, across a worker's
//! restart; a stopped worker fails only the requests that need it, with a 503.

mod common;

use common::citus::{cluster, own_cluster, CitusCluster};
use common::TestServer;
use futures_util::SinkExt as _;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// The SQL blocks of docs/deployment.md's "Distributing tables" (what this test runs: the
/// documentation is tested): the demo's layout, and the first tenant tables.
fn documented(block: usize) -> String {
    let doc = include_str!("../../../docs/deployment.md");
    let section = &doc[doc
        .find("### Distributing tables")
        .expect("the Citus section")..];
    let section = &section[..section[4..].find("\n### ").expect("the next section") + 4];
    let blocks: Vec<&str> = section
        .split("```sql\n")
        .skip(1)
        .map(|b| &b[..b.find("```").expect("the block's end")])
        .collect();
    blocks[block].to_string()
}

/// `sql` without Citus's calls (and the sequences they moved), for one PostgreSQL.
fn without_citus(sql: &str) -> String {
    sql.lines()
        .filter(|l| !l.starts_with("SELECT create_") && !l.starts_with("SELECT setval"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The demo's tables on Citus as the documentation lays them out (the small ones copied to
/// every node, the big ones spread by their key), or, for one PostgreSQL, its other statements
/// (the demo's points trigger dropped: on Citus a trigger on a shard cannot write other tables).
fn demo_layout(distribute: bool) -> String {
    let sql = documented(0);
    if distribute {
        sql
    } else {
        without_citus(&sql)
    }
}

/// The tenant tables (the documented ones, and ads co-located with them) and their rows, a
/// view and functions reading them.
fn tenant_schema(distribute: bool) -> String {
    let tables = if distribute {
        documented(1)
    } else {
        without_citus(&documented(1))
    };
    let citus = |call: &str| {
        if distribute {
            call.to_string()
        } else {
            String::new()
        }
    };
    format!(
        "{tables}
         CREATE TABLE ads (company_id bigint NOT NULL, campaign_id bigint NOT NULL,
                           id bigserial, title text NOT NULL, clicks integer NOT NULL DEFAULT 0,
                           PRIMARY KEY (company_id, id),
                           FOREIGN KEY (company_id, campaign_id) REFERENCES campaigns (company_id, id));
         {}
         INSERT INTO countries VALUES ('fr', 'France'), ('de', 'Germany'), ('jp', 'Japan');
         INSERT INTO companies
           SELECT i, 'company ' || i, (ARRAY['fr', 'de', 'jp'])[1 + i % 3]
           FROM generate_series(1, 20) i;
         INSERT INTO campaigns
           SELECT c, j, 'campaign ' || c || '-' || j, 100 * j
           FROM generate_series(1, 20) c, generate_series(1, 3) j;
         INSERT INTO ads (company_id, campaign_id, id, title, clicks)
           SELECT c, j, c * 100 + j * 10 + k, 'ad ' || c || '-' || j || '-' || k, k
           FROM generate_series(1, 20) c, generate_series(1, 3) j, generate_series(1, 2) k;
         SELECT setval(pg_get_serial_sequence('ads', 'id'), 10000);
         -- people and posts joined on a column neither is distributed by
         CREATE VIEW people_posts AS
           SELECT p.id, p.first_name, po.title FROM people p JOIN posts po ON po.author = p.first_name;
         CREATE FUNCTION cities() RETURNS TABLE (city text, people bigint)
           LANGUAGE plpgsql STABLE AS $$
           BEGIN RETURN QUERY SELECT p.city, count(*) FROM people p GROUP BY p.city; END $$;
         CREATE FUNCTION cities_sql() RETURNS TABLE (city text, people bigint)
           LANGUAGE sql STABLE AS $$ SELECT city, count(*) FROM people GROUP BY city $$;",
        citus("SELECT create_distributed_table('ads', 'company_id', colocate_with => 'campaigns');"),
    )
}

async fn execute(url: &str, sql: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    client
        .batch_execute(&format!("SET client_min_messages = warning; {sql}"))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    drop(client);
    let _ = task.await;
}

async fn query_ints(url: &str, sql: &str) -> Vec<i64> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .query(sql, &[])
        .await
        .expect(sql)
        .iter()
        .map(|r| r.get::<_, i64>(0))
        .collect()
}

/// A Citus database of `cluster` holding the demo (200 people) laid out as above, with the
/// tenant tables.
async fn citus_demo(cluster: &CitusCluster) -> String {
    let url = cluster.new_database();
    rowgate::demo::postgres::init(&url, 200)
        .await
        .expect("demo init");
    execute(&url, &demo_layout(true)).await;
    execute(&url, &tenant_schema(true)).await;
    url
}

/// The demo's configuration, everything open to the anonymous role, ORDS on (`hr`).
fn config(dir: &std::path::Path, realtime: &str) -> rowgate::config::Config {
    let toml = rowgate::demo::CONFIG
        .replace("refuse_unfiltered_writes = true", "refuse_unfiltered_writes = false")
        .replace(
            "tables = [\"employee\", \"team\", \"driver\", \"race\", \"driver_race_map\", \"posts\", \"people\", \"team_standings\"]\nops = [\"select\"]",
            "tables = [\"*\"]\nops = [\"select\", \"insert\", \"update\", \"delete\"]\nfunctions = [\"*\"]",
        )
        .replace(
            "tables = [\"team\", \"driver\", \"race\", \"driver_race_map\", \"posts\"]",
            &format!("tables = {realtime}\npoll_ms = 200"),
        );
    let toml = format!("[ords]\nschema = \"hr\"\n\n{toml}");
    common::write_config(
        dir,
        &toml,
        &[(
            "templates/blog.html",
            include_str!("../demo/templates/blog.html"),
        )],
    )
    .expect("config")
}

/// What a server answered: status, body (JSON, or text), and the count header.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    body: Value,
    range: Option<String>,
}

async fn ask(
    s: &TestServer,
    method: &str,
    path: &str,
    body: Option<&Value>,
    prefer: &str,
) -> Answer {
    // `csv:/path`: the path asked for as CSV
    let (csv, path) = match path.strip_prefix("csv:") {
        Some(path) => (true, path),
        None => (false, path),
    };
    let url =
        if path.starts_with("/ords/") || path.starts_with("/teams/") || path == "/openapi.json" {
            s.root_url(path)
        } else {
            s.url(path)
        };
    let mut request = s
        .client
        .request(method.parse().expect("method"), url)
        .header("Prefer", prefer);
    if let Some(body) = body {
        request = request.json(body);
    }
    if csv {
        request = request.header("Accept", "text/csv");
    }
    let r = request.send().await.expect("request");
    let status = r.status().as_u16();
    let range = r
        .headers()
        .get("content-range")
        .map(|v| v.to_str().expect("range").to_string());
    let text = r.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        body,
        range,
    }
}

/// ORDS's answers name the server they came from: the links are left out of the comparison.
fn without_links(mut v: Value) -> Value {
    match &mut v {
        Value::Object(map) => {
            map.remove("links");
            for value in map.values_mut() {
                *value = without_links(value.take());
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                *item = without_links(item.take());
            }
        }
        _ => {}
    }
    v
}

/// Reads, embedding (co-located, to and from reference tables), aggregates, RPC, duality views,
/// custom resources, ORDS and the OpenAPI document answer on Citus as on one PostgreSQL; so do
/// writes (insert, bulk insert, update, delete, put, upserts on distributed and reference
/// tables, constraint errors, a strict max-affected rolled back). What Citus refuses answers
/// 400 with SQLSTATE 0A000 and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_on_citus_as_on_postgres() {
    let citus_url = citus_demo(cluster()).await;
    let plain_url = common::postgres::new_demo_database().await;
    execute(&plain_url, &demo_layout(false)).await;
    execute(&plain_url, &tenant_schema(false)).await;
    let realtime = r#"["team", "driver", "race", "driver_race_map", "posts", "people", "companies", "campaigns", "ads"]"#;
    let (dir_c, dir_p) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (config_c, config_p) = (
        config(dir_c.path(), realtime),
        config(dir_p.path(), realtime),
    );
    let citus = TestServer::start_at(&citus_url, dir_c, config_c).await;
    let plain = TestServer::start_at(&plain_url, dir_p, config_p).await;

    let reads = [
        "/employee?salary=gt.100000&order=salary.desc,emp_no&select=first_name,last_name,salary",
        "/employee/2?select=hire_date",
        "/team/3",
        "/people?select=id&last_name=like.*a*&or=(city.like.L*,city.like.T*)&order=id&limit=3",
        "/people?id=in.(1,2,3,50,199)&order=id",
        "/people?order=last_name,id&limit=5&offset=100",
        "/people?first_name=ilike.*an*&select=id,first_name&order=id",
        "/people?select=city,count()&order=city&limit=5",
        "/people?birth_date=lt.1950-01-01&select=id&order=id",
        "/posts?title=fts.cache&select=id,title&order=id",
        "/posts?select=id,title,meta&order=id&limit=3",
        "/team?points=gte.400&select=team_id&order=team_id",
        "/team_standings?team_id=eq.1",
        "csv:/team?select=team_id,name&order=team_id&limit=2",
        "/driver?select=name,team(name)&order=driver_id",
        "/team?select=name,driver(name)&order=team_id&driver.order=driver_id",
        "/race?select=name,driver_race_map(position,driver(name))&order=race_id&limit=2",
        "/companies?select=name,campaigns(name,budget,ads(title,clicks))&order=id&limit=4&campaigns.order=id&campaigns.ads.order=id",
        "/companies?select=name,countries(name)&order=id",
        "/campaigns?select=name,companies(name,countries(name))&order=company_id,id&limit=6",
        "/ads?select=title,campaigns(name,companies(name))&company_id=eq.4&order=id",
        "/companies?select=name,campaigns!inner(name)&campaigns.budget=gt.200&order=id&limit=5",
        "/companies?select=id,campaigns(count)&order=id&limit=3",
        "/companies?select=id,campaigns(name)&campaigns.order=budget.desc&campaigns.limit=1&order=id&limit=3",
        "/campaigns?select=company_id,budget.sum(),id.count()&order=company_id",
        "/employee?select=dept_no,salary.sum(),emp_no.count()&order=dept_no",
        "/companies?country=eq.fr&select=id&order=id",
        "/rpc/add_them?a=1&b=2",
        "/rpc/cities?order=city&limit=4",
        "/rpc/drivers_above?min_points=100&order=driver_id",
        "/team_dv?order=_id&limit=2",
        "/driver_dv/1",
        "/teams/1/drivers",
        "/ords/hr/people/?q={\"city\":{\"$like\":\"L%\"},\"$orderby\":{\"id\":\"asc\"}}&limit=3",
        "/ords/hr/companies/5",
        "/ords/hr/team/?limit=2",
    ];
    for path in reads {
        let (c, p) = (
            ask(&citus, "GET", path, None, "count=exact").await,
            ask(&plain, "GET", path, None, "count=exact").await,
        );
        assert!(c.status < 300, "{path} on Citus: {} {:?}", c.status, c.body);
        assert_eq!(
            (c.status, without_links(c.body), c.range),
            (p.status, without_links(p.body), p.range),
            "{path}"
        );
    }
    // the OpenAPI document describes the distributed and reference tables as tables
    let (c, p) = (
        ask(&citus, "GET", "/openapi.json", None, "").await,
        ask(&plain, "GET", "/openapi.json", None, "").await,
    );
    assert_eq!(c.body["paths"], p.body["paths"]);
    assert_eq!(c.body["components"], p.body["components"]);
    assert!(c.body["paths"]["/api/people"]["post"].is_object());

    let writes: [(&str, &str, Value, &str); 16] = [
        (
            "POST",
            "/team",
            json!({"name": "Sauber", "points": 4}),
            "return=representation",
        ),
        (
            "POST",
            "/people?order=first_name",
            json!([
                {"first_name": "Ada", "last_name": "L", "city": "London", "birth_date": "1990-01-01", "created_at": "2020-01-01T00:00:00"},
                {"first_name": "Bob", "last_name": "M", "city": "Paris", "birth_date": "1991-01-01", "created_at": "2020-01-01T00:00:00"},
                {"first_name": "Cy", "last_name": "N", "city": "Tokyo", "birth_date": "1992-01-01", "created_at": "2020-01-01T00:00:00"}
            ]),
            "return=representation",
        ),
        (
            "PATCH",
            "/people?id=in.(1,2,3,4,5,6)&order=id",
            json!({"city": "Lyon"}),
            "return=representation",
        ),
        (
            "DELETE",
            "/people?id=eq.7",
            Value::Null,
            "return=representation",
        ),
        (
            "PUT",
            "/people/8",
            json!({"id": 8, "first_name": "X", "last_name": "Y", "city": "Z", "birth_date": "2000-01-01", "created_at": "2020-01-01T00:00:00"}),
            "return=representation",
        ),
        (
            "POST",
            "/people?on_conflict=id&order=id",
            json!([
                {"id": 9, "first_name": "M", "last_name": "Y", "city": "Z", "birth_date": "2000-01-01", "created_at": "2020-01-01T00:00:00"},
                {"id": 5000, "first_name": "New", "last_name": "Y", "city": "Z", "birth_date": "2000-01-01", "created_at": "2020-01-01T00:00:00"}
            ]),
            "resolution=merge-duplicates,return=representation",
        ),
        (
            "POST",
            "/team?on_conflict=name",
            json!([{"name": "Ferrari", "points": 1}]),
            "resolution=merge-duplicates,return=representation",
        ),
        (
            "POST",
            "/companies",
            json!({"id": 21, "name": "company 21", "country": "jp"}),
            "return=representation",
        ),
        (
            "POST",
            "/campaigns",
            json!([{"company_id": 21, "id": 1, "name": "launch", "budget": 50}]),
            "return=representation",
        ),
        (
            "POST",
            "/ads?order=title",
            json!([{"company_id": 21, "campaign_id": 1, "title": "first"}, {"company_id": 21, "campaign_id": 1, "title": "second"}]),
            "return=representation",
        ),
        (
            "PATCH",
            "/ads?company_id=eq.21&title=eq.first",
            json!({"clicks": 9}),
            "return=minimal",
        ),
        ("POST", "/rpc/add_them", json!({"a": 40, "b": 2}), ""),
        ("POST", "/team", json!({"name": "Sauber"}), ""),
        (
            "POST",
            "/driver",
            json!({"name": "Ghost", "team_id": 999}),
            "",
        ),
        (
            "POST",
            "/employee",
            json!({"first_name": "a", "last_name": "b", "hire_date": "2020-01-01", "dept_no": "1", "job_code": "x", "job_grade": 1, "job_country": "x", "salary": -1}),
            "",
        ),
        (
            "PATCH",
            "/people?id=lt.5",
            json!({"city": "Nowhere"}),
            "max-affected=1,handling=strict",
        ),
    ];
    for (method, path, body, prefer) in &writes {
        let body = (!body.is_null()).then_some(body);
        let (c, p) = (
            ask(&citus, method, path, body, prefer).await,
            ask(&plain, method, path, body, prefer).await,
        );
        if p.status >= 400 {
            // the same error (Citus's message names a shard of the table)
            assert_eq!(
                (c.status, &c.body["code"]),
                (p.status, &p.body["code"]),
                "{method} {path}: {:?}",
                c.body
            );
        } else {
            assert_eq!((c.status, c.body), (p.status, p.body), "{method} {path}");
        }
    }
    // a duality view's document replaced whole, and another's removed with its rows
    let (_, mut team) = common::get_json(&plain, "/team_dv/3?driver.order=driver_id").await;
    team["name"] = json!("Red Bull Racing");
    team["driver"][0]["points"] = json!(1);
    for (method, path, body) in [
        ("PUT", "/team_dv/3?driver.order=driver_id", Some(&team)),
        ("DELETE", "/race_dv/1", None),
    ] {
        let (c, p) = (
            ask(&citus, method, path, body, "").await,
            ask(&plain, method, path, body, "").await,
        );
        assert!(p.status < 300, "{method} {path}: {:?}", p.body);
        assert_eq!((c.status, c.body), (p.status, p.body), "{method} {path}");
    }
    for path in [
        "/team_dv/3?driver.order=driver_id",
        "/race_dv?order=_id&limit=2",
        "/people?select=id,city&order=id&limit=10",
        "/people?id=eq.5000",
        "/team?order=team_id",
        "/ads?company_id=eq.21&order=id",
        "/companies?select=name,campaigns(name,ads(title,clicks))&id=eq.21&campaigns.ads.order=title",
    ] {
        let (c, p) = (
            ask(&citus, "GET", path, None, "").await,
            ask(&plain, "GET", path, None, "").await,
        );
        assert_eq!((c.status, c.body), (p.status, p.body), "after the writes: {path}");
    }

    // What Citus refuses: a clear 400 (PostgreSQL answers these)
    let refused: [(&str, &str, Value, &str); 5] = [
        // a correlated subquery over a reference table: embedding distributed rows in it
        (
            "GET",
            "/countries?select=name,companies(name)&order=code",
            Value::Null,
            "",
        ),
        // a join on columns neither table is distributed by
        ("GET", "/people_posts?order=id&limit=3", Value::Null, ""),
        // an SQL function reading a distributed table, counted (Citus plans its query in some
        // statements only; PL/pgSQL's, as `cities`, in all)
        (
            "GET",
            "/rpc/cities_sql?order=city&limit=4",
            Value::Null,
            "count=exact",
        ),
        // a write whose representation embeds other rows (a subquery in the INSERT)
        (
            "POST",
            "/team?select=name,driver(name)",
            json!({"name": "Minardi"}),
            "return=representation",
        ),
        (
            "POST",
            "/team_dv",
            json!({"name": "Tyrrell", "points": 0, "driver": []}),
            "return=representation",
        ),
    ];
    for (method, path, body, prefer) in &refused {
        let body = (!body.is_null()).then_some(body);
        let p = ask(&plain, method, path, body, prefer).await;
        assert!(p.status < 300, "{path} on PostgreSQL: {:?}", p.body);
        let c = ask(&citus, method, path, body, prefer).await;
        assert_eq!(c.status, 400, "{path}: {:?}", c.body);
        assert_eq!(c.body["code"], "0A000", "{path}");
        let message = c.body["message"].as_str().expect("message");
        assert!(
            message.starts_with("the distributed database (Citus) cannot run this request: "),
            "{message}"
        );
        assert!(
            c.body["hint"]
                .as_str()
                .is_some_and(|h| h.contains("docs/deployment.md")),
            "{:?}",
            c.body
        );
    }
    // nothing was written by the refused writes
    let (c, _) = common::get_json(&citus, "/team?name=in.(Minardi,Tyrrell)").await;
    assert_eq!(c, 200);
    assert_eq!(
        query_ints(
            &citus_url,
            "SELECT count(*) FROM team WHERE name IN ('Minardi', 'Tyrrell')"
        )
        .await,
        vec![0]
    );
}

/// The worker (0 or 1) of `cluster` holding `people` row `id`.
async fn worker_of(cluster: &CitusCluster, url: &str, id: i64) -> usize {
    let port = query_ints(
        url,
        &format!(
            "SELECT nodeport::bigint FROM citus_shards
             WHERE shardid = get_shard_id_for_distribution_column('people', {id})"
        ),
    )
    .await[0];
    cluster
        .workers
        .iter()
        .position(|w| i64::from(w.port) == port)
        .expect("a worker")
}

/// Reads realtime events of `table` until `n` have come; their `(id, key, row)`.
async fn events(socket: &mut common::ws::Socket, n: usize) -> Vec<Value> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let frame = common::ws::next(socket).await;
        if frame["type"] == "event" {
            got.push(frame);
        }
    }
    got
}

/// Every change made on a distributed table (by the API, several rows on both workers in one
/// statement, and by psql behind Rowgate's back) and on a reference table reaches realtime
/// once, in order per row, with ids that only grow; a stopped worker fails the requests that
/// need it with a 503 while the other worker's rows are read, written and streamed; once it is
/// back, what it captured is delivered, and a client resuming from an id gets the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_on_citus_sees_every_change_across_a_worker_restart() {
    let cluster = own_cluster();
    let url = citus_demo(&cluster).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path(), r#"["people", "team"]"#);
    let s = TestServer::start_at(&url, dir, config).await;
    let mut people = common::ws::follow(s.addr, "people", None).await;
    let mut teams = common::ws::follow(s.addr, "team", None).await;

    // rows on each worker
    let mut on: [Vec<i64>; 2] = [Vec::new(), Vec::new()];
    for id in 1..=20 {
        let w = worker_of(&cluster, &url, id).await;
        if on[w].len() < 3 {
            on[w].push(id);
        }
    }
    assert!(on[0].len() == 3 && on[1].len() == 3, "{on:?}");
    let all: Vec<i64> = on.concat();
    let list = |ids: &[i64]| ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    // what each row's city was set to, in order
    let mut expected: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    let mut team_points = Vec::new();
    for round in 0..4 {
        let city = format!("r{round}");
        let r = s
            .patch(
                &format!("/people?id=in.({})", list(&all)),
                json!({"city": city}),
            )
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status(), 204);
        for id in &all {
            expected.entry(*id).or_default().push(city.clone());
        }
        let r = s
            .patch("/team?team_id=eq.1", json!({"points": round}))
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status(), 204);
        team_points.push(round);
    }
    // behind Rowgate's back, on a row of the second worker, just before it stops
    let held = on[1][0];
    execute(
        &url,
        &format!("UPDATE people SET city = 'psql' WHERE id = {held}"),
    )
    .await;
    expected.entry(held).or_default().push("psql".into());
    let second = &cluster.workers[1];
    second.stop();

    // the second worker's rows: 503, saying which node; the first's: read and written
    let r = s
        .patch(
            &format!("/people?id=eq.{}", on[1][1]),
            json!({"city": "lost"}),
        )
        .send()
        .await
        .expect("patch");
    let body = common::assert_error(r, 503, "RG503").await;
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("127.0.0.1:{}", second.port))),
        "{body}"
    );
    let (status, _) = common::get_json(&s, &format!("/people?id=eq.{}", on[1][1])).await;
    assert_eq!(status, 503);
    let (status, body) =
        common::get_json(&s, &format!("/people?id=eq.{}&select=city", on[0][0])).await;
    assert_eq!((status, body), (200, json!([{"city": "r3"}])));
    let (status, _) = common::get_json(&s, "/team?team_id=eq.1").await;
    assert_eq!(status, 200, "reference tables are read from any copy");
    let r = s
        .patch(
            &format!("/people?id=in.({})", list(&on[0])),
            json!({"city": "alone"}),
        )
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status(), 204);
    for id in &on[0] {
        expected.entry(*id).or_default().push("alone".into());
    }

    second.start();
    // it answers again (the pool's connections to it are made anew)
    let mut back = false;
    for _ in 0..100 {
        let r = s
            .patch(
                &format!("/people?id=in.({})", list(&on[1])),
                json!({"city": "back"}),
            )
            .send()
            .await
            .expect("patch");
        if r.status() == 204 {
            back = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(back, "the worker did not come back");
    for id in &on[1] {
        expected.entry(*id).or_default().push("back".into());
    }

    let n: usize = expected.values().map(Vec::len).sum();
    let got = events(&mut people, n).await;
    let ids: Vec<i64> = got.iter().map(|e| e["id"].as_i64().expect("id")).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let mut seen: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    for e in &got {
        assert_eq!(e["op"], "update", "{e}");
        let id = e["key"]["id"].as_i64().expect("key");
        seen.entry(id)
            .or_default()
            .push(e["row"]["city"].as_str().expect("city").to_string());
    }
    assert_eq!(seen, expected);
    let points: Vec<i64> = events(&mut teams, team_points.len())
        .await
        .iter()
        .map(|e| e["row"]["points"].as_i64().expect("points"))
        .collect();
    assert_eq!(points, team_points);

    // a client resuming after the fifth event gets the others, in the same order
    let (mut resumed, _) = tokio_tungstenite::connect_async(format!("ws://{}/realtime", s.addr))
        .await
        .expect("websocket");
    resumed
        .send(Message::text(
            json!({"type": "subscribe", "table": "people", "since": ids[4]}).to_string(),
        ))
        .await
        .expect("subscribe");
    let again = events(&mut resumed, n - 5).await;
    let again: Vec<i64> = again
        .iter()
        .map(|e| e["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(again, ids[5..]);
    // the workers' outboxes are empty: everything was moved, once
    let left = query_ints(
        &url,
        "SELECT sum(result::bigint)::bigint FROM run_command_on_workers('SELECT count(*) FROM rowgate.changes')",
    )
    .await;
    assert_eq!(left, vec![0]);
}
