//! Socket reads in blocks larger than rustls asks for. rustls reads at most 4 KB at a time, so
//! an 8 KB review took three `recvfrom` calls, each a system call with the socket's lock; read
//! ahead, it takes one, and rustls gets the rest from memory.

use tokio::io::{AsyncRead, BufReader};

use super::acceptor::Wrap;

/// A full TLS record (16 KB of payload, its header and tag) fits. Each connection keeps one
/// such buffer from its accept (`--max-connections` bounds their number).
pub const READ_AHEAD_BYTES: usize = 16 * 1024 + 512;

/// A stream read through a buffer of [`READ_AHEAD_BYTES`]: a small read fills it with one read
/// of the stream and is served from it, a read as large as the buffer goes straight through,
/// and writes pass through.
pub type ReadAhead<T> = BufReader<T>;

/// The layer that puts [`ReadAhead`] under what reads the accepted stream (TLS); used with
/// [`WrapAcceptor`](super::acceptor::WrapAcceptor).
#[derive(Clone, Copy)]
pub struct ReadAheadLayer;

impl<T: AsyncRead> Wrap<T> for ReadAheadLayer {
    type Wrapped = ReadAhead<T>;
    fn wrap(&self, stream: T) -> ReadAhead<T> {
        BufReader::with_capacity(READ_AHEAD_BYTES, stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::{AsyncReadExt, AsyncWrite, ReadBuf};

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
        let mut stream = ReadAheadLayer.wrap(Chunks {
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
        let mut stream = ReadAheadLayer.wrap(Chunks {
            chunks: vec![body.clone()],
            reads: 0,
        });
        let mut large = vec![0u8; READ_AHEAD_BYTES + 100];
        let n = stream.read(&mut large).await.unwrap();
        assert_eq!(n, body.len(), "one read of the socket takes it all");
        assert_eq!(large, body);
        assert_eq!(stream.get_ref().reads, 1);
    }

    /// rustls hands its records over as one vectored write, which must reach the socket as one.
    #[tokio::test]
    async fn writes_stay_vectored() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        assert!(socket.is_write_vectored());
        assert!(ReadAheadLayer.wrap(socket).is_write_vectored());
    }
}
