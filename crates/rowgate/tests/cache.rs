//! The response cache (`[cache]`, SQLite): repeated reads are answered from it, and a commit
//! made anywhere — through the API, by another connection, by another process writing the
//! file while reads go on — is in the very next answer. Volatile SQL is never kept; roles and
//! headers keep answers apart; `If-None-Match` and HEAD are answered from kept answers.

mod common;

use common::{write_config, Backend, TestServer};
use serde_json::{json, Value};

/// `rowgate_cache_hits_total` and `rowgate_cache_misses_total` of the server now.
async fn cache_counts(s: &TestServer) -> (u64, u64) {
    let text = common::metrics_text(s).await;
    let count = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in /metrics:\n{text}"))
    };
    (
        count("rowgate_cache_hits_total"),
        count("rowgate_cache_misses_total"),
    )
}

/// A server configured by `toml`, on a demo database `setup` (SQL) has run on.
async fn start_configured(toml: &str, setup: &str) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), toml, &[]).expect("config");
    TestServer::start_prepared(Backend::Sqlite, dir, config, setup, |_| {}).await
}

async fn body_of(s: &TestServer, path: &str) -> (u16, String) {
    let r = s.get(path).send().await.expect("get");
    (r.status().as_u16(), r.text().await.expect("text"))
}

/// The same read, repeated, is answered from the cache with the same bytes; a different
/// query or header is another answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_reads_are_answered_from_the_cache() {
    let s = TestServer::start(Backend::Sqlite).await;
    let path = "/employee?select=emp_no,last_name&order=emp_no&limit=5";
    let (status, first) = body_of(&s, path).await;
    assert_eq!(status, 200);
    let (hits, _) = cache_counts(&s).await;
    for _ in 0..10 {
        assert_eq!(body_of(&s, path).await, (200, first.clone()));
    }
    let (more_hits, _) = cache_counts(&s).await;
    // each of the runtime's two threads may see the database once for the first time
    assert!(more_hits - hits >= 8, "{hits} → {more_hits} hits");

    // another query is another answer
    let (_, other) = body_of(&s, "/employee?select=emp_no,last_name&order=emp_no&limit=2").await;
    assert_eq!(
        serde_json::from_str::<Value>(&other).expect("json"),
        serde_json::from_str::<Value>(&first)
            .expect("json")
            .as_array()
            .expect("rows")[..2]
            .iter()
            .cloned()
            .collect::<Value>()
    );
    // and so is another header that changes it
    let with = |name: &'static str, value: &'static str| s.get(path).header(name, value).send();
    let r = with("Prefer", "count=exact").await.expect("get");
    assert_eq!(
        r.headers()["content-range"].to_str().expect("text"),
        "0-4/42"
    );
    let r = with("Accept", "text/csv").await.expect("get");
    let csv = r.text().await.expect("text");
    assert_eq!(csv.lines().next(), Some("emp_no,last_name"), "{csv}");
}

/// Each write through the API is in the next read of the rows it changed (the cache held the
/// old answer until then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_the_api_is_in_the_next_read() {
    let s = TestServer::start(Backend::Sqlite).await;
    let path = "/team?team_id=eq.1&select=points";
    for points in 1..=20 {
        // twice, so that the second comes from the cache
        for _ in 0..2 {
            let (_, body) = body_of(&s, path).await;
            assert_ne!(body, format!("[{{\"points\":{points}}}]"));
        }
        let r = s
            .patch("/team?team_id=eq.1", json!({ "points": points }))
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status(), 204);
        assert_eq!(
            body_of(&s, path).await.1,
            format!("[{{\"points\":{points}}}]")
        );
    }
    let (hits, misses) = cache_counts(&s).await;
    assert!(hits >= 15 && misses >= 20, "{hits} hits, {misses} misses");
}

