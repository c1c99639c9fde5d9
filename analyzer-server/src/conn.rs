//! Bounded connections: both listeners (gRPC and HTTP) accept through a [`LimitedListener`],
//! which caps the connections open at once, overall and per peer address, and closes a
//! connection that has sent nothing for the idle timeout. A connection beyond a cap is
//! closed as soon as it is accepted (counted, logged at most once a second), so a flood of
//! idle connections from one place can neither exhaust the process's file descriptors nor
//! lock out other peers.

use crate::counters::{Counter, Counters};
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// Connection caps of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one peer address.
    pub max_per_peer: usize,
    /// A connection that has sent nothing for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// 1024 connections, 64 per peer, 120 s idle.
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            max_per_peer: 64,
            idle_timeout: Duration::from_secs(120),
        }
    }
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_peer: BTreeMap<IpAddr, usize>,
}

/// A place in the connection count, given back when the connection closes.
#[derive(Debug)]
struct Slot {
    open: Arc<Mutex<Open>>,
    peer: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.per_peer.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.per_peer.remove(&self.peer);
            }
        }
    }
}

/// An accepted connection: closed with `TimedOut` when the peer sends nothing for the idle
/// timeout; its place in the count is given back when it is dropped.
#[derive(Debug)]
pub struct IdleIo {
    inner: TcpStream,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    _slot: Slot,
}

impl IdleIo {
    /// The peer's address.
    pub fn peer(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }
}

impl AsyncRead for IdleIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let next = tokio::time::Instant::now() + self.idle;
                    self.deadline.as_mut().reset(next);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle past the timeout",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for IdleIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for IdleIo {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// A TCP listener that enforces [`ConnectionLimits`]; a `Stream` of connections for tonic
/// and an [`axum::serve::Listener`] for axum.
#[derive(Debug)]
pub struct LimitedListener {
    listener: TcpListener,
    limits: ConnectionLimits,
    open: Arc<Mutex<Open>>,
    counters: Arc<Counters>,
    /// After an accept error (no file descriptors left), a pause before trying again.
    backoff: Option<Pin<Box<Sleep>>>,
    last_warning: Option<Instant>,
}

impl LimitedListener {
    /// Wraps a bound listener.
    pub fn new(listener: TcpListener, limits: ConnectionLimits, counters: Arc<Counters>) -> Self {
        LimitedListener {
            listener,
            limits,
            open: Arc::default(),
            counters,
            backoff: None,
            last_warning: None,
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }

    /// Takes a place for a connection from `peer`, or says which cap it is over.
    fn admit(&self, peer: IpAddr) -> Result<Slot, &'static str> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.limits.max_connections {
            return Err("the connection cap");
        }
        let from_peer = open.per_peer.entry(peer).or_default();
        if *from_peer >= self.limits.max_per_peer {
            return Err("the per-peer connection cap");
        }
        *from_peer += 1;
        open.total += 1;
        Ok(Slot {
            open: self.open.clone(),
            peer,
        })
    }

    fn refused(&mut self, peer: SocketAddr, cap: &str) {
        self.counters.bump(Counter::ConnectionsRefused);
        let now = Instant::now();
        if self
            .last_warning
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            self.last_warning = Some(now);
            tracing::warn!(%peer, cap, "connection refused (more are not logged for a second)");
        }
    }

    /// The next admitted connection.
    pub fn poll_next_connection(&mut self, cx: &mut Context<'_>) -> Poll<(IdleIo, SocketAddr)> {
        loop {
            if let Some(backoff) = self.backoff.as_mut() {
                if backoff.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.backoff = None;
            }
            match self.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => {
                    self.counters.bump(Counter::InternalErrors);
                    tracing::error!(%error, "accepting a connection failed; retrying in 100 ms");
                    self.backoff = Some(Box::pin(tokio::time::sleep(Duration::from_millis(100))));
                }
                Poll::Ready(Ok((stream, peer))) => match self.admit(peer.ip()) {
                    Ok(slot) => {
                        let _ = stream.set_nodelay(true);
                        let idle = self.limits.idle_timeout;
                        let io = IdleIo {
                            inner: stream,
                            idle,
                            deadline: Box::pin(tokio::time::sleep(idle)),
                            _slot: slot,
                        };
                        return Poll::Ready((io, peer));
                    }
                    Err(cap) => {
                        drop(stream);
                        self.refused(peer, cap);
                    }
                },
            }
        }
    }
}

impl tokio_stream::Stream for LimitedListener {
    type Item = Result<IdleIo, io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .poll_next_connection(cx)
            .map(|(io, _)| Some(Ok(io)))
    }
}

impl axum::serve::Listener for LimitedListener {
    type Io = IdleIo;
    type Addr = SocketAddr;

    fn accept(&mut self) -> impl Future<Output = (Self::Io, Self::Addr)> + Send {
        std::future::poll_fn(|cx| self.poll_next_connection(cx))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}
