//! A realtime client's message from any bytes: this server's own JSON protocol, and Supabase's
//! Phoenix frames (text of either protocol version, and realtime-js's binary broadcast push).
//! Beyond "no panic": a Phoenix text frame that decodes encodes back to one that decodes to
//! the same message.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rowgate::realtime::protocol::ClientMessage;
use rowgate::realtime::supabase::{decode_binary, decode_text, encode, Vsn};

fuzz_target!(|data: &[u8]| {
    let _ = decode_binary(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = serde_json::from_str::<ClientMessage>(text);
    for vsn in [Vsn::V1, Vsn::V2] {
        let Ok(message) = decode_text(vsn, text) else {
            continue;
        };
        let again = encode(
            vsn,
            message.join_ref.as_deref(),
            message.reference.as_deref(),
            &message.topic,
            &message.event,
            &message.payload,
        );
        assert_eq!(decode_text(vsn, &again), Ok(message), "encoded as {again}");
    }
});
