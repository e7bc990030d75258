//! Every call's deadline: the client's `grpc-timeout` or the server's request timeout
//! (`SNUG_REQUEST_TIMEOUT`), whichever is sooner.
//!
//! The server's request timeout counts from the last piece of the request body to arrive, not
//! from the call's start: an upload that keeps arriving (a 64 MiB image from a slow client,
//! streamed on by the gateway as it comes) is not cut off for taking longer than a call that
//! follows it may; what bounds the time a body may take to arrive is its receiver's pace
//! (`crate::chunks`). For a unary call the body is one message, so nothing changes there. The
//! client's `grpc-timeout` counts from the start, as the protocol says.
//!
//! When it passes, the call's future is dropped — so a blocking job it waits for sees its
//! `crate::blocking::Cancel` and stops — and the caller is answered DEADLINE_EXCEEDED with reason
//! `DEADLINE_EXCEEDED` in domain `snug.rpc`. tonic's own server timeout answered untyped
//! `CANCELLED "Timeout expired"` outside the observation layer, so a timed-out call was neither
//! typed nor counted; this layer sits inside it ([`crate::server::serve`]).
//!
//! tonic still reads the client's `grpc-timeout` itself, outside every layer of ours, and would
//! race this one to the same instant; this one ends [`HEAD_START`] sooner, so its typed answer
//! is ready when tonic's timer fires (tonic's layer polls the call before its timer). Should
//! tonic's timer still win (a machine too loaded to run the two layers within a millisecond), the
//! call is dropped without an answer of ours, and [`crate::observe`] counts it as
//! DEADLINE_EXCEEDED all the same ([`expired`]).

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use tower::{Layer, Service};

use crate::{limit::DOMAIN, status};

const GRPC_TIMEOUT: &str = "grpc-timeout";

/// How much sooner than the client's `grpc-timeout` this layer answers: one tick of tokio's
/// timer, so that it fires no later than tonic's own reading of the same header.
pub const HEAD_START: Duration = Duration::from_millis(1);

/// How much earlier than its deadline a dropped call is still taken for one that ran out of time:
/// timers fire on millisecond ticks, and a client's own deadline reaches the server a network
/// delay after it fired.
const SLACK: Duration = Duration::from_millis(10);

/// The client's `grpc-timeout` (gRPC over HTTP/2: at most 8 digits and a unit, `H` `M` `S` `m`
/// `u` `n`); `None` when there is none or it is malformed, as tonic reads it.
pub fn client_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let text = headers.get(GRPC_TIMEOUT)?.to_str().ok()?;
    let unit_at = text.len().checked_sub(1)?;
    let (digits, unit) = text.split_at(unit_at);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

/// Returns whether a call with these request headers that ended after `elapsed` without an
/// answer ran out of the client's time (rather than being cancelled by it).
pub fn expired(headers_timeout: Option<Duration>, elapsed: Duration) -> bool {
    headers_timeout.is_some_and(|timeout| elapsed + SLACK >= timeout)
}

/// The status of a call whose deadline passed.
pub fn exceeded(timeout: Duration) -> tonic::Status {
    status::from_reason(
        &snug_reasons::rpc::DEADLINE_EXCEEDED,
        DOMAIN,
        format!(
            "the call's deadline of {} ms passed before it was answered; its work was stopped and nothing was kept",
            timeout.as_millis()
        ),
        [("timeout", format!("{}ms", timeout.as_millis()))],
    )
}

/// Bounds every call by its deadline; see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    server: Duration,
}

impl DeadlineLayer {
    /// Calls end after `server` at the latest, sooner when the client's `grpc-timeout` says so.
    pub fn new(server: Duration) -> Self {
        Self { server }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline {
            inner,
            server: self.server,
        }
    }
}

/// The service [`DeadlineLayer`] produces.
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
    server: Duration,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<S, B> Service<http::Request<B>> for Deadline<S>
where
    S: Service<http::Request<Watched<B>>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let client = client_timeout(request.headers());
        let server = self.server;
        let start = tokio::time::Instant::now();
        let arrived = Arc::new(AtomicU64::new(0));
        let request = request.map(|body| Watched {
            inner: body,
            start,
            arrived: Arc::clone(&arrived),
        });
        let response = self.inner.call(request);
        Box::pin(async move {
            tokio::pin!(response);
            loop {
                // The server's timeout from the body's latest piece, the client's from the start.
                let last_piece = start + Duration::from_millis(arrived.load(Ordering::Relaxed));
                let server_deadline = last_piece + server;
                let deadline = client.map_or(server_deadline, |client| {
                    server_deadline.min(start + client)
                });
                match tokio::time::timeout_at(deadline, &mut response).await {
                    Ok(response) => return response,
                    Err(_) => {
                        let moved = start + Duration::from_millis(arrived.load(Ordering::Relaxed));
                        if moved == last_piece || client.is_some_and(|c| start + c <= deadline) {
                            // Dropping the call's future here is what stops its work.
                            let timeout = client.map_or(server, |c| c.min(server));
                            return Ok(exceeded(timeout).into_http());
                        }
                    }
                }
            }
        })
    }
}

