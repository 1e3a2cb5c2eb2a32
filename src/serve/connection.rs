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
///
/// Activity only records the time; the timer is moved when it fires early. Resetting it on
/// every read and write took the timer wheel's lock several times per request.
pub struct Guarded<T> {
    inner: T,
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    last_active: Instant,
    deadline: Pin<Box<Sleep>>,
}

impl<T> Guarded<T> {
    fn new(inner: T, permit: OwnedSemaphorePermit, idle: Duration) -> Self {
        Self {
            inner,
            _permit: permit,
            idle,
            last_active: Instant::now(),
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn active(&mut self) {
        self.last_active = Instant::now();
    }

    /// A write's result, noted as activity when bytes went out.
    fn written(&mut self, result: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.active();
        }
        result
    }

    /// Whether the connection has been idle for `idle` (registering the waker when not).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return false;
            }
            let due = self.last_active + self.idle;
            if due <= Instant::now() {
                return true;
            }
            // Fired, but there was activity since it was set: wait for the rest.
            self.deadline.as_mut().reset(due);
        }
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
        this.written(result)
    }

    // rustls hands its queued TLS records over as one vectored write: passed through, they
    // go out in one system call instead of one per record.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(result)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    const IDLE: Duration = Duration::from_secs(1);
    const BEAT: Duration = Duration::from_millis(600);

    fn guarded_pair() -> (Guarded<DuplexStream>, DuplexStream) {
        let (server, client) = tokio::io::duplex(64);
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        (Guarded::new(server, permit, IDLE), client)
    }

    /// Reads on `server` until it fails, and returns how long after `since` that was.
    async fn idle_error_after(server: &mut Guarded<DuplexStream>, since: Instant) -> Duration {
        let mut byte = [0u8; 1];
        let err = server.read(&mut byte).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        since.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_in_use_stays_open_past_the_idle_timeout_and_closes_once_idle() {
        let (mut server, mut client) = guarded_pair();
        let started = Instant::now();
        let mut byte = [0u8; 1];
        // A byte in every 0.6 s for 3 s: never idle for 1 s.
        for _ in 0..5 {
            tokio::time::sleep(BEAT).await;
            client.write_all(b"x").await.unwrap();
            server.read_exact(&mut byte).await.unwrap();
        }
        assert!(started.elapsed() >= 3 * IDLE);
        // Bytes out count as activity too, plain or vectored: the server answers for 3 s more.
        for beat in 0..6 {
            tokio::time::sleep(BEAT).await;
            if beat % 2 == 0 {
                server.write_all(b"y").await.unwrap();
            } else {
                let written = server
                    .write_vectored(&[io::IoSlice::new(b""), io::IoSlice::new(b"z")])
                    .await
                    .unwrap();
                assert_eq!(written, 1);
            }
            client.read_exact(&mut byte).await.unwrap();
        }
        let last = Instant::now();
        let waited = idle_error_after(&mut server, last).await;
        assert_eq!(waited, IDLE, "closed {waited:?} after the last byte");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_never_sends_closes_after_the_idle_timeout() {
        let (mut server, _client) = guarded_pair();
        let waited = idle_error_after(&mut server, Instant::now()).await;
        assert_eq!(waited, IDLE);
    }
}