/// Another process commits to the file while reads go on: as soon as it says a commit is
/// done, the next read shows it (or something newer), whatever the cache held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_by_another_process_are_in_the_next_read() {
    let s = TestServer::start(Backend::Sqlite).await;
    s.exec("CREATE TABLE tally (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); INSERT INTO tally VALUES (1, 0);");
    common::wait_until_served(&s, "/tally").await;
    // readers keep the answer cached between the writer's commits
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (client, url, stop) = (s.client.clone(), s.url("/tally?id=eq.1"), stop.clone());
        readers.push(tokio::spawn(async move {
            let mut last = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let rows: Value = client
                    .get(&url)
                    .send()
                    .await
                    .expect("get")
                    .json()
                    .await
                    .expect("json");
                let n = rows[0]["n"].as_i64().expect("n");
                // never older than what this reader saw before
                assert!(n >= last, "{n} after {last}");
                last = n;
            }
        }));
    }
    let script = format!(
        "import sqlite3, sys, time\n\
         db = sqlite3.connect({:?}, timeout=10, isolation_level=None)\n\
         for i in range(1, 201):\n\
         \x20   db.execute('UPDATE tally SET n = ? WHERE id = 1', (i,))\n\
         \x20   print(i, flush=True)\n\
         \x20   sys.stdin.readline()\n",
        s.db_path.display().to_string()
    );
    let mut writer = common::SteppedWriter::spawn(&script);
    let mut checked = 0;
    while let Some(line) = writer.committed() {
        let committed: i64 = line.trim().parse().expect("number");
        for _ in 0..2 {
            let rows: Value = s
                .get("/tally?id=eq.1")
                .send()
                .await
                .expect("get")
                .json()
                .await
                .expect("json");
            assert_eq!(rows[0]["n"], committed, "the read after commit {committed}");
        }
        checked += 1;
        writer.go_on();
    }
    writer.finish();
    assert_eq!(checked, 200);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.await.expect("reader");
    }
    let (hits, _) = cache_counts(&s).await;
    assert!(hits >= 200, "{hits} hits");
}

/// Views and custom resources whose SQL reads the time or randomness are never kept, nor is
/// a resource declared `cache = false`; others are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volatile_sql_is_never_kept() {
    const TOML: &str = r#"
[[resources]]
path = "/dice"
roles = ["*"]
sql = "SELECT abs(random()) % 1000000 AS r"

[[resources]]
path = "/unkept"
roles = ["*"]
cache = false
sql = "SELECT count(*) AS n FROM tally"

[[resources]]
path = "/kept"
roles = ["*"]
etag = true
cache_control = "max-age=5"
sql = "SELECT count(*) AS n FROM tally"

[[resources]]
path = "/over_view"
roles = ["*"]
sql = "SELECT r FROM roll"
"#;
    let s = start_configured(
        TOML,
        "CREATE TABLE tally (id INTEGER PRIMARY KEY);
         CREATE VIEW roll AS SELECT abs(random()) % 1000000 AS r;
         CREATE VIEW roll_again AS SELECT r FROM roll;",
    )
    .await;
    // how many different answers eight reads of `url` gave
    let distinct = |url: String| {
        let s = &s;
        async move {
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..8 {
                let r = s.client.get(&url).send().await.expect("get");
                assert_eq!(r.status(), 200, "{url}");
                seen.insert(r.text().await.expect("text"));
            }
            seen.len()
        }
    };
    let (hits, misses) = cache_counts(&s).await;
    // (eight draws of a million values: all alike has odds of 1e-42)
    for url in [
        s.root_url("/dice"),
        s.root_url("/over_view"),
        s.url("/roll"),
        s.url("/roll_again"),
    ] {
        assert!(distinct(url.clone()).await > 1, "{url} was kept");
    }
    assert_eq!(distinct(s.root_url("/unkept")).await, 1);
    assert_eq!(
        cache_counts(&s).await,
        (hits, misses),
        "nothing kept or hit"
    );
    assert_eq!(distinct(s.root_url("/kept")).await, 1);
    let (more_hits, _) = cache_counts(&s).await;
    assert!(more_hits > hits, "/kept was not kept");
    // its 304, from the kept answer, says what its 200 says of caching (RFC 9110 §15.4.5)
    let tag = s
        .client
        .get(s.root_url("/kept"))
        .send()
        .await
        .expect("get")
        .headers()["etag"]
        .to_str()
        .expect("text")
        .to_string();
    for _ in 0..3 {
        let r = s
            .client
            .get(s.root_url("/kept"))
            .header("If-None-Match", &tag)
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 304);
        assert_eq!(r.headers()["cache-control"], "max-age=5");
    }
    assert!(
        cache_counts(&s).await.0 > more_hits,
        "no 304 came from the cache"
    );
}

