//! What a connection to the TLS port gets when it does not open with TLS,
//! against the real API server: each opening is sent raw on a new TCP
//! connection straight to kube-apiserver and to watchmux serving TLS, the
//! client's write side then closed, and every byte the server writes before
//! it closes is compared.
//!
//! The answers come from Go's HTTPS server before any TLS: plain HTTP gets
//! `HTTP/1.0 400` and a sentence, other non-TLS openings get nothing, an
//! SSLv2 hello and a record over TLS's limit get one alert. A first record
//! that is a handshake record but no ClientHello fails inside the handshake,
//! rustls's and not Go's: Go says `unexpected_message` to an empty one and
//! `internal_error` to a message longer than it takes, rustls `decode_error`
//! or nothing (it closes). Those rows check that both sides refuse the same
//! way in kind (nothing, or one fatal alert, then the end), not the alert.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::adversarial::socket;
use crate::auth::{cluster_api, cluster_file};
use crate::env::*;

/// Sends `opening` on a new connection, closes the write side, and returns
/// everything the server writes until it closes. With the write side closed
/// every server sees the end, partial openings included: one that still
/// holds the connection after 5 s fails the test.
async fn answer(addr: SocketAddr, opening: &[u8]) -> Vec<u8> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(opening).await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "{addr}: the server kept the connection open after {opening:?}");
    answer
}

/// A TLS record: its header (type, version, length) and `body`.
fn record(content_type: u8, version: [u8; 2], body: &[u8]) -> Vec<u8> {
    let mut record = vec![content_type, version[0], version[1]];
    record.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    record.extend_from_slice(body);
    record
}

#[tokio::test]
async fn openings_that_are_not_tls_get_the_api_servers_answer() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let crt = cluster_file(&cluster, "apiserver.crt");
    let key = cluster_file(&cluster, "apiserver.key");
    let wm = Watchmux::start(
        &cluster,
        &["--tls-cert-file", crt.to_str().unwrap(), "--tls-private-key-file", key.to_str().unwrap()],
    )
    .await;
    let api = socket(&cluster_api(&cluster));

    let mut oversized = vec![0x16, 0x03, 0x01, 0xff, 0xff];
    oversized.extend_from_slice(&[0; 64]);
    let hello_of_garbage = record(0x16, [3, 1], &[0xee; 64]);
    // (row, opening, compare the exact bytes: else both must only refuse)
    let rows: Vec<(&str, Vec<u8>, bool)> = vec![
        ("GET, plain HTTP", b"GET /api/v1/pods HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(), true),
        ("HEAD, plain HTTP", b"HEAD /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(), true),
        ("POST, plain HTTP", b"POST /api/v1/namespaces HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}".to_vec(), true),
        ("PUT, plain HTTP", b"PUT /api/v1/namespaces/x HTTP/1.1\r\n\r\n".to_vec(), true),
        ("OPTIONS, plain HTTP", b"OPTIONS * HTTP/1.1\r\n\r\n".to_vec(), true),
        ("DELETE, plain HTTP", b"DELETE /api/v1/namespaces/x HTTP/1.1\r\n\r\n".to_vec(), true),
        ("PATCH, plain HTTP", b"PATCH /api/v1/namespaces/x HTTP/1.1\r\n\r\n".to_vec(), true),
        ("GET of an absolute URL", b"GET http://localhost/ HTTP/1.1\r\n\r\n".to_vec(), true),
        ("lower-case get", b"get / HTTP/1.1\r\n\r\n".to_vec(), true),
        ("an HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(), true),
        ("nothing", Vec::new(), true),
        ("four bytes", b"GET ".to_vec(), true),
        ("one bad byte", vec![0x47], true),
        ("application data first", record(0x17, [3, 3], &[7; 32]), true),
        ("change cipher spec first", record(0x14, [3, 3], &[1]), true),
        ("an unknown content type", record(0x63, [3, 3], &[0]), true),
        ("a handshake claiming version 16.0", record(0x16, [0x10, 0], &[1, 0, 0, 0]), true),
        ("SSLv2", vec![0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10], true),
        ("a record over TLS's limit", oversized, true),
        ("a handshake record of 18,433 bytes (one over)", vec![0x16, 0x03, 0x01, 0x48, 0x01], true),
        ("a handshake record of 18,432 bytes (the limit), cut short", vec![0x16, 0x03, 0x01, 0x48, 0x00, 0x01], true),
        ("a handshake record of 18,432 bytes, whole", record(0x16, [3, 1], &[0; 18_432]), true),
        ("a handshake record of 16,385 bytes, whole", record(0x16, [3, 1], &[0; 16_385]), true),
        ("a handshake record of 16,384 bytes of zeros", record(0x16, [3, 1], &[0; 16_384]), false),
        ("an alert first", record(0x15, [3, 3], &[2, 40]), true),
        ("a ClientHello of garbage", hello_of_garbage, false),
        ("an empty handshake record", record(0x16, [3, 1], &[]), false),
        ("a truncated ClientHello", vec![0x16, 0x03, 0x01, 0x01, 0x2c, 0x01, 0x00, 0x01, 0x28, 0x03, 0x03], false),
    ];
    let mut failures = Vec::new();
    for (row, opening, exact) in &rows {
        let direct = answer(api, opening).await;
        let via = answer(wm.addr, opening).await;
        let same = if *exact { direct == via } else { only_refuses(&direct) && only_refuses(&via) };
        if !same {
            failures.push(format!(
                "{row}: the API server {:?}, watchmux {:?}",
                String::from_utf8_lossy(&direct),
                String::from_utf8_lossy(&via)
            ));
        }
    }
    // The row users meet: a plain-HTTP client pointed at the TLS port.
    let http = answer(wm.addr, b"GET /api HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert_eq!(http, b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n");
    assert!(failures.is_empty(), "{} of {} rows differ:\n{}", failures.len(), rows.len(), failures.join("\n"));
    // And the port still serves TLS afterwards: a handshake, a request, an
    // HTTP answer.
    let mut tls = tls_connect(wm.addr, &cluster_file(&cluster, "ca.crt"), b"http/1.1").await;
    tls.write_all(b"GET /version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut response)).await;
    assert!(response.starts_with(b"HTTP/1.1 "), "{:?}\n{}", String::from_utf8_lossy(&response), wm.log());
}

/// Whether `answer` is a refusal and no more: nothing, or one fatal alert.
fn only_refuses(answer: &[u8]) -> bool {
    matches!(answer, [] | [0x15, 0x03, 0x01..=0x03, 0x00, 0x02, 0x02, _])
}
