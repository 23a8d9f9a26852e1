//! Raw bytes on a connection: what a client sends, fed to the server's connection handling
//! (`rowgate::server::connection`: the mending layer, hyper's HTTP/1 parser, routing, the API,
//! WebSocket upgrades) over an in-memory pipe, the client's side closed after them. Beyond
//! "no panic": the connection ends (no hang: the server finishes within 10 s of the client's
//! end), whatever comes back starts with an HTTP/1.x status line, the first answer is not a
//! 500, and when it is the only answer, an error, with a body, that body is the JSON error
//! envelope.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[path = "served.rs"]
mod served;

fuzz_target!(|data: &[u8]| {
    let served = served::served("http_connection");
    let http = rowgate::server::http_settings(&served.app.config.limits);
    let answer = served.runtime.block_on(async {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
        let connection = tokio::spawn(rowgate::server::connection(
            &served.app,
            &http,
            server,
            loopback,
        ));
        let (mut reading, mut writing) = tokio::io::split(client);
        let sent = data.to_vec();
        let writer = tokio::spawn(async move {
            // the server may close first (an answer and `Connection: close`): that is fine
            let _ = writing.write_all(&sent).await;
            let _ = writing.shutdown().await;
        });
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = reading.read_to_end(&mut answer).await;
            let _ = connection.await;
        })
        .await;
        let _ = writer.await;
        assert!(
            read.is_ok(),
            "the connection did not end: {:?}",
            String::from_utf8_lossy(&answer)
        );
        answer
    });
    if answer.is_empty() {
        return;
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut response = httparse::Response::new(&mut headers);
    let parsed = response.parse(&answer);
    assert!(
        parsed.is_ok() && (answer.starts_with(b"HTTP/1.1 ") || answer.starts_with(b"HTTP/1.0 ")),
        "not an HTTP answer: {:?}",
        String::from_utf8_lossy(&answer)
    );
    let Ok(httparse::Status::Complete(head)) = parsed else {
        return;
    };
    let status = response.code.unwrap_or(0);
    assert_ne!(status, 500, "{:?}", String::from_utf8_lossy(&answer));
    let length = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok());
    // one answer and its whole body (after a HEAD, the next answer would follow the head)
    if let (true, Some(length)) = (status >= 400, length) {
        if length > 0 && answer.len() == head + length {
            let body = &answer[head..];
            assert!(
                served::is_error_envelope(body),
                "{status}: {:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
});
