//! The bytes of a connection between the socket and hyper, mended where hyper's own HTTP/1 parser
//! would answer a client that did nothing wrong, or answer without our error envelope.
//!
//! Reading: percent-encodes, in the request target of each request line, the bytes curl sends
//! raw but `http::Uri` refuses (`"`, `<`, `>`, backtick), so a PostgREST URL typed as is
//! (`?select=meta->>lang`) is served as PostgREST serves it. It tracks message framing just
//! enough to know where the next request line starts (Content-Length bodies); on anything it
//! does not model (Transfer-Encoding, Upgrade, CONNECT, an odd Content-Length) it stops
//! rewriting for the rest of the connection, so it can never disagree with hyper about where a
//! body ends.
//!
//! Writing: hyper answers a request it cannot parse (400, 414 URI too long, 431 too many or too
//! large headers) with an empty body and closes. Such an answer (no content type, an empty
//! body) is replaced by the same status with the JSON error envelope every other error has.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{ApiError, ErrorCode};

#[derive(Clone, Copy, PartialEq)]
enum State {
    /// In a request line; `spaces` counts the spaces seen (target = after the first).
    Line { spaces: u8 },
    /// In the header block.
    Headers,
    /// In a Content-Length body: bytes left.
    Body(u64),
    /// Stopped rewriting for good.
    Passthrough,
}

const LINE_CAP: usize = 64;

/// A connection's byte stream with its request targets and parse-error answers mended.
pub struct Mended<S> {
    inner: S,
    state: State,
    /// Rewritten bytes that did not fit the caller's buffer; served before reading again.
    pending: Vec<u8>,
    pending_at: usize,
    /// First bytes of the current request line (method) or header line.
    line: [u8; LINE_CAP],
    line_len: usize,
    line_long: bool,
    content_length: Option<u64>,
    give_up: bool,
    /// An error answer being written in place of hyper's empty one: the bytes, how many are
    /// written, and the length of hyper's buffer it stands for.
    replacing: Option<(Vec<u8>, usize, usize)>,
}

impl<S> Mended<S> {
    /// Wraps a connection's stream.
    pub fn new(inner: S) -> Self {
        Mended {
            inner,
            state: State::Line { spaces: 0 },
            pending: Vec::new(),
            pending_at: 0,
            line: [0; LINE_CAP],
            line_len: 0,
            line_long: false,
            content_length: None,
            give_up: false,
            replacing: None,
        }
    }

    fn push_line(&mut self, b: u8) {
        if self.line_len < LINE_CAP {
            self.line[self.line_len] = b;
            self.line_len += 1;
        } else {
            self.line_long = true;
        }
    }

    fn push_slice(&mut self, bytes: &[u8]) {
        let room = LINE_CAP - self.line_len;
        let n = bytes.len().min(room);
        self.line[self.line_len..self.line_len + n].copy_from_slice(&bytes[..n]);
        self.line_len += n;
        if bytes.len() > room {
            self.line_long = true;
        }
    }

