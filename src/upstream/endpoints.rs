//! Several API servers as one upstream: the endpoints a connection may be
//! dialed to, each with its own health, and the dialer that picks one.
//!
//! A production control plane runs three or five kube-apiservers on one
//! etcd, often with no load balancer in front of them for node traffic
//! (KubePrism, k0s's node-local balancer, kubespray's nginx-proxy exist for
//! that). `--upstream-servers` lists them; they share the kubeconfig's
//! credentials, CA and `tls-server-name` (without one, each endpoint's own
//! host is the name its certificate is checked against, as any client
//! dialing that URL would check it).
//!
//! The choice is made per connection, when one is dialed, below the
//! connection pools: a request's URI stays the kubeconfig's server, so
//! each pool still holds one set of connections, and only where they lead
//! changes.
//!
//! - **Preferred** (watchmux's own connections: the cache's lists and
//!   watches, reviews, probes): the first healthy endpoint in the order
//!   given. One API server carries every cache's watch; any other can
//!   resume them from their resourceVersions (they share etcd), so
//!   stability is worth more than spreading a handful of streams. The
//!   order is the operator's preference (the local control-plane node
//!   first, say).
//! - **Spread** (pass-through connections and upgrades): healthy endpoints
//!   in turn, so that clients' own requests load every API server.
//!
//! With `--upstream-discover-servers` the list follows the API servers
//! kube-apiserver itself publishes, as KubePrism does: the `default/kubernetes`
//! EndpointSlices (ready addresses, port `https`), read every
//! [`DISCOVERY_PERIOD`]. The servers given (or the kubeconfig's) stay first,
//! in their order, so that a load balancer in front is still preferred and
//! the API servers behind it are the fallback when it fails; discovered
//! servers follow, in address order. An endpoint that stays keeps its health.
//!
//! **Fallback servers** (`--upstream-fallback-servers`) come after all of
//! those and take no traffic of any kind while one of the others is healthy:
//! a node-local in a tree lists its tier first and the API servers as the
//! fallback, so that when the tier is down the kubelet's lease renewals and
//! other writes go straight to an API server (no node goes NotReady because
//! one tier did), and only then. They have a TLS configuration of their own
//! (`--upstream-fallback-ca-file`, `--upstream-fallback-tls-server-name`):
//! the tier's certificate is not the API servers'. Once a primary endpoint
//! is healthy again, [`Endpoints::take_fallback_dialed`] tells the upstream
//! client to make new connections, which go to it; the fallback's end with
//! their last requests (see `Upstream::probe_ready`).
//!
//! An endpoint is unhealthy while its last readiness probe failed, or for
//! [`DIAL_FAILURE_HOLD`] after a dial to it failed; unhealthy endpoints are
//! still tried, last, so that an upstream whose every endpoint looks down
//! is tried anyway. A dial that fails moves on to the next endpoint at once:
//! a request that never reached an API server is sent to another.
//!
//! Each endpoint also keeps the Kubernetes minor its `/version` said, read
//! when it becomes ready and every minute after: during a control-plane
//! upgrade the API servers run two minors, and watchmux writes the oldest
//! ready one's forms (`upstream::version`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use tokio::time::Instant;

use crate::metrics as m;

/// How often `--upstream-discover-servers` reads the `default/kubernetes`
/// EndpointSlices.
pub(crate) const DISCOVERY_PERIOD: Duration = Duration::from_secs(10);

/// The path of the EndpointSlices kube-apiserver keeps for its own Service.
pub(crate) const KUBERNETES_SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes";

/// How long an endpoint a dial failed to reach is tried only after the
/// others: about a readiness probe's period, after which the probe (or
/// the next dial) says again.
pub(crate) const DIAL_FAILURE_HOLD: Duration = Duration::from_secs(5);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One API server: where it is, and what was last learnt of its health.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// `scheme://host:port`, no path.
    uri: Uri,
    /// One of `--upstream-fallback-servers`.
    fallback: bool,
    state: parking_lot::Mutex<Health>,
}

