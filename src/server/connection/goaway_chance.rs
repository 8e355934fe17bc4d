//! The GOAWAY chance (`--goaway-chance`): balance after a rollout.
//!
//! HTTP/2 clients keep one connection for as long as it works, so behind a
//! load balancer (a Service, an LB in front of a tier) the replica that
//! came up first after a rollout keeps most of the connections, and the last
//! one almost none, until clients restart. kube-apiserver has the same
//! problem and `--goaway-chance` for it (k8s.io/apiserver's
//! `WithProbabilisticGoaway`): each HTTP/2 request, of any kind, has this
//! chance of having its answer end its connection gracefully (GOAWAY: the
//! client opens no new stream on it and goes through the load balancer again
//! for the next request, while the streams already open, a watch among them,
//! run to their own ends). No client sees an error, and the connections
//! spread out again over minutes.
//!
//! The chance is capped as kube-apiserver's is, at 0.02 (one request in
//! fifty), and refused with its message past that; 0 (the default) never
//! sends one. HTTP/1.1 needs none: a watch on HTTP/1.1 ends at its
//! `timeoutSeconds` (or the randomised `MIN_REQUEST_TIMEOUT`) and is made
//! again on a new connection that goes through the load balancer, and
//! kube-apiserver applies the chance to HTTP/2 alone too. The listener
//! applies it (see [`super::activity`]) on the API's TCP listener only: the
//! admin port and a unix socket have no load balancer in front to balance.

use rand::Rng;

/// The largest chance accepted, as kube-apiserver's: one request in fifty.
/// More would end connections faster than clients' requests are worth
/// the new connections (a TLS handshake each).
pub(crate) const MAX_GOAWAY_CHANCE: f64 = 0.02;

/// The chance, per HTTP/2 request, that its answer ends its connection with
/// GOAWAY: between 0 and [`MAX_GOAWAY_CHANCE`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GoawayChance(f64);

impl GoawayChance {
    /// Never: `--goaway-chance`'s default, and the admin listener's.
    pub(crate) const NEVER: Self = Self(0.0);

    /// Every request: past the flag's cap, for tests that must see a GOAWAY.
    #[cfg(test)]
    pub(crate) const ALWAYS: Self = Self(1.0);

    /// The chance `chance`, refused (with kube-apiserver's message) outside 0
    /// to [`MAX_GOAWAY_CHANCE`], NaN included.
    pub(crate) fn new(chance: f64) -> Result<Self, String> {
        if (0.0..=MAX_GOAWAY_CHANCE).contains(&chance) {
            Ok(Self(chance))
        } else {
            Err(format!("--goaway-chance can not be less than 0 or greater than {MAX_GOAWAY_CHANCE}"))
        }
    }

    /// Whether this request's answer ends its connection, drawn afresh.
    pub(crate) fn roll(self) -> bool {
        // No draw at all when off, which is the default.
        self.0 > 0.0 && self.decide(&mut rand::rng())
    }

    /// The decision, for a draw from `rng`: true with the chance. A draw is
    /// in [0, 1), so a chance of 0 is never and of 1 always.
    fn decide(self, rng: &mut impl Rng) -> bool {
        self.decide_draw(rng.random::<f64>())
    }

    fn decide_draw(self, draw: f64) -> bool {
        draw < self.0
    }
}

/// `--goaway-chance`'s value parser: a number in [`GoawayChance::new`]'s
/// range, so that a bad one is refused before anything starts.
pub(crate) fn parse_goaway_chance(s: &str) -> Result<f64, String> {
    let chance: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number"))?;
    GoawayChance::new(chance).map(|_| chance)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    /// How many of `draws` draws from a seeded generator say GOAWAY.
    fn goaways(chance: GoawayChance, draws: usize) -> usize {
        let mut rng = StdRng::seed_from_u64(45);
        (0..draws).filter(|_| chance.decide(&mut rng)).count()
    }

    #[test]
    fn a_chance_of_zero_never_sends_goaway_and_one_always_does() {
        assert_eq!(goaways(GoawayChance::NEVER, 100_000), 0);
        assert!(!GoawayChance::NEVER.roll());
        assert!(!GoawayChance::NEVER.decide_draw(0.0), "the smallest draw");
        assert_eq!(goaways(GoawayChance::ALWAYS, 100_000), 100_000);
        assert!(GoawayChance::ALWAYS.roll());
        assert!(GoawayChance::ALWAYS.decide_draw(1.0 - f64::EPSILON), "the largest draw");
    }

    #[test]
    fn a_draw_below_the_chance_sends_goaway_and_one_at_it_does_not() {
        let chance = GoawayChance::new(0.001).unwrap();
        assert!(chance.decide_draw(0.0));
        assert!(chance.decide_draw(0.000_999));
        assert!(!chance.decide_draw(0.001));
        assert!(!chance.decide_draw(0.5));
    }

    /// The rate over many requests is the chance: 0.02 of 100,000 is 2,000,
    /// whose binomial standard deviation is about 44.
    #[test]
    fn the_rate_of_goaways_is_the_chance() {
        let sent = goaways(GoawayChance::new(MAX_GOAWAY_CHANCE).unwrap(), 100_000);
        assert!((1_800..2_200).contains(&sent), "{sent} GOAWAYs in 100,000 requests");
    }

    #[test]
    fn the_flag_takes_zero_to_the_cap_and_refuses_the_rest_as_kube_apiserver() {
        assert_eq!(parse_goaway_chance("0"), Ok(0.0));
        assert_eq!(parse_goaway_chance("0.001"), Ok(0.001));
        assert_eq!(parse_goaway_chance(" 0.02"), Ok(MAX_GOAWAY_CHANCE));
        assert_eq!(GoawayChance::new(0.001), Ok(GoawayChance(0.001)));
        for bad in ["0.0201", "-0.001", "1", "NaN", "inf"] {
            assert_eq!(
                parse_goaway_chance(bad),
                Err("--goaway-chance can not be less than 0 or greater than 0.02".to_owned()),
                "{bad}"
            );
        }
        assert!(parse_goaway_chance("often").unwrap_err().contains("not a number"));
    }
}
