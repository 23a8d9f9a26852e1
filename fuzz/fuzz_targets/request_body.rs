//! Request bodies against the planner and the database: a write (POST, PATCH, PUT, or a
//! function call) to one of the demo's tables, duality views or functions, with its body as
//! JSON, a form or CSV and one of the `Prefer` headers that change how a body is read, sent
//! to the app as a service (no socket), from any bytes. Beyond "no panic": no answer is a 500
//! (a bad body is the client's error, answered 4xx), every error answer is the JSON envelope,
//! and a representation asked for is JSON.

#![no_main]

use http_body_util::BodyExt as _;
use libfuzzer_sys::fuzz_target;

#[path = "served.rs"]
mod served;

/// Where a write goes: (path of a collection, path of one item, path with a filter).
const TARGETS: [(&str, &str, &str); 8] = [
    ("/api/team", "/api/team/1", "/api/team?team_id=eq.1"),
    ("/api/driver", "/api/driver/1", "/api/driver?driver_id=lt.3"),
    ("/api/people", "/api/people/7", "/api/people?id=in.(1,2,3)"),
    (
        "/api/employee",
        "/api/employee/10001",
        "/api/employee?emp_no=eq.10001",
    ),
    ("/api/race", "/api/race/1", "/api/race?race_id=eq.1"),
    ("/api/team_dv", "/api/team_dv/1", "/api/team_dv?_id=eq.1"),
    (
        "/api/driver_dv",
        "/api/driver_dv/1",
        "/api/driver_dv?_id=eq.2",
    ),
    (
        "/api/rpc/add_them",
        "/api/rpc/drivers_above",
        "/api/rpc/add_them?a=1",
    ),
];

const MEDIA: [&str; 5] = [
    "application/json",
    "application/x-www-form-urlencoded",
    "text/csv",
    "application/vnd.pgrst.object+json",
    "application/json; charset=utf-8",
];

const PREFER: [&str; 6] = [
    "return=representation",
    "return=minimal",
    "missing=default, return=representation",
    "resolution=merge-duplicates",
    "resolution=ignore-duplicates, return=representation",
    "params=single-object",
];

fuzz_target!(|data: &[u8]| {
    let [method, target, media, prefer, body @ ..] = data else {
        return;
    };
    let (collection, item, filtered) = TARGETS[usize::from(*target) % TARGETS.len()];
    let (method, path) = match method % 4 {
        0 => ("POST", collection),
        1 => ("PATCH", filtered),
        2 => ("PUT", item),
        _ => ("POST", filtered),
    };
    let prefer = PREFER[usize::from(*prefer) % PREFER.len()];
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", MEDIA[usize::from(*media) % MEDIA.len()])
        .header("prefer", prefer)
        .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(
            body,
        )))
        .expect("request");
    let served = served::served("request_body");
    let (status, answer) = served.runtime.block_on(async {
        let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
        let response = rowgate::server::dispatch(&served.app, request, loopback).await;
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.expect("body").to_bytes();
        (parts.status.as_u16(), bytes)
    });
    let text = String::from_utf8_lossy(&answer);
    assert_ne!(status, 500, "{method} {path} answered 500: {text}");
    if status >= 400 {
        assert!(served::is_error_envelope(&answer), "{status}: {text}");
    } else if prefer.contains("return=representation") && status != 204 && !answer.is_empty() {
        assert!(
            serde_json::from_slice::<serde_json::Value>(&answer).is_ok(),
            "{status}: {text}"
        );
    }
});
