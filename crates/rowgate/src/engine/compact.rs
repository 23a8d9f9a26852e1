//! A nested JSON value of a body (an object or array given as a cell) written as it is read,
//! as the compact text a `serde_json::Value` of it prints: no tree of `Value`s is built (32
//! bytes and often an allocation per element: a 10 MB array of `[]` took 250 MB). The text is
//! the same as before: numbers and strings printed by serde_json, each object's members sorted
//! by key with the last of duplicate keys kept (a `Value`'s map is a `BTreeMap`). Members come
//! sorted in most bodies; an object whose keys are not is rebuilt in place once closed, at the
//! cost of its own size.

use std::cmp::Ordering;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// A JSON value written to `out` as it is read.
pub struct Compact<'o> {
    /// Where the text goes.
    pub out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Compact<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Compact<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        self.out
            .extend_from_slice(if b { b"true" } else { b"false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<(), E> {
        write(self.out, &i)
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<(), E> {
        write(self.out, &u)
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<(), E> {
        // (a parsed number is finite, printed as a `Value`'s number is)
        write(self.out, &f)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        write(self.out, s)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        write_seq(seq, self.out)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        write_map(map, self.out)
    }
}

fn write<E: de::Error, T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) -> Result<(), E> {
    serde_json::to_writer(out, v).map_err(E::custom)
}

/// An array's elements, written as they are read.
pub fn write_seq<'de, A: SeqAccess<'de>>(mut seq: A, out: &mut Vec<u8>) -> Result<(), A::Error> {
    out.push(b'[');
    let mut first = true;
    loop {
        let mark = out.len();
        if !first {
            out.push(b',');
        }
        if seq.next_element_seed(Compact { out })?.is_none() {
            out.truncate(mark);
            break;
        }
        first = false;
    }
    out.push(b']');
    Ok(())
}

/// An object's members, written as they are read, then put in key order if they were not.
pub fn write_map<'de, A: MapAccess<'de>>(mut map: A, out: &mut Vec<u8>) -> Result<(), A::Error> {
    out.push(b'{');
    let start = out.len();
    let mut previous = String::new();
    let mut sorted = true;
    let mut first = true;
    while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
        if !first {
            out.push(b',');
            sorted = sorted && *key > *previous;
        }
        first = false;
        if sorted {
            previous.clear();
            previous.push_str(&key);
        }
        write(out, &*key)?;
        out.push(b':');
        map.next_value_seed(Compact { out })?;
    }
    if !sorted {
        sort_members(out, start);
    }
    out.push(b'}');
    Ok(())
}

/// Puts the members written from `start` to the end of `out` (an object's, without its
/// braces, as compact JSON) in key order, the last of equal keys kept.
fn sort_members(out: &mut Vec<u8>, start: usize) {
    let members = member_starts(&out[start..]);
    let text = &out[start..];
    let end_of = |i: usize| members.get(i + 1).map_or(text.len(), |next| next - 1);
    let mut order: Vec<usize> = (0..members.len()).collect();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    // by key, then by position: the last of a run of equal keys is the one kept
    order.sort_by(|&x, &y| {
        decoded_key(&text[members[x]..], &mut a);
        decoded_key(&text[members[y]..], &mut b);
        a.cmp(&b).then(x.cmp(&y))
    });
    let mut rebuilt = Vec::with_capacity(text.len());
    for (n, &i) in order.iter().enumerate() {
        if let Some(&next) = order.get(n + 1) {
            decoded_key(&text[members[i]..], &mut a);
            decoded_key(&text[members[next]..], &mut b);
            if a.cmp(&b) == Ordering::Equal {
                continue;
            }
        }
        if !rebuilt.is_empty() {
            rebuilt.push(b',');
        }
        rebuilt.extend_from_slice(&text[members[i]..end_of(i)]);
    }
    out.truncate(start);
    out.extend_from_slice(&rebuilt);
}

/// Where each member of an object's compact text (without its braces) starts.
fn member_starts(text: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &c) in text.iter().enumerate() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth -= 1,
            b',' if depth == 0 => starts.push(i + 1),
            _ => {}
        }
    }
    starts
}

/// The key a member's compact text starts with (a JSON string as serde_json writes one),
/// decoded into `into`.
fn decoded_key(member: &[u8], into: &mut Vec<u8>) {
    into.clear();
    let mut bytes = member.iter().skip(1);
    while let Some(&c) = bytes.next() {
        match c {
            b'"' => return,
            b'\\' => match bytes.next() {
                Some(b'b') => into.push(0x08),
                Some(b'f') => into.push(0x0c),
                Some(b'n') => into.push(b'\n'),
                Some(b'r') => into.push(b'\r'),
                Some(b't') => into.push(b'\t'),
                // serde_json writes only control characters as \u00XX
                Some(b'u') => {
                    let hex: Vec<u8> = bytes.by_ref().take(4).copied().collect();
                    let code = std::str::from_utf8(&hex)
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok());
                    into.push(code.unwrap_or(0));
                }
                Some(&other) => into.push(other),
                None => return,
            },
            c => into.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compact(text: &str) -> String {
        let mut out = Vec::new();
        let mut json = serde_json::Deserializer::from_str(text);
        Compact { out: &mut out }
            .deserialize(&mut json)
            .expect("json");
        String::from_utf8(out).expect("utf-8")
    }

    /// The text is the one a `serde_json::Value` of the same JSON prints.
    #[test]
    fn same_text_as_a_value() {
        for text in [
            r#"{"b": 1, "a": [1, 2.50, -3e2, {"z": null, "y": true}], "c": "x\"\u00e9\n"}"#,
            r#"[[], {}, [[]], {"a": {}}, 18446744073709551615, -9223372036854775808, 1e-7]"#,
            r#"{"a": 1, "a": 2, "b": {"k": 1, "k": [3]}, "\u0001": 0, "\"": 1, "\\": 2}"#,
            r#"{"é": 1, "e": 2, "z": 3, "": 4, "aa": 5, "a": 6}"#,
            r#"{"a\tb": 1, "a": 2, "a\u001fb": 3}"#,
            r#""\ud83d\ude00 \/ \b""#,
        ] {
            let value: serde_json::Value = serde_json::from_str(text).expect("json");
            assert_eq!(compact(text), value.to_string(), "{text}");
        }
    }
}
