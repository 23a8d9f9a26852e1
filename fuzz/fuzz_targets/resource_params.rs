//! A custom resource's parameters from any text: its SQL's `:name`s numbered as placeholders
//! (both dialects), and a value checked against every parameter type, as it arrives from a
//! URL (text) and from a JSON body. Beyond "no panic": every name found is written `:name` in
//! the SQL and numbered once; an accepted float is finite.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rowgate::config::resources::ParamType;
use rowgate::resources::params::{coerce, Raw};
use rowgate::resources::sql::number;
use rowgate_query::render::{Postgres, Sqlite};
use rowgate_query::Value;

const TYPES: [ParamType; 7] = [
    ParamType::Int,
    ParamType::Float,
    ParamType::Text,
    ParamType::Bool,
    ParamType::Date,
    ParamType::Timestamp,
    ParamType::Json,
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for dialect in [&Sqlite as &dyn rowgate_query::render::Dialect, &Postgres] {
        if let Ok(numbered) = number(text, dialect, &|_| None) {
            for (i, name) in numbered.names.iter().enumerate() {
                assert!(text.contains(&format!(":{name}")), "{name} in {text:?}");
                assert!(!numbered.names[..i].contains(name), "{name} numbered twice");
            }
        }
    }
    let json: Option<serde_json::Value> = serde_json::from_str(text).ok();
    for kind in TYPES {
        let mut raws = vec![Raw::Text(text)];
        raws.extend(json.as_ref().map(Raw::Json));
        for raw in raws {
            if let Ok(Value::Real(f)) = coerce(kind, raw) {
                assert!(f.is_finite(), "{kind:?} accepted {f}");
            }
        }
    }
});
