//! Lingering close: a connection that answered a request before reading its body keeps reading,
//! and discarding, what the client still sends, for a bounded time, before it goes.
//!
//! The gateway refuses many uploads before their bodies (a quota or a length over its limit, an
//! upload budget spent, a credential refused). hyper then closes the connection with the rest
//! of the body unread, and closing a socket that holds unread bytes makes the kernel answer
//! with a reset: a client that writes its whole body before it reads (curl, Python's `requests`,
//! hyper's client) gets a broken pipe or a reset instead of the typed answer the gateway wrote,
//! and one still in the client's receive buffer is lost with it. So, as nginx's
//! `lingering_close` does, a connection whose request body was left unread is not dropped: its
//! write side is shut (the answer, then a FIN) and its read side drained until the client is
//! done, or is silent for [`IDLE`], or [`TOTAL`] passes. It stays counted among the open
//! connections meanwhile (`hold`), so lingering never lets a client past the connection caps.

use std::{
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};

use crate::connections::Watch;

/// How long a lingering connection may be silent before it is closed.
pub const IDLE: Duration = Duration::from_secs(2);

/// How long a connection lingers at most, however fast the client sends.
pub const TOTAL: Duration = Duration::from_secs(10);

/// A connection's stream that lingers when dropped if one of its request bodies was left unread
/// ([`Watch::left_unread`]), holding `hold` (its place among the open connections) meanwhile.
pub struct Lingering<S, H>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Send + 'static,
{
    /// Always `Some` until dropped, when a linger takes it.
    io: Option<S>,
    watch: Arc<Watch>,
    hold: Option<H>,
}

impl<S, H> Lingering<S, H>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Send + 'static,
{
    /// Wraps `io`, whose requests report to `watch`.
    pub fn new(io: S, watch: Arc<Watch>, hold: H) -> Self {
        Self {
            io: Some(io),
            watch,
            hold: Some(hold),
        }
    }

    fn io(&mut self) -> Pin<&mut S> {
        Pin::new(self.io.as_mut().expect("taken only when dropped"))
    }
}

impl<S, H> Drop for Lingering<S, H>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Send + 'static,
{
    fn drop(&mut self) {
        if !self.watch.left_unread() {
            return;
        }
        let (Some(io), Ok(runtime)) = (self.io.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let hold = self.hold.take();
        runtime.spawn(async move {
            drain(io).await;
            drop(hold);
        });
    }
}

/// Shuts `io`'s write side, then reads and discards until the client is done, silent for
/// [`IDLE`], or [`TOTAL`] has passed.
async fn drain(mut io: impl AsyncRead + AsyncWrite + Unpin) {
    // Already shut when hyper closed the connection itself; a second shutdown changes nothing.
    let _ = io.shutdown().await;
    let until = tokio::time::Instant::now() + TOTAL;
    let mut discard = vec![0u8; 64 * 1024];
    loop {
        let silent_until = (tokio::time::Instant::now() + IDLE).min(until);
        match tokio::time::timeout_at(silent_until, io.read(&mut discard)).await {
            Ok(Ok(n)) if n > 0 => {}
            // Done (the client's FIN), failed, silent for too long, or out of time.
            _ => return,
        }
    }
}

impl<S, H> AsyncRead for Lingering<S, H>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Send + 'static + Unpin,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.io().poll_read(cx, buf)
    }
}

impl<S, H> AsyncWrite for Lingering<S, H>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Send + 'static + Unpin,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(S::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}
