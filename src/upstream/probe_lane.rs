//! The probe lane: the connection the readiness probe and the freshness
//! proofs of consistent reads go on, apart from the one carrying watchmux's
//! watches and lists.
//!
//! With one connection for everything, a connection that froze (half-open:
//! no bytes, no close; new connections still work) took the probe down
//! with the watches: `/readyz` called the whole upstream unresponsive, and
//! consistent reads waited on proofs that could not come, until keep-alive
//! gave the connection up. Apart, the probe answers for the upstream, not
//! for one connection. And since the lane itself may freeze, a probe or
//! proof that goes unanswered within its bound replaces the lane's pool:
//! the next one dials afresh instead of queueing behind the frozen stream
//! (a timed-out HTTP/2 stream would otherwise leave its connection pooled
//! until keep-alive closes it).

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;

use super::{HttpsClient, SendError, UpstreamConnector};
use crate::body::ProxyBody;

/// A pooled client that is replaced when a request on it goes unanswered.
pub(super) struct ProbeLane {
    connector: UpstreamConnector,
    build: fn(UpstreamConnector) -> HttpsClient,
    /// The client, and its generation: how many times it was replaced.
    client: parking_lot::Mutex<(u64, HttpsClient)>,
}

impl ProbeLane {
    /// A lane whose clients `build` makes over `connector`.
    pub(super) fn new(connector: UpstreamConnector, build: fn(UpstreamConnector) -> HttpsClient) -> Self {
        let client = parking_lot::Mutex::new((0, build(connector.clone())));
        Self { connector, build, client }
    }

    /// Sends `req`; with no response headers within `limit`, the lane gets
    /// a new pool (the old connection closes with its last request) and
    /// the answer is [`SendError::ProbeTimeout`].
    pub(super) async fn send(&self, req: Request<ProxyBody>, limit: Duration) -> Result<Response<Incoming>, SendError> {
        let (generation, client) = self.client.lock().clone();
        match tokio::time::timeout(limit, client.request(req)).await {
            Ok(answer) => Ok(answer?),
            Err(_) => {
                let mut current = self.client.lock();
                // Once per frozen pool, not once per request that waited on it.
                if current.0 == generation {
                    *current = (generation + 1, (self.build)(self.connector.clone()));
                    tracing::info!(?limit, "no answer on the probe connection: dialing a new one");
                }
                Err(SendError::ProbeTimeout(limit))
            }
        }
    }
}
