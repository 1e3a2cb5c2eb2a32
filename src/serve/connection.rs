//! Bounds on the webhook port's connections, under TLS and whatever the protocol: at most
//! `--max-connections` open at once (one more is closed at accept, before its handshake), and a
//! connection with no byte in either direction for `--idle-timeout` is closed. HTTP/1.1 had
//! its header timeout; an idle HTTP/2 connection had nothing, and a few thousand of them held
//! file descriptors and memory until the process could answer nothing.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::metrics::Metrics;

/// The acceptor under TLS that applies both bounds.
#[derive(Clone)]
pub struct GuardAcceptor {
    permits: Arc<Semaphore>,
    idle: Duration,
    metrics: Arc<Metrics>,
}

impl GuardAcceptor {
    pub fn new(max_connections: usize, idle: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_connections)),
            idle,
            metrics,
        }
    }
}

impl<S: Send + 'static> Accept<TcpStream, S> for GuardAcceptor {
    type Stream = Guarded<TcpStream>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let result = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let _ = stream.set_nodelay(true);
                Ok((Guarded::new(stream, permit, self.idle), service))
            }
            Err(_) => {
                self.metrics.record_connection_refused();
                Err(io::Error::other("--max-connections reached"))
            }
        };
        std::future::ready(result)
    }
}

/// A stream that holds its connection slot and fails once idle too long.
pub struct Guarded<T> {
    inner: T,
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<T> Guarded<T> {
    fn new(inner: T, permit: OwnedSemaphorePermit, idle: Duration) -> Self {
        Self {
            inner,
            _permit: permit,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn active(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// Whether the idle deadline passed (registering the waker when not).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline.as_mut().poll(cx).is_ready()
    }
}

fn idle_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "connection idle past --idle-timeout",
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.active();
                }
                Poll::Ready(result)
            }
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(idle_error())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            this.active();
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
