//! Bounds on the connections of both ports, whatever the protocol: at most so many open at
//! once (`--max-connections` on the webhook port, [`LIFECYCLE_MAX_CONNECTIONS`] on the
//! lifecycle port; one more is closed at accept, before any handshake), and a connection with
//! no byte in either direction for `--idle-timeout` is closed (an idle HTTP/2 connection had no
//! bound, and a few thousand of them held file descriptors and memory until the process could
//! answer nothing). On HTTP/1.1, a request head must arrive within `--body-read-timeout` of its
//! first byte (and so must HTTP/2's connection preface).

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

use super::acceptor::Wrap;
use crate::metrics::{Metrics, Port};

/// At most this many connections to the lifecycle port at once: probes open one each and
/// close it, a Prometheus keeps one per scraper. Unbounded, idle connections held there took
/// file descriptors from the webhook port.
pub(crate) const LIFECYCLE_MAX_CONNECTIONS: usize = 64;

/// The acceptor that applies the cap and the idle timeout (under TLS on the webhook port).
#[derive(Clone)]
pub(crate) struct GuardAcceptor {
    permits: Arc<Semaphore>,
    idle: Duration,
    metrics: Arc<Metrics>,
    port: Port,
}

impl GuardAcceptor {
    pub(crate) fn new(
        max_connections: usize,
        idle: Duration,
        metrics: Arc<Metrics>,
        port: Port,
    ) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_connections)),
            idle,
            metrics,
            port,
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
                self.metrics.record_connection_refused(self.port);
                Err(io::Error::other(match self.port {
                    Port::Webhook => "--max-connections reached",
                    Port::Lifecycle => "the lifecycle port's connection cap reached",
                }))
            }
        };
        std::future::ready(result)
    }
}

/// A stream whose traffic is reported to a [`Watch`], which may end it: the idle guard and the
/// head deadline are both one.
pub(crate) struct Watched<T, W> {
    inner: T,
    watch: W,
}

/// What a [`Watched`] stream tells its watch, and asks it.
pub(crate) trait Watch {
    /// Bytes just read (never empty).
    fn read(&mut self, bytes: &[u8]);
    /// Bytes just written (never empty; of a vectored write, its first slice's).
    fn wrote(&mut self, bytes: &[u8]);
    /// The error that ends the connection, once it is due (registering the waker when not).
    fn overdue(&mut self, cx: &mut Context<'_>) -> Option<io::Error>;
}

impl<T, W: Watch> Watched<T, W> {
    /// A write's result, reported when bytes of `first` went out.
    fn written(
        &mut self,
        first: &[u8],
        result: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = result
            && n > 0
        {
            self.watch.wrote(&first[..n.min(first.len())]);
        }
        result
    }
}

impl<T: AsyncRead + Unpin, W: Watch + Unpin> AsyncRead for Watched<T, W> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                let bytes = &buf.filled()[before..];
                if !bytes.is_empty() {
                    this.watch.read(bytes);
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.watch.overdue(cx) {
                Some(error) => Poll::Ready(Err(error)),
                None => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin, W: Watch + Unpin> AsyncWrite for Watched<T, W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, data);
        this.written(data, result)
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
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        this.written(first, result)
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

/// A stream that holds its connection slot and fails once idle too long.
pub(crate) type Guarded<T> = Watched<T, IdleWatch>;

/// The idle guard: activity only records the time; the timer is moved when it fires early.
/// Resetting it on every read and write took the timer wheel's lock several times per request.
pub(crate) struct IdleWatch {
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    last_active: Instant,
    deadline: Pin<Box<Sleep>>,
}

impl<T> Guarded<T> {
    fn new(inner: T, permit: OwnedSemaphorePermit, idle: Duration) -> Self {
        let watch = IdleWatch {
            _permit: permit,
            idle,
            last_active: Instant::now(),
            deadline: Box::pin(tokio::time::sleep(idle)),
        };
        Self { inner, watch }
    }
}

impl Watch for IdleWatch {
    fn read(&mut self, _: &[u8]) {
        self.last_active = Instant::now();
    }

    fn wrote(&mut self, _: &[u8]) {
        self.last_active = Instant::now();
    }

    fn overdue(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return None;
            }
            let due = self.last_active + self.idle;
            if due <= Instant::now() {
                return Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle past --idle-timeout",
                ));
            }
            // Fired, but there was activity since it was set: wait for the rest.
            self.deadline.as_mut().reset(due);
        }
    }
}

