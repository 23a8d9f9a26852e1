//! What one kind of request is: method, path and body templates with random variables, headers,
//! and the checks its answer must pass (a failed check counts as an error, like k6's checks).

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// One kind of request, as written in a scenario file or on the command line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// HTTP method.
    #[serde(default = "get")]
    pub method: String,
    /// Path and query; `{name}` is replaced by variable `name`.
    pub path: String,
    /// Request headers (`Name: value`); values are templates too.
    #[serde(default)]
    pub headers: Vec<String>,
    /// Request body template.
    #[serde(default)]
    pub body: Option<String>,
    /// Variables: `"1..10"` (a random integer, both ends included), `"A..Z"` (a random letter),
    /// `"seq"` (a number unique in the run).
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// Relative weight in a mix.
    #[serde(default = "one")]
    pub weight: u32,
    /// What the answer must look like.
    #[serde(default)]
    pub check: Check,
}

fn get() -> String {
    "GET".into()
}

fn one() -> u32 {
    1
}

/// Checks on an answer. Every field that is set must hold.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// Expected status (default: any 2xx).
    pub status: Option<u16>,
    /// Another status that is as good (a peer's 404 for a random delete whose row an earlier
    /// one removed, where Rowgate's filtered delete answers 204 either way).
    pub or_status: Option<u16>,
    /// Expected start of the content type.
    pub content_type: Option<String>,
    /// The body is a JSON array of this length (or holds one at `array_at`).
    pub json_len: Option<usize>,
    /// JSON pointer (RFC 6901) to the array `json_len` counts; absent: the body itself.
    pub array_at: Option<String>,
    /// The body is a JSON object (or an array whose first element is one) whose field
    /// `field` equals the template `value` (compared as text); a `field` starting with `/` is a
    /// JSON pointer from the body instead.
    pub json_field: Option<FieldCheck>,
    /// The body contains this text (a template).
    pub contains: Option<String>,
    /// The body matches this regular expression.
    pub matches: Option<String>,
}

/// `json_field` check.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FieldCheck {
    /// Field name.
    pub field: String,
    /// Expected value (template).
    pub value: String,
}

/// A variable's generator.
#[derive(Debug, Clone)]
enum Var {
    Int(i64, i64),
    Letter(u8, u8),
    Seq,
    /// `env:NAME`: the environment variable's value, read once (a bearer token).
    Const(String),
}

/// A compiled request kind: templates split once, checks compiled once.
#[derive(Debug, Clone)]
pub struct Request {
    /// The spec it came from.
    pub spec: RequestSpec,
    method: http::Method,
    path: Template,
    headers: Vec<(http::HeaderName, Template)>,
    body: Option<Template>,
    vars: Vec<(String, Var)>,
    regex: Option<regex::Regex>,
}

/// Text with `{var}` holes.
#[derive(Debug, Clone)]
struct Template(Vec<Piece>);

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Var(usize),
}

/// One drawn request: the values of its variables and the rendered parts.
pub struct Drawn {
    /// Method.
    pub method: http::Method,
    /// Path and query.
    pub path: String,
    /// Headers.
    pub headers: Vec<(http::HeaderName, String)>,
    /// Body.
    pub body: Option<String>,
    values: Vec<String>,
}

impl Drawn {
    /// A request given as it is, without a template.
    pub fn plain(
        method: http::Method,
        path: &str,
        headers: Vec<(http::HeaderName, String)>,
        body: Option<String>,
    ) -> Drawn {
        Drawn {
            method,
            path: path.to_string(),
            headers,
            body,
            values: Vec::new(),
        }
    }
}

