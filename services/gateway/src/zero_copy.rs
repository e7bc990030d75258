//! The gateway's connections: TCP streams that send sealed bytes (`snug_files::sealed`) with
//! `sendfile` instead of copying them into the socket.
//!
//! When the gateway runs in the same process as the sync store (`snug-hub serve`), a download of
//! a small image hands hyper the very buffer the store keeps in memory, and the store seals it
//! with the [`Sealer`] the composition root handed to both. hyper writes a response as a vectored
//! write of its head and the body's buffers; this stream sends any buffer it finds in that
//! sealer from the sealed memfd, so the kernel passes references to
//! the memfd's pages on to the socket rather than copying the bytes (what nginx does for a file
//! with `sendfile on`). The head before such a buffer goes out with `MSG_MORE`, so it leaves in
//! the same segment as the body's first bytes. Everything else, and everything where `sendfile`
//! is not available, is written as by a plain `TcpStream`.

use std::{
    fs::File,
    io::{self, IoSlice},
    net::SocketAddr,
    pin::Pin,
    sync::atomic::{AtomicBool, Ordering},
    task::{Context, Poll, ready},
};

use snug_files::sealed::Sealer;
use tokio::{
    io::{AsyncRead, AsyncWrite, Interest, ReadBuf},
    net::{TcpListener, TcpStream},
};

/// Set once `sendfile` turned out not to work here (a sandbox without it, say); from then on
/// every stream writes by copying. Process-wide rather than part of the [`Sealer`]: it is a fact
/// about the kernel and the sandbox this process runs in, which no sealer changes.
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// A listener whose connections are [`ZeroCopyStream`]s.
#[derive(Debug)]
pub struct ZeroCopyListener {
    tcp: TcpListener,
    sealer: Sealer,
}

impl ZeroCopyListener {
    /// Wraps `listener`; its connections send the buffers `sealer` sealed with `sendfile` (none,
    /// with a disabled one).
    pub fn new(listener: TcpListener, sealer: Sealer) -> Self {
        Self {
            tcp: listener,
            sealer,
        }
    }
}

impl axum::serve::Listener for ZeroCopyListener {
    type Io = ZeroCopyStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // TcpListener's own accept loop: it retries and backs off on errors as axum does.
        let (tcp, addr) = axum::serve::Listener::accept(&mut self.tcp).await;
        (ZeroCopyStream::new(tcp, self.sealer.clone()), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A TCP stream that sends the buffers its sealer sealed with `sendfile`.
#[derive(Debug)]
pub struct ZeroCopyStream {
    tcp: TcpStream,
    sealer: Sealer,
}

impl ZeroCopyStream {
    /// Wraps a connected stream that sends what `sealer` sealed from its memfds.
    pub fn new(tcp: TcpStream, sealer: Sealer) -> Self {
        Self { tcp, sealer }
    }

    /// The underlying stream, for its socket options.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Runs the non-blocking socket operation `op` once the socket is writable, as tokio's own
    /// writes do: a `WouldBlock` clears the readiness and waits for the next.
    fn poll_op(
        &self,
        cx: &mut Context<'_>,
        mut op: impl FnMut() -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.tcp.poll_write_ready(cx))?;
            match self.tcp.try_io(Interest::WRITABLE, &mut op) {
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                result => return Poll::Ready(result),
            }
        }
    }

    /// Sends what `fallback` holds from `file` at `offset`, where the same bytes are sealed;
    /// `fallback` itself is written, by copying, if `sendfile` is refused or sends nothing (a
    /// file shorter than its registration, which its seals rule out).
    fn poll_sendfile(
        &mut self,
        cx: &mut Context<'_>,
        file: &File,
        offset: u64,
        fallback: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = ready!(self.poll_op(cx, || {
            let mut at = offset;
            rustix::fs::sendfile(&self.tcp, file, Some(&mut at), fallback.len())
                .map_err(io::Error::from)
        }));
        match result {
            Ok(0) => Pin::new(&mut self.tcp).poll_write(cx, fallback),
            Ok(sent) => {
                snug_rpc::metrics::global()
                    .http_zero_copy_bytes
                    .inc_by(sent as u64);
                Poll::Ready(Ok(sent))
            }
            Err(err) if sendfile_unsupported(&err) => {
                UNAVAILABLE.store(true, Ordering::Relaxed);
                tracing::warn!(error = %err, "sendfile is not available; responses are sent by copying");
                Pin::new(&mut self.tcp).poll_write(cx, fallback)
            }
            Err(err) => Poll::Ready(Err(err)),
        }
    }

    /// Writes `bufs` (what precedes a sealed buffer) telling the kernel more follows at once.
    fn poll_send_more(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        use rustix::net::{SendAncillaryBuffer, SendFlags};
        self.poll_op(cx, || {
            rustix::net::sendmsg(
                &self.tcp,
                bufs,
                &mut SendAncillaryBuffer::default(),
                SendFlags::MORE | SendFlags::NOSIGNAL,
            )
            .map_err(io::Error::from)
        })
    }
}

