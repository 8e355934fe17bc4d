//! A reflector-shaped watch client, as client-go's: list, then watch from
//! the list's resourceVersion; resume from the last resourceVersion seen
//! when a stream breaks; list again on 410 Gone; back off with jitter
//! between attempts. What it reads goes to a [`View`], which keeps whatever
//! the bench measures (a sequence number, a whole state).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use http::StatusCode;
use http_body_util::BodyExt;
use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::client::{Sender, Shape, Target};
use super::lines::{End, Pace, Paced, find_rv, read_lines};

/// client-go's reflector backs off from 800 ms, doubling to 30 s, with jitter.
pub const BACKOFF_START: Duration = Duration::from_millis(800);
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How many times a request a connection going away did not send is sent
/// again on another, as Go's transport retries it.
const RESENDS: usize = 3;

/// What a reflector reads, as it reads it.
pub trait View: Send + 'static {
    /// A LIST answered 200 with `body`: its resourceVersion (None: not a list).
    fn listed(&mut self, body: &[u8], now: Instant) -> Option<u64>;
    /// A watch answered 200, from `from`.
    fn watching(&mut self, _from: u64) {}
    /// One line of a watch stream other than an ERROR event.
    fn event(&mut self, line: &[u8], now: Instant);
    /// A request failed (None) or was answered other than 200 or 410.
    fn refused(&mut self, _status: Option<StatusCode>, _now: Instant) {}
    /// A watch stream stopped, not by the bench.
    fn stream_ended(&mut self, _end: &End, _now: Instant) {}
}

/// Counters every reflector of a group shares.
#[derive(Default)]
pub struct Counters {
    /// Reflectors whose first watch was answered 200.
    pub ready: AtomicUsize,
    pub watch_requests: AtomicU64,
    pub list_requests: AtomicU64,
    /// Watch streams that stopped, not by the bench.
    pub reconnects: AtomicU64,
    /// 410 Gone, as a status or an ERROR event.
    pub gone: AtomicU64,
    /// Attempts that failed or were answered other than 200 or 410.
    pub refused: AtomicU64,
    /// Watch streams that ended with an error (a reset, a cut connection),
    /// not at a clean end of their body.
    pub stream_errors: AtomicU64,
    /// Requests a connection going away (GOAWAY) did not send, sent again
    /// on a new connection: no error to the client, as with Go's transport.
    pub resent: AtomicU64,
}

impl Counters {
    /// watch requests, lists, streams broken, 410s, refused attempts.
    pub fn snapshot(&self) -> [u64; 5] {
        [&self.watch_requests, &self.list_requests, &self.reconnects, &self.gone, &self.refused]
            .map(|a| a.load(Ordering::SeqCst))
    }
}

/// One connection slot shared by the reflectors on it: made again when it breaks.
pub struct Slot {
    pub target: Target,
    pub shape: Shape,
    conn: tokio::sync::Mutex<Option<Sender>>,
}

impl Slot {
    pub fn new(target: Target, shape: Shape) -> Arc<Self> {
        Arc::new(Self { target, shape, conn: Default::default() })
    }

    pub async fn sender(&self) -> anyhow::Result<Sender> {
        let mut conn = self.conn.lock().await;
        if let Some(s) = conn.as_ref().filter(|s| !s.is_closed()) {
            return Ok(s.clone());
        }
        let s = self.target.connect(self.shape).await?;
        *conn = Some(s.clone());
        Ok(s)
    }

    /// The connection in use, if any.
    pub async fn current(&self) -> Option<Sender> {
        self.conn.lock().await.clone()
    }

    pub async fn reset(&self, broken: &Sender) {
        let mut conn = self.conn.lock().await;
        if let (Some(Sender::H2(a)), Sender::H2(b)) = (conn.as_ref(), broken)
            && !a.is_closed()
            && !b.is_closed()
        {
            return;
        }
        *conn = None;
    }
}

pub struct Reflector<V> {
    pub slot: Arc<Slot>,
    pub counters: Arc<Counters>,
    pub stop: CancellationToken,
    /// The collection, without a query.
    pub list_path: String,
    pub view: V,
    /// Start by watching from this version (the view holds what a list at
    /// it said) instead of listing.
    pub resume_from: Option<u64>,
    /// Read watch streams no faster than this (a slow client); None: at once.
    pub pace: Option<Arc<Pace>>,
    /// Each watch's timeoutSeconds, drawn from this range, as client-go's
    /// reflector draws from 5 to 10 minutes; None: the server's own.
    pub watch_timeout: Option<std::ops::Range<u64>>,
}

impl<V: View> Reflector<V> {
    /// A LIST: its resourceVersion. The first one is at resourceVersion=0 (any
    /// cached state), later ones (after 410 Gone) consistent, as client-go's
    /// reflector does.
    async fn list(&mut self, conn: &Sender, first: bool) -> anyhow::Result<u64> {
        self.counters.list_requests.fetch_add(1, Ordering::Relaxed);
        let path = if first { format!("{}?resourceVersion=0", self.list_path) } else { self.list_path.clone() };
        let resp = conn.send(self.slot.target.request(self.slot.shape, &path)).await?;
        if resp.status() != StatusCode::OK {
            self.view.refused(Some(resp.status()), Instant::now());
            bail!("LIST: {}", resp.status());
        }
        let body = resp.into_body().collect().await?.to_bytes();
        match self.view.listed(&body, Instant::now()) {
            Some(rv) => Ok(rv),
            None => bail!("LIST without a resourceVersion"),
        }
    }

