//! A generative differential fuzzer of delegated auth against the real API
//! server (security issue 23, item 2): random identities, impersonation
//! headers, paths from discovery and selectors, each request sent straight
//! to kube-apiserver and through watchmux in each upstream-identity mode,
//! with the same credentials and the same bytes. An answer through watchmux
//! that gives more than the API server's is a failure (`oracle.rs`), and
//! the seed and case number reproduce it.
//!
//! First the corpus (`corpus.jsonl`: literal cases that found bugs) is
//! replayed, then `FUZZ_AUTH_CASES` cases are generated from
//! `FUZZ_AUTH_SEED`. Run with `make fuzz-auth` (long) or as the last step of
//! `make test-e2e` (short, fixed seed); both start the API server.
//!
//! Environment:
//! - `FUZZ_AUTH_SEED` (default 20261130), `FUZZ_AUTH_CASES` (default 300);
//! - `FUZZ_AUTH_ONLY=<case>`: that one case of the seed (to reproduce);
//! - `FUZZ_AUTH_CORPUS=0`: skip the corpus (to measure what generation finds);
//! - `FUZZ_AUTH_STRICT=1`: fail on findings known and open too (`OPEN`);
//! - `FUZZ_AUTH_TARGETS` (default `impersonate,client,offline`);
//! - `FUZZ_AUTH_DEADLINE` seconds for the whole run (default 900): no new
//!   case starts after it;
//! - `FUZZ_AUTH_CONCURRENCY` (default 4); `FUZZ_AUTH_OUT` (default
//!   `.run/fuzz-auth`): where failures and differences are written.

mod fixtures;
mod generate;
mod oracle;
#[path = "../ports.rs"]
mod ports;
mod targets;
mod wire;
mod x509;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};

use crate::fixtures::Admin;
use crate::generate::{Case, Dict, Rng, Who, own_subject};
use crate::oracle::Verdict;
use crate::targets::{Target, World};
use crate::wire::{Answer, Identity, Req, Wire};
use crate::x509::StringType;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A corpus entry: a literal case, why it is kept, and the targets it is
/// sent to (both when not said).
#[derive(Serialize, Deserialize)]
struct Entry {
    name: String,
    #[serde(default)]
    targets: Vec<String>,
    /// Set on a finding known and open elsewhere (see `OPEN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open: Option<String>,
    case: Case,
}

/// Findings known and open, whose fix is not this change's: outside
/// `FUZZ_AUTH_STRICT=1` (which `make fuzz-auth` sets) a failure whose
/// label names one of these and nothing else is reported, not failed, so
/// that `make test` fails on what must be fixed now (rows 1-3 of issue 23)
/// and on anything new. Remove an entry when its fix lands.
const OPEN: &[&str] = &[];

/// Whether a failure is only of open findings.
fn only_open(label: &str) -> bool {
    label.split(" + ").all(|part| OPEN.contains(&part))
}

/// One case's outcome at one target.
struct Finding {
    label: String,
    target: String,
    case: Case,
    direct: Answer,
    via: Answer,
    verdict: Verdict,
}

