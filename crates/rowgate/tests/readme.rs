//! The README's tour, replayed on `rowgate serve --demo` as a reader would run it: every fenced
//! `sh` block command by command, every inline `curl 'http://127.0.0.1:8080/…'` of the prose
//! and every request in the example column of the tour's tables, in the README's order, against
//! the real binary serving a fresh demo database in a temporary folder. What counts as an example,
//! and what each must answer, is the convention written in README.md's source (the comment that
//! opens the tour); this file reads it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rowgate");

/// Where the tour starts and ends in README.md's source.
const TOUR_START: &str = "<!-- The tour.";
const TOUR_END: &str = "<!-- tour: end";

/// The address the README's examples name; the test rewrites it to its own server's.
const README_ADDRESS: &str = "127.0.0.1:8080";

/// Longest an example may run before the replay gives up on it (a guard against a hang, not a
/// measurement: wscat's examples hold their socket a second).
const EXAMPLE_GUARD: Duration = Duration::from_secs(120);

/// One example of the tour.
#[derive(Debug)]
enum Example {
    /// A shell command (from a fenced `sh` block, or an inline `curl` of the prose).
    Shell {
        line: usize,
        command: String,
        /// The status its trailing comment names (`# 401 …`); otherwise every request is 2xx.
        status: Option<u16>,
    },
    /// A request of a table's example column.
    Request {
        line: usize,
        method: String,
        path: String,
        body: Option<String>,
        status: Option<u16>,
    },
}

impl Example {
    fn line(&self) -> usize {
        match self {
            Example::Shell { line, .. } | Example::Request { line, .. } => *line,
        }
    }

    /// How a failure names the example: its README line and its text.
    fn name(&self) -> String {
        match self {
            Example::Shell { line, command, .. } => format!("README.md:{line}: {command}"),
            Example::Request {
                line,
                method,
                path,
                body,
                ..
            } => match body {
                Some(body) => format!("README.md:{line}: {method} {path} with {body}"),
                None => format!("README.md:{line}: {method} {path}"),
            },
        }
    }
}

/// What the README's tour holds: the examples to replay, and the table rows left to
/// PostgreSQL (listed, never skipped silently).
#[derive(Debug, Default)]
struct Tour {
    examples: Vec<Example>,
    postgres_rows: Vec<String>,
}

/// The code spans and the text between them of a line or a table cell: `(is_code, text)`.
fn segments(text: &str) -> Vec<(bool, &str)> {
    text.split('`')
        .enumerate()
        .map(|(i, part)| (i % 2 == 1, part))
        .collect()
}

/// A table row's cells (a `|` inside a code span does not split).
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut in_code = false;
    for c in inner.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                cells.last_mut().expect("a cell").push(c);
            }
            '|' if !in_code => cells.push(String::new()),
            _ => cells.last_mut().expect("a cell").push(c),
        }
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

/// A code span that is a request: `/path…` or `METHOD /path…`.
fn request(span: &str) -> Option<(String, String)> {
    let (method, path) = match span.split_once(' ') {
        Some((method, path))
            if ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"].contains(&method) =>
        {
            (method, path)
        }
        _ => ("GET", span),
    };
    (path.starts_with('/') && !path.contains(' ')).then(|| (method.to_string(), path.to_string()))
}

/// `→ 201` at the start of `text`: the status an example must answer.
fn arrow_status(text: &str) -> Option<u16> {
    let rest = text.trim_start().strip_prefix('→')?.trim_start();
    rest.get(..3)?.parse().ok()
}

/// The requests of one example cell, with the cell's JSON body and each request's stated status.
fn cell_requests(line: usize, cell: &str) -> Vec<Example> {
    let parts = segments(cell);
    let body = parts
        .iter()
        .filter(|(code, text)| *code && (text.starts_with('{') || text.starts_with('[')))
        .find(|(_, text)| serde_json::from_str::<serde_json::Value>(text).is_ok())
        .map(|(_, text)| text.to_string());
    let mut examples = Vec::new();
    for (i, &(code, span)) in parts.iter().enumerate() {
        if !code {
            continue;
        }
        assert!(
            !span.starts_with('?'),
            "README.md:{line}: the example `{span}` is a query without its path: write the whole \
             path (`/api/table?…`) so that the tour's replay can send it"
        );
        let Some((method, path)) = request(span) else {
            continue;
        };
        // `→ NNN` right after the request, or after `with` and its body
        let after = parts.get(i + 1).map_or("", |p| p.1);
        let status = arrow_status(after).or_else(|| {
            (after.trim() == "with")
                .then(|| parts.get(i + 3).and_then(|p| arrow_status(p.1)))
                .flatten()
        });
        let body = (method != "GET" && method != "HEAD")
            .then(|| body.clone())
            .flatten();
        examples.push(Example::Request {
            line,
            method,
            path,
            body,
            status,
        });
    }
    examples
}

