//! Socket reads in blocks larger than rustls asks for. rustls reads at most 4 KB at a time, so
//! an 8 KB review took three `recvfrom` calls, each a system call with the socket's lock; read
//! ahead, it takes one, and rustls gets the rest from memory.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One full TLS record (16 KB of payload and its header and tag) fits, and so does the
/// largest review the API server sends in one go in practice.
pub const READ_AHEAD_BYTES: usize = 16 * 1024 + 512;

/// A stream whose reads are served from a buffer filled by one large read of the inner stream.
/// The buffer is allocated at the first small read and kept with the connection (the cap on
/// connections bounds their number); writes pass through.
pub struct ReadAhead<T> {
    inner: T,
    buffer: Box<[u8]>,
    start: usize,
    end: usize,
}

impl<T> ReadAhead<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            buffer: Box::default(),
            start: 0,
            end: 0,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ReadAhead<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.start == this.end {
            // A read as large as the buffer gains nothing from it.
            if buf.remaining() >= READ_AHEAD_BYTES {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.buffer.is_empty() {
                this.buffer = vec![0; READ_AHEAD_BYTES].into_boxed_slice();
            }
            let mut ahead = ReadBuf::new(&mut this.buffer);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut ahead))?;
            // Nothing read is the end of the stream, passed on as nothing copied.
            (this.start, this.end) = (0, ahead.filled().len());
        }
        let n = (this.end - this.start).min(buf.remaining());
        buf.put_slice(&this.buffer[this.start..this.start + n]);
        this.start += n;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ReadAhead<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
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

/// The acceptor that puts [`ReadAhead`] under what reads the accepted stream (TLS).
#[derive(Clone)]
pub struct ReadAheadAcceptor<A> {
    inner: A,
}

impl<A> ReadAheadAcceptor<A> {
    pub fn new(inner: A) -> Self {
        Self { inner }
    }
}

impl<A, I, S> Accept<I, S> for ReadAheadAcceptor<A>
where
    A: Accept<I, S>,
    A::Future: Send + 'static,
{
    type Stream = ReadAhead<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            Ok((ReadAhead::new(stream), service))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Hands out its chunks one per read, as a socket hands out what has arrived, and counts
    /// the reads.
    struct Chunks {
        chunks: Vec<Vec<u8>>,
        reads: usize,
    }

    impl AsyncRead for Chunks {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            this.reads += 1;
            if !this.chunks.is_empty() {
                let chunk = &mut this.chunks[0];
                let n = chunk.len().min(buf.remaining());
                buf.put_slice(&chunk[..n]);
                chunk.drain(..n);
                if chunk.is_empty() {
                    this.chunks.remove(0);
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[tokio::test]
    async fn a_review_read_4_kb_at_a_time_takes_one_read_of_the_socket_and_loses_no_byte() {
        let (review, next) = (bytes(8_400, 1), bytes(3_000, 2));
        let mut stream = ReadAhead::new(Chunks {
            chunks: vec![review.clone(), next.clone()],
            reads: 0,
        });
        let mut read = Vec::new();
        let mut block = [0u8; 4096];
        while read.len() < review.len() {
            let n = stream.read(&mut block).await.unwrap();
            assert!(n > 0, "the stream ended early");
            read.extend_from_slice(&block[..n]);
        }
        assert_eq!(read, review);
        assert_eq!(
            stream.get_ref().reads,
            1,
            "reads of the socket for one review"
        );
        // What arrives next is read once more, and then the end of the stream is nothing.
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, next);
        assert_eq!(stream.get_ref().reads, 3);
    }

    #[tokio::test]
    async fn a_read_as_large_as_the_buffer_goes_straight_to_the_socket() {
        let body = bytes(READ_AHEAD_BYTES + 100, 3);
        let mut stream = ReadAhead::new(Chunks {
            chunks: vec![body.clone()],
            reads: 0,
        });
        let mut large = vec![0u8; READ_AHEAD_BYTES + 100];
        let n = stream.read(&mut large).await.unwrap();
        assert_eq!(&large[..n], &body[..n]);
        assert_eq!(n, body.len());
        assert!(stream.buffer.is_empty(), "no buffer was needed");
    }
}
