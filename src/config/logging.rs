//! Which log lines are written: klog's `-v` verbosity, the habit of every
//! Kubernetes component, mapped onto tracing's levels, and `RUST_LOG`, the
//! tracing habit, which wins when it is set.

/// `-v` to tracing directives for watchmux's own targets. klog's levels
/// are by convention 0-1 the default information, 2 the useful steady-state
/// detail, 4 debugging, 5+ tracing; tracing has info, debug and trace, so
/// 2-4 are debug and 5 and up trace. Libraries (hyper, h2, rustls) stay at
/// info: their debug lines are per frame, and `RUST_LOG` reaches them.
fn verbosity_directives(verbosity: u8) -> &'static str {
    match verbosity {
        0 | 1 => "info",
        2..=4 => "info,watchmux=debug",
        _ => "info,watchmux=trace",
    }
}

impl super::Args {
    /// The tracing filter's directives: `RUST_LOG` (`rust_log`) when it is
    /// set and not empty, whatever `-v` says; else `-v`'s.
    pub fn log_filter_directives(&self, rust_log: Option<&str>) -> String {
        match rust_log.map(str::trim) {
            Some(directives) if !directives.is_empty() => directives.to_owned(),
            _ => verbosity_directives(self.verbosity).to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::super::Args;

    fn directives(flags: &[&str], rust_log: Option<&str>) -> String {
        let argv = std::iter::once("watchmux").chain(flags.iter().copied());
        Args::try_parse_from(argv).unwrap().log_filter_directives(rust_log)
    }

    #[test]
    fn klog_levels_map_onto_tracings() {
        assert_eq!(directives(&[], None), "info");
        for (flags, want) in [
            (&["-v", "1"][..], "info"),
            (&["-v=2"], "info,watchmux=debug"),
            (&["-v4"], "info,watchmux=debug"),
            (&["--v=5"], "info,watchmux=trace"),
            (&["--v", "10"], "info,watchmux=trace"),
        ] {
            assert_eq!(directives(flags, None), want, "{flags:?}");
        }
    }

    #[test]
    fn rust_log_wins_when_set() {
        assert_eq!(directives(&["--v=4"], Some("warn,h2=trace")), "warn,h2=trace");
        assert_eq!(directives(&[], Some("debug")), "debug");
        assert_eq!(directives(&["--v=2"], Some("")), "info,watchmux=debug", "RUST_LOG= is unset");
    }

    #[test]
    fn verbosity_is_klogs_range() {
        let parse = |flags: &[&str]| Args::try_parse_from(std::iter::once("watchmux").chain(flags.iter().copied()));
        assert!(parse(&["--v=11"]).is_err());
        assert!(parse(&["-v", "-1"]).is_err());
        assert!(parse(&["--v=high"]).is_err());
    }
}