#[derive(Debug, Default)]
struct Health {
    /// When a dial to it last failed, if it has not succeeded since.
    dial_failed_at: Option<Instant>,
    /// The last readiness probe's verdict (`None`: not probed yet).
    probed_ready: Option<bool>,
    /// The Kubernetes minor its `/version` last said (`upstream::version`).
    minor: Option<u8>,
    /// When its `/version` was last read, and when it is due again; `None`
    /// makes it due at the next probe that finds the endpoint ready (the
    /// first, or one after it was not ready: an API server that went away
    /// may come back upgraded).
    minor_read: Option<(Instant, Duration)>,
}

impl Endpoint {
    fn new(uri: Uri, fallback: bool) -> Arc<Self> {
        Arc::new(Self { uri, fallback, state: Default::default() })
    }

    /// One of `--upstream-fallback-servers`.
    pub(crate) fn is_fallback(&self) -> bool {
        self.fallback
    }

    /// `scheme://host:port`, as given, for logs, metrics and `/readyz`.
    pub(crate) fn uri(&self) -> &Uri {
        &self.uri
    }

    /// Neither a failed probe nor a recent failed dial.
    pub(crate) fn healthy(&self) -> bool {
        let state = self.state.lock();
        state.probed_ready != Some(false) && state.dial_failed_at.is_none_or(|at| at.elapsed() >= DIAL_FAILURE_HOLD)
    }

    /// Records a readiness probe's verdict; `gauge`: in
    /// `watchmux_upstream_endpoint_ready` too (with several endpoints).
    pub(crate) fn probed(&self, ready: bool, gauge: bool) {
        let mut state = self.state.lock();
        if ready && state.probed_ready == Some(false) {
            state.minor_read = None;
        }
        state.probed_ready = Some(ready);
        drop(state);
        if gauge {
            metrics::gauge!(m::UPSTREAM_ENDPOINT_READY, "endpoint" => self.uri.to_string())
                .set(f64::from(u8::from(ready)));
        }
    }

    /// The Kubernetes minor its `/version` last said, while it is healthy.
    pub(crate) fn serving_minor(&self) -> Option<u8> {
        if self.healthy() { self.state.lock().minor } else { None }
    }

    /// Whether its `/version` is to be read: it is ready, and was never
    /// read since it became so, or its next read is due.
    pub(crate) fn minor_due(&self) -> bool {
        let state = self.state.lock();
        state.probed_ready == Some(true) && state.minor_read.is_none_or(|(at, next)| at.elapsed() >= next)
    }

    /// Records a read of its `/version` that said no minor (an answer
    /// without one, or none): the minor known stays, and it is read again
    /// `after` this.
    pub(crate) fn minor_unread(&self, after: Duration) {
        self.state.lock().minor_read = Some((Instant::now(), after));
    }

    /// Records the minor its `/version` said, to be read again `after`
    /// this; `gauge`: in `watchmux_upstream_endpoint_minor` too (with
    /// several endpoints).
    pub(crate) fn read_minor(&self, minor: u8, after: Duration, gauge: bool) {
        let mut state = self.state.lock();
        state.minor = Some(minor);
        state.minor_read = Some((Instant::now(), after));
        drop(state);
        if gauge {
            metrics::gauge!(m::UPSTREAM_ENDPOINT_MINOR, "endpoint" => self.uri.to_string()).set(f64::from(minor));
        }
    }

    /// [`Self::dialed`], for tests elsewhere.
    #[cfg(test)]
    pub(crate) fn dialed_for_test(&self, ok: bool) {
        self.dialed(ok);
    }

    fn dialed(&self, ok: bool) {
        let mut state = self.state.lock();
        state.dial_failed_at = if ok { None } else { Some(Instant::now()) };
    }

    /// `uri`'s path and query, sent to this endpoint: what a connector needs.
    fn target(&self, uri: &Uri) -> Uri {
        let mut parts = self.uri.clone().into_parts();
        parts.path_and_query = uri.path_and_query().cloned().or_else(|| Some("/".parse().expect("a path")));
        Uri::from_parts(parts).expect("an endpoint's scheme and authority with a path")
    }
}