/// A request body that notes when each of its pieces arrived, in milliseconds since the call
/// started, for [`Deadline`].
#[derive(Debug)]
pub struct Watched<B> {
    inner: B,
    start: tokio::time::Instant,
    arrived: Arc<AtomicU64>,
}

impl<B> http_body::Body for Watched<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &frame {
            let millis = self.start.elapsed().as_millis() as u64;
            self.arrived.store(millis, Ordering::Relaxed);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_as_the_protocol_spells_them() {
        let cases: [(&str, Option<Duration>); 10] = [
            ("1H", Some(Duration::from_secs(3600))),
            ("2M", Some(Duration::from_secs(120))),
            ("30S", Some(Duration::from_secs(30))),
            ("250m", Some(Duration::from_millis(250))),
            ("99999999u", Some(Duration::from_micros(99_999_999))),
            ("5n", Some(Duration::from_nanos(5))),
            ("123456789S", None),
            ("S", None),
            ("10x", None),
            ("-1S", None),
        ];
        for (text, expected) in cases {
            let mut headers = http::HeaderMap::new();
            headers.insert(GRPC_TIMEOUT, http::HeaderValue::from_static(text));
            assert_eq!(client_timeout(&headers), expected, "{text}");
        }
        assert_eq!(client_timeout(&http::HeaderMap::new()), None);
    }

    /// A call that outlives its deadline is answered DEADLINE_EXCEEDED with a reason, and its
    /// future is dropped (which is what cancels the work it waits for).
    #[tokio::test]
    async fn a_call_past_its_deadline_is_dropped_and_answered_typed() {
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let mut service = DeadlineLayer::new(Duration::from_secs(60)).layer(tower::service_fn({
            let dropped = dropped.clone();
            move |_request: http::Request<Watched<()>>| {
                let flag = Flag(dropped.clone());
                async move {
                    let _flag = flag;
                    std::future::pending::<()>().await;
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        tonic::body::Body::empty(),
                    ))
                }
            }
        }));
        let request = http::Request::builder()
            .header(GRPC_TIMEOUT, "50m")
            .body(())
            .expect("request");
        let response = service.call(request).await.expect("answered");
        let status = tonic::Status::from_header_map(response.headers()).expect("a status");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(
            status::reason_of(&status).as_deref(),
            Some("DEADLINE_EXCEEDED")
        );
        assert!(
            dropped.load(std::sync::atomic::Ordering::SeqCst),
            "the call was dropped"
        );
    }

    type Pieces = std::pin::Pin<
        Box<
            dyn futures::Stream<Item = Result<http_body::Frame<bytes::Bytes>, std::io::Error>>
                + Send,
        >,
    >;

    /// A body of `n` pieces, one every `every`.
    fn trickle(n: usize, every: Duration) -> http_body_util::StreamBody<Pieces> {
        let pieces = futures::stream::unfold(0, move |i| async move {
            if i == n {
                return None;
            }
            tokio::time::sleep(every).await;
            Some((
                Ok(http_body::Frame::data(bytes::Bytes::from_static(b"x"))),
                i + 1,
            ))
        });
        http_body_util::StreamBody::new(Box::pin(pieces) as Pieces)
    }

    /// What a call whose handler reads the whole body, then works for `work`, is answered, under
    /// a server timeout of 100 ms, its body arriving in five pieces 60 ms apart (300 ms).
    async fn upload_then_work(work: Duration) -> Option<tonic::Code> {
        let mut service = DeadlineLayer::new(Duration::from_millis(100)).layer(tower::service_fn(
            move |request: http::Request<Watched<http_body_util::StreamBody<Pieces>>>| async move {
                use http_body_util::BodyExt as _;
                let mut body = request.into_body();
                while body.frame().await.is_some() {}
                tokio::time::sleep(work).await;
                Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::empty()))
            },
        ));
        let request = http::Request::new(trickle(5, Duration::from_millis(60)));
        let response = service.call(request).await.expect("answered");
        tonic::Status::from_header_map(response.headers()).map(|status| status.code())
    }

    /// The server's timeout counts from the body's last piece: an upload that keeps arriving is
    /// not cut for outlasting it, and the work after it still has only the timeout.
    #[tokio::test(start_paused = true)]
    async fn the_server_timeout_counts_from_the_last_piece_of_the_body() {
        assert_eq!(upload_then_work(Duration::from_millis(50)).await, None);
        assert_eq!(
            upload_then_work(Duration::from_millis(150)).await,
            Some(tonic::Code::DeadlineExceeded)
        );
    }
}
