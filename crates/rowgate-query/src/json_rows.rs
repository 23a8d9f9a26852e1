//! An insert's rows as one JSON text, bound as a single parameter and read by the database
//! (`json_each` on SQLite, `json_populate_recordset` on PostgreSQL, as PostgREST does). A large
//! body then lives in memory once, as compact text, instead of as millions of bound values (a
//! value costs 32 bytes and an allocation; a 10 MB array of small objects took a worker past
//! 1 GB).
//!
//! The shape depends on the dialect ([`Dialect::rows_by_name`]): arrays of cells in column order
//! (`[[1,"a"],[2,null]]`, SQLite reads `value ->> 0`), or objects keyed by column name
//! (`[{"id":1,"name":"a"}]`, PostgreSQL converts each value to its column's type).

use crate::ast::Value;
use crate::render::Dialect;
use crate::stmt::JsonRows;

/// One cell written to a row.
#[derive(Debug, Clone, Copy)]
pub enum Cell<'a> {
    /// A scalar (text as a JSON string).
    Value(&'a Value),
    /// JSON text, written as it is (a nested object or array of the body).
    Json(&'a str),
}

/// Writes rows one cell at a time, for the columns it was made for; optionally cut into
/// several texts of about a given size (a database copies and parses a statement's rows whole:
/// a large body is better inserted piecewise).
#[derive(Debug)]
pub struct JsonRowsWriter {
    out: Vec<u8>,
    /// Each column's key, `"name":`, when rows are objects.
    keys: Option<Vec<String>>,
    count: usize,
    cells_in_row: usize,
    /// Texts already cut (`piece_bytes` > 0).
    pieces: Vec<JsonRows>,
    /// The size after which a text is cut (0: never).
    piece_bytes: usize,
    /// Bytes still expected, to reserve room for.
    expected: usize,
}

impl JsonRowsWriter {
    /// A writer of rows with one cell per column of `columns`, in that order, as `d` reads them.
    pub fn new(d: &dyn Dialect, columns: &[String]) -> JsonRowsWriter {
        JsonRowsWriter::cut(d, columns, 0, 0)
    }

    /// [`JsonRowsWriter::new`], cutting the rows into texts of about `piece_bytes` each (0:
    /// one text), with room reserved for the `expected` bytes (a large text grown by doubling
    /// is copied at each step, and briefly held twice).
    pub fn cut(
        d: &dyn Dialect,
        columns: &[String],
        expected: usize,
        piece_bytes: usize,
    ) -> JsonRowsWriter {
        let keys = d.rows_by_name().then(|| {
            columns
                .iter()
                .map(|c| {
                    let mut key = serde_json::to_string(c).unwrap_or_else(|_| "\"\"".into());
                    key.push(':');
                    key
                })
                .collect()
        });
        let mut writer = JsonRowsWriter {
            out: Vec::new(),
            keys,
            count: 0,
            cells_in_row: 0,
            pieces: Vec::new(),
            piece_bytes,
            expected,
        };
        writer.start_text();
        writer
    }

    /// Starts a text, with room for what is expected of it.
    fn start_text(&mut self) {
        let room = match self.piece_bytes {
            0 => self.expected,
            piece => self.expected.min(piece + piece / 8),
        };
        self.expected -= room;
        self.out = Vec::with_capacity(room.max(2));
        self.out.push(b'[');
    }

    /// Opens a row.
    pub fn begin_row(&mut self) {
        if self.out.len() > 1 {
            self.out.push(b',');
        }
        self.out.push(if self.keys.is_some() { b'{' } else { b'[' });
        self.cells_in_row = 0;
    }

    /// Writes the next cell of the open row.
    pub fn cell(&mut self, cell: Cell<'_>) {
        if self.cells_in_row > 0 {
            self.out.push(b',');
        }
        if let Some(key) = self.keys.as_ref().and_then(|k| k.get(self.cells_in_row)) {
            self.out.extend_from_slice(key.as_bytes());
        }
        self.cells_in_row += 1;
        match cell {
            // PostgreSQL reads a nested value by the column's type (jsonb, arrays); SQLite
            // reads it as text, the same text whichever way its rows are bound
            Cell::Json(text) if self.keys.is_some() => self.out.extend_from_slice(text.as_bytes()),
            Cell::Json(text) => {
                let _ = serde_json::to_writer(&mut self.out, text);
            }
            Cell::Value(Value::Null) => self.out.extend_from_slice(b"null"),
            Cell::Value(Value::Bool(b)) => {
                self.out
                    .extend_from_slice(if *b { b"true" } else { b"false" })
            }
            Cell::Value(Value::Int(i)) => self.out.extend_from_slice(i.to_string().as_bytes()),
            // JSON has no NaN or infinities: NaN is stored as NULL (as SQLite does with a bound
            // NaN), the infinities as a number too large for a double, which reads back as one.
            Cell::Value(Value::Real(f)) if f.is_nan() => self.out.extend_from_slice(b"null"),
            Cell::Value(Value::Real(f)) if f.is_infinite() => self
                .out
                .extend_from_slice(if *f > 0.0 { b"9e999" } else { b"-9e999" }),
            // writing to a Vec cannot fail; strings and finite floats always serialize
            Cell::Value(Value::Real(f)) => {
                let _ = serde_json::to_writer(&mut self.out, f);
            }
            Cell::Value(Value::Text(t)) => {
                let _ = serde_json::to_writer(&mut self.out, t);
            }
        }
    }

    /// Closes the open row.
    pub fn end_row(&mut self) {
        self.out.push(if self.keys.is_some() { b'}' } else { b']' });
        self.count += 1;
        if self.piece_bytes > 0 && self.out.len() >= self.piece_bytes {
            let piece = self.seal();
            self.pieces.push(piece);
            self.start_text();
        }
    }

    /// How many rows have been written.
    pub fn count(&self) -> usize {
        self.pieces.iter().map(|p| p.count).sum::<usize>() + self.count
    }

    /// The rows written: one text, or the pieces cut (never none; a text may hold no row).
    pub fn finish(mut self) -> Vec<JsonRows> {
        if self.count > 0 || self.pieces.is_empty() {
            let last = self.seal();
            self.pieces.push(last);
        }
        self.pieces
    }

    /// The current text, closed.
    fn seal(&mut self) -> JsonRows {
        // not shrunk to fit: that would copy a large text once more
        self.out.push(b']');
        JsonRows {
            // only JSON text and whole UTF-8 strings were written
            text: String::from_utf8(std::mem::take(&mut self.out)).unwrap_or_default(),
            count: std::mem::take(&mut self.count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{Postgres, Sqlite};

    fn write(d: &dyn Dialect) -> JsonRows {
        let mut pieces = write_cut(d, 0);
        assert_eq!(pieces.len(), 1);
        pieces.remove(0)
    }

    fn write_cut(d: &dyn Dialect, piece_bytes: usize) -> Vec<JsonRows> {
        let columns = ["id".to_string(), "na\"me".to_string()];
        let mut w = JsonRowsWriter::cut(d, &columns, 100, piece_bytes);
        for (a, b) in [
            (
                Cell::Value(&Value::Int(1)),
                Cell::Value(&Value::Text("x\"y".into())),
            ),
            (Cell::Value(&Value::Real(2.5)), Cell::Json(r#"{"n":[1]}"#)),
            (
                Cell::Value(&Value::Real(f64::NAN)),
                Cell::Value(&Value::Bool(true)),
            ),
            (
                Cell::Value(&Value::Real(f64::NEG_INFINITY)),
                Cell::Value(&Value::Null),
            ),
        ] {
            w.begin_row();
            w.cell(a);
            w.cell(b);
            w.end_row();
        }
        w.finish()
    }

    #[test]
    fn rows_are_arrays_or_objects_by_dialect() {
        let sqlite = write(&Sqlite);
        assert_eq!(sqlite.count, 4);
        assert_eq!(
            sqlite.text,
            r#"[[1,"x\"y"],[2.5,"{\"n\":[1]}"],[null,true],[-9e999,null]]"#
        );
        assert_eq!(
            write(&Postgres).text,
            r#"[{"id":1,"na\"me":"x\"y"},{"id":2.5,"na\"me":{"n":[1]}},{"id":null,"na\"me":true},{"id":-9e999,"na\"me":null}]"#
        );
        let empty = JsonRowsWriter::new(&Sqlite, &[]).finish();
        assert_eq!(empty.len(), 1);
        assert_eq!((empty[0].text.as_str(), empty[0].count), ("[]", 0));
    }

    #[test]
    fn rows_are_cut_into_pieces() {
        let pieces = write_cut(&Sqlite, 20);
        let texts: Vec<(&str, usize)> = pieces.iter().map(|p| (p.text.as_str(), p.count)).collect();
        assert_eq!(
            texts,
            vec![
                (r#"[[1,"x\"y"],[2.5,"{\"n\":[1]}"]]"#, 2),
                (r#"[[null,true],[-9e999,null]]"#, 2),
            ]
        );
    }
}
