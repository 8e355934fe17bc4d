//! Code the benchmarks share: the environment they are run with, `/proc`
//! readings, Prometheus text, the watch clients (TLS straight at
//! kube-apiserver, plain text to watchmux; HTTP/2 or HTTP/1.1), the line
//! scanning of watch streams, a reflector-shaped watch client, a process's
//! peak RSS, percentiles and the machine-readable results.
//!
//! Each bench target includes it with `#[path = "../common/mod.rs"] mod common;`,
//! so a target that uses only part of it would warn about the rest.
#![allow(dead_code)]

pub mod api;
pub mod client;
pub mod env;
pub mod lines;
pub mod procfs;
pub mod prom;
pub mod reflector;
pub mod sampler;
pub mod stats;
