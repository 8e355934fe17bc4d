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
//! An endpoint is unhealthy while its last readiness probe failed, or for
//! [`DIAL_FAILURE_HOLD`] after a dial to it failed; unhealthy endpoints are
//! still tried, last, so that an upstream whose every endpoint looks down
//! is tried anyway. A dial that fails moves on to the next endpoint at once:
//! a request that never reached an API server is sent to another.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    state: parking_lot::Mutex<Health>,
}

#[derive(Debug, Default)]
struct Health {
    /// When a dial to it last failed, if it has not succeeded since.
    dial_failed_at: Option<Instant>,
    /// The last readiness probe's verdict (`None`: not probed yet).
    probed_ready: Option<bool>,
}

impl Endpoint {
    fn new(uri: Uri) -> Arc<Self> {
        Arc::new(Self { uri, state: Default::default() })
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
        self.state.lock().probed_ready = Some(ready);
        if gauge {
            metrics::gauge!(m::UPSTREAM_ENDPOINT_READY, "endpoint" => self.uri.to_string())
                .set(f64::from(u8::from(ready)));
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

/// The upstream's endpoints, in the order given.
#[derive(Debug)]
pub(crate) struct Endpoints {
    list: parking_lot::RwLock<Arc<[Arc<Endpoint>]>>,
    /// The endpoints given: first, whatever discovery finds.
    seeds: Vec<Uri>,
    /// Where [`Choice::Spread`] starts next.
    next: AtomicUsize,
}

impl Endpoints {
    /// The endpoints `uris` name (`scheme://host:port`), in that order.
    pub(crate) fn new(uris: impl IntoIterator<Item = Uri>) -> Arc<Self> {
        let seeds: Vec<Uri> = uris.into_iter().collect();
        assert!(!seeds.is_empty(), "an upstream has at least one endpoint");
        let list: Arc<[_]> = seeds.iter().cloned().map(Endpoint::new).collect();
        Arc::new(Self { list: parking_lot::RwLock::new(list), seeds, next: AtomicUsize::new(0) })
    }

    /// The endpoints given, then `discovered` (those not given already):
    /// an endpoint in both lists keeps its state. True when the list changed.
    pub(crate) fn follow(&self, mut discovered: Vec<Uri>) -> bool {
        discovered.sort_by_key(Uri::to_string);
        discovered.dedup();
        let wanted: Vec<Uri> =
            self.seeds.iter().cloned().chain(discovered.into_iter().filter(|d| !self.seeds.contains(d))).collect();
        let mut list = self.list.write();
        if list.iter().map(|e| &e.uri).eq(wanted.iter()) {
            return false;
        }
        let kept: Arc<[_]> = wanted
            .into_iter()
            .map(|uri| list.iter().find(|e| e.uri == uri).cloned().unwrap_or_else(|| Endpoint::new(uri)))
            .collect();
        *list = kept;
        true
    }

    /// Every endpoint, in the order given.
    pub(crate) fn all(&self) -> Arc<[Arc<Endpoint>]> {
        self.list.read().clone()
    }

    /// The endpoints a dial tries, in turn: the healthy ones in `choice`'s
    /// order, then the others in the same order.
    pub(crate) fn order(&self, choice: &Choice) -> Vec<Arc<Endpoint>> {
        let list = self.all();
        let rotated: Vec<_> = match choice {
            Choice::Pinned(endpoint) => return vec![endpoint.clone()],
            Choice::Preferred => list.to_vec(),
            Choice::Spread => {
                let start = self.next.fetch_add(1, Ordering::Relaxed) % list.len();
                list[start..].iter().chain(&list[..start]).cloned().collect()
            }
        };
        let (mut healthy, down): (Vec<_>, Vec<_>) = rotated.into_iter().partition(|e| e.healthy());
        healthy.extend(down);
        healthy
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
}

impl<C> EndpointDialer<C> {
    pub(crate) fn new(endpoints: Arc<Endpoints>, choice: Choice, inner: C) -> Self {
        Self { endpoints, choice, inner }
    }

    /// The same dialer, to `endpoint` only.
    pub(crate) fn pinned(&self, endpoint: Arc<Endpoint>) -> Self
    where
        C: Clone,
    {
        Self { endpoints: self.endpoints.clone(), choice: Choice::Pinned(endpoint), inner: self.inner.clone() }
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
        Box::pin(async move {
            let mut last = None;
            for endpoint in order {
                let mut inner = inner.clone();
                let dialed = async {
                    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                    inner.call(endpoint.target(&uri)).await
                };
                match dialed.await {
                    Ok(conn) => {
                        endpoint.dialed(true);
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
pub(crate) fn parse_servers(list: &[String], kubeconfig_server: &Uri) -> Result<Vec<Uri>, String> {
    list.iter()
        .map(|s| {
            let uri: Uri = s.parse().map_err(|e| format!("--upstream-servers: {s:?}: {e}"))?;
            if uri.scheme() != kubeconfig_server.scheme() || uri.authority().is_none() {
                return Err(format!(
                    "--upstream-servers: {s:?} must be {}://host:port, as the kubeconfig's server",
                    kubeconfig_server.scheme_str().unwrap_or("https")
                ));
            }
            if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
                return Err(format!("--upstream-servers: {s:?} has a path; the kubeconfig server's applies to all"));
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
        let ok = parse_servers(&["https://a:6443".into(), "https://10.0.0.2:6443/".into()], &server).unwrap();
        assert_eq!(ok.iter().map(Uri::to_string).collect::<Vec<_>>(), ["https://a:6443/", "https://10.0.0.2:6443/"]);
        assert!(parse_servers(&["http://a:6443".into()], &server).unwrap_err().contains("https://host:port"));
        assert!(parse_servers(&["https://a:6443/x".into()], &server).unwrap_err().contains("path"));
        assert!(parse_servers(&["a:6443".into()], &server).is_err());
        assert_eq!(endpoint_of(&server).to_string(), "https://lb:6443/");
    }
}
