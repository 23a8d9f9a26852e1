//! Browsers through a real server: CORS preflights answered before routing on every route (the
//! API, the token endpoint, custom resources), the headers scripts need on every answer (errors
//! too) for the origins allowed, credentials, and CORS off.

mod common;

use common::*;
use reqwest::Method;

fn header<'r>(r: &'r reqwest::Response, name: &str) -> Option<&'r str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn preflight(s: &TestServer, url: String, origin: &str) -> reqwest::Response {
    s.client
        .request(Method::OPTIONS, url)
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "PATCH")
        .header(
            "Access-Control-Request-Headers",
            "authorization, prefer, content-type",
        )
        .send()
        .await
        .expect("preflight")
}

/// The default allows any origin, as PostgREST does: preflights on every route, and the
/// headers on every answer to a cross-origin request (errors too), none without `Origin`.
async fn any_origin_by_default(b: Backend) {
    let s = TestServer::start(b).await;
    for url in [
        s.url("/team"),
        s.url("/team/3"),
        s.root_url("/oauth/token"),
        s.root_url("/xyz"),
    ] {
        let r = preflight(&s, url.clone(), "https://app.example").await;
        assert_eq!(r.status(), 204, "{url}");
        assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
        assert!(header(&r, "access-control-allow-methods").is_some_and(|m| m.contains("PATCH")));
        assert_eq!(
            header(&r, "access-control-allow-headers"),
            Some("authorization, prefer, content-type")
        );
        assert_eq!(header(&r, "access-control-max-age"), Some("86400"));
    }
    let r = s
        .get("/team?limit=2")
        .header("Origin", "https://app.example")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 206);
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
    let exposed = header(&r, "access-control-expose-headers").expect("exposed");
    for name in ["Content-Range", "Location", "ETag", "Preference-Applied"] {
        assert!(exposed.contains(name), "{name} in {exposed}");
    }
    let r = s
        .get("/nope")
        .header("Origin", "https://app.example")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 404);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("*"),
        "errors are readable too"
    );
    let r = s.get("/team").send().await.expect("get");
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        None,
        "not a cross-origin request"
    );
}

/// Listed origins only, with credentials: the origin echoed with `Vary: Origin` and
/// `Access-Control-Allow-Credentials`; another origin gets no CORS headers and its preflight 403.
async fn listed_origins_with_credentials(b: Backend) {
    let s = TestServer::start_with(b, |c| {
        c.cors.origins = vec!["https://app.example".into()];
        c.cors.allow_credentials = true;
    })
    .await;
    let r = preflight(&s, s.url("/team"), "https://app.example").await;
    assert_eq!(r.status(), 204);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(header(&r, "access-control-allow-credentials"), Some("true"));
    assert_eq!(header(&r, "vary"), Some("Origin"));
    let r = s
        .get("/team")
        .header("Origin", "https://app.example")
        .send()
        .await
        .expect("get");
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("https://app.example")
    );
    let r = s
        .get("/team")
        .header("Origin", "https://evil.example")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    let r = preflight(&s, s.url("/team"), "https://evil.example").await;
    assert_error(r, 403, "42501").await;
}

/// No origins: CORS is off, a preflight is an OPTIONS like any other (its `Allow`, no CORS
/// headers).
async fn cors_off(b: Backend) {
    let s = TestServer::start_with(b, |c| c.cors.origins.clear()).await;
    let r = preflight(&s, s.url("/team"), "https://app.example").await;
    assert_eq!(r.status(), 200);
    assert!(header(&r, "allow").is_some_and(|a| a.starts_with("OPTIONS,GET")));
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    assert_eq!(header(&r, "access-control-allow-methods"), None);
}

backend_tests!(
    any_origin_by_default,
    listed_origins_with_credentials,
    cors_off
);