/// A shell command's stated status: its trailing comment starting with one (`# 401 …`).
fn comment_status(command: &str) -> Option<u16> {
    let last = command.lines().last()?;
    let (_, comment) = last.rsplit_once(" # ")?;
    let comment = comment.trim_start();
    let digits = comment.get(..3)?;
    let follows = comment[3..].chars().next();
    (digits.bytes().all(|b| b.is_ascii_digit()) && follows.is_none_or(|c| !c.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Reads the tour out of README.md's text, by the convention its source states.
fn tour(readme: &str) -> Tour {
    let start = readme
        .find(TOUR_START)
        .expect("README.md has the comment that opens the tour");
    let end = readme
        .find(TOUR_END)
        .expect("README.md has the comment that ends the tour");
    assert!(start < end, "the tour ends before it starts");
    let first_line = readme[..start].lines().count() + 1;
    let mut tour = Tour::default();
    let mut lines = readme[start..end]
        .lines()
        .enumerate()
        .map(|(i, l)| (first_line + i, l))
        .peekable();
    let mut in_comment = false;
    // the example column's index of the table being read, if its last column is "example"
    let mut table: Option<usize> = None;
    while let Some((line, text)) = lines.next() {
        if in_comment || text.starts_with("<!--") {
            in_comment = !text.contains("-->");
            continue;
        }
        if let Some(lang) = text.strip_prefix("```") {
            let mut block = Vec::new();
            for (block_line, block_text) in lines.by_ref() {
                if block_text.starts_with("```") {
                    break;
                }
                block.push((block_line, block_text));
            }
            if lang.trim() == "sh" {
                tour.examples.extend(commands(&block));
            }
            continue;
        }
        if text.starts_with('|') {
            let row = cells(text);
            if lines
                .peek()
                .is_some_and(|(_, next)| next.starts_with("|---"))
            {
                // a header row
                table = (row.last().map(String::as_str) == Some("example")).then(|| row.len() - 1);
                lines.next();
                continue;
            }
            let Some(column) = table else { continue };
            if row[0].contains("PostgreSQL") {
                tour.postgres_rows
                    .push(format!("README.md:{line}: {}", row[0]));
                continue;
            }
            if let Some(cell) = row.get(column) {
                tour.examples.extend(cell_requests(line, cell));
            }
            continue;
        }
        table = None;
        for (code, span) in segments(text) {
            if code
                && span.starts_with("curl ")
                && span.contains(&format!("http://{README_ADDRESS}/"))
            {
                tour.examples.push(Example::Shell {
                    line,
                    command: span.to_string(),
                    status: None,
                });
            }
        }
    }
    tour
}

/// The commands of a `sh` block: a line ending in `\` goes on; blank and comment lines are none.
fn commands(block: &[(usize, &str)]) -> Vec<Example> {
    let mut examples = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for &(line, text) in block {
        if current.is_none() && (text.trim().is_empty() || text.trim_start().starts_with('#')) {
            continue;
        }
        let (start, mut command) = current.take().unwrap_or((line, String::new()));
        if !command.is_empty() {
            command.push('\n');
        }
        command.push_str(text);
        if text.trim_end().ends_with('\\') {
            current = Some((start, command));
        } else {
            let status = comment_status(&command);
            examples.push(Example::Shell {
                line: start,
                command,
                status,
            });
        }
    }
    assert!(current.is_none(), "a sh block ends in a backslash");
    examples
}

/// A bash session running the examples one at a time, each in a folder of its own where the
/// `curl` it calls leaves every answer's headers.
struct Session {
    bash: Child,
    input: ChildStdin,
    done: mpsc::Receiver<String>,
    steps: PathBuf,
    count: usize,
}

impl Session {
    fn start(dir: &Path, path: &str) -> Session {
        let steps = dir.join("steps");
        std::fs::create_dir(&steps).expect("steps folder");
        let mut bash = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(dir)
            .env("PATH", path)
            .env("RG_STEPS", &steps)
            .env_remove("ROWGATE_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("bash");
        let input = bash.stdin.take().expect("stdin");
        let output = bash.stdout.take().expect("stdout");
        let (tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut session = Session {
            bash,
            input,
            done,
            steps,
            count: 0,
        };
        // an open stdin on which nothing comes (a terminal nobody types in: wscat reads it), and
        // a curl that leaves every answer's headers in the current example's folder
        session.send(
            "set -o pipefail\n\
             mkfifo \"$RG_STEPS/stdin\" && exec 3<>\"$RG_STEPS/stdin\"\n\
             curl() { command curl --dump-header \"$(mktemp -p \"$RG_STEP\" answer.XXXXXX)\" \"$@\"; }\n",
        );
        session
    }

    /// The folder of the last example run.
    fn step(&self) -> PathBuf {
        self.steps.join(self.count.to_string())
    }

    fn send(&mut self, text: &str) {
        self.input
            .write_all(text.as_bytes())
            .expect("write to bash");
        self.input.flush().expect("flush bash");
    }

    /// Runs `command` as the next example; its exit status, output and answered statuses.
    fn run(&mut self, name: &str, command: &str, files: &[(&str, &str)]) -> Outcome {
        self.count += 1;
        let step = self.step();
        std::fs::create_dir(&step).expect("step folder");
        for (file, text) in files {
            std::fs::write(step.join(file), text).expect("step file");
        }
        self.send(&format!(
            "RG_STEP={}\n{{\n{command}\n}} <&3 >\"$RG_STEP/output\" 2>&1\necho \"rg-exit $?\"\n",
            shell_quote(&step.to_string_lossy()),
        ));
        let deadline = Instant::now() + EXAMPLE_GUARD;
        let exit = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.done.recv_timeout(left) {
                Ok(line) => {
                    if let Some(code) = line.strip_prefix("rg-exit ") {
                        break code.parse::<i32>().expect("exit status");
                    }
                }
                Err(_) => panic!(
                    "{name}: did not finish within {EXAMPLE_GUARD:?}; its output so far:\n{}",
                    std::fs::read_to_string(step.join("output")).unwrap_or_default()
                ),
            }
        };
        let output = std::fs::read_to_string(step.join("output")).unwrap_or_default();
        let mut statuses = Vec::new();
        for entry in std::fs::read_dir(&step).expect("step folder") {
            let path = entry.expect("entry").path();
            let is_answer = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("answer."));
            if is_answer {
                let headers = std::fs::read_to_string(&path).expect("headers");
                // the last status line (after any 100 Continue); none when curl could not connect
                let status = headers
                    .lines()
                    .rfind(|l| l.starts_with("HTTP/"))
                    .and_then(|l| l.split(' ').nth(1))
                    .and_then(|s| s.parse::<u16>().ok());
                statuses.push(status);
            }
        }
        Outcome {
            exit,
            output,
            statuses,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.bash.kill();
        let _ = self.bash.wait();
    }
}

/// What an example did.
struct Outcome {
    exit: i32,
    output: String,
    /// Each request's final status (`None`: no answer).
    statuses: Vec<Option<u16>>,
}

impl Outcome {
    /// Fails naming the example unless it exited 0 and every request answered as it should.
    fn check(&self, name: &str, stated: Option<u16>) {
        assert_eq!(
            self.exit, 0,
            "{name}: exited {}; its output:\n{}",
            self.exit, self.output
        );
        for status in &self.statuses {
            let fits = match (status, stated) {
                (Some(status), Some(stated)) => *status == stated,
                (Some(status), None) => (200..300).contains(status),
                (None, _) => false,
            };
            assert!(
                fits,
                "{name}: answered {status:?} where {} was expected; its output:\n{}",
                stated.map_or("2xx".to_string(), |s| s.to_string()),
                self.output
            );
        }
        if stated.is_some() {
            assert!(
                !self.statuses.is_empty(),
                "{name}: states a status but sent no request"
            );
        }
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `rowgate serve --demo` in `dir`, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve_demo(dir: &Path, port: u16) -> Server {
    let log = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let child = Command::new(BIN)
        .current_dir(dir)
        .args(["serve", "--demo", "--listen", &format!("127.0.0.1:{port}")])
        .env_remove("ROWGATE_LOG")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn rowgate");
    Server(child)
}

/// The folder holding `program`, for PATH.
fn folder(program: &Path) -> String {
    program
        .parent()
        .expect("a program's folder")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_tour_runs_on_the_demo() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let tour = tour(&readme);
    for row in &tour.postgres_rows {
        eprintln!("not replayed, for PostgreSQL: {row}");
    }
    let shell = tour
        .examples
        .iter()
        .filter(|e| matches!(e, Example::Shell { .. }))
        .count();
    let requests = tour.examples.len() - shell;
    eprintln!("replaying {shell} shell commands and {requests} table requests");
    // the examples the README has today: a convention that reads none of them fails here
    assert!(
        shell >= 15 && requests >= 30,
        "the tour's examples were not found: {shell} commands, {requests} requests"
    );
    for example in &tour.examples {
        if let Example::Shell { command, .. } = example {
            let other = command.replace(README_ADDRESS, "");
            assert!(
                !other.contains(":8080") && !other.contains("localhost"),
                "{}: name the server as http://{README_ADDRESS}, which the replay rewrites",
                example.name()
            );
        }
    }

    let jq = common::debian_program(&["/usr/bin/jq"], "jq");
    let wscat = common::js_clients().join("node_modules/.bin/wscat");
    assert!(wscat.exists(), "wscat is missing from clients/js");
    let path = [
        folder(Path::new(BIN)),
        folder(&wscat),
        folder(&jq),
        std::env::var("PATH").unwrap_or_default(),
    ]
    .join(":");

    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _server = serve_demo(dir.path(), port);
    let mut session = Session::start(dir.path(), &path);
    let base = format!("http://127.0.0.1:{port}");
    // the supervisor listens before its worker serves: wait for /live
    let ready = session.run(
        "the demo server",
        &format!(
            "for _ in $(seq 600); do command curl -sf {base}/live >/dev/null && break; sleep 0.05; done
             command curl -sf {base}/live"
        ),
        &[],
    );
    assert_eq!(
        ready.exit,
        0,
        "rowgate serve --demo did not answer /live: {}",
        std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
    );
    // the tables' writes go with a writer's token, made as the README's Security section says
    let writer = session.run(
        "the tables' writer token",
        &format!(
            "RG_WRITER=$(rowgate clients add readme-tables --role writer --demo --json \
             | jq -r '.client_id + \":\" + .client_secret' \
             | xargs -I{{}} curl -sf -u {{}} -d grant_type=client_credentials {base}/oauth/token \
             | jq -er .access_token)"
        ),
        &[],
    );
    writer.check("the tables' writer token", None);

    let mut last_line = 0;
    for example in &tour.examples {
        assert!(example.line() >= last_line, "examples out of order");
        last_line = example.line();
        let name = example.name();
        match example {
            Example::Shell {
                command, status, ..
            } => {
                let command = command.replace(README_ADDRESS, &format!("127.0.0.1:{port}"));
                session.run(&name, &command, &[]).check(&name, *status);
            }
            Example::Request {
                method,
                path,
                body,
                status,
                ..
            } => {
                let mut command = format!(
                    "curl -g -sS -o \"$RG_STEP/body\" -X {method} --url \"$(cat \"$RG_STEP/url\")\""
                );
                if method != "GET" && method != "HEAD" {
                    command.push_str(" -H \"Authorization: Bearer $RG_WRITER\"");
                }
                if body.is_some() {
                    command.push_str(
                        " -H 'Content-Type: application/json' --data-binary @\"$RG_STEP/request\"",
                    );
                }
                let url = format!("{base}{path}");
                let files = [
                    ("url", url.as_str()),
                    ("request", body.as_deref().unwrap_or("")),
                ];
                let outcome = session.run(&name, &command, &files);
                assert_eq!(
                    outcome.statuses.len(),
                    1,
                    "{name}: one request was to be sent"
                );
                let answer =
                    std::fs::read_to_string(session.step().join("body")).unwrap_or_default();
                Outcome {
                    output: format!("{}{answer}", outcome.output),
                    ..outcome
                }
                .check(&name, *status);
            }
        }
    }
}
