//! Tunnelling of HTTP/1.1 upgrades: `kubectl exec`, `attach` and
//! `port-forward` switch the connection to SPDY/3.1 or WebSocket. watchmux
//! forwards the handshake, and once the upstream answers 101 it splices the
//! two raw connections together until either side closes.

use http::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics::{counter, gauge};

use super::{Passthrough, Peer, headers, set_identity};
use crate::auth::UpstreamIdentity;
use crate::body::{self, ProxyBody, RequestBody};
use crate::metrics as m;
use crate::request::RequestInfo;
use crate::upstream::ConnectionKind;

pub(super) async fn forward(
    pass: &Passthrough,
    mut req: Request<RequestBody>,
    peer: Peer,
    info: &RequestInfo,
    identity: &UpstreamIdentity,
) -> Response<ProxyBody> {
    let verb = info.verb_label();
    let downstream_upgrade = hyper::upgrade::on(&mut req);
    let (mut parts, incoming) = req.into_parts();
    headers::remove_hop_by_hop_keep_upgrade(&mut parts.headers);
    if let Some(addr) = peer.addr {
        headers::append_forwarded_for(&mut parts.headers, addr.ip());
    }
    // Last, as for every other request: see `identity`.
    if let Err(refusal) = set_identity(&mut parts.headers, identity) {
        return *refusal;
    }
    let upstream_req = Request::from_parts(parts, body::boxed(incoming));
    let mut resp = match pass.upstream.send_as(upstream_req, &identity.credential(), ConnectionKind::Upgrade).await {
        Ok(resp) => {
            pass.failures.succeeded();
            resp
        }
        Err(err) => return pass.upstream_failure(&err, verb, info),
    };
    let resource = pass.resources.label(info, Some(resp.status()));
    counter!(m::PASSTHROUGH_REQUESTS, "verb" => verb, "resource" => resource, "code" => resp.status().as_str().to_owned())
        .increment(1);

    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // The upstream refused the upgrade (403, 404, 400...): pass its
        // answer on as an ordinary response.
        let (mut parts, incoming) = resp.into_parts();
        headers::remove_hop_by_hop(&mut parts.headers);
        return Response::from_parts(parts, body::boxed(incoming));
    }

    let upstream_upgrade = hyper::upgrade::on(&mut resp);
    let span =
        tracing::debug_span!("tunnel", peer = ?peer.addr, resource = %info.resource, subresource = ?info.subresource);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let (down, up) = match tokio::try_join!(downstream_upgrade, upstream_upgrade) {
                Ok(pair) => pair,
                Err(err) => {
                    tracing::debug!(error = %err, "upgrade did not complete");
                    return;
                }
            };
            gauge!(m::UPGRADED_TUNNELS).increment(1.0);
            let (mut down, mut up) = (TokioIo::new(down), TokioIo::new(up));
            match tokio::io::copy_bidirectional(&mut down, &mut up).await {
                Ok((to_up, to_down)) => tracing::debug!(to_up, to_down, "tunnel closed"),
                Err(err) => tracing::debug!(error = %err, "tunnel ended with an error"),
            }
            gauge!(m::UPGRADED_TUNNELS).decrement(1.0);
        },
        span,
    ));

    // The 101 goes back with the upstream's handshake headers (Upgrade,
    // Connection, Sec-WebSocket-Accept, X-Stream-Protocol-Version) intact.
    let (parts, _) = resp.into_parts();
    Response::from_parts(parts, body::empty())
}
