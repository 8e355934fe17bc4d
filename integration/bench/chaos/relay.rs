//! A TCP relay between watchmux and kube-apiserver that the harness can
//! break in two ways: cut (every connection closed, new ones refused), or
//! freeze (a half-open upstream: the connections it carries stop forwarding
//! bytes in both directions but stay open, for good, so that only watchmux's
//! own keepalives can tell them dead; new connections are refused while the
//! freeze lasts and forwarded again after it).
//!
//! A packet that is silently dropped is out of reach on loopback without a
//! packet filter: the relay's own kernel still acknowledges what watchmux
//! sends, so TCP keepalive probes succeed and only an application-level
//! ping (HTTP/2 PING) can detect a frozen connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Forward,
    Cut,
    Freeze,
    /// Freeze, and new connections are accepted and frozen too.
    BlackHole,
    /// The connections accepted before the `n`th freeze; later ones (this
    /// one's `n` and on) are forwarded: one connection half-open while the
    /// server still takes new ones.
    FreezeBefore(u64),
}

pub struct Relay {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    /// Connections accepted and forwarded, refused, and frozen.
    accepted: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    frozen: Arc<AtomicU64>,
    /// Ends every task and closes every socket, frozen ones included.
    shutdown: CancellationToken,
}

impl Relay {
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, _) = watch::channel(Mode::Forward);
        let counter = || Arc::new(AtomicU64::new(0));
        let (accepted, refused, frozen) = (counter(), counter(), counter());
        let shutdown = CancellationToken::new();
        let (mode_rx, stop) = (mode.subscribe(), shutdown.clone());
        let (acc, rfs, frz) = (accepted.clone(), refused.clone(), frozen.clone());
        tokio::spawn(async move {
            loop {
                let down = tokio::select! {
                    _ = stop.cancelled() => return,
                    a = listener.accept() => match a {
                        Ok((down, _)) => down,
                        Err(_) => continue,
                    },
                };
                match *mode_rx.borrow() {
                    Mode::Forward | Mode::FreezeBefore(_) => {}
                    Mode::BlackHole => {
                        rfs.fetch_add(1, Ordering::Relaxed);
                        frz.fetch_add(1, Ordering::Relaxed);
                        let stop = stop.clone();
                        tokio::spawn(async move {
                            stop.cancelled().await;
                            drop(down);
                        });
                        continue;
                    }
                    Mode::Cut | Mode::Freeze => {
                        rfs.fetch_add(1, Ordering::Relaxed);
                        continue; // refused: dropped at once
                    }
                }
                // The connection's number: FreezeBefore freezes those below it.
                let id = acc.fetch_add(1, Ordering::Relaxed);
                let (mut mode_rx, frz, stop) = (mode_rx.clone(), frz.clone(), stop.clone());
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(target).await else { return };
                    let mut pair = (down, up);
                    let broken = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut pair.0, &mut pair.1) => return,
                        _ = stop.cancelled() => return,
                        m = mode_rx.wait_for(|m| match m {
                            Mode::Forward => false,
                            Mode::FreezeBefore(n) => id < *n,
                            _ => true,
                        }) => m.map(|m| *m),
                    };
                    if matches!(broken, Ok(Mode::Freeze | Mode::BlackHole | Mode::FreezeBefore(_))) {
                        // Half-open: both sockets stay open and silent until the relay goes.
                        frz.fetch_add(1, Ordering::Relaxed);
                        stop.cancelled().await;
                    }
                    drop(pair);
                });
            }
        });
        Ok(Self { addr, mode, accepted, refused, frozen, shutdown })
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Freezes every connection forwarded so far; new ones are forwarded.
    pub fn freeze_existing(&self) {
        self.set(Mode::FreezeBefore(self.accepted()));
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Connections the relay was asked for: forwarded or refused.
    pub fn attempts(&self) -> u64 {
        self.accepted() + self.refused.load(Ordering::Relaxed)
    }

    pub fn frozen(&self) -> u64 {
        self.frozen.load(Ordering::Relaxed)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A plain TCP load balancer in front of a tier's replicas, as a Service's
/// or a cloud balancer's: each new connection goes to the next replica in
/// turn (one that refuses is skipped), bytes relayed untouched.
pub struct Balancer {
    pub addr: SocketAddr,
    shutdown: CancellationToken,
}

impl Balancer {
    pub async fn start(backends: Vec<SocketAddr>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut turn = 0usize;
            loop {
                let mut down = tokio::select! {
                    _ = stop.cancelled() => return,
                    a = listener.accept() => match a {
                        Ok((down, _)) => down,
                        Err(_) => continue,
                    },
                };
                turn += 1;
                let (backends, stop) = (backends.clone(), stop.clone());
                let first = turn;
                tokio::spawn(async move {
                    for i in 0..backends.len() {
                        let Ok(mut up) = TcpStream::connect(backends[(first + i) % backends.len()]).await else {
                            continue;
                        };
                        tokio::select! {
                            _ = stop.cancelled() => {}
                            _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        }
                        return;
                    }
                });
            }
        });
        Ok(Self { addr, shutdown })
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
