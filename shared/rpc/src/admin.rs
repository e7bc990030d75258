//! The admin port: `GET /metrics` in the Prometheus text format, and where a process holds the
//! users directory the admin gRPC API (`snug.admin.v1`, behind its own token), on a listener of
//! their own so that neither shares a port (or a network policy) with the API.
//!
//! Off unless `SNUG_ADMIN_LISTEN` names an address. The metrics hold no secret and no user data
//! (see [`crate::metrics`] on label values); the admin API checks its token on every call.

use std::{future::Future, net::SocketAddr};

use axum::{Router, http::header, routing::get};
use tokio::net::TcpListener;

use crate::server::LocalChannel;

/// The admin port's router: `GET /metrics`; every other request goes to the gRPC services of
/// `grpc` (h2c) — built by [`crate::server::local`], so they answer behind the same observation,
/// typed refusals and load shedding as the gRPC port's — or, without them, is 404.
pub fn router(grpc: Option<LocalChannel>) -> Router {
    let metrics = Router::new().route(
        "/metrics",
        get(|| async {
            (
                [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
                crate::metrics::global().encode(),
            )
        }),
    );
    let Some(channel) = grpc else {
        return metrics;
    };
    metrics.fallback_service(tower::service_fn(move |request: axum::extract::Request| {
        let channel = channel.clone();
        async move {
            let (parts, body) = request.into_parts();
            let request = http::Request::from_parts(parts, tonic::body::Body::new(body));
            let response = match tower::ServiceExt::oneshot(channel, request).await {
                Ok(response) => response.map(axum::body::Body::new),
                Err(err) => {
                    tracing::error!(error = %err, "the admin port's gRPC services failed");
                    axum::response::IntoResponse::into_response(
                        http::StatusCode::SERVICE_UNAVAILABLE,
                    )
                }
            };
            Ok::<_, std::convert::Infallible>(response)
        }
    }))
}

/// Serves the admin port on `listener` until `shutdown` completes: the metrics, and the gRPC
/// services of `grpc`.
pub async fn serve(
    listener: TcpListener,
    grpc: Option<LocalChannel>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let local: Option<SocketAddr> = listener.local_addr().ok();
    if let Some(addr) = local {
        tracing::info!(addr = %addr, admin_api = grpc.is_some(), "admin port listening (GET /metrics)");
    }
    axum::serve(listener, router(grpc))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        answer
    }

    #[tokio::test]
    async fn metrics_are_served_in_the_prometheus_text_format_and_nothing_else_is() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, None, async {
            let _ = stopped.await;
        }));
        let answer = get(addr, "/metrics").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
            "{answer}"
        );
        assert!(
            answer.contains("# TYPE snug_container_unlock_attempts_total counter"),
            "{answer}"
        );
        let missing = get(addr, "/other").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let _ = stop.send(());
        server.await.expect("join").expect("serve");
    }
}