#[tokio::test]
async fn generated_requests_never_get_more_through_watchmux_than_from_the_api_server() {
    let seed: u64 = env_or("FUZZ_AUTH_SEED", 20_261_130);
    let cases: u64 = env_or("FUZZ_AUTH_CASES", 300);
    let only: Option<u64> = std::env::var("FUZZ_AUTH_ONLY").ok().and_then(|v| v.parse().ok());
    let corpus = env_or("FUZZ_AUTH_CORPUS", 1) != 0 && only.is_none();
    let strict = env_or("FUZZ_AUTH_STRICT", 0) != 0;
    let deadline = Instant::now() + Duration::from_secs(env_or("FUZZ_AUTH_DEADLINE", 900));
    let concurrency: usize = env_or("FUZZ_AUTH_CONCURRENCY", 4);
    let wanted: Vec<String> =
        env_or("FUZZ_AUTH_TARGETS", "impersonate,client,offline".to_owned()).split(',').map(str::to_owned).collect();
    let out = PathBuf::from(env_or("FUZZ_AUTH_OUT", format!("{}/.run/fuzz-auth", env!("CARGO_MANIFEST_DIR"))));
    std::fs::create_dir_all(&out).unwrap();
    let started = Instant::now();
    println!("fuzz-auth: seed {seed}, {cases} cases, targets {wanted:?}");

    let world = World::from_env();
    let wire = Wire::new(&world.ca);
    let admin =
        Admin { wire: &wire, api: world.api, who: Identity { cert: None, token: Some(world.admin_token.clone()) } };
    admin.set_up().await;
    let mut tokens = BTreeMap::new();
    for account in fixtures::TOKEN_ACCOUNTS {
        let token = match account.split_once('/') {
            Some((ns, name)) => admin.token(ns, name).await,
            None if *account == "admin" => world.admin_token.clone(),
            None => "fz-a-token-nobody-issued".to_owned(),
        };
        tokens.insert(account.to_string(), token);
    }
    admin.wait_settled(&tokens).await;
    let resources = admin.discover().await;
    let cluster_scoped: Vec<String> = resources.iter().filter(|r| !r.namespaced).map(|r| r.name.clone()).collect();
    let openapi = admin.openapi_documents().await;
    let dict = Dict { resources, openapi };
    let targets: Vec<Target> = world.start_targets(&wanted).await;
    println!(
        "fuzz-auth: fixture, {} resources and {} watchmux ready in {:.1?}",
        dict.resources.len(),
        targets.len(),
        started.elapsed()
    );

    let run = Run { world: &world, wire: &wire, tokens: &tokens, targets: &targets, cluster_scoped: &cluster_scoped };
    let mut failures: Vec<(String, Finding)> = Vec::new();
    let mut triage = std::fs::File::create(out.join(format!("triage-{seed}.jsonl"))).unwrap();
    let mut tally: BTreeMap<String, Tally> = BTreeMap::new();

    if corpus {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/integration/fuzz_auth/corpus.jsonl"))
            .expect("the corpus");
        let entries: Vec<Entry> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("corpus line {l}: {e}")))
            .collect();
        for e in &entries {
            for f in run.case(&e.case, &e.targets).await {
                record(&mut tally, &mut triage, &format!("corpus {}", e.name), &f);
                if matches!(f.verdict, Verdict::Looser(_)) {
                    failures.push((format!("corpus entry {:?}", e.name), f));
                } else if e.open.is_some() {
                    println!("fuzz-auth: corpus entry {:?} (open: {:?}) passes now at {}", e.name, e.open, f.target);
                }
            }
        }
        println!("fuzz-auth: corpus of {} entries replayed in {:.1?}", entries.len(), started.elapsed());
    }

    let numbers: Vec<u64> = match only {
        Some(n) => vec![n],
        None => (0..cases).collect(),
    };
    let mut first_found: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut ran = 0u64;
    let mut results = futures_util::stream::iter(numbers)
        .take_while(|_| std::future::ready(Instant::now() < deadline))
        .map(|n| {
            let case = dict.case(&mut Rng::for_case(seed, n));
            let run = &run;
            async move { (n, run.case(&case, &[]).await) }
        })
        .buffered(concurrency);
    while let Some((n, findings)) = results.next().await {
        ran += 1;
        for f in findings {
            record(&mut tally, &mut triage, &format!("seed {seed} case {n}"), &f);
            if matches!(f.verdict, Verdict::Looser(_)) {
                let e = first_found.entry(f.label.clone()).or_insert((n, 0));
                e.1 += 1;
                failures.push((format!("seed {seed} case {n} (FUZZ_AUTH_SEED={seed} FUZZ_AUTH_ONLY={n})"), f));
            }
        }
        if ran.is_multiple_of(500) {
            println!("fuzz-auth: {ran} cases, {} failures, {:.0?}", failures.len(), started.elapsed());
        }
    }
    drop(results);

    let mut failed = std::fs::File::create(out.join(format!("failures-{seed}.jsonl"))).unwrap();
    for (at, f) in &failures {
        let entry = serde_json::json!({"name": format!("{} ({at})", f.label), "targets": [f.target], "case": f.case});
        writeln!(failed, "{entry}").unwrap();
    }
    println!("fuzz-auth: {ran} generated cases in {:.1?} (seed {seed})", started.elapsed());
    for (target, t) in &tally {
        println!(
            "  {target}: {} same, {} different (triage), {} looser; answered 2xx {} ({} of {} as watchmux's own identity); \
             shared answers {}, {} the same; watches {}, {} with the same events",
            t.same, t.differs, t.looser, t.ok, t.ok_own, t.own, t.shared, t.shared_same, t.watches, t.watches_same
        );
    }
    for (label, (first, count)) in &first_found {
        println!("  found {label:?} first at case {first} ({count} cases in all)");
    }
    println!(
        "  differences: {}; failures: {}",
        out.join(format!("triage-{seed}.jsonl")).display(),
        out.join(format!("failures-{seed}.jsonl")).display()
    );
    let (open, failures): (Vec<_>, Vec<_>) = failures.into_iter().partition(|(_, f)| !strict && only_open(&f.label));
    if !open.is_empty() {
        println!(
            "  {} failures of open findings only ({OPEN:?}), reported, not failed (FUZZ_AUTH_STRICT=1 fails them)",
            open.len()
        );
    }
    let report: Vec<String> = failures
        .iter()
        .take(25)
        .map(|(at, f)| {
            format!(
                "{at} [{}] via {}: {}\n  {} {} as {}\n  headers {:?}\n  direct:   {} {}\n  watchmux: {} {}",
                f.label,
                f.target,
                match &f.verdict {
                    Verdict::Looser(why) => why.as_str(),
                    _ => "",
                },
                f.case.method,
                f.case.path,
                serde_json::to_string(&f.case.who).unwrap(),
                f.case.headers,
                f.direct.status,
                f.direct.text(),
                f.via.status,
                f.via.text()
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} answers through watchmux gave more than the API server (first 25 below; all in {}):\n{}",
        failures.len(),
        out.join(format!("failures-{seed}.jsonl")).display(),
        report.join("\n")
    );
}

