//! TCP listeners with the kernel's whole accept queue, as Go's `net.Listen`
//! opens them.
//!
//! A socket's listen backlog bounds the connections the kernel completes
//! before the process accepts them; past it, a SYN is dropped and the client
//! retries after 1, 3, 7, 15, 31 s. tokio's `TcpListener::bind` (through the
//! standard library) asks for 128, kube-apiserver for `net.core.somaxconn`
//! (4096 on current kernels): a fleet of kubelets reconnecting at once, a
//! few hundred TLS handshakes in flight on a busy tier, overflowed 128 and
//! left some kubelets half a minute behind the rest (`make bench-scale`'s
//! storm: a 31-34 s tail through watchmux, none direct).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::{TcpListener, TcpSocket};

/// Go's `maxListenerBacklog` on Linux: `net.core.somaxconn`, at most 65,535
/// (the kernel keeps the backlog in 16 bits on older versions); 4096 when
/// it cannot be read (the kernel's default since 5.4).
pub(crate) fn listen_backlog() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|n| *n > 0)
        .map_or(4096, |n| n.min(65_535))
}

/// Binds `addr` and listens with [`listen_backlog`], with `SO_REUSEADDR` as
/// the standard library sets it (a restart while old connections linger in
/// TIME_WAIT binds again at once). `[::]` (what `--listen=:7443` means) on a
/// host without IPv6 is every IPv4 address instead, as Go's `net.Listen`
/// falls back.
pub(crate) fn bind_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    match bind_exactly(addr) {
        Err(err) if addr.ip() == Ipv6Addr::UNSPECIFIED && no_ipv6_here(&err) => {
            bind_exactly(SocketAddr::from((Ipv4Addr::UNSPECIFIED, addr.port())))
        }
        bound => bound,
    }
}

fn bind_exactly(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(listen_backlog())
}

/// An IPv6 socket cannot be made (the kernel has no IPv6: EAFNOSUPPORT, 97
/// on Linux) or `[::]` bound (IPv6 disabled on every interface).
fn no_ipv6_here(err: &std::io::Error) -> bool {
    const EAFNOSUPPORT: i32 = 97;
    err.raw_os_error() == Some(EAFNOSUPPORT)
        || matches!(err.kind(), std::io::ErrorKind::AddrNotAvailable | std::io::ErrorKind::Unsupported)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// More clients than the standard library's 128 connect at once while
    /// nothing accepts (a busy process): the kernel completes every
    /// handshake into the queue at once, none waits for a SYN retry (1 s).
    #[tokio::test]
    async fn connections_past_128_queue_while_nothing_accepts() {
        assert!(listen_backlog() > 128, "somaxconn here: {}", listen_backlog());
        let listener = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..300).map(|_| {
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(700), tokio::net::TcpStream::connect(addr)).await
            })
        });
        let mut connected = Vec::new();
        for c in connects {
            connected.push(c.await.unwrap().expect("connected without a SYN retry").unwrap());
        }
        assert_eq!(connected.len(), 300);
        // And they are there to accept, in order.
        let (first, _) = listener.accept().await.unwrap();
        assert_eq!(first.peer_addr().unwrap().ip(), addr.ip());
    }

    #[tokio::test]
    async fn an_address_in_use_is_an_error_and_port_0_picks_one() {
        let listener = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        assert!(bind_tcp(addr).is_err(), "a second listener on the same port");
    }

    /// `--listen=:0`, Go's every address: an IPv4 client reaches it, through
    /// the kernel's IPv4-mapped addresses on a dual-stack host or the IPv4
    /// fallback on one without IPv6.
    #[tokio::test]
    async fn every_address_takes_ipv4_clients_too() {
        let every = crate::go_rules::net::parse_listen_address(":0").unwrap();
        let listener = bind_tcp(every).unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await.unwrap();
        let (_, peer) = listener.accept().await.unwrap();
        assert_eq!(peer.port(), client.local_addr().unwrap().port());
    }
}
