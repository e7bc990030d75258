//! Fuzzes the token parser and verifier: any input is a typed refusal (or, never in practice, a
//! verified token), never a panic, including inputs that select a key by `kid`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use snug_identity::{KeySet, Policy};

// One key of each algorithm (public halves only; the fuzzer cannot sign, it explores the paths
// before and around the signature check).
const JWKS: &str = r#"{"keys":[
 {"kty":"EC","kid":"ec","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
 {"kty":"OKP","kid":"ed","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let keys = KeySet::parse(JWKS.as_bytes()).expect("the fixed key set parses");
    let policy = Policy::new("snug-hub", None, Some("groups=snug")).expect("policy");
    let _ = snug_identity::peek(text);
    let _ = snug_identity::verify(text, "https://id.example", &keys, &policy, 1_800_000_000);
    let _ = KeySet::parse(data);
    let _ = snug_identity::Discovery::parse(data, "https://id.example");
    let _ = snug_identity::Flow::open(text, b"0123456789abcdef0123456789abcdef", 0);
});