/// Per target: verdicts, and how much of what it answered was compared.
#[derive(Default)]
struct Tally {
    same: u64,
    differs: u64,
    looser: u64,
    /// Answered 2xx through watchmux, and of those, to watchmux's own identity.
    ok: u64,
    ok_own: u64,
    /// Cases sent as watchmux's own identity.
    own: u64,
    /// Shared answers (discovery, OpenAPI) both answered 2xx, and those judged the same.
    shared: u64,
    shared_same: u64,
    /// Watches both answered 2xx (by a watch query or the `/watch/` prefix), and those judged the same.
    watches: u64,
    watches_same: u64,
}

fn record(tally: &mut BTreeMap<String, Tally>, triage: &mut std::fs::File, at: &str, f: &Finding) {
    let t = tally.entry(f.target.clone()).or_default();
    t.own += u64::from(oracle::is_own_identity(&f.case));
    if (200..300).contains(&f.via.status) && (200..300).contains(&f.direct.status) && oracle::is_shared(&f.case.path) {
        t.shared += 1;
        t.shared_same += u64::from(f.verdict == Verdict::Same);
    }
    if (200..300).contains(&f.via.status) {
        t.ok += 1;
        t.ok_own += u64::from(oracle::is_own_identity(&f.case));
        let watch = f.case.path.contains("watch=") || f.case.path.contains("/watch/");
        if watch && (200..300).contains(&f.direct.status) {
            t.watches += 1;
            t.watches_same += u64::from(f.verdict == Verdict::Same);
        }
    }
    match &f.verdict {
        Verdict::Same => t.same += 1,
        Verdict::Differs(why) | Verdict::Looser(why) => {
            if matches!(f.verdict, Verdict::Differs(_)) {
                t.differs += 1;
            } else {
                t.looser += 1;
            }
            let line = serde_json::json!({"at": at, "target": f.target, "why": why,
                "looser": matches!(f.verdict, Verdict::Looser(_)), "case": f.case,
                "direct": [f.direct.status, f.direct.text()], "watchmux": [f.via.status, f.via.text()]});
            writeln!(triage, "{line}").unwrap();
        }
    }
}

struct Run<'a> {
    world: &'a World,
    wire: &'a Wire,
    tokens: &'a BTreeMap<String, String>,
    targets: &'a [Target],
    cluster_scoped: &'a [String],
}

