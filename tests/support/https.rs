//! A real HTTPS client on the same stack as the server (rustls with ring, hyper): one
//! keep-alive HTTP/1.1 connection per `Connection`, as the apiserver uses them, and HTTP/2
//! connections (`H2Connection`) as a Go client negotiates them.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    h2_connector: TlsConnector,
    no_alpn_connector: TlsConnector,
}

impl TlsClient {
    /// Trusts every CA given (PEM).
    pub fn new(ca_pems: &[&[u8]]) -> Self {
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let mut roots = RootCertStore::empty();
        for pem in ca_pems {
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots.add(cert.expect("CA PEM")).expect("CA certificate");
            }
        }
        let config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let with_alpn = |protocols: &[&[u8]]| {
            let mut config = config.clone();
            config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
            TlsConnector::from(Arc::new(config))
        };
        Self {
            connector: with_alpn(&[b"http/1.1"]),
            h2_connector: with_alpn(&[b"h2"]),
            no_alpn_connector: with_alpn(&[]),
        }
    }

    /// A TLS stream to write raw HTTP on (slow clients, requests in flight).
    pub async fn connect_tls(&self, addr: SocketAddr) -> io::Result<TlsStream<TcpStream>> {
        tls_over(&self.connector, addr).await
    }

    /// A TLS stream that offers no ALPN protocol, to write raw HTTP/2 frames on.
    pub async fn connect_tls_without_alpn(
        &self,
        addr: SocketAddr,
    ) -> io::Result<TlsStream<TcpStream>> {
        tls_over(&self.no_alpn_connector, addr).await
    }

    pub async fn connect(&self, addr: SocketAddr) -> io::Result<Connection> {
        let tls = self.connect_tls(addr).await?;
        let peer_certificate = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|cert| cert.as_ref().to_vec())
            .unwrap_or_default();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(connection);
        Ok(Connection {
            sender,
            peer_certificate,
        })
    }
}

impl TlsClient {
    /// An HTTP/2 connection (ALPN `h2`).
    pub async fn connect_h2(&self, addr: SocketAddr) -> io::Result<H2Connection> {
        Self::h2_over(&self.h2_connector, addr).await
    }

    /// An HTTP/2 connection over TLS without ALPN: the client knows the server speaks it.
    pub async fn connect_h2_prior_knowledge(&self, addr: SocketAddr) -> io::Result<H2Connection> {
        Self::h2_over(&self.no_alpn_connector, addr).await
    }

    async fn h2_over(connector: &TlsConnector, addr: SocketAddr) -> io::Result<H2Connection> {
        let tls = tls_over(connector, addr).await?;
        let (sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(tls),
        )
        .await
        .map_err(io::Error::other)?;
        tokio::spawn(connection);
        Ok(H2Connection { sender })
    }
}

async fn tls_over(connector: &TlsConnector, addr: SocketAddr) -> io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost").expect("a DNS name");
    connector.connect(name, tcp).await
}

type StreamedBody = http_body_util::StreamBody<
    futures::stream::Iter<std::vec::IntoIter<Result<hyper::body::Frame<Bytes>, io::Error>>>,
>;

pub struct H2Connection {
    sender:
        hyper::client::conn::http2::SendRequest<http_body_util::Either<Full<Bytes>, StreamedBody>>,
}

impl H2Connection {
    /// Whether the server closed the connection.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// POSTs `body` in one piece (its length declared), or, with `streamed`, in 64 KiB DATA
    /// frames without a length.
    pub async fn post(
        &mut self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
        streamed: bool,
    ) -> io::Result<(StatusCode, Bytes)> {
        let body = if streamed {
            let frames: Vec<Result<hyper::body::Frame<Bytes>, io::Error>> = body
                .chunks(64 * 1024)
                .map(|c| Ok(hyper::body::Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            http_body_util::Either::Right(http_body_util::StreamBody::new(futures::stream::iter(
                frames,
            )))
        } else {
            http_body_util::Either::Left(Full::new(Bytes::from(body)))
        };
        let request = Request::post(format!("https://localhost{path}"))
            .header("content-type", content_type)
            .body(body)
            .expect("a valid request");
        self.sender.ready().await.map_err(io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(io::Error::other)?;
        status_and_body(response).await
    }
}

pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    /// DER of the certificate the server presented in this connection's handshake.
    pub peer_certificate: Vec<u8>,
}

impl Connection {
    pub async fn post(
        &mut self,
        path: &str,
        content_type: &str,
        body: impl Into<Bytes>,
    ) -> io::Result<(StatusCode, Bytes)> {
        let request = Request::post(path)
            .header("host", "localhost")
            .header("content-type", content_type)
            .body(Full::new(body.into()))
            .expect("a valid request");
        self.send(request).await
    }

    pub async fn get(&mut self, path: &str) -> io::Result<(StatusCode, Bytes)> {
        let request = Request::get(path)
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        self.send(request).await
    }

    async fn send(&mut self, request: Request<Full<Bytes>>) -> io::Result<(StatusCode, Bytes)> {
        self.sender.ready().await.map_err(io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(io::Error::other)?;
        status_and_body(response).await
    }
}

/// A response's status and whole body.
async fn status_and_body(
    response: hyper::Response<hyper::body::Incoming>,
) -> io::Result<(StatusCode, Bytes)> {
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(io::Error::other)?
        .to_bytes();
    Ok((status, body))
}
