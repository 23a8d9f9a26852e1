//! Smoke tests: the demo database is served, and the README's first example works.

mod common;
use common::*;
use serde_json::Value;

async fn readme_example(b: Backend) {
    let s = TestServer::start(b).await;
    let (status, body) = get_json(
        &s,
        "/employee?salary=gt.100000&order=salary.desc&select=first_name,last_name,salary",
    )
    .await;
    assert_eq!(status, 200);
    let rows = body.as_array().expect("array");
    assert!(rows.len() >= 10, "{body}");
    let salaries: Vec<f64> = rows
        .iter()
        .map(|r| r["salary"].as_f64().expect("salary"))
        .collect();
    assert!(salaries.iter().all(|&x| x > 100000.0));
    assert!(
        salaries.windows(2).all(|w| w[0] >= w[1]),
        "descending: {salaries:?}"
    );
    assert_eq!(rows[0].as_object().expect("object").len(), 3);
    assert!(rows[0]["first_name"].is_string());
}

async fn every_demo_table_is_served(b: Backend) {
    let s = TestServer::start(b).await;
    for (table, rows) in [
        ("employee", 42),
        ("team", 10),
        ("driver", 20),
        ("posts", 20),
        ("people", 200),
        ("team_standings", 10),
    ] {
        let (status, body) = get_json(&s, &format!("/{table}")).await;
        assert_eq!(status, 200, "{table}");
        assert_eq!(body.as_array().map(Vec::len), Some(rows), "{table}");
    }
    let (_, body) = get_json(&s, "/employee").await;
    let size = serde_json::to_vec(&body).expect("json").len();
    assert!(
        (8_000..16_000).contains(&size),
        "employee JSON is {size} bytes"
    );
    assert_eq!(body[0]["emp_no"], Value::from(2));
}

/// Reads answer the same whether they run inline (default) or only on the reader threads, and a
/// read too long for the inline budget is re-run on the pool and answered in full.
async fn inline_and_pooled_reads_agree(b: Backend) {
    let slow = "CREATE VIEW slow AS WITH RECURSIVE c(x) AS \
        (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT count(*) AS n FROM c";
    let mut answers = Vec::new();
    for inline in [true, false] {
        let s = TestServer::start_with(b, |c| {
            c.db.inline_reads = inline;
            rusqlite::Connection::open(&c.db.path)
                .and_then(|conn| conn.execute_batch(slow))
                .expect("view");
        })
        .await;
        let (status, body) = get_json(&s, "/slow").await;
        assert_eq!(
            (status, body),
            (200, serde_json::json!([{"n": 2000000}])),
            "inline={inline}"
        );
        let (status, body) = get_json(
            &s,
            "/people?select=id,last_name&last_name=like.M*&order=id&limit=5",
        )
        .await;
        assert_eq!(status, 200);
        answers.push(body);
    }
    assert_eq!(answers[0], answers[1]);
    assert!(!answers[0].as_array().expect("array").is_empty());
}

backend_tests!(readme_example, every_demo_table_is_served,);

sqlite_tests!(inline_and_pooled_reads_agree,);