/// How a dial picks among the endpoints (see the module's doc).
#[derive(Debug, Clone)]
pub(crate) enum Choice {
    /// The first healthy endpoint in the order given.
    Preferred,
    /// Healthy endpoints in turn.
    Spread,
    /// This endpoint and no other (its readiness probe).
    Pinned(Arc<Endpoint>),
}

/// The upstream's endpoints, in the order given: the primary ones, then
/// the fallback servers.
#[derive(Debug)]
pub(crate) struct Endpoints {
    list: parking_lot::RwLock<Arc<[Arc<Endpoint>]>>,
    /// The endpoints given: first, whatever discovery finds.
    seeds: Vec<Uri>,
    /// `--upstream-fallback-servers`: last, always.
    fallbacks: Vec<Uri>,
    /// Where [`Choice::Spread`] starts next.
    next: AtomicUsize,
    /// A dial reached a fallback server since [`Self::take_fallback_dialed`]
    /// last looked.
    fallback_dialed: AtomicBool,
}

impl Endpoints {
    /// The endpoints `uris` name (`scheme://host:port`), in that order.
    #[cfg(test)]
    pub(crate) fn new(uris: impl IntoIterator<Item = Uri>) -> Arc<Self> {
        Self::with_fallbacks(uris, [])
    }

    /// The endpoints `uris` name, then the fallback servers.
    pub(crate) fn with_fallbacks(
        uris: impl IntoIterator<Item = Uri>,
        fallbacks: impl IntoIterator<Item = Uri>,
    ) -> Arc<Self> {
        let seeds: Vec<Uri> = uris.into_iter().collect();
        let fallbacks: Vec<Uri> = fallbacks.into_iter().filter(|f| !seeds.contains(f)).collect();
        assert!(!seeds.is_empty(), "an upstream has at least one endpoint");
        let list: Arc<[_]> = seeds
            .iter()
            .map(|uri| Endpoint::new(uri.clone(), false))
            .chain(fallbacks.iter().map(|uri| Endpoint::new(uri.clone(), true)))
            .collect();
        Arc::new(Self {
            list: parking_lot::RwLock::new(list),
            seeds,
            fallbacks,
            next: AtomicUsize::new(0),
            fallback_dialed: AtomicBool::new(false),
        })
    }

    /// The endpoints given, then `discovered` (those not given already),
    /// then the fallback servers: an endpoint in both lists keeps its state.
    /// True when the list changed.
    pub(crate) fn follow(&self, mut discovered: Vec<Uri>) -> bool {
        discovered.sort_by_key(Uri::to_string);
        discovered.dedup();
        let given = |d: &Uri| self.seeds.contains(d) || self.fallbacks.contains(d);
        let wanted: Vec<(Uri, bool)> = self
            .seeds
            .iter()
            .cloned()
            .chain(discovered.into_iter().filter(|d| !given(d)))
            .map(|uri| (uri, false))
            .chain(self.fallbacks.iter().map(|uri| (uri.clone(), true)))
            .collect();
        let mut list = self.list.write();
        if list.iter().map(|e| &e.uri).eq(wanted.iter().map(|(uri, _)| uri)) {
            return false;
        }
        let kept: Arc<[_]> = wanted
            .into_iter()
            .map(|(uri, fallback)| {
                list.iter().find(|e| e.uri == uri).cloned().unwrap_or_else(|| Endpoint::new(uri, fallback))
            })
            .collect();
        *list = kept;
        true
    }

    /// Whether a dial reached a fallback server since the last call, now
    /// that a primary endpoint is healthy (else false, and it is asked
    /// again later): the upstream client then makes new connections.
    pub(crate) fn take_fallback_dialed(&self) -> bool {
        let primary_healthy = self.all().iter().any(|e| !e.fallback && e.healthy());
        primary_healthy && self.fallback_dialed.swap(false, Ordering::Relaxed)
    }

    /// Every endpoint, in the order given.
    pub(crate) fn all(&self) -> Arc<[Arc<Endpoint>]> {
        self.list.read().clone()
    }

