//! What the server tells of the requests it served, through its real interfaces: the
//! statistics per route at `/metrics`, the access log's lines in a file, and `X-Request-Id`.

mod common;

use std::time::Duration;

use common::{Backend, TestServer};
use rowgate::config::AccessLogFormat;
use serde_json::Value;

/// A server whose access log goes to `log` in `format`.
async fn server(b: Backend, log: &std::path::Path, format: AccessLogFormat) -> TestServer {
    let log = log.to_path_buf();
    let adjust = move |c: &mut rowgate::config::Config| {
        c.access_log.format = format;
        c.access_log.path = log;
    };
    TestServer::start_with(b, adjust).await
}

/// The log's lines once at least `n` are written (the writer is a thread of its own).
async fn lines(log: &std::path::Path, n: usize) -> Vec<String> {
    for _ in 0..100 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(String::from).collect();
        if lines.len() >= n {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {n} lines in {}", log.display());
}

/// The value of the series whose line starts with `series` (name and labels up to `pid`,
/// then the rest of the labels), if any.
fn sample(metrics: &str, name: &str, labels: &str, rest: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let after = line.strip_prefix(&format!("{name}{{{labels},pid=\""))?;
        let (_, after) = after.split_once('"')?;
        let value = after.strip_prefix(&format!("{rest}}} "))?;
        value.parse().ok()
    })
}

/// Each request is counted under its route and method: by status class, exact error status,
/// in the latency histogram, with its bytes and database time; a 404 keeps no name.
async fn statistics_per_route(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server(b, &dir.path().join("access.log"), AccessLogFormat::Off).await;
    for _ in 0..3 {
        let r = s.get("/team?select=name").send().await.expect("get");
        assert_eq!(r.status(), 200);
    }
    let r = s.get("/team/1").send().await.expect("item");
    assert_eq!(r.status(), 200);
    let r = s.get("/no_such_table_123").send().await.expect("missing");
    assert_eq!(r.status(), 404);
    let r = s
        .post("/team", serde_json::json!({"no_such_column": 1}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400);
    let r = s
        .client
        .get(s.root_url("/live"))
        .send()
        .await
        .expect("live");
    assert_eq!(r.status(), 200);

    let metrics = common::metrics_text(&s).await;
    let team_get = "route=\"table\",name=\"team\",method=\"GET\"";
    let count = |name, labels, rest| sample(&metrics, name, labels, rest);
    assert_eq!(
        count("rowgate_requests_total", team_get, ",status=\"2xx\""),
        Some(4.0),
        "{metrics}"
    );
    assert_eq!(
        count("rowgate_request_duration_seconds_count", team_get, ""),
        Some(4.0)
    );
    assert_eq!(
        count(
            "rowgate_request_duration_seconds_bucket",
            team_get,
            ",le=\"+Inf\""
        ),
        Some(4.0)
    );
    let buckets: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("rowgate_request_duration_seconds_bucket{route=\"table\",name=\"team\",method=\"GET\""))
        .map(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("value"))
        .collect();
    assert_eq!(buckets.len(), 17, "16 bounds and +Inf");
    assert!(
        buckets.windows(2).all(|w| w[0] <= w[1]),
        "cumulative: {buckets:?}"
    );
    assert!(count("rowgate_response_bytes_total", team_get, "").expect("bytes") > 0.0);
    assert!(
        count("rowgate_database_seconds_total", team_get, "").expect("db time") > 0.0,
        "reads wait for the database"
    );
    assert_eq!(
        count(
            "rowgate_requests_total",
            "route=\"table\",name=\"team\",method=\"POST\"",
            ",status=\"400\""
        ),
        Some(1.0)
    );
    assert_eq!(
        count(
            "rowgate_requests_total",
            "route=\"table\",name=\"\",method=\"GET\"",
            ",status=\"404\""
        ),
        Some(1.0),
        "a 404 keeps no name"
    );
    assert!(!metrics.contains("no_such_table_123"));
    assert_eq!(
        count(
            "rowgate_requests_total",
            "route=\"health\",name=\"\",method=\"GET\"",
            ",status=\"2xx\""
        ),
        Some(1.0)
    );
    for family in [
        "# TYPE rowgate_requests_total counter",
        "# TYPE rowgate_request_duration_seconds histogram",
        "# TYPE rowgate_response_bytes_total counter",
        "# TYPE rowgate_database_seconds_total counter",
    ] {
        assert_eq!(metrics.matches(family).count(), 1, "{family}");
    }
    s.stop().await;
}