/// Errors by which `sendfile` says it cannot do this at all (rather than that the connection
/// failed).
fn sendfile_unsupported(err: &io::Error) -> bool {
    use rustix::io::Errno;
    let errno = err.raw_os_error().map(Errno::from_raw_os_error);
    matches!(
        errno,
        Some(Errno::NOSYS | Errno::INVAL | Errno::OPNOTSUPP | Errno::PERM)
    )
}

impl AsyncRead for ZeroCopyStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for ZeroCopyStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.sealer.any_live() || UNAVAILABLE.load(Ordering::Relaxed) {
            return Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        }
        let sealed = bufs
            .iter()
            .enumerate()
            .find_map(|(i, buf)| Some((i, self.sealer.file_range(buf)?)));
        match sealed {
            None => Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs),
            Some((0, (file, offset))) => self.poll_sendfile(cx, &file, offset, &bufs[0]),
            Some((first, _)) => self.poll_send_more(cx, &bufs[..first]),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    async fn connected(sealer: &Sealer) -> (ZeroCopyStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (ZeroCopyStream::new(server, sealer.clone()), client)
    }

    /// Writes `bufs` as hyper does: vectored writes of whatever is left, advancing by what each
    /// write took.
    async fn write_all(stream: &mut ZeroCopyStream, bufs: &[Bytes]) {
        let mut left: Vec<Bytes> = bufs.to_vec();
        while !left.is_empty() {
            let slices: Vec<IoSlice<'_>> = left.iter().map(|b| IoSlice::new(b)).collect();
            let mut n =
                std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_write_vectored(cx, &slices))
                    .await
                    .expect("write");
            assert!(n > 0, "a write took nothing");
            while n > 0 {
                let first = left[0].len().min(n);
                let _ = left[0].split_to(first);
                n -= first;
                if left[0].is_empty() {
                    left.remove(0);
                }
            }
        }
        stream.shutdown().await.expect("shutdown");
    }

    /// Reads everything, slowly at first, so that the writer fills the socket and has to wait.
    async fn read_all(mut client: TcpStream) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 7_001];
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            match client.read(&mut buf).await.expect("read") {
                0 => return out,
                n => out.extend_from_slice(&buf[..n]),
            }
        }
        client.read_to_end(&mut out).await.expect("read");
        out
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[tokio::test]
    async fn sealed_and_plain_buffers_arrive_whole_and_in_order() {
        let sealer = Sealer::new(0);
        // Larger than a loopback socket's buffers, so sendfile is cut short and waits.
        let sealed = sealer.seal(Bytes::from(pattern(3 << 20, 1)));
        assert!(sealer.file_range(&sealed).is_some(), "sealing works here");
        let plain = |len, seed| Bytes::from(pattern(len, seed));
        let cases: Vec<Vec<Bytes>> = vec![
            // A response: its head, then an image kept in memory.
            vec![plain(187, 2), sealed.clone()],
            vec![sealed.clone()],
            vec![sealed.slice(10..2_000), plain(5, 3), sealed.slice(5_000..)],
            vec![sealed.slice(..1), sealed.slice(1..)],
            vec![
                plain(100, 4),
                plain(200_000, 5),
                sealed.slice(77..100_077),
                plain(1, 6),
            ],
            vec![plain(64, 7)],
        ];
        for bufs in cases {
            let expected: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let sealed_bytes: usize = bufs
                .iter()
                .filter(|b| sealer.file_range(b).is_some())
                .map(Bytes::len)
                .sum();
            let before = snug_rpc::metrics::global().http_zero_copy_bytes.get();
            let (mut server, client) = connected(&sealer).await;
            let reader = tokio::spawn(read_all(client));
            write_all(&mut server, &bufs).await;
            let received = reader.await.expect("reader");
            assert_eq!(received.len(), expected.len());
            assert!(received == expected, "the bytes arrive exactly as written");
            let sent = snug_rpc::metrics::global().http_zero_copy_bytes.get() - before;
            // Other tests of this process may send sealed bytes at the same time.
            assert!(sent >= sealed_bytes as u64, "{sent} < {sealed_bytes}");
        }
    }

    #[tokio::test]
    async fn a_peer_that_went_away_is_an_error_not_a_hang() {
        let sealer = Sealer::new(0);
        let sealed = sealer.seal(Bytes::from(pattern(4 << 20, 9)));
        let (mut server, client) = connected(&sealer).await;
        drop(client);
        let mut failed = false;
        for _ in 0..64 {
            let slices = [IoSlice::new(&sealed)];
            let written = tokio::time::timeout(
                Duration::from_secs(5),
                std::future::poll_fn(|cx| Pin::new(&mut server).poll_write_vectored(cx, &slices)),
            )
            .await
            .expect("no hang");
            if written.is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "writing to a closed connection fails");
    }

    #[tokio::test]
    async fn reads_pass_through() {
        let (mut server, mut client) = connected(&Sealer::disabled()).await;
        client
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .expect("write");
        let mut buf = [0u8; 18];
        server.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"GET / HTTP/1.1\r\n\r\n");
    }
}