    /// The endpoints a dial tries, in turn: the healthy primary ones in
    /// `choice`'s order, the healthy fallback servers in the order given,
    /// then the others in the same order.
    pub(crate) fn order(&self, choice: &Choice) -> Vec<Arc<Endpoint>> {
        let list = self.all();
        let primaries = list.iter().take_while(|e| !e.fallback).count();
        let (primary, fallback) = list.split_at(primaries);
        let rotated: Vec<_> = match choice {
            Choice::Pinned(endpoint) => return vec![endpoint.clone()],
            Choice::Preferred => primary.to_vec(),
            Choice::Spread => {
                let start = self.next.fetch_add(1, Ordering::Relaxed) % primary.len();
                primary[start..].iter().chain(&primary[..start]).cloned().collect()
            }
        };
        let (mut order, down): (Vec<_>, Vec<_>) =
            rotated.into_iter().chain(fallback.iter().cloned()).partition(|e| e.healthy());
        order.extend(down);
        order
    }

    /// The endpoint watchmux's own requests go to now.
    pub(crate) fn preferred(&self) -> Arc<Endpoint> {
        self.order(&Choice::Preferred).swap_remove(0)
    }

    /// More than one endpoint: per-endpoint health is worth reporting.
    pub(crate) fn several(&self) -> bool {
        self.list.read().len() > 1
    }
}

/// A connector that dials `inner` to the endpoints `choice` picks, one
/// after another until one answers.
#[derive(Debug, Clone)]
pub(crate) struct EndpointDialer<C> {
    endpoints: Arc<Endpoints>,
    choice: Choice,
    inner: C,
    /// Dials the fallback servers (their own TLS configuration); none:
    /// `inner` does.
    fallback: Option<C>,
}

impl<C> EndpointDialer<C> {
    pub(crate) fn new(endpoints: Arc<Endpoints>, choice: Choice, inner: C) -> Self {
        Self { endpoints, choice, inner, fallback: None }
    }

    /// The same dialer, with `fallback` dialing the fallback servers.
    pub(crate) fn with_fallback(self, fallback: C) -> Self {
        Self { fallback: Some(fallback), ..self }
    }

    /// The same dialer, to `endpoint` only.
    pub(crate) fn pinned(&self, endpoint: Arc<Endpoint>) -> Self
    where
        C: Clone,
    {
        Self {
            endpoints: self.endpoints.clone(),
            choice: Choice::Pinned(endpoint),
            inner: self.inner.clone(),
            fallback: self.fallback.clone(),
        }
    }
}

impl<C> tower_service::Service<Uri> for EndpointDialer<C>
where
    C: tower_service::Service<Uri, Error = BoxError> + Clone + Send + 'static,
    C::Future: Send + 'static,
    C::Response: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Each attempt readies its own clone of the inner connector.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let order = self.endpoints.order(&self.choice);
        let inner = self.inner.clone();
        let fallback = self.fallback.clone().unwrap_or_else(|| inner.clone());
        let endpoints = self.endpoints.clone();
        // A probe lane's dial (pinned) carries no traffic: only other
        // dials to a fallback server call for new connections later.
        let carries_traffic = !matches!(self.choice, Choice::Pinned(_));
        Box::pin(async move {
            let mut last = None;
            for endpoint in order {
                let mut inner = if endpoint.fallback { fallback.clone() } else { inner.clone() };
                let dialed = async {
                    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                    inner.call(endpoint.target(&uri)).await
                };
                match dialed.await {
                    Ok(conn) => {
                        endpoint.dialed(true);
                        if endpoint.fallback && carries_traffic {
                            endpoints.fallback_dialed.store(true, Ordering::Relaxed);
                        }
                        return Ok(conn);
                    }
                    Err(err) => {
                        endpoint.dialed(false);
                        tracing::debug!(endpoint = %endpoint.uri, error = %err, "dial failed; trying the next endpoint");
                        last = Some(err);
                    }
                }
            }
            Err(last.expect("at least one endpoint is tried"))
        })
    }
}