    /// Lists and watches until `stop`; then gives back its view.
    pub async fn run(mut self) -> V {
        let mut rv = self.resume_from;
        let mut backoff = BACKOFF_START;
        let mut first = true;
        let stop = self.stop.clone();
        while !stop.is_cancelled() {
            if !first {
                // Jitter: a uniform factor in [1, 2), as client-go's.
                let pause = backoff.mul_f64(1.0 + rand::rng().random::<f64>());
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            let attempt = async {
                let conn = self.slot.sender().await?;
                let from = match rv {
                    Some(v) => v,
                    None => match self.list(&conn, first).await {
                        Ok(v) => v,
                        Err(e) => {
                            self.slot.reset(&conn).await;
                            return Err(e);
                        }
                    },
                };
                self.counters.watch_requests.fetch_add(1, Ordering::Relaxed);
                let mut path = format!("{}?watch=1&allowWatchBookmarks=true&resourceVersion={from}", self.list_path);
                if let Some(range) = self.watch_timeout.clone() {
                    path.push_str(&format!("&timeoutSeconds={}", rand::random_range(range)));
                }
                // As Go's HTTP/2 transport (client-go's) does: a request a
                // connection going away never sent goes on a new one, a few
                // times at most.
                let mut conn = conn;
                let mut resends = 0;
                let sent = loop {
                    match conn.send(self.slot.target.request(self.slot.shape, &path)).await {
                        Err(e) if unsent(&e) && resends < RESENDS => {
                            resends += 1;
                            self.counters.resent.fetch_add(1, Ordering::Relaxed);
                            self.slot.reset(&conn).await;
                            conn = self.slot.sender().await?;
                        }
                        sent => break sent.map(|r| (conn, r)),
                    }
                };
                match sent {
                    Ok((conn, r)) => anyhow::Ok((conn, from, r)),
                    Err(e) => {
                        if let Some(conn) = self.slot.current().await {
                            self.slot.reset(&conn).await;
                        }
                        Err(e)
                    }
                }
            };
            // A server that never answers must not keep the bench from stopping.
            let attempt = tokio::select! {
                _ = stop.cancelled() => break,
                a = attempt => a,
            };
            let (conn, from, resp) = match attempt {
                Ok(x) => x,
                Err(_) => {
                    self.counters.refused.fetch_add(1, Ordering::Relaxed);
                    self.view.refused(None, Instant::now());
                    first = false;
                    continue;
                }
            };
            if resp.status() == StatusCode::GONE {
                self.counters.gone.fetch_add(1, Ordering::Relaxed);
                rv = None;
                first = false;
                continue;
            }
            if resp.status() != StatusCode::OK {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                self.view.refused(Some(resp.status()), Instant::now());
                // client-go retries the watch only when refused for load
                // (429) or a server error; on anything else (a 404 for a
                // deleted CRD) it lists again.
                if !(resp.status() == StatusCode::TOO_MANY_REQUESTS || resp.status().is_server_error()) {
                    rv = None;
                }
                first = false;
                continue;
            }
            if first {
                self.counters.ready.fetch_add(1, Ordering::Relaxed);
            }
            first = false;
            self.view.watching(from);
            let mut last = from;
            let mut gone = false;
            let view = &mut self.view;
            let body = Paced::new(resp.into_body(), self.pace.clone());
            let end = read_lines(body, &stop, |line, now| {
                if line.starts_with(b"{\"type\":\"ERROR\"") {
                    // 410 Gone (expired): list again.
                    if line.windows(5).any(|w| w == b"\"410\"" || w == b":410,") || line.ends_with(b":410}}") {
                        gone = true;
                    }
                    return;
                }
                if let Some(v) = find_rv(line) {
                    last = last.max(v);
                }
                view.event(line, now);
            })
            .await;
            if end == End::Cancelled {
                break;
            }
            self.view.stream_ended(&end, Instant::now());
            backoff = BACKOFF_START;
            self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
            if gone {
                self.counters.gone.fetch_add(1, Ordering::Relaxed);
                rv = None;
            } else {
                rv = Some(last);
            }
            if matches!(end, End::Error(_)) {
                self.counters.stream_errors.fetch_add(1, Ordering::Relaxed);
                self.slot.reset(&conn).await;
            }
        }
        self.view
    }
}

/// Whether a request failed without being sent, because its HTTP/2
/// connection was going away (a graceful GOAWAY, a stream refused past it)
/// or already closed: Go's transport retries such a request on a new
/// connection by itself.
fn unsent(err: &anyhow::Error) -> bool {
    let Some(err) = err.downcast_ref::<hyper::Error>() else { return false };
    if err.is_canceled() || err.is_closed() {
        return true;
    }
    let h2 = std::error::Error::source(err).and_then(|e| e.downcast_ref::<h2::Error>());
    h2.is_some_and(|e| {
        let graceful_goaway = e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR);
        graceful_goaway || e.reason() == Some(h2::Reason::REFUSED_STREAM)
    })
}