    fn end_header_line(&mut self) {
        let mut l = &self.line[..self.line_len];
        if let [rest @ .., b'\r'] = l {
            l = rest;
        }
        if l.is_empty() && !self.line_long {
            // end of the head
            self.state = match (self.give_up, self.content_length) {
                (true, _) => State::Passthrough,
                (false, Some(n)) if n > 0 => State::Body(n),
                (false, _) => State::Line { spaces: 0 },
            };
            self.content_length = None;
        } else if let Some(colon) = l.iter().position(|&b| b == b':') {
            let (name, value) = (&l[..colon], l[colon + 1..].trim_ascii());
            if name.eq_ignore_ascii_case(b"content-length") {
                let n = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok());
                if self.line_long || self.content_length.is_some() || n.is_none() {
                    self.give_up = true;
                }
                self.content_length = n;
            } else if name.eq_ignore_ascii_case(b"transfer-encoding")
                || name.eq_ignore_ascii_case(b"upgrade")
            {
                self.give_up = true;
            }
        } else if self.line_long
            && self.line[..self.line_len]
                .iter()
                .all(|&b| b != b':' && b != b' ')
        {
            // a header name longer than LINE_CAP: could be anything
            self.give_up = true;
        }
        self.line_len = 0;
        self.line_long = false;
    }

    /// Advances the framing state over `input`; returns the rewritten bytes if any byte had to
    /// be escaped (None: `input` stands as is).
    fn process(&mut self, input: &[u8]) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::Passthrough => {
                    if let Some(o) = out.as_mut() {
                        o.extend_from_slice(&input[i..]);
                    }
                    return out;
                }
                State::Body(left) => {
                    let n = left.min((input.len() - i) as u64) as usize;
                    if let Some(o) = out.as_mut() {
                        o.extend_from_slice(&input[i..i + n]);
                    }
                    i += n;
                    self.state = if left == n as u64 {
                        State::Line { spaces: 0 }
                    } else {
                        State::Body(left - n as u64)
                    };
                }
                State::Line { spaces } => {
                    let b = input[i];
                    let escape = spaces == 1 && matches!(b, b'"' | b'<' | b'>' | b'`');
                    match b {
                        b'\n' => {
                            let method = &self.line[..self.line_len];
                            if method.eq_ignore_ascii_case(b"CONNECT") {
                                self.give_up = true;
                            }
                            // an empty line before a request line is skipped by httparse
                            self.state = if spaces == 0 && method.iter().all(|&b| b == b'\r') {
                                State::Line { spaces: 0 }
                            } else {
                                State::Headers
                            };
                            self.line_len = 0;
                            self.line_long = false;
                        }
                        b' ' => {
                            self.state = State::Line {
                                spaces: spaces.saturating_add(1),
                            }
                        }
                        _ if spaces == 0 => self.push_line(b),
                        _ => {}
                    }
                    if escape {
                        let o = out.get_or_insert_with(|| {
                            let mut v = Vec::with_capacity(input.len() + 16);
                            v.extend_from_slice(&input[..i]);
                            v
                        });
                        const HEX: &[u8; 16] = b"0123456789ABCDEF";
                        o.extend_from_slice(&[
                            b'%',
                            HEX[(b >> 4) as usize],
                            HEX[(b & 15) as usize],
                        ]);
                    } else if let Some(o) = out.as_mut() {
                        o.push(b);
                    }
                    i += 1;
                }
                State::Headers => {
                    // a header line at a time (memchr), keeping only its first bytes
                    let rest = &input[i..];
                    let end = memchr::memchr(b'\n', rest);
                    let line = &rest[..end.unwrap_or(rest.len())];
                    self.push_slice(line);
                    let taken = line.len() + usize::from(end.is_some());
                    if let Some(o) = out.as_mut() {
                        o.extend_from_slice(&rest[..taken]);
                    }
                    i += taken;
                    if end.is_some() {
                        self.end_header_line();
                    }
                }
            }
        }
        out
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Mended<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending_at < this.pending.len() {
            let n = buf.remaining().min(this.pending.len() - this.pending_at);
            buf.put_slice(&this.pending[this.pending_at..this.pending_at + n]);
            this.pending_at += n;
            if this.pending_at == this.pending.len() {
                this.pending.clear();
                this.pending_at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        if this.state == State::Passthrough {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let start = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if let Some(out) = this.process(&buf.filled()[start..]) {
            // `out` is longer than what was read; the excess waits in `pending`
            buf.set_filled(start);
            let n = buf.remaining().min(out.len());
            buf.put_slice(&out[..n]);
            this.pending.extend_from_slice(&out[n..]);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Mended<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.replacing.is_none() {
            if let Some(answer) = enveloped_parse_error(b) {
                this.replacing = Some((answer, 0, b.len()));
            }
        }
        if let Some((answer, written, stands_for)) = this.replacing.as_mut() {
            while *written < answer.len() {
                let n = std::task::ready!(
                    Pin::new(&mut this.inner).poll_write(cx, &answer[*written..])
                )?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                *written += n;
            }
            let consumed = *stands_for;
            this.replacing = None;
            return Poll::Ready(Ok(consumed));
        }
        Pin::new(&mut this.inner).poll_write(cx, b)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // hyper's bare error answer is one head buffer: handled (replaced) by `poll_write`;
        // everything else goes out vectored as it came
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &**b);
        if self.replacing.is_some() || enveloped_parse_error(first).is_some() {
            return self.poll_write(cx, first);
        }
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Hyper's answer to a request it could not parse (a 400, 414 or 431 head with no content type
/// and an empty body), as the same status with the JSON error envelope; `None` for anything
/// else (every answer of Rowgate's own has a content type).
fn enveloped_parse_error(head: &[u8]) -> Option<Vec<u8>> {
    let code = match head.get(..12)? {
        b"HTTP/1.1 400" | b"HTTP/1.0 400" => ErrorCode::BadRequest,
        b"HTTP/1.1 414" | b"HTTP/1.0 414" => ErrorCode::UriTooLong,
        b"HTTP/1.1 431" | b"HTTP/1.0 431" => ErrorCode::HeadersTooLarge,
        _ => return None,
    };
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    if end + 4 != head.len() {
        return None; // a body follows: not hyper's empty answer
    }
    let text = std::str::from_utf8(&head[..end]).ok()?.to_ascii_lowercase();
    if text.contains("\r\ncontent-type:") || !text.contains("\r\ncontent-length: 0") {
        return None;
    }
    let body = ApiError::new(code, code.describe()).body();
    let status_line =
        std::str::from_utf8(&head[..head.windows(2).position(|w| w == b"\r\n")?]).ok()?;
    let mut answer = format!(
        "{status_line}\r\ncontent-type: application/json; charset=utf-8\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut f = Mended::new(());
        let mut out = Vec::new();
        for c in chunks {
            match f.process(c) {
                Some(v) => out.extend(v),
                None => out.extend_from_slice(c),
            }
        }
        out
    }

    #[test]
    fn rewrites_targets_only() {
        let req = b"GET /a?s=m->>l&q=\"<`> HTTP/1.1\r\nX: <>\r\nContent-Length: 9\r\n\r\n<>\"`<>\"`\nGET /b?x=> HTTP/1.1\r\n\r\n";
        let want = b"GET /a?s=m-%3E%3El&q=%22%3C%60%3E HTTP/1.1\r\nX: <>\r\nContent-Length: 9\r\n\r\n<>\"`<>\"`\nGET /b?x=%3E HTTP/1.1\r\n\r\n";
        assert_eq!(run(&[req]), want);
        // byte by byte: same result
        let chunks: Vec<&[u8]> = req.chunks(1).collect();
        assert_eq!(run(&chunks), want);
        for split in 0..req.len() {
            assert_eq!(run(&[&req[..split], &req[split..]]), want, "split {split}");
        }
    }

    #[test]
    fn hypers_empty_error_answers_get_the_envelope() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let answer =
            String::from_utf8(enveloped_parse_error(hyper).expect("rewritten")).expect("utf8");
        assert!(
            answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{answer}"
        );
        assert!(
            answer.contains("content-type: application/json"),
            "{answer}"
        );
        assert!(answer.ends_with("\"code\":\"RG431\",\"message\":\"the request's headers are too many or too large\",\"details\":null,\"hint\":null}"), "{answer}");
        // Rowgate's own answers (a content type, a body) pass untouched.
        let own = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n";
        assert!(enveloped_parse_error(own).is_none());
        assert!(enveloped_parse_error(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
    }

    #[test]
    fn stops_on_chunked_and_upgrade() {
        let req = b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n<>>\r\n0\r\n\r\nGET /b?x=> HTTP/1.1\r\n\r\n";
        assert_eq!(run(&[req]), req);
        let req = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET /b?x=> HTTP/1.1\r\n\r\n";
        assert_eq!(run(&[req]), req);
        let req = b"POST /a HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n<>GET /b?x=> HTTP/1.1\r\n\r\n";
        assert_eq!(run(&[req]), req);
    }
}
