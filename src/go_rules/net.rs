//! A listen address as Go's `net.Listen("tcp", address)` reads one (Go 1.26,
//! `src/net/ipsock.go` `SplitHostPort`, `src/net/dial.go` `Listen`), the
//! syntax of every Kubernetes component's `--bind-address`-style flags and
//! of a Go server's `:6443`. Rust's `SocketAddr` parse needs a host, so
//! `--listen=:6443` would be refused where the Go habit means "every
//! address".
//!
//! An empty host is `[::]`: every IPv6 address and, where the kernel maps
//! IPv4 onto an IPv6 socket (Linux's default, `net.ipv6.bindv6only=0`),
//! every IPv4 one too, as Go's dual-stack listener; a host without IPv6
//! falls back to `0.0.0.0` when the socket is bound
//! (`server::connection::backlog::bind_tcp`). Host names are not resolved
//! (Go would): an address to listen on is an IP literal here, so that what
//! the trust checks see is what is bound.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// `host:port`, `[ipv6]:port` or `:port` (every address) to the address
/// to bind; the port is decimal, 0 to 65535 (0: any free port).
pub(crate) fn parse_listen_address(address: &str) -> Result<SocketAddr, String> {
    let (host, port) = split_host_port(address)?;
    let port: u16 = if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        port.parse().map_err(|_| format!("{address:?}: port {port} is over 65535"))?
    } else {
        return Err(format!("{address:?}: the port must be a number, e.g. :7443"));
    };
    if host.is_empty() {
        return Ok(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)));
    }
    let ip: IpAddr = host.parse().map_err(|_| {
        format!("{address:?}: {host:?} is not an IP address (host names are not resolved; none means every address)")
    })?;
    Ok(SocketAddr::from((ip, port)))
}

/// `net.SplitHostPort`: the host in brackets when it has colons (an IPv6
/// literal), the port after the last colon; `::1:80` (colons without
/// brackets) and a missing port are errors, as Go's.
fn split_host_port(address: &str) -> Result<(&str, &str), String> {
    let missing_port = || format!("{address:?}: missing port, e.g. 127.0.0.1:7443 or :7443");
    if let Some(bracketed) = address.strip_prefix('[') {
        let (host, rest) = bracketed.split_once(']').ok_or_else(|| format!("{address:?}: missing ']'"))?;
        let port = rest.strip_prefix(':').ok_or_else(missing_port)?;
        return Ok((host, port));
    }
    let (host, port) = address.rsplit_once(':').ok_or_else(missing_port)?;
    if host.contains(':') {
        return Err(format!("{address:?}: too many colons; an IPv6 address goes in brackets, [::1]:7443"));
    }
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_host_is_every_address_as_in_go() {
        let every = parse_listen_address(":6443").unwrap();
        assert!(every.ip().is_unspecified() && every.is_ipv6(), "{every}");
        assert_eq!(every.port(), 6443);
        assert_eq!(parse_listen_address(":0").unwrap().port(), 0);
    }

    #[test]
    fn ip_literals_keep_their_host() {
        for (spelled, want) in [
            ("127.0.0.1:7443", "127.0.0.1:7443"),
            ("0.0.0.0:7443", "0.0.0.0:7443"),
            ("[::]:6443", "[::]:6443"),
            ("[::1]:7443", "[::1]:7443"),
            ("[127.0.0.1]:80", "127.0.0.1:80"),
        ] {
            assert_eq!(parse_listen_address(spelled), Ok(want.parse().unwrap()), "{spelled}");
        }
    }

    #[test]
    fn what_go_refuses_or_would_resolve_is_refused() {
        for (spelled, why) in [
            ("6443", "missing port"),
            ("127.0.0.1", "missing port"),
            ("::1:7443", "too many colons"),
            ("[::1]7443", "missing port"),
            ("[::1:7443", "missing ']'"),
            (":", "must be a number"),
            (":https", "must be a number"),
            (":-1", "must be a number"),
            (":65536", "over 65535"),
            ("localhost:7443", "not an IP address"),
            ("", "missing port"),
        ] {
            let err = parse_listen_address(spelled).unwrap_err();
            assert!(err.contains(why), "{spelled:?}: {err}");
        }
    }
}