/// Parses `--upstream-servers`: `scheme://host:port` URLs, comma-separated,
/// each with the kubeconfig server's scheme and no path of its own (the
/// kubeconfig server's path prefix applies to every one).
pub(crate) fn parse_servers(flag: &str, list: &[String], kubeconfig_server: &Uri) -> Result<Vec<Uri>, String> {
    list.iter()
        .map(|s| {
            let uri: Uri = s.parse().map_err(|e| format!("--{flag}: {s:?}: {e}"))?;
            if uri.scheme() != kubeconfig_server.scheme() || uri.authority().is_none() {
                return Err(format!(
                    "--{flag}: {s:?} must be {}://host:port, as the kubeconfig's server",
                    kubeconfig_server.scheme_str().unwrap_or("https")
                ));
            }
            if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
                return Err(format!("--{flag}: {s:?} has a path; the kubeconfig server's applies to all"));
            }
            Ok(Uri::builder()
                .scheme(uri.scheme().expect("checked").clone())
                .authority(uri.authority().expect("checked").clone())
                .path_and_query("/")
                .build()
                .expect("a scheme and an authority"))
        })
        .collect()
}

/// The API servers a list of `default/kubernetes` EndpointSlices names:
/// each ready address (`conditions.ready` not false) at the slice's `https`
/// port (or its only port), with `scheme`.
pub(crate) fn from_slices(list: &serde_json::Value, scheme: &http::uri::Scheme) -> Vec<Uri> {
    let mut found = Vec::new();
    for slice in list["items"].as_array().into_iter().flatten() {
        let ports = slice["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p["name"] == "https")
            .or(if ports.len() == 1 { ports.first() } else { None })
            .and_then(|p| p["port"].as_u64());
        let Some(port) = port else { continue };
        for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
            if endpoint["conditions"]["ready"] == false {
                continue;
            }
            for address in endpoint["addresses"].as_array().into_iter().flatten().filter_map(|a| a.as_str()) {
                let host = match address.parse::<std::net::IpAddr>() {
                    Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
                    Ok(v4) => v4.to_string(),
                    Err(_) => continue,
                };
                if let Ok(uri) = format!("{scheme}://{host}:{port}/").parse() {
                    found.push(uri);
                }
            }
        }
    }
    found
}