/// The layer that times HTTP/1.1 request heads (with
/// [`WrapAcceptor`](super::acceptor::WrapAcceptor)): the first byte of a head starts
/// `--body-read-timeout`, and the time between requests is the idle guard's. hyper's own header
/// timeout also runs while a keep-alive connection waits for its next request, so it closed the
/// API server's pooled connections 10 s after each review; the API server keeps them for 90 s,
/// and a review it sent as the close crossed was lost (its pod, with failurePolicy Ignore,
/// created uninjected).
#[derive(Clone, Copy)]
pub(crate) struct HeadLayer {
    limit: Duration,
}

impl HeadLayer {
    pub(crate) fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

/// Whether a stream was agreed to carry HTTP/2 before its first byte (ALPN).
pub(crate) trait Negotiated {
    fn agreed_http2(&self) -> bool;
}

impl<T> Negotiated for tokio_rustls::server::TlsStream<T> {
    fn agreed_http2(&self) -> bool {
        self.get_ref().1.alpn_protocol() == Some(b"h2")
    }
}

/// Plain TCP has no negotiation: HTTP/1.1, or HTTP/2 told by its preface.
impl<T> Negotiated for Guarded<T> {
    fn agreed_http2(&self) -> bool {
        false
    }
}

impl<T: Negotiated> Wrap<T> for HeadLayer {
    type Wrapped = HeadDeadline<T>;

    fn wrap(&self, stream: T) -> HeadDeadline<T> {
        // HTTP/2 frames are not heads; hyper and the handler time its streams. Without ALPN
        // the client may still speak HTTP/2 (prior knowledge): its preface tells.
        let http1 = !stream.agreed_http2();
        HeadDeadline::new(stream, http1.then_some(self.limit))
    }
}

const HEAD_END: &[u8; 4] = b"\r\n\r\n";

/// How an interim (1xx) answer begins; hyper writes each in one piece.
const INTERIM_STATUS: &[u8] = b"HTTP/1.1 1";

/// What an HTTP/2 client sends first (RFC 9113, section 3.4). hyper serves HTTP/2 on a
/// connection that opens with it, whatever ALPN said.
const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Where the connection stands between the client's bytes and the server's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Between requests (or before the first): nothing is owed, however long it lasts.
    Awaited,
    /// A head has begun: `matched` bytes of its end (CRLF CRLF) seen so far.
    Arriving { since: Instant, matched: usize },
    /// The head is in; the body and the answer are the handler's to time. The next answer
    /// written makes the connection `Awaited` again.
    Received,
}

/// A stream whose HTTP/1.1 request heads must arrive within `limit` of their first byte
/// (`None`: not timed). A pipelined head already read with the one before it is parsed from
/// hyper's buffer, complete, so it needs no timing. A connection that opens with HTTP/2's
/// preface is timed until the preface is in, and not after.
pub(crate) type HeadDeadline<T> = Watched<T, HeadWatch>;

/// The head deadline's state.
pub(crate) struct HeadWatch {
    limit: Option<Duration>,
    head: Head,
    /// How much of the HTTP/2 preface the connection's first bytes have matched; `None` once
    /// they differ. The preface is timed as a head until complete; then nothing is (its frames
    /// would otherwise be read as a head that never ends, and the connection cut while quiet).
    preface: Option<usize>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<T> HeadDeadline<T> {
    fn new(inner: T, limit: Option<Duration>) -> Self {
        let watch = HeadWatch {
            limit,
            head: Head::Awaited,
            preface: Some(0),
            timer: None,
        };
        Self { inner, watch }
    }
}

impl HeadWatch {
    /// Follows an HTTP/1.1 head through `bytes` (never empty) to its CRLF CRLF.
    fn follow_head(&mut self, bytes: &[u8]) {
        let (since, mut matched) = match self.head {
            Head::Received => return,
            Head::Awaited => (None, 0),
            Head::Arriving { since, matched } => (Some(since), matched),
        };
        for &byte in bytes {
            matched = if byte == HEAD_END[matched] {
                matched + 1
            } else if byte == HEAD_END[0] {
                1
            } else {
                0
            };
            if matched == HEAD_END.len() {
                self.head = Head::Received;
                return;
            }
        }
        let since = since.unwrap_or_else(Instant::now);
        self.head = Head::Arriving { since, matched };
    }
}

impl Watch for HeadWatch {
    /// Follows the head (or the HTTP/2 preface) through the bytes.
    fn read(&mut self, bytes: &[u8]) {
        if self.limit.is_none() {
            return;
        }
        if let Some(seen) = self.preface.take() {
            let rest = &HTTP2_PREFACE[seen..];
            let common = rest.len().min(bytes.len());
            if bytes[..common] == rest[..common] {
                if seen + common == HTTP2_PREFACE.len() {
                    self.limit = None;
                    return;
                }
                // Partly in: timed like a head, and its CRLF CRLF in the middle does not end it.
                self.preface = Some(seen + common);
                if self.head == Head::Awaited {
                    self.head = Head::Arriving {
                        since: Instant::now(),
                        matched: 0,
                    };
                }
                return;
            }
            // Not HTTP/2: the bytes held back as its preface were a head's.
            if seen > 0 {
                self.follow_head(&HTTP2_PREFACE[..seen]);
            }
        }
        self.follow_head(bytes);
    }

