//! What is known of the downstream connection a request came on: where from,
//! the identity its verified client certificate proves, whether it is
//! over the connection limit, and its place in a user's share. Authentication starts from it; the listener
//! fills it in.

use std::net::SocketAddr;

use super::cert::ClientCert;
use crate::server::gates::connections::ConnectionClaim;

/// What the proxy knows about the downstream connection a request came on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Peer {
    /// The client's address; `None` on a unix socket.
    pub addr: Option<SocketAddr>,
    /// The client certificate verified during the TLS handshake (only with
    /// `--client-ca-file`): who it says the client is while its chain is
    /// valid, or why the API server would not accept it as anyone.
    pub client_cert: Option<ClientCert>,
    /// The connection is over `--max-connections`: its requests get 429.
    pub over_connection_limit: bool,
    /// The connection's place in its user's share of connections; `None`
    /// without a connection budget.
    pub connection: Option<ConnectionClaim>,
}
