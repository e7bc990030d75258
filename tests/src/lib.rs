//! Snug Hub's cross-crate tests live in `tests/tests/`; this library is intentionally empty.
