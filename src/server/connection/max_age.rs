//! The maximum connection age (`--max-connection-age`): balance after a
//! rollout for clients that make few requests.
//!
//! `--goaway-chance` moves a connection at one of its requests; a
//! kubelet-shaped client holds one HTTP/2 connection for its whole life,
//! with a handful of long watches on it and few other requests, so after a
//! rollout its connection stays on the replica it reached first for hours.
//! With a maximum age, each HTTP/2 connection is finished once it is that
//! old, as gRPC's `MaxConnectionAge` does: a graceful GOAWAY (the client
//! opens no new stream on it and goes through the load balancer again), and
//! its watch streams, cached or passed through, end as at a graceful
//! shutdown, so their clients watch again from their resourceVersion on the
//! new connection (no error, no 410, no LIST). Other requests on it run to
//! their end, for at most the grace (gRPC's `MaxConnectionAgeGrace`); then
//! the connection is closed.
//!
//! Each connection's age is drawn within ±[`JITTER`] of the flag's, so the
//! connections a rollout moved at once do not all age out at once again.
//! HTTP/1.1 needs none: a watch ends at its `timeoutSeconds` (or the
//! randomised `MIN_REQUEST_TIMEOUT`, 30 to 60 minutes) and the client makes
//! it again on a new connection through the load balancer. The listener
//! applies it (see `super::listener`) on the API's TCP listener only: the
//! admin port and a unix socket have nothing in front to balance.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rand::Rng;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

/// How far one connection's age may be from the flag's, either way, as a
/// fraction of it: gRPC's jitter.
pub(crate) const JITTER: f64 = 0.1;

/// `--max-connection-age` and `--max-connection-age-grace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaxConnectionAge {
    /// The age, before jitter.
    pub age: Duration,
    /// How long requests other than watches still have once the age is
    /// reached.
    pub grace: Duration,
}

impl MaxConnectionAge {
    /// The maximum age `age` with `grace`; `None` (no maximum) when `age` is
    /// zero, the flag's default.
    pub(crate) fn new(age: Duration, grace: Duration) -> Option<Self> {
        (!age.is_zero()).then_some(Self { age, grace })
    }

    /// One connection's age, drawn afresh within the jitter.
    fn draw(self) -> Duration {
        self.age_for(rand::rng().random_range(-1.0..=1.0))
    }

    /// The age for a draw `spread` in [-1, 1]: the flag's, moved by that
    /// share of the jitter.
    fn age_for(self, spread: f64) -> Duration {
        self.age.mul_f64(1.0 + JITTER * spread.clamp(-1.0, 1.0))
    }
}

/// Where a connection's maximum age stands.
enum Stage {
    /// Serving until the age.
    Young,
    /// Finished at its age: its other requests have until the grace's end.
    InGrace,
    /// The grace is over: nothing more to say.
    Over,
}

/// One HTTP/2 connection's maximum age: when it is reached, its watch
/// streams (served with [`Self::streams_stop`]) are ended, and after the
/// grace the connection's time is over.
pub(crate) struct ConnectionAge {
    limit: MaxConnectionAge,
    sleep: Pin<Box<Sleep>>,
    stage: Stage,
    streams: CancellationToken,
}

/// What the connection should do now that its maximum age says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgeAction {
    /// The age is reached: GOAWAY, and its watch streams end.
    Finish,
    /// The grace is over too: close the connection.
    Close,
}

impl ConnectionAge {
    /// The age of a connection accepted now, whose watch streams end with
    /// `streams` (a child of the server's own, so that a shutdown ends them
    /// too).
    pub(crate) fn new(limit: MaxConnectionAge, streams: CancellationToken) -> Self {
        Self::with_age(limit, limit.draw(), streams)
    }

    fn with_age(limit: MaxConnectionAge, age: Duration, streams: CancellationToken) -> Self {
        Self { limit, sleep: Box::pin(tokio::time::sleep(age)), stage: Stage::Young, streams }
    }