    /// An answer re-arms the head for the next request, unless it is an interim one: after a
    /// `100 Continue` come the body and then the final answer, and hyper keeps reading (to see
    /// the client hang up) while the handler works, so a body read as a head never ending
    /// would have cut a slow review short.
    fn wrote(&mut self, bytes: &[u8]) {
        if self.head == Head::Received && bytes.starts_with(INTERIM_STATUS) {
            return;
        }
        self.head = Head::Awaited;
    }

    fn overdue(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let (Some(limit), Head::Arriving { since, .. }) = (self.limit, self.head) else {
            return None;
        };
        let due = since + limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        timer.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "request head not received within --body-read-timeout of its first byte",
            )
        })
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

    const HEAD_LIMIT: Duration = Duration::from_secs(1);

    fn head_pair(limit: Option<Duration>) -> (HeadDeadline<DuplexStream>, DuplexStream) {
        let (server, client) = tokio::io::duplex(256);
        (HeadDeadline::new(server, limit), client)
    }

    /// A stream whose ALPN outcome is set by the test.
    struct Alpn {
        h2: bool,
    }

    impl Negotiated for Alpn {
        fn agreed_http2(&self) -> bool {
            self.h2
        }
    }

    #[test]
    fn the_head_layer_times_heads_unless_http2_was_agreed() {
        let layer = HeadLayer::new(HEAD_LIMIT);
        assert_eq!(layer.wrap(Alpn { h2: false }).watch.limit, Some(HEAD_LIMIT));
        assert_eq!(layer.wrap(Alpn { h2: true }).watch.limit, None);
    }

    /// Reads on `server` until it fails or `within` passes: the error's kind, if any.
    async fn read_failure(
        server: &mut HeadDeadline<DuplexStream>,
        within: Duration,
    ) -> Option<io::ErrorKind> {
        let mut bytes = [0u8; 64];
        let reads = async {
            loop {
                if let Err(e) = server.read(&mut bytes).await {
                    return e.kind();
                }
            }
        };
        tokio::time::timeout(within, reads).await.ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_head_is_timed_from_its_first_byte_never_between_requests() {
        let (mut server, mut client) = head_pair(Some(HEAD_LIMIT));
        // Before the first request, and between requests, a keep-alive connection may wait
        // as long as it likes (the idle guard under TLS bounds that).
        assert_eq!(read_failure(&mut server, 10 * HEAD_LIMIT).await, None);

        // A head that ends in the next read: received, so its body may take its own time.
        client
            .write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\n\r")
            .await
            .unwrap();
        client.write_all(b"\n{").await.unwrap();
        assert_eq!(read_failure(&mut server, 10 * HEAD_LIMIT).await, None);
        // The answer goes out: the connection waits for the next request, untimed.
        server.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        assert_eq!(read_failure(&mut server, 10 * HEAD_LIMIT).await, None);

        // A head that trickles in, a byte every 300 ms: cut a second after its first byte,
        // though bytes keep coming.
        let started = Instant::now();
        let trickle = tokio::spawn(async move {
            for byte in b"POST /mutate HTTP/1.1\r\nHost: x\r\n".iter().cycle() {
                if client.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        assert_eq!(
            read_failure(&mut server, 10 * HEAD_LIMIT).await,
            Some(io::ErrorKind::TimedOut)
        );
        assert_eq!(started.elapsed(), HEAD_LIMIT);
        drop(server);
        trickle.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn after_100_continue_the_body_is_not_a_head() {
        let (mut server, mut client) = head_pair(Some(HEAD_LIMIT));
        client
            .write_all(
                b"POST /mutate HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n",
            )
            .await
            .unwrap();
        assert_eq!(read_failure(&mut server, HEAD_LIMIT / 2).await, None);
        server
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .unwrap();
        // The body, then a review slower than the limit while hyper still reads.
        client.write_all(b"{\"a\":\"b\"}").await.unwrap();
        assert_eq!(read_failure(&mut server, 10 * HEAD_LIMIT).await, None);
        // The final answer re-arms (its first slice after an empty one, as vectored writes
        // may come): the next head is timed again.
        let answer = b"HTTP/1.1 200 OK\r\n\r\n";
        let written = server
            .write_vectored(&[io::IoSlice::new(b""), io::IoSlice::new(answer)])
            .await
            .unwrap();
        assert_eq!(written, answer.len());
        client
            .write_all(b"POST /mutate HTTP/1.1\r\n")
            .await
            .unwrap();
        assert_eq!(
            read_failure(&mut server, 10 * HEAD_LIMIT).await,
            Some(io::ErrorKind::TimedOut)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_connection_is_not_timed_by_heads() {
        let (mut server, mut client) = head_pair(None);
        client.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        assert_eq!(read_failure(&mut server, 10 * HEAD_LIMIT).await, None);
    }

    /// An empty SETTINGS frame: a client's first frame after the preface.
    const SETTINGS_FRAME: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];

    #[tokio::test(start_paused = true)]
    async fn without_alpn_an_http2_preface_ends_the_timing_once_it_is_in() {
        let (mut server, mut client) = head_pair(Some(HEAD_LIMIT));
        // The preface in two reads, split after its inner CRLF CRLF, then frames that never
        // contain one: the connection may then stay quiet, as HTTP/2 connections do.
        client.write_all(&HTTP2_PREFACE[..18]).await.unwrap();
        assert_eq!(read_failure(&mut server, HEAD_LIMIT / 2).await, None);
        client.write_all(&HTTP2_PREFACE[18..]).await.unwrap();
        client.write_all(&SETTINGS_FRAME).await.unwrap();
        assert_eq!(read_failure(&mut server, HEAD_LIMIT / 2).await, None);
        // The server's SETTINGS, and the client's acknowledgement after it: as HTTP/1.1 that
        // would be the first bytes of a head.
        server.write_all(&SETTINGS_FRAME).await.unwrap();
        client.write_all(&SETTINGS_FRAME).await.unwrap();
        assert_eq!(read_failure(&mut server, 10 * HEAD_LIMIT).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_preface_begun_and_never_finished_is_cut_like_a_head() {
        let (mut server, mut client) = head_pair(Some(HEAD_LIMIT));
        let started = Instant::now();
        // Its CRLF CRLF would end an HTTP/1.1 head; here it does not.
        client.write_all(&HTTP2_PREFACE[..18]).await.unwrap();
        assert_eq!(
            read_failure(&mut server, 10 * HEAD_LIMIT).await,
            Some(io::ErrorKind::TimedOut)
        );
        assert_eq!(started.elapsed(), HEAD_LIMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_that_began_like_the_preface_count_towards_an_http1_head() {
        // "P" of POST, then the rest: an HTTP/1.1 head received whole, so not timed.
        let (mut server, mut client) = head_pair(Some(HEAD_LIMIT));
        client.write_all(b"P").await.unwrap();
        // Read apart (the duplex would hand over both writes in one read).
        assert_eq!(read_failure(&mut server, HEAD_LIMIT / 2).await, None);
        client
            .write_all(b"OST /mutate HTTP/1.1\r\nHost: x\r\n\r\n{")
            .await
            .unwrap();
        assert_eq!(read_failure(&mut server, 10 * HEAD_LIMIT).await, None);

        // The preface up to its inner CRLF CRLF, then not HTTP/2: as HTTP/1.1 that was a
        // whole head (hyper answers it with an error), so nothing more is timed.
        let (mut server, mut client) = head_pair(Some(HEAD_LIMIT));
        client.write_all(&HTTP2_PREFACE[..18]).await.unwrap();
        assert_eq!(read_failure(&mut server, HEAD_LIMIT / 2).await, None);
        client.write_all(b"X").await.unwrap();
        assert_eq!(read_failure(&mut server, 10 * HEAD_LIMIT).await, None);
    }
}
