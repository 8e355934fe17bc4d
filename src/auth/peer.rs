//! What is known of the downstream connection a request came on: where from,
//! the identity its verified client certificate proves, whether it is
//! over the connection limit, its place in a user's share, and when its
//! watch streams end. Authentication starts from it; the listener fills it
//! in.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::cert::ClientCert;

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
    pub connection: Option<Arc<dyn UserShare>>,
    /// Cancelled when the connection's watch streams are to end, as at a
    /// graceful shutdown (whose own token cancels it too): at its maximum
    /// age (`server::connection::max_age`). `None`: at the shutdown alone.
    pub streams_stop: Option<CancellationToken>,
}

/// A connection's place in its user's share of connections (the listener's
/// connection budget implements it; authentication only says who).
pub(crate) trait UserShare: std::fmt::Debug + Send + Sync {
    /// Counts the connection against `user`'s share when it is the first
    /// authenticated, non-anonymous user on it; false when `user` already
    /// holds its share and the request is to be refused.
    fn claim(&self, user: &str) -> bool;
}