impl Run<'_> {
    fn identity(&self, who: &Who) -> Identity {
        let token = |account: &str| {
            Some(self.tokens.get(account).unwrap_or_else(|| panic!("no fixture token {account:?}")).clone())
        };
        match who {
            Who::Anonymous => Identity::default(),
            Who::Token { account } => Identity { cert: None, token: token(account) },
            Who::Cert { subject, token: t } => {
                let cert =
                    if *subject == own_subject() { self.world.node.clone() } else { self.world.issuer.client(subject) };
                Identity { cert: Some(cert), token: t.as_deref().and_then(token) }
            }
        }
    }

    /// Sends `case` straight and through each target (those named in
    /// `only`, or all); a 403 through watchmux is asked again, since a
    /// remembered denial takes another path.
    async fn case(&self, case: &Case, only: &[String]) -> Vec<Finding> {
        let who = self.identity(&case.who);
        let req = Req { method: &case.method, path: &case.path, headers: &case.headers, body: &case.body };
        let send = |addr| self.wire.send(addr, &who, &req);
        let direct = send(self.world.api).await;
        let mut findings = Vec::new();
        for t in self.targets.iter().filter(|t| only.is_empty() || only.contains(&t.name)) {
            let mut via = send(t.addr).await;
            let offline = t.name == "offline";
            let mut verdict = oracle::judge(case, &direct, &via, offline);
            if via.status == 403 && (verdict != Verdict::Same || direct.status == 403) {
                let again = send(t.addr).await;
                let second = oracle::judge(case, &direct, &again, offline);
                if matches!(second, Verdict::Looser(_)) {
                    (via, verdict) = (again, second);
                }
            }
            let label = label(case, &t.name, self.cluster_scoped);
            findings.push(Finding {
                label,
                target: t.name.clone(),
                case: case.clone(),
                direct: direct.clone(),
                via,
                verdict,
            });
        }
        findings
    }
}

/// What a failing case has in common with the known rows of issue 23, for
/// counting; a case that matches none is `new`.
fn label(case: &Case, target: &str, cluster_scoped: &[String]) -> String {
    let mut labels = Vec::new();
    let long_label = |name: &str| name.split('.').any(|l| l.len() > 63);
    for (k, v) in &case.headers {
        if k == "impersonate-user" {
            if v.strip_prefix("system:serviceaccount:")
                .and_then(|r| r.split_once(':'))
                .is_some_and(|(_, n)| long_label(n))
            {
                labels.push("row 1: long service-account name");
            }
            if v.strip_prefix("system:node:").is_some_and(long_label) {
                labels.push("row 1: long node name");
            }
        }
        if let Some(key) = k.strip_prefix("impersonate-extra-")
            && (key.contains('%') || key.chars().any(|c| c.is_ascii_uppercase()))
        {
            labels.push("row 1: extra key");
        }
    }
    let node_user = case.headers.iter().any(|(k, v)| k == "impersonate-user" && v.starts_with("system:node:"));
    if node_user && !case.headers.iter().any(|(k, _)| k == "impersonate-group") {
        labels.push("a node impersonated without groups");
    }
    let segments: Vec<&str> = case.path.split('?').next().unwrap_or("").split('/').collect();
    if let Some(i) = segments.iter().position(|s| *s == "namespaces")
        && segments.get(i + 2).is_some_and(|r| cluster_scoped.iter().any(|c| c == r))
    {
        labels.push("row 2: cluster-scoped resource at a namespaced path");
    }
    if let Who::Cert { subject, .. } = &case.who {
        let own = format!("system:node:{}", fixtures::WATCHMUX_NODE);
        if target == "client" && subject.iter().flatten().any(|a| a.attr == "CN" && a.value == own) {
            labels.push("row 3: watchmux's own CN");
        }
        if subject.iter().flatten().any(|a| a.string != StringType::Utf8) {
            labels.push("row 7: a subject's string types");
        }
        if subject.iter().flatten().any(|a| a.attr == "CN" && a.value == "system:anonymous") {
            labels.push("a certificate named system:anonymous");
        }
    }
    if target == "offline" && !oracle::is_own_identity(case) {
        labels.push("offline: another identity");
    }
    if labels.is_empty() { "new".to_owned() } else { labels.join(" + ") }
}