/// A kept answer with an `ETag` answers `If-None-Match` with 304; HEAD is answered from the
/// GET's kept answer, without a body; an answer over `cache.max_entry_kb` is not kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_and_head_requests_and_the_entry_bound() {
    let s = TestServer::start_with(Backend::Sqlite, |c| c.cache.max_entry_kb = 4).await;
    let r = s.get("/team/1").send().await.expect("get");
    assert_eq!(r.status(), 200);
    let tag = r.headers()["etag"].to_str().expect("text").to_string();
    // (a thread's first look at the database moves the epoch on: a kept answer may have to be
    // read again once per thread, hence a GET before each try)
    let (mut conditional_hits, mut head_hits) = (0, 0);
    for _ in 0..6 {
        assert_eq!(s.get("/team/1").send().await.expect("get").status(), 200);
        let (hits, _) = cache_counts(&s).await;
        let r = s
            .get("/team/1")
            .header("If-None-Match", &tag)
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 304);
        assert_eq!(r.headers()["etag"].to_str().expect("text"), tag);
        assert_eq!(r.text().await.expect("text"), "");
        let (after, _) = cache_counts(&s).await;
        conditional_hits += after - hits;

        assert_eq!(s.get("/team/1").send().await.expect("get").status(), 200);
        let (hits, _) = cache_counts(&s).await;
        let r = s.client.head(s.url("/team/1")).send().await.expect("head");
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["etag"].to_str().expect("text"), tag);
        assert_eq!(r.text().await.expect("text"), "");
        let (after, _) = cache_counts(&s).await;
        head_hits += after - hits;
    }
    assert!(
        conditional_hits >= 3,
        "{conditional_hits} of 6 conditional GETs hit"
    );
    assert!(head_hits >= 3, "{head_hits} of 6 HEADs hit");

    // 200 people are about 20 KB: over the bound, run every time
    let (hits, misses) = cache_counts(&s).await;
    for _ in 0..4 {
        assert_eq!(body_of(&s, "/people").await.0, 200);
    }
    assert_eq!(cache_counts(&s).await, (hits, misses));
}

/// The same URL read by different roles, and by different tokens of one role under a row
/// filter by `sub`, gives each its own rows: answers are kept per role and token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_kept_apart_by_role_and_token() {
    const TOML: &str = r#"
[[grants]]
role = "anon"
tables = ["team"]
ops = ["select"]
filter = "team_id=eq.1"

