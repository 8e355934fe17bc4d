//! The watch clients: where a side's watches go, and HTTP/2 or HTTP/1.1
//! connections to it (TLS with the admin token straight at kube-apiserver;
//! plain text to watchmux, h2c by prior knowledge, or TLS when it serves TLS).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::bail;
use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Shape {
    /// Many watches multiplexed over each HTTP/2 connection (as client-go does).
    H2,
    /// One HTTP/1.1 connection per watcher (as separate kubelets would hold).
    H1,
}

impl std::str::FromStr for Shape {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "h2" => Ok(Shape::H2),
            "h1" => Ok(Shape::H1),
            other => bail!("shape {other:?}: h2 or h1"),
        }
    }
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::H2 => "h2",
            Shape::H1 => "h1",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SideKind {
    Direct,
    Watchmux,
}

impl std::str::FromStr for SideKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "direct" => Ok(SideKind::Direct),
            "watchmux" => Ok(SideKind::Watchmux),
            other => bail!("side {other:?}: direct or watchmux"),
        }
    }
}

impl SideKind {
    pub fn name(self) -> &'static str {
        match self {
            SideKind::Direct => "direct",
            SideKind::Watchmux => "watchmux",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            SideKind::Direct => "direct",
            SideKind::Watchmux => "through watchmux",
        }
    }
}

/// Where the watches of one side go.
#[derive(Clone)]
pub enum Target {
    Direct {
        addr: SocketAddr,
        tls_h2: Arc<rustls::ClientConfig>,
        tls_h1: Arc<rustls::ClientConfig>,
        auth: HeaderValue,
    },
    /// watchmux; `tls` (for HTTP/2, for HTTP/1.1) when it serves TLS.
    Proxy {
        addr: SocketAddr,
        tls: Option<(Arc<rustls::ClientConfig>, Arc<rustls::ClientConfig>)>,
    },
}

/// `FANOUT_RCVBUF`: a fixed SO_RCVBUF for the watch connections (a diagnostic;
/// unset, the kernel autotunes it as it does for any client).
fn rcvbuf() -> Option<u32> {
    static RCVBUF: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *RCVBUF.get_or_init(|| std::env::var("FANOUT_RCVBUF").ok().and_then(|v| v.parse().ok()))
}

impl Target {
    pub fn addr(&self) -> SocketAddr {
        match self {
            Target::Direct { addr, .. } | Target::Proxy { addr, .. } => *addr,
        }
    }

    /// A GET; absolute-form URI for HTTP/2 (it needs :scheme and
    /// :authority), origin-form with Host for HTTP/1.1.
    pub fn request(&self, shape: Shape, path_and_query: &str) -> Request<Empty<Bytes>> {
        let addr = self.addr();
        let tls = matches!(self, Target::Direct { .. } | Target::Proxy { tls: Some(_), .. });
        let scheme = if tls { "https" } else { "http" };
        let uri = match shape {
            Shape::H2 => format!("{scheme}://{addr}{path_and_query}"),
            Shape::H1 => path_and_query.to_owned(),
        };
        let mut b = Request::get(uri).header("accept", "application/json");
        if shape == Shape::H1 {
            b = b.header("host", addr.to_string());
        }
        if let Target::Direct { auth, .. } = self {
            b = b.header("authorization", auth.clone());
        }
        b.body(Empty::new()).expect("valid request")
    }

    /// One new connection of the given shape.
    pub async fn connect(&self, shape: Shape) -> anyhow::Result<Sender> {
        let tcp = match rcvbuf() {
            None => TcpStream::connect(self.addr()).await?,
            Some(size) => {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.set_recv_buffer_size(size)?;
                socket.connect(self.addr()).await?
            }
        };
        tcp.set_nodelay(true)?;
        match self {
            Target::Direct { tls_h2, tls_h1, .. } => {
                let tls = if shape == Shape::H2 { tls_h2 } else { tls_h1 };
                let stream = tls_connect(tls.clone(), tcp).await?;
                handshake(stream, shape).await
            }
            Target::Proxy { tls: Some((tls_h2, tls_h1)), .. } => {
                let tls = if shape == Shape::H2 { tls_h2 } else { tls_h1 };
                let stream = tls_connect(tls.clone(), tcp).await?;
                handshake(stream, shape).await
            }
            Target::Proxy { tls: None, .. } => handshake(tcp, shape).await,
        }
    }
}

pub async fn tls_connect(
    tls: Arc<rustls::ClientConfig>,
    tcp: TcpStream,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let name = ServerName::IpAddress(tcp.peer_addr()?.ip().into());
    Ok(tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await?)
}

/// One connection's request sender; an HTTP/2 one is cloned for every watch it carries.
#[derive(Clone)]
pub enum Sender {
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
    H1(Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Empty<Bytes>>>>),
}

impl Sender {
    pub async fn send(&self, req: Request<Empty<Bytes>>) -> anyhow::Result<http::Response<Incoming>> {
        Ok(match self {
            Sender::H2(s) => {
                let mut s = s.clone();
                s.ready().await?;
                s.send_request(req).await?
            }
            Sender::H1(s) => {
                let mut s = s.lock().await;
                s.ready().await?;
                s.send_request(req).await?
            }
        })
    }

    /// The connection is gone (an HTTP/1.1 one may also just be busy: not closed).
    pub fn is_closed(&self) -> bool {
        match self {
            Sender::H2(s) => s.is_closed(),
            Sender::H1(s) => s.try_lock().map(|s| s.is_closed()).unwrap_or(false),
        }
    }
}

pub async fn handshake<T>(io: T, shape: Shape) -> anyhow::Result<Sender>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    Ok(match shape {
        Shape::H2 => {
            // client-go's HTTP/2 health check (ReadIdleTimeout 30 s, then a
            // PING answered within 15 s): a frozen server is given up after
            // about that long, as a real client would.
            let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(std::time::Duration::from_secs(30))
                .keep_alive_timeout(std::time::Duration::from_secs(15))
                .handshake(TokioIo::new(io))
                .await?;
            tokio::spawn(conn);
            Sender::H2(send)
        }
        Shape::H1 => {
            let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
            tokio::spawn(conn);
            Sender::H1(Arc::new(tokio::sync::Mutex::new(send)))
        }
    })
}

/// Reads the server's first SETTINGS frame and returns its
/// SETTINGS_MAX_CONCURRENT_STREAMS (None: not sent, i.e. unlimited).
pub async fn advertised_max_streams<T: AsyncRead + AsyncWrite + Unpin>(mut io: T) -> anyhow::Result<Option<u32>> {
    io.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
    io.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await?; // empty SETTINGS
    io.flush().await?;
    for _ in 0..8 {
        let mut head = [0u8; 9];
        io.read_exact(&mut head).await?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        io.read_exact(&mut payload).await?;
        if head[3] == 4 && head[4] & 1 == 0 {
            return Ok(payload.chunks_exact(6).find_map(|s| {
                (u16::from_be_bytes([s[0], s[1]]) == 3).then(|| u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
            }));
        }
    }
    bail!("no SETTINGS frame from the server")
}
