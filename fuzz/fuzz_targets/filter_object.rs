//! ORDS's `q=` filter object (`{"points":{"$gt":400},"$orderby":{"name":"asc"}}`) from any
//! text. Beyond "no panic": the conditions of one that parses render with every value bound
//! (placeholders `1..=n`, nothing spliced into the text) on both dialects.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "bound.rs"]
mod bound;
use rowgate_query::filter_object::parse_filter_object;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(object) = parse_filter_object(text) else {
        return;
    };
    for condition in &object.filters {
        bound::assert_binds_every_value(condition);
    }
});
