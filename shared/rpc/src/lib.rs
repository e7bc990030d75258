//! The shared runtime of Snug Hub's gRPC services.
//!
//! Every service crate (`services/*`) is a thin adapter from a domain crate to its proto; what
//! they have in common lives here, so it is written once:
//!
//! - [`status`]: the only way a service builds a `tonic::Status` — a code, a machine-readable
//!   `google.rpc.ErrorInfo` reason and a domain, never a message a client would have to parse;
//! - [`chunks`]: payloads of up to 64 MiB travel as streams of ≤ 1 MiB chunks after one header
//!   message, with the size cap enforced while the bytes arrive, for any message that is
//!   `snug_proto::Chunked`;
//! - [`framed`]: the result-then-chunks responses of the large downloads, framed without
//!   copying their payload;
//! - [`server`]: configuration from flags and environment, gRPC health and reflection, request
//!   timeouts, a global concurrency limit that sheds bursts (never health checks), and graceful
//!   shutdown on SIGTERM;
//! - [`deadline`]: each call's deadline (the client's `grpc-timeout` or the request timeout),
//!   answered DEADLINE_EXCEEDED with a reason; [`refusal`]: the refusals tonic makes itself
//!   (a message over the decode limit, an empty unary body, a stream cut inside a message or
//!   broken off by the client) typed with documented codes and reasons;
//! - [`budget`] and [`pace`]: the bytes of uploads a process holds at once (admitted whole, up
//!   front, half at most per user, first come first served) and the minimum rate every upload
//!   keeps after a grace, so no client holds a share for long;
//! - [`blocking`]: the bounded pool every service runs its heavy sync work on, whose jobs stop
//!   when their caller goes away (a [`blocking::Cancel`] per job, tripped when the call is
//!   dropped: cancelled by the client, or past its deadline);
//! - [`telemetry`]: logs (text or JSON lines, with trace ids) and OpenTelemetry traces over
//!   OTLP/gRPC when an endpoint is configured, off otherwise;
//! - [`trace_context`]: W3C `traceparent` propagation, and [`trace_context::Traced`] for client
//!   channels, so one request is one trace across processes;
//! - [`observe`]: the gRPC server's request span and metrics, and the body wrapper that ends
//!   them when the response body ends;
//! - [`metrics`] and [`admin`]: the process's Prometheus metrics and the admin port serving them.
//! - [`bearer`]: the token of an `Authorization: Bearer` header, read one way for the gateway's
//!   callers and the admin API's.
//! - [`watch`]: what brings a watcher of one user's revisions up to date (`WatchImage`'s rule),
//!   for the sync service that serves it and the gateway that fans it out.
//!
//! What it deliberately does not do: choose a status code for a domain error (each service's
//! `status.rs` does, exhaustively) or know anything about Snug files.
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map; the map's paragraph opens it.)
//!
//! The runtime every service shares: `ServerConfig` (flags and `SNUG_*` environment variables),
//! `serve()` with grpc.health.v1, reflection, each call's deadline (`deadline.rs`: typed
//! DEADLINE_EXCEEDED, and the call's blocking job stops), tonic's own refusals typed
//! (`refusal.rs`), a global concurrency limit that sheds
//! a burst at once with UNAVAILABLE/`OVERLOADED` (domain `snug.rpc`; health checks bypass it, so a busy
//! pod is never restarted as a dead one — `limit.rs`), graceful shutdown on SIGTERM (health flips to NOT_SERVING, then a bounded drain);
//! `status::error()` (the only way a status is built: code + `ErrorInfo` reason + domain);
//! `chunks` (header-then-chunks streams of ≤ 1 MiB, cap enforced while bytes arrive); `framed`
//! (the large downloads — container Unlock, sync GetImage — answered through `framed::Override` with
//! a body of each chunk message's gRPC and protobuf headers followed by the payload's own slices: the
//! bytes tonic would send, checked byte for byte in its tests and through generated clients in every
//! service suite, without tonic's copy of every chunk into a fresh encode buffer; `framed::client`
//! reads such answers handing out chunk payloads as slices of the frames they arrived in, for the
//! gateway's downloads and the reference Rust client); telemetry
//! (`telemetry.rs`: logs, OpenTelemetry traces; `trace_context.rs`: W3C `traceparent` in and out;
//! `observe.rs`: each call's server span and metrics, outermost layer of `serve()`; `metrics.rs` and
//! `admin.rs`: the Prometheus registry and the admin port) — see "Observability" below.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
pub mod bearer;
pub mod blocking;
pub mod budget;
pub mod chunks;
pub mod client;
pub mod deadline;
pub mod framed;
pub mod limit;
pub mod metrics;
pub mod observe;
pub mod pace;
pub mod refusal;
pub mod runtime;
pub mod server;
pub mod service_token;
pub mod status;
pub mod telemetry;
pub mod trace_context;
pub mod watch;
