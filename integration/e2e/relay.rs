//! A TCP relay between watchmux and the API server that a test can cut and
//! restore, to make watchmux lose its upstream while the API server stays up
//! (so that changes happen that watchmux can only learn by relisting).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub(crate) struct Relay {
    pub(crate) addr: SocketAddr,
    cut: Arc<AtomicBool>,
    /// Bumped on every cut: live connections end when it changes.
    generation: watch::Sender<u64>,
}

impl Relay {
    pub(crate) async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let (cut2, gen_rx) = (cut.clone(), generation.subscribe());
        tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = listener.accept().await else { return };
                if cut2.load(Ordering::SeqCst) {
                    drop(down);
                    continue;
                }
                let mut gen_rx = gen_rx.clone();
                gen_rx.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut up) = TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = gen_rx.changed() => {}
                    }
                });
            }
        });
        Self { addr, cut, generation }
    }

    /// Drops every relayed connection and refuses new ones.
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    pub(crate) fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// A copy of the cluster's kubeconfig whose server is this relay, in `dir`.
    pub(crate) fn kubeconfig(&self, cluster: &crate::env::Cluster, dir: &std::path::Path) -> std::path::PathBuf {
        let kubeconfig = std::fs::read_to_string(&cluster.kubeconfig)
            .unwrap()
            .replace(&format!("https://{}", cluster.api_addr()), &format!("https://{}", self.addr));
        let path = dir.join("kubeconfig");
        std::fs::write(&path, kubeconfig).unwrap();
        path
    }
}
