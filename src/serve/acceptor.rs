//! One acceptor shape for a layer put on an accepted stream (the head deadline): accept with
//! the acceptor below, then wrap what it gave. Each layer says only how it wraps a stream.

use std::future::Future;
use std::io;
use std::pin::Pin;

use axum_server::accept::Accept;

/// How a layer wraps each stream an acceptor accepted. Cloned into each accept.
pub(crate) trait Wrap<T>: Clone {
    type Wrapped;
    fn wrap(&self, stream: T) -> Self::Wrapped;
}

/// Accepts with `inner`, then wraps the stream with `layer`; the service passes through.
#[derive(Clone)]
pub(crate) struct WrapAcceptor<A, W> {
    inner: A,
    layer: W,
}

impl<A, W> WrapAcceptor<A, W> {
    pub(crate) fn new(inner: A, layer: W) -> Self {
        Self { inner, layer }
    }
}

impl<A, W, I, S> Accept<I, S> for WrapAcceptor<A, W>
where
    A: Accept<I, S>,
    A::Future: Send + 'static,
    W: Wrap<A::Stream> + Send + 'static,
{
    type Stream = W::Wrapped;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let layer = self.layer.clone();
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            Ok((layer.wrap(stream), service))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum_server::accept::DefaultAcceptor;

    /// Tags a stream with a label, so that the order of layers shows.
    #[derive(Clone)]
    struct Tag(&'static str);

    impl Wrap<String> for Tag {
        type Wrapped = String;
        fn wrap(&self, stream: String) -> String {
            format!("{}({stream})", self.0)
        }
    }

    /// Fails every accept, as the connection cap does when it is reached.
    #[derive(Clone)]
    struct Refusing;

    impl Accept<String, ()> for Refusing {
        type Stream = String;
        type Service = ();
        type Future = std::future::Ready<io::Result<(String, ())>>;
        fn accept(&self, _: String, _: ()) -> Self::Future {
            std::future::ready(Err(io::Error::other("cap reached")))
        }
    }

    #[tokio::test]
    async fn layers_wrap_from_the_inside_out_and_the_service_passes_through() {
        let acceptor = WrapAcceptor::new(
            WrapAcceptor::new(DefaultAcceptor, Tag("inner")),
            Tag("outer"),
        );
        let (stream, service) = acceptor.accept("tcp".to_string(), 7u8).await.unwrap();
        assert_eq!(stream, "outer(inner(tcp))");
        assert_eq!(service, 7);
    }

    #[tokio::test]
    async fn a_refused_accept_stays_refused_and_is_not_wrapped() {
        let acceptor = WrapAcceptor::new(Refusing, Tag("outer"));
        let error = acceptor.accept("tcp".to_string(), ()).await.unwrap_err();
        assert_eq!(error.to_string(), "cap reached");
    }
}