impl Request {
    /// Compiles a spec.
    pub fn new(spec: RequestSpec) -> anyhow::Result<Request> {
        let method = http::Method::from_bytes(spec.method.as_bytes())
            .with_context(|| format!("method {:?}", spec.method))?;
        let vars = spec
            .vars
            .iter()
            .map(|(name, def)| {
                Ok((
                    name.clone(),
                    parse_var(def).with_context(|| format!("variable {name}"))?,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let names: Vec<&str> = vars.iter().map(|(n, _)| n.as_str()).collect();
        let path = Template::parse(&spec.path, &names)?;
        let headers = spec
            .headers
            .iter()
            .map(|h| {
                let (name, value) = h
                    .split_once(':')
                    .with_context(|| format!("header {h:?} needs a colon"))?;
                Ok((
                    http::HeaderName::from_bytes(name.trim().as_bytes())?,
                    Template::parse(value.trim(), &names)?,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let body = spec
            .body
            .as_deref()
            .map(|b| Template::parse(b, &names))
            .transpose()?;
        for t in [
            &spec.check.contains,
            &spec.check.json_field.as_ref().map(|f| f.value.clone()),
        ]
        .into_iter()
        .flatten()
        {
            Template::parse(t, &names)?;
        }
        let regex = spec
            .check
            .matches
            .as_deref()
            .map(regex::Regex::new)
            .transpose()?;
        Ok(Request {
            spec,
            method,
            path,
            headers,
            body,
            vars,
            regex,
        })
    }

    /// Draws the variables and renders the request; `seq` is the run-wide request number.
    pub fn draw(&self, rng: &mut fastrand::Rng, seq: u64) -> Drawn {
        let values: Vec<String> = self
            .vars
            .iter()
            .map(|(_, v)| match v {
                Var::Int(lo, hi) => rng.i64(*lo..=*hi).to_string(),
                Var::Letter(lo, hi) => char::from(rng.u8(*lo..=*hi)).to_string(),
                Var::Seq => seq.to_string(),
                Var::Const(v) => v.clone(),
            })
            .collect();
        Drawn {
            method: self.method.clone(),
            path: self.path.render(&values),
            headers: self
                .headers
                .iter()
                .map(|(n, t)| (n.clone(), t.render(&values)))
                .collect(),
            body: self.body.as_ref().map(|b| b.render(&values)),
            values,
        }
    }

    /// Checks an answer to `drawn`; the error says what was wrong.
    pub fn check(
        &self,
        drawn: &Drawn,
        status: u16,
        content_type: &str,
        body: &[u8],
    ) -> Result<(), String> {
        let c = &self.spec.check;
        match c.status {
            Some(s) if s != status && c.or_status != Some(status) => {
                return Err(format!("status {status}, expected {s}"))
            }
            None if !(200..300).contains(&status) => return Err(format!("status {status}")),
            _ => {}
        }
        if let Some(ct) = &c.content_type {
            if !content_type.starts_with(ct.as_str()) {
                return Err(format!("content type {content_type:?}, expected {ct:?}"));
            }
        }
        let names: Vec<&str> = self.vars.iter().map(|(n, _)| n.as_str()).collect();
        let render = |t: &str| {
            Template::parse(t, &names)
                .map(|t| t.render(&drawn.values))
                .unwrap_or_default()
        };
        if let Some(text) = &c.contains {
            let want = render(text);
            if !body
                .windows(want.len().max(1))
                .any(|w| w == want.as_bytes())
            {
                return Err(format!("body lacks {want:?}"));
            }
        }
        if let Some(re) = &self.regex {
            if !re.is_match(&String::from_utf8_lossy(body)) {
                return Err(format!("body does not match {re}"));
            }
        }
        if let Some(n) = c.json_len {
            let len = match c.array_at.as_deref() {
                // Counted without building values: the check must not cost more than the request.
                None | Some("") => serde_json::from_slice::<Vec<serde::de::IgnoredAny>>(body)
                    .map(|items| items.len())
                    .map_err(|e| format!("body is not a JSON array: {e}"))?,
                Some(pointer) => {
                    let json: serde_json::Value = serde_json::from_slice(body)
                        .map_err(|e| format!("body is not JSON: {e}"))?;
                    json.pointer(pointer)
                        .and_then(|a| a.as_array())
                        .map(Vec::len)
                        .ok_or_else(|| format!("no JSON array at {pointer}"))?
                }
            };
            if len != n {
                return Err(format!("JSON array of {len} items, expected {n}"));
            }
        }
        if let Some(f) = &c.json_field {
            let json: serde_json::Value =
                serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
            let value = if f.field.starts_with('/') {
                json.pointer(&f.field).unwrap_or(&serde_json::Value::Null)
            } else if json.is_array() {
                &json[0][&f.field]
            } else {
                &json[&f.field]
            };
            let got = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let want = render(&f.value);
            if got != want {
                return Err(format!("{} is {got}, expected {want}", f.field));
            }
        }
        Ok(())
    }
}

fn parse_var(def: &str) -> anyhow::Result<Var> {
    if def == "seq" {
        return Ok(Var::Seq);
    }
    if let Some(name) = def.strip_prefix("env:") {
        return std::env::var(name)
            .map(Var::Const)
            .with_context(|| format!("{def:?}: the environment variable {name} is not set"));
    }
    let (lo, hi) = def
        .split_once("..")
        .with_context(|| format!("{def:?}: expected LO..HI or seq"))?;
    if let (Ok(lo), Ok(hi)) = (lo.parse::<i64>(), hi.parse::<i64>()) {
        if lo > hi {
            bail!("{def:?}: empty range");
        }
        return Ok(Var::Int(lo, hi));
    }
    match (lo.as_bytes(), hi.as_bytes()) {
        ([a], [b]) if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() && a <= b => {
            Ok(Var::Letter(*a, *b))
        }
        _ => bail!("{def:?}: expected integers or single letters"),
    }
}

impl Template {
    fn parse(text: &str, names: &[&str]) -> anyhow::Result<Template> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let var = names.iter().position(|n| *n == &after[..len]);
            match var {
                Some(i) if after[len..].starts_with('}') => {
                    pieces.push(Piece::Text(rest[..open].to_string()));
                    pieces.push(Piece::Var(i));
                    rest = &after[len + 1..];
                }
                // Not a variable (JSON braces in a body, `{nope}`): keep it as text.
                _ => {
                    pieces.push(Piece::Text(rest[..=open].to_string()));
                    rest = after;
                }
            }
        }
        pieces.push(Piece::Text(rest.to_string()));
        Ok(Template(pieces))
    }

    fn render(&self, values: &[String]) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Var(i) => out.push_str(&values[*i]),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(path: &str) -> RequestSpec {
        RequestSpec {
            method: "GET".into(),
            path: path.into(),
            headers: vec!["Authorization: Bearer {tok}".into()],
            body: Some("{\"id\": {id}}".into()),
            vars: [
                ("id".to_string(), "1..3".to_string()),
                ("tok".to_string(), "a..a".to_string()),
            ]
            .into(),
            weight: 1,
            check: Check {
                json_field: Some(FieldCheck {
                    field: "team_id".into(),
                    value: "{id}".into(),
                }),
                ..Check::default()
            },
        }
    }

    #[test]
    fn templates_draw_and_checks_follow_the_drawn_values() {
        let r = Request::new(spec("/api/team/{id}?x={nope}")).expect("compile");
        let mut rng = fastrand::Rng::with_seed(7);
        for seq in 0..20 {
            let d = r.draw(&mut rng, seq);
            let id: i64 = d
                .path
                .trim_start_matches("/api/team/")
                .split('?')
                .next()
                .expect("id")
                .parse()
                .expect("int");
            assert!((1..=3).contains(&id));
            assert!(d.path.ends_with("?x={nope}"));
            assert_eq!(d.headers[0].1, "Bearer a");
            assert_eq!(
                d.body.as_deref(),
                Some(format!("{{\"id\": {id}}}").as_str())
            );
            let good = format!("{{\"team_id\":{id}}}");
            assert_eq!(
                r.check(&d, 200, "application/json", good.as_bytes()),
                Ok(())
            );
            let bad = format!("[{{\"team_id\":{}}}]", id + 10);
            assert!(r
                .check(&d, 200, "application/json", bad.as_bytes())
                .is_err());
            assert!(r
                .check(&d, 500, "application/json", good.as_bytes())
                .is_err());
        }
    }

    #[test]
    fn pointers_reach_into_wrapped_answers() {
        let mut s = spec("/x");
        s.check = Check {
            json_len: Some(2),
            array_at: Some("/items".into()),
            json_field: Some(FieldCheck {
                field: "/items/1/team_id".into(),
                value: "{id}".into(),
            }),
            ..Check::default()
        };
        let r = Request::new(s).expect("compile");
        let d = r.draw(&mut fastrand::Rng::with_seed(1), 0);
        let body = |n: &str| format!("{{\"items\":[{{\"team_id\":0}},{{\"team_id\":{n}}}]}}");
        // The body template is {"id": N}: N is the drawn id the check expects.
        let drawn_id = d
            .body
            .as_deref()
            .and_then(|b| {
                b.trim_start_matches("{\"id\": ")
                    .trim_end_matches('}')
                    .parse::<i64>()
                    .ok()
            })
            .expect("id");
        assert_eq!(
            r.check(
                &d,
                200,
                "application/json",
                body(&drawn_id.to_string()).as_bytes()
            ),
            Ok(())
        );
        assert!(r
            .check(&d, 200, "application/json", body("99").as_bytes())
            .is_err());
        assert!(r
            .check(&d, 200, "application/json", b"{\"items\":[1]}")
            .is_err());
        assert!(r.check(&d, 200, "application/json", b"[1,2]").is_err());
    }

    #[test]
    fn bad_variables_are_refused() {
        for def in ["3..1", "x", "1..b", "AA..B"] {
            let mut s = spec("/x");
            s.vars.insert("id".into(), def.into());
            assert!(Request::new(s).is_err(), "{def}");
        }
    }
}
