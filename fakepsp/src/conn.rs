//! A TCP listener whose connections a request handler can sever, for `pm_fake_lost_response`.
//!
//! The point of that token is a client that sent a request, had it fully processed, and got
//! *no* HTTP response at all — not a status, not headers, nothing. A handler cannot express
//! that through axum (every handler returns a response, and hyper writes its head before it
//! looks at the body). So each accepted connection carries a kill switch that the handler
//! reaches through [`ConnectInfo`](axum::extract::ConnectInfo): once it is thrown, every write
//! on that socket fails, hyper abandons the connection without having written a byte of the
//! response, and the socket is closed. The client sees the connection close mid-request.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Wraps a [`TcpListener`] so every accepted connection can be severed by its handler.
#[derive(Debug)]
pub(crate) struct SeverableListener {
    inner: TcpListener,
}

impl SeverableListener {
    /// Wraps a bound listener.
    pub(crate) fn new(inner: TcpListener) -> Self {
        Self { inner }
    }
}

impl Listener for SeverableListener {
    type Io = SeverableStream;
    type Addr = ConnHandle;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // axum's own impl logs and retries accept errors; reuse it.
        let (stream, remote) = Listener::accept(&mut self.inner).await;
        // Answers are small and written whole; no reason to let Nagle delay them.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let severed = Arc::new(AtomicBool::new(false));
        let handle = ConnHandle {
            remote,
            severed: Arc::clone(&severed),
        };
        (SeverableStream { stream, severed }, handle)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(ConnHandle {
            remote: self.inner.local_addr()?,
            severed: Arc::default(),
        })
    }
}

/// A handler's grip on the connection its request came in on.
#[derive(Clone, Debug)]
pub(crate) struct ConnHandle {
    /// The peer address (for logs).
    pub(crate) remote: SocketAddr,
    severed: Arc<AtomicBool>,
}

impl ConnHandle {
    /// Makes sure nothing more is ever written to this connection: the response the handler
    /// returns is discarded and the socket closed.
    pub(crate) fn sever(&self) {
        self.severed.store(true, Ordering::SeqCst);
    }
}

impl Connected<IncomingStream<'_, SeverableListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, SeverableListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// A TCP stream that refuses all writes once its connection has been severed.
#[derive(Debug)]
pub(crate) struct SeverableStream {
    stream: TcpStream,
    severed: Arc<AtomicBool>,
}

impl SeverableStream {
    /// The error every write gets after [`ConnHandle::sever`].
    fn check(&self) -> io::Result<()> {
        if self.severed.load(Ordering::SeqCst) {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection severed on purpose (pm_fake_lost_response)",
            ))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for SeverableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SeverableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Closing is always allowed: it sends no response bytes, only the FIN the client sees.
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
