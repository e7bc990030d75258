//! The shared runtime of Snug Hub's gRPC services.
//!
//! Every service crate (`services/*`) is a thin adapter from a domain crate to its proto; what
//! they have in common lives here, so it is written once:
//!
//! - [`status`]: the only way a service builds a `tonic::Status` — a code, a machine-readable
//!   `google.rpc.ErrorInfo` reason and a domain, never a message a client would have to parse;
//! - [`chunks`]: payloads of up to 64 MiB travel as streams of ≤ 1 MiB chunks after one header
//!   message, with the size cap enforced while the bytes arrive;
//! - [`server`]: configuration from flags and environment, gRPC health and reflection, request
//!   timeouts, a global concurrency limit that sheds bursts (never health checks), and graceful
//!   shutdown on SIGTERM;
//! - [`telemetry`]: tracing initialisation for binaries (text or JSON lines).
//!
//! What it deliberately does not do: choose a status code for a domain error (each service's
//! `status.rs` does, exhaustively) or know anything about Snug files.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocking;
pub mod chunks;
pub mod limit;
pub mod server;
pub mod status;
pub mod telemetry;