/// One JSON line per request with its id (taken from the request or made and echoed), role
/// and client; credentials in the query are redacted and the bearer token never written.
async fn access_log_lines(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("access.log");
    let s = server(b, &log, AccessLogFormat::Json).await;
    let (client, token) = common::client_token(&s, "logged", "anon").await;
    let r = s
        .get("/team?select=name&apikey=very-secret-key")
        .header("X-Request-Id", "trace-abc-1")
        .bearer_auth(&token)
        .send()
        .await
        .expect("get");
    // (a query parameter PostgREST does not know is a filter on a column there is not)
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["x-request-id"], "trace-abc-1", "echoed");
    let r = s.get("/team/1").send().await.expect("get");
    let made = r.headers()["x-request-id"]
        .to_str()
        .expect("id")
        .to_string();
    assert_eq!(made.len(), 32, "made: {made}");
    let r = s
        .get("/team/2")
        .header("X-Request-Id", "has a space")
        .send()
        .await
        .expect("get");
    assert_ne!(
        r.headers()["x-request-id"],
        "has a space",
        "not a sensible id"
    );

    // the token request and the three reads
    let lines = lines(&log, 4).await;
    let text = lines.join("\n");
    assert!(!text.contains(&token), "no token in the log");
    assert!(!text.contains("very-secret-key"), "no key in the log");
    let entries: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let traced = entries
        .iter()
        .find(|e| e["request_id"] == "trace-abc-1")
        .expect("the traced request");
    assert_eq!(traced["method"], "GET");
    assert_eq!(traced["path"], "/api/team?select=name&apikey=REDACTED");
    assert_eq!(traced["status"], 400);
    assert_eq!(traced["role"], "anon");
    assert_eq!(traced["client"], client.as_str());
    assert_eq!(traced["route"], "table");
    assert_eq!(traced["name"], "team");
    assert_eq!(traced["peer"], "127.0.0.1");
    assert!(traced["bytes"].as_u64().is_some_and(|n| n > 0));
    assert!(traced["duration_ms"].as_f64().is_some_and(|ms| ms >= 0.0));
    assert!(traced["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    let anonymous = entries
        .iter()
        .find(|e| e["request_id"] == made.as_str())
        .expect("the made id, logged");
    assert_eq!(anonymous["client"], Value::Null);
    assert!(entries.iter().any(|e| e["route"] == "token"));
    s.stop().await;
}

/// logfmt: `key=value` pairs, quoted where a value needs it.
async fn access_log_logfmt(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("access.log");
    let s = server(b, &log, AccessLogFormat::Logfmt).await;
    let r = s
        .get("/team?name=eq.Mercedes")
        .header("X-Request-Id", "lf-1")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    let lines = lines(&log, 1).await;
    let line = lines
        .iter()
        .find(|l| l.contains("request_id=lf-1"))
        .expect("logged");
    assert!(
        line.contains(" method=GET path=\"/api/team?name=eq.Mercedes\" status=200 "),
        "{line}"
    );
    assert!(
        line.contains(" role=anon client=\"\" route=table name=team peer=127.0.0.1"),
        "{line}"
    );
    s.stop().await;
}

backend_tests!(statistics_per_route, access_log_lines, access_log_logfmt);
