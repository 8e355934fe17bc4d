//! The synthetic Pods upstream and the watchmux in front of it, shared by the
//! benches that need no cluster (`ingest`, `million`): the pods
//! ([`pods`]), the TLS server that lists and watches them ([`upstream`]),
//! and watchmux started under `taskset` with a kubeconfig pointing at it
//! ([`watchmux`]).
//!
//! Each bench target includes it with `#[path = "../synthetic/mod.rs"] mod synthetic;`
//! beside `common`, which it uses; a target that uses only part of it would
//! warn about the rest.
#![allow(dead_code)]

pub mod pods;
pub mod upstream;
pub mod watchmux;