[[grants]]
role = "owner"
tables = ["notes"]
ops = ["select"]
filter = "owner=eq.@sub"
"#;
    let s = start_configured(
        TOML,
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, owner TEXT NOT NULL);",
    )
    .await;
    let (alice_id, alice) = common::client_token(&s, "alice", "owner").await;
    let (bob_id, bob) = common::client_token(&s, "bob", "owner").await;
    s.exec(&format!(
        "INSERT INTO notes (id, owner) VALUES (1, '{alice_id}'), (2, '{alice_id}'), (3, '{bob_id}');"
    ));
    let ids = |token: Option<&str>| {
        let mut req = s.get("/notes?select=id&order=id");
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        async move {
            let r = req.send().await.expect("get");
            (r.status().as_u16(), r.text().await.expect("text"))
        }
    };
    for _ in 0..5 {
        assert_eq!(
            ids(Some(&alice)).await,
            (200, r#"[{"id":1},{"id":2}]"#.into())
        );
        assert_eq!(ids(Some(&bob)).await, (200, r#"[{"id":3}]"#.into()));
        assert_eq!(ids(None).await.0, 401);
    }
    // (each of the two threads' first look after the setup's commits drops what was kept)
    let (hits, _) = cache_counts(&s).await;
    assert!(hits >= 6, "{hits} hits of 10");
}

/// What `path` answers once it answers `expected` (a commit made elsewhere ends a PostgreSQL
/// server's kept answers within a poll), or after half a second of asking.
async fn answer_within_polls(s: &TestServer, path: &str, expected: &str) -> (u16, String) {
    let mut seen = body_of(s, path).await;
    for _ in 0..50 {
        if seen == (200, expected.to_string()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        seen = body_of(s, path).await;
    }
    seen
}

/// PostgreSQL keeps no answers unless `cache.postgres_poll_ms` says how often to read its
/// WAL position (commits made elsewhere are seen no sooner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_are_not_kept_by_default() {
    let s = TestServer::start(Backend::Postgres).await;
    for _ in 0..3 {
        assert_eq!(
            body_of(&s, "/team?select=team_id&team_id=eq.1").await.0,
            200
        );
    }
    assert!(s.app.cache.is_none());
    assert_eq!(cache_counts(&s).await, (0, 0));
}

/// With `cache.postgres_poll_ms`, PostgreSQL's answers are kept: repeated reads are hits with
/// the same bytes; a write through the API is in the very next read (the clock moves before
/// the write is answered); a commit made behind the server's back (psql) is in the reads once
/// the WAL position has been read again; a read naming a `Rowgate-Position` the clock has not
/// read yet is not answered from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_are_kept_until_the_wal_moves() {
    let s = TestServer::start_with(Backend::Postgres, |c| c.cache.postgres_poll_ms = 20).await;
    assert!(s.app.cache.is_some());
    let path = "/team?select=team_id,points&team_id=eq.1";
    // the clock is known once the first poll is answered
    let mut first = body_of(&s, path).await;
    for _ in 0..50 {
        if cache_counts(&s).await.1 > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        first = body_of(&s, path).await;
    }
    assert_eq!(first.0, 200);
    let (hits, _) = cache_counts(&s).await;
    for _ in 0..10 {
        assert_eq!(body_of(&s, path).await, first);
    }
    let (more_hits, _) = cache_counts(&s).await;
    assert!(more_hits - hits >= 8, "{hits} → {more_hits} hits");

    // a write through the API: the next read has it
    let r = s
        .patch("/team?team_id=eq.1", json!({"points": 4321}))
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status(), 204);
    // (where it committed, for reads on other nodes to name)
    assert!(r.headers().contains_key("rowgate-position"));
    assert_eq!(
        body_of(&s, path).await,
        (200, r#"[{"team_id":1,"points":4321}]"#.to_string())
    );
    // a commit behind its back: in the reads within a poll or two
    let url = s.db_path.to_string_lossy().to_string();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .execute("UPDATE team SET points = 99 WHERE team_id = 1", &[])
        .await
        .expect("update");
    assert_eq!(
        answer_within_polls(&s, path, r#"[{"team_id":1,"points":99}]"#).await,
        (200, r#"[{"team_id":1,"points":99}]"#.to_string())
    );
    // a position past what the clock has read: not from the cache (nor kept)
    let (hits, misses) = cache_counts(&s).await;
    for _ in 0..3 {
        let r = s
            .get(path)
            .header("Rowgate-Position", "FFFFFFFF/0")
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 200);
    }
    assert_eq!(cache_counts(&s).await, (hits, misses));
}

/// Two nodes on one PostgreSQL, each keeping answers: a write through one is in the other's
/// next read when the read names the write's `Rowgate-Position` (not served from a cache that
/// has not read that position yet), and in every read of it within a poll or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_nodes_keep_answers_fresh_for_positions_they_are_told() {
    let first = TestServer::start_with(Backend::Postgres, |c| c.cache.postgres_poll_ms = 20).await;
    let mut config = rowgate::config::Config::default();
    config.cache.postgres_poll_ms = 20;
    config.grants.push(common::grant_everything("anon"));
    let second = TestServer::start_beside(&first, config).await;
    let path = "/team?select=points&team_id=eq.2";
    // the second node keeps its answer (hits once its clock is known)
    for _ in 0..50 {
        body_of(&second, path).await;
        if cache_counts(&second).await.0 > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        cache_counts(&second).await.0 > 0,
        "the second node answers from its cache"
    );
    for points in [11, 12, 13] {
        let r = first
            .patch("/team?team_id=eq.2", json!({"points": points}))
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status(), 204);
        let position = r.headers()["rowgate-position"]
            .to_str()
            .expect("position")
            .to_string();
        let r = second
            .get(path)
            .header("Rowgate-Position", &position)
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.json::<Value>().await.expect("json"),
            json!([{"points": points}]),
            "a read naming {position}"
        );
    }
    assert_eq!(
        answer_within_polls(&second, path, r#"[{"points":13}]"#).await,
        (200, r#"[{"points":13}]"#.to_string())
    );
}

/// ORDS reads are kept as `/api`'s are: repeated, they are answered from the cache with the
/// same bytes, and a write (through ORDS) is in the next one. A trusted proxy's answers are
/// kept apart from other clients' with the same headers: its `X-Forwarded-Host` names the
/// links' host, another client's does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ords_reads_are_kept_and_apart_for_trusted_proxies() {
    let s = TestServer::start_with(Backend::Sqlite, |c| {
        c.trusted_proxies = vec!["127.0.0.2".into()];
    })
    .await;
    let ords = |path: &str| s.root_url(&format!("/ords/rowgate{path}"));
    let read = |client: &reqwest::Client, url: String| {
        let request = client
            .get(url)
            .header("X-Forwarded-Host", "api.example.com");
        async move {
            let r = request.send().await.expect("get");
            (r.status().as_u16(), r.text().await.expect("text"))
        }
    };
    let direct = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 1]))
        .build()
        .expect("client");
    let (status, first) = read(&direct, ords("/team/1")).await;
    assert_eq!(status, 200, "{first}");
    let (hits, _) = cache_counts(&s).await;
    for _ in 0..6 {
        assert_eq!(read(&direct, ords("/team/1")).await, (200, first.clone()));
    }
    let (more_hits, _) = cache_counts(&s).await;
    assert!(more_hits - hits >= 4, "{hits} → {more_hits} hits");
    assert!(!first.contains("api.example.com"), "{first}");

    // the trusted proxy's answer names the host it forwards for, and the direct client's
    // answer, asked again, still does not
    let proxy = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .expect("client");
    for _ in 0..2 {
        let (_, proxied) = read(&proxy, ords("/team/1")).await;
        assert!(
            proxied.contains("\"http://api.example.com/ords/rowgate/team/1\""),
            "{proxied}"
        );
        let (_, again) = read(&direct, ords("/team/1")).await;
        assert_eq!(again, first);
    }

    // a write through ORDS is in the next read
    let r = direct
        .put(ords("/team/1"))
        .json(&json!({"team_id": 1, "name": "Mercedes", "points": 7}))
        .send()
        .await
        .expect("put");
    assert_eq!(r.status(), 200);
    let (_, after) = read(&direct, ords("/team/1")).await;
    let after: Value = serde_json::from_str(&after).expect("json");
    assert_eq!(after["points"], 7, "{after}");
}