/// The endpoint of a server URL: its scheme and authority.
pub(crate) fn endpoint_of(server: &Uri) -> Uri {
    Uri::builder()
        .scheme(server.scheme().cloned().unwrap_or(http::uri::Scheme::HTTPS))
        .authority(server.authority().cloned().expect("a server URL has an authority"))
        .path_and_query("/")
        .build()
        .expect("a scheme and an authority")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use tower_service::Service as _;

    fn endpoints(n: u16) -> Arc<Endpoints> {
        Endpoints::new((0..n).map(|i| format!("https://10.0.0.{i}:6443/").parse().unwrap()))
    }

    fn ports(order: &[Arc<Endpoint>]) -> Vec<String> {
        order.iter().map(|e| e.uri().host().unwrap().to_owned()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn preferred_is_the_first_healthy_and_spread_takes_turns() {
        let set = endpoints(3);
        assert_eq!(ports(&set.order(&Choice::Preferred)), ["10.0.0.0", "10.0.0.1", "10.0.0.2"]);
        let starts: Vec<_> = (0..3).map(|_| ports(&set.order(&Choice::Spread))[0].clone()).collect();
        assert_eq!(starts, ["10.0.0.0", "10.0.0.1", "10.0.0.2"]);
        // The first fails its probe: the others first, it last.
        set.all()[0].probed(false, false);
        assert_eq!(ports(&set.order(&Choice::Preferred)), ["10.0.0.1", "10.0.0.2", "10.0.0.0"]);
        assert_eq!(set.preferred().uri().host(), Some("10.0.0.1"));
        set.all()[0].probed(true, false);
        assert_eq!(set.preferred().uri().host(), Some("10.0.0.0"));
        // A failed dial holds an endpoint back for a while, then it is
        // preferred again.
        set.all()[0].dialed(false);
        assert_eq!(set.preferred().uri().host(), Some("10.0.0.1"));
        tokio::time::advance(DIAL_FAILURE_HOLD).await;
        assert_eq!(set.preferred().uri().host(), Some("10.0.0.0"));
    }

    /// A connector that fails for the hosts in `refuse` and counts dials.
    #[derive(Clone)]
    struct Fake {
        refuse: Arc<[&'static str]>,
        dials: Arc<AtomicU32>,
    }

    impl tower_service::Service<Uri> for Fake {
        type Response = String;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<String, BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, uri: Uri) -> Self::Future {
            self.dials.fetch_add(1, Ordering::Relaxed);
            let host = uri.host().unwrap().to_owned();
            let refused = self.refuse.contains(&host.as_str());
            Box::pin(async move { if refused { Err("refused".into()) } else { Ok(uri.to_string()) } })
        }
    }

    /// A dial refused by the first endpoint goes on to the next at once,
    /// with the request's path; the refused one is tried last afterwards.
    #[tokio::test(start_paused = true)]
    async fn a_failed_dial_moves_on_to_the_next_endpoint() {
        let set = endpoints(3);
        let fake = Fake { refuse: Arc::from(["10.0.0.0"]), dials: Default::default() };
        let mut dialer = EndpointDialer::new(set.clone(), Choice::Preferred, fake.clone());
        let conn = dialer.call("https://kubernetes.default:443/api?x=1".parse().unwrap()).await.unwrap();
        assert_eq!(conn, "https://10.0.0.1:6443/api?x=1");
        assert_eq!(fake.dials.load(Ordering::Relaxed), 2);
        let again = dialer.call("https://kubernetes.default:443/".parse().unwrap()).await.unwrap();
        assert_eq!(again, "https://10.0.0.1:6443/");
        assert_eq!(fake.dials.load(Ordering::Relaxed), 3, "the endpoint that failed is not tried first");
        // Every endpoint refusing: the last error.
        let none = Fake { refuse: Arc::from(["10.0.0.0", "10.0.0.1", "10.0.0.2"]), dials: Default::default() };
        let mut dialer = EndpointDialer::new(set.clone(), Choice::Spread, none.clone());
        assert!(dialer.call("https://k/".parse().unwrap()).await.is_err());
        assert_eq!(none.dials.load(Ordering::Relaxed), 3);
        // Pinned: that endpoint and no other.
        let mut pinned = dialer.pinned(set.all()[2].clone());
        assert!(pinned.call("https://k/".parse().unwrap()).await.is_err());
        assert_eq!(none.dials.load(Ordering::Relaxed), 4);
    }

    /// Fallback servers take nothing while a primary endpoint is healthy,
    /// Spread included; then everything, in their order; and a dial that
    /// reached one is reported once a primary is healthy again.
    #[tokio::test(start_paused = true)]
    async fn fallback_servers_take_traffic_only_while_no_primary_is_healthy() {
        let uri = |s: &str| -> Uri { s.parse().unwrap() };
        let set = Endpoints::with_fallbacks(
            [uri("https://10.0.0.0:7443/"), uri("https://10.0.0.1:7443/")],
            [uri("https://10.9.0.0:6443/"), uri("https://10.9.0.1:6443/"), uri("https://10.0.0.1:7443/")],
        );
        assert_eq!(set.all().len(), 4, "a fallback that is also a primary endpoint is one endpoint, primary");
        for _ in 0..4 {
            let spread = ports(&set.order(&Choice::Spread));
            assert!(spread[..2].iter().all(|h| h.starts_with("10.0.")), "{spread:?}");
            assert_eq!(spread[2..], ["10.9.0.0", "10.9.0.1"]);
        }
        let fake = Fake { refuse: Arc::from([]), dials: Default::default() };
        let fallback_fake = Fake { refuse: Arc::from([]), dials: Default::default() };
        let mut dialer =
            EndpointDialer::new(set.clone(), Choice::Spread, fake.clone()).with_fallback(fallback_fake.clone());
        dialer.call("https://tier/".parse().unwrap()).await.unwrap();
        assert_eq!((fake.dials.load(Ordering::Relaxed), fallback_fake.dials.load(Ordering::Relaxed)), (1, 0));
        assert!(!set.take_fallback_dialed());

        // Every primary down: the fallbacks first, in order, on their own connector.
        set.all()[0].probed(false, false);
        set.all()[1].probed(false, false);
        assert_eq!(ports(&set.order(&Choice::Preferred)), ["10.9.0.0", "10.9.0.1", "10.0.0.0", "10.0.0.1"]);
        assert_eq!(ports(&set.order(&Choice::Spread))[..2], ["10.9.0.0", "10.9.0.1"]);
        let conn = dialer.call("https://tier/api/v1/nodes".parse().unwrap()).await.unwrap();
        assert_eq!(conn, "https://10.9.0.0:6443/api/v1/nodes");
        assert_eq!((fake.dials.load(Ordering::Relaxed), fallback_fake.dials.load(Ordering::Relaxed)), (1, 1));
        assert!(!set.take_fallback_dialed(), "not while every primary is down");
        set.all()[1].probed(true, false);
        assert_eq!(set.preferred().uri().host(), Some("10.0.0.1"));
        assert!(set.take_fallback_dialed(), "a primary is back after a fallback was dialed");
        assert!(!set.take_fallback_dialed(), "reported once");
        // A probe lane's dial to a fallback server (every endpoint is
        // probed) is no reason for new connections.
        let mut probe = dialer.pinned(set.all()[2].clone());
        assert_eq!(probe.call("https://tier/readyz".parse().unwrap()).await.unwrap(), "https://10.9.0.0:6443/readyz");
        assert!(!set.take_fallback_dialed(), "a probe's dial carries no traffic");
    }

    /// Discovery keeps the servers given first and the state of endpoints
    /// that stay; ready addresses at the `https` port, IPv6 in brackets.
    #[tokio::test(start_paused = true)]
    async fn discovered_servers_follow_the_given_ones() {
        let set = Endpoints::new(["https://lb:6443/".parse().unwrap()]);
        let slices = serde_json::json!({"items": [
            {"ports": [{"name": "https", "port": 6443}], "endpoints": [
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.1"]},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
            ]},
            {"ports": [{"name": "https", "port": 443}], "endpoints": [{"addresses": ["fd00::1", "not-an-ip"]}]},
            {"ports": [{"name": "other", "port": 1}, {"name": "x", "port": 2}], "endpoints": [{"addresses": ["10.9.9.9"]}]},
        ]});
        let found = from_slices(&slices, &http::uri::Scheme::HTTPS);
        assert!(set.follow(found.clone()));
        let uris: Vec<String> = set.all().iter().map(|e| e.uri().to_string()).collect();
        assert_eq!(
            uris,
            ["https://lb:6443/", "https://10.0.0.1:6443/", "https://10.0.0.2:6443/", "https://[fd00::1]:443/"]
        );
        set.all()[1].probed(false, false);
        assert!(!set.follow(found), "the same list changes nothing");
        // 10.0.0.2 goes; 10.0.0.1 stays with its health.
        assert!(set.follow(vec!["https://10.0.0.1:6443/".parse().unwrap()]));
        let all = set.all();
        assert_eq!(all.len(), 2);
        assert!(!all[1].healthy(), "an endpoint that stays keeps its state");
    }

    #[test]
    fn servers_share_the_kubeconfig_servers_scheme_and_have_no_path() {
        let server: Uri = "https://lb:6443/prefix".parse().unwrap();
        let ok =
            parse_servers("upstream-servers", &["https://a:6443".into(), "https://10.0.0.2:6443/".into()], &server)
                .unwrap();
        assert_eq!(ok.iter().map(Uri::to_string).collect::<Vec<_>>(), ["https://a:6443/", "https://10.0.0.2:6443/"]);
        assert!(
            parse_servers("upstream-servers", &["http://a:6443".into()], &server)
                .unwrap_err()
                .contains("https://host:port")
        );
        assert!(parse_servers("upstream-servers", &["https://a:6443/x".into()], &server).unwrap_err().contains("path"));
        assert!(parse_servers("upstream-servers", &["a:6443".into()], &server).is_err());
        assert_eq!(endpoint_of(&server).to_string(), "https://lb:6443/");
    }
}