    /// The token the connection's watch streams end with.
    pub(crate) fn streams_stop(&self) -> &CancellationToken {
        &self.streams
    }

    /// [`AgeAction::Finish`] once at the age (the streams are ended by then),
    /// [`AgeAction::Close`] once at the grace's end, then pending for ever.
    pub(crate) fn poll_action(&mut self, cx: &mut Context<'_>) -> Poll<AgeAction> {
        if matches!(self.stage, Stage::Over) || self.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        match self.stage {
            Stage::Young => {
                self.stage = Stage::InGrace;
                self.streams.cancel();
                let grace_end = Instant::now() + self.limit.grace;
                self.sleep.as_mut().reset(grace_end);
                Poll::Ready(AgeAction::Finish)
            }
            Stage::InGrace => {
                self.stage = Stage::Over;
                Poll::Ready(AgeAction::Close)
            }
            Stage::Over => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGE: Duration = Duration::from_secs(600);
    const GRACE: Duration = Duration::from_secs(60);

    fn limit() -> MaxConnectionAge {
        MaxConnectionAge::new(AGE, GRACE).unwrap()
    }

    #[test]
    fn zero_is_no_maximum_age() {
        assert_eq!(MaxConnectionAge::new(Duration::ZERO, GRACE), None);
        assert_eq!(limit(), MaxConnectionAge { age: AGE, grace: GRACE });
    }

    /// Ages are spread over ±10 % of the flag's, so that a rollout's
    /// connections do not all end together; never outside it.
    #[test]
    fn each_age_is_within_the_jitter_and_they_spread() {
        assert_eq!(limit().age_for(-1.0), Duration::from_secs(540));
        assert_eq!(limit().age_for(1.0), Duration::from_secs(660));
        assert_eq!(limit().age_for(0.0), AGE);
        assert_eq!(limit().age_for(7.0), Duration::from_secs(660), "clamped");
        let ages: Vec<Duration> = (0..1_000).map(|_| limit().draw()).collect();
        assert!(ages.iter().all(|a| (Duration::from_secs(540)..=Duration::from_secs(660)).contains(a)));
        let (min, max) = (ages.iter().min().unwrap(), ages.iter().max().unwrap());
        assert!(*max - *min > Duration::from_secs(100), "ages not spread: {min:?} to {max:?}");
    }

    /// At the age: Finish, with the streams' token cancelled (and not the
    /// server's); at the grace's end: Close; nothing before either.
    #[tokio::test(start_paused = true)]
    async fn finish_at_the_age_then_close_at_the_grace_end() {
        let server = CancellationToken::new();
        let mut age = ConnectionAge::with_age(limit(), AGE, server.child_token());
        let waker = futures_util::task::noop_waker();
        let poll = |age: &mut ConnectionAge| age.poll_action(&mut Context::from_waker(&waker));
        assert_eq!(poll(&mut age), Poll::Pending);
        tokio::time::advance(AGE - Duration::from_millis(1)).await;
        assert_eq!(poll(&mut age), Poll::Pending, "before the age");
        assert!(!age.streams_stop().is_cancelled());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(poll(&mut age), Poll::Ready(AgeAction::Finish));
        assert!(age.streams_stop().is_cancelled());
        assert!(!server.is_cancelled(), "one connection's age ends its own streams only");
        tokio::time::advance(GRACE - Duration::from_millis(1)).await;
        assert_eq!(poll(&mut age), Poll::Pending, "within the grace");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(poll(&mut age), Poll::Ready(AgeAction::Close));
        assert_eq!(poll(&mut age), Poll::Pending, "said once");
    }

    /// A shutdown ends the connection's streams through the server's token.
    #[tokio::test]
    async fn the_servers_token_ends_the_connections_streams() {
        let server = CancellationToken::new();
        let age = ConnectionAge::with_age(limit(), AGE, server.child_token());
        server.cancel();
        assert!(age.streams_stop().is_cancelled());
    }
}
