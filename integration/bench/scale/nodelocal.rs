//! Side (c) of the storm: kubelets behind node-local watchmux processes in
//! front of the tier, as the chart's `nodeLocal.tier.server` deploys them.
//!
//! The first `SCALE_NODE_LOCALS` nodes (20; as many as this machine holds
//! next to kube-apiserver, the tier and the kubelets) each get a watchmux of
//! their own, started cold at the storm's instant (a node fleet restarted at
//! once: node-local proxy and kubelet together), caching what the chart's
//! nodeLocal caches with the kubelet's credentials: its node's pods
//! (`spec.nodeName`), its own Node (`metadata.name`) and the Services; its
//! kubelet's ConfigMap and Secret pass through to the tier, whose caches
//! answer them. The other nodes' node-locals are simulated by their kubelets
//! asking the tier directly: a node-local's requests upstream are the
//! kubelet's own (one list and watch of each of the five collections, with
//! the same selectors), so the tier sees the same load.
//!
//! Environment (bench-scale.sh sets the first three when `nodelocal` is in
//! `SCALE_SIDES`): `SCALE_NODE_LOCAL_BIN` (the watchmux binary),
//! `SCALE_NODE_LOCAL_KUBECONFIG` (its upstream: the tier),
//! `SCALE_NODE_LOCAL_TLS` (`cert:key` it serves with), `SCALE_NODE_LOCALS`,
//! `SCALE_NODE_LOCAL_PORT` (18000: node-local i listens on port + 2i, its
//! admin listener on port + 2i + 1), `SCALE_NODE_LOCAL_LOGS` (a directory
//! for their logs), `SCALE_NODE_LOCAL_WATCH_LIST` (1: they take their lists
//! as watch-lists, `--upstream-watch-list`, as the chart's tree does; 0: as
//! paginated consistent LISTs, for the comparison).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context as _, bail};

use crate::common::client::Target;
use crate::common::env::{env, env_or};
use crate::common::procfs::{cpu_ticks, rss_bytes, ticks_ms};
use crate::objects::World;

/// How to start the node-local processes.
pub struct Config {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cert: String,
    key: String,
    pub count: usize,
    port: u16,
    logs: PathBuf,
    watch_list: bool,
}

impl Config {
    pub fn from_env() -> anyhow::Result<Self> {
        let tls = env("SCALE_NODE_LOCAL_TLS")?;
        let Some((cert, key)) = tls.split_once(':') else { bail!("SCALE_NODE_LOCAL_TLS is cert:key") };
        Ok(Self {
            bin: env("SCALE_NODE_LOCAL_BIN")?.into(),
            kubeconfig: env("SCALE_NODE_LOCAL_KUBECONFIG")?.into(),
            cert: cert.to_owned(),
            key: key.to_owned(),
            count: env_or("SCALE_NODE_LOCALS", 20)?,
            port: env_or("SCALE_NODE_LOCAL_PORT", 18000)?,
            logs: std::env::var("SCALE_NODE_LOCAL_LOGS").unwrap_or_else(|_| ".run/bench-scale".into()).into(),
            watch_list: env_or("SCALE_NODE_LOCAL_WATCH_LIST", 1u8)? != 0,
        })
    }
}

/// Running node-local processes; killed when dropped.
pub struct NodeLocals {
    children: Vec<tokio::process::Child>,
    pids: Vec<u32>,
    /// Whether they take their lists as watch-lists.
    pub watch_list: bool,
    /// Where kubelet i (i < the count) connects: its own node-local.
    pub targets: Vec<Target>,
}

impl NodeLocals {
    /// Starts `cfg.count` node-locals (at most the nodes), the first nodes'
    /// own; `tier` is the tier's target, whose TLS settings they share.
    pub fn start(cfg: &Config, w: &World, tier: &Target) -> anyhow::Result<Self> {
        let Target::Proxy { tls, .. } = tier else { bail!("the node-locals' upstream is the tier") };
        let count = cfg.count.min(w.nodes);
        let (mut children, mut pids, mut targets) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..count {
            let node = World::node_name(i);
            let port = cfg.port + 2 * i as u16;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let log = std::fs::File::create(cfg.logs.join(format!("nodelocal-{i}.log")))?;
            let child = tokio::process::Command::new(&cfg.bin)
                .env("RUST_LOG", "warn")
                .arg("--kubeconfig")
                .arg(&cfg.kubeconfig)
                .arg(format!("--listen={addr}"))
                .arg(format!("--admin-listen=127.0.0.1:{}", port + 1))
                .args(["--tls-cert-file", &cfg.cert, "--tls-private-key-file", &cfg.key])
                .arg("--cache-resources=pods,nodes,services")
                .arg(format!("--cache-scope=pods=fieldSelector=spec.nodeName={node}"))
                .arg(format!("--cache-scope=nodes=fieldSelector=metadata.name={node}"))
                .arg("--cache-warm")
                .arg(format!("--upstream-watch-list={}", cfg.watch_list))
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", cfg.bin.display()))?;
            pids.push(child.id().context("node-local exited at once")?);
            children.push(child);
            targets.push(Target::Proxy { addr, tls: tls.clone() });
        }
        Ok(Self { children, pids, watch_list: cfg.watch_list, targets })
    }

    /// Their CPU so far, seconds, summed.
    pub fn cpu_s(&self) -> f64 {
        self.pids.iter().filter_map(|&p| cpu_ticks(p).ok()).map(ticks_ms).sum::<f64>() / 1e3
    }

    /// The largest RSS among them now, bytes.
    pub fn max_rss(&self) -> u64 {
        self.pids.iter().filter_map(|&p| rss_bytes(p).ok()).max().unwrap_or(0)
    }

    /// How many are still running (one that exited failed its node).
    pub fn alive(&mut self) -> usize {
        self.children.iter_mut().filter_map(|c| c.try_wait().ok()).filter(Option::is_none).count()
    }

    pub async fn stop(mut self) {
        for c in &mut self.children {
            let _ = c.start_kill();
        }
        for c in &mut self.children {
            let _ = c.wait().await;
        }
    }
}
