//! A query string, as PostgREST's syntax reads it (`select=`, filters, logic trees, `order=`,
//! embedded parameters), from any bytes. Beyond "no panic": a query that parses prints back
//! to one that parses to the same query, and each of its filters renders with every value
//! bound (placeholders `1..=n`, nothing spliced into the text) on both dialects.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "bound.rs"]
mod bound;
use rowgate_query::parse::parse_query;
use rowgate_query::print::to_query_string;

fuzz_target!(|data: &[u8]| {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(data)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let Ok(query) = parse_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) else {
        return;
    };
    let printed = to_query_string(&query);
    let again = parse_query(printed.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert_eq!(again.as_ref(), Ok(&query), "printed as {printed:?}");
    for condition in &query.filters {
        bound::assert_binds_every_value(condition);
    }
});
