//! Configuration from the environment the bench scripts set.

use anyhow::{Context as _, anyhow};

/// A required variable; the message names the script that sets it.
pub fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set (run the integration/scripts/bench-*.sh script)"))
}

/// An optional variable, parsed, or its default.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| anyhow!("{name}={v:?} does not parse")),
        _ => Ok(default),
    }
}

/// A comma- or space-separated list, each item parsed, or the default.
pub fn env_list<T: std::str::FromStr>(name: &str, default: &str) -> anyhow::Result<Vec<T>> {
    let text = std::env::var(name).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_owned());
    text.split([',', ' '])
        .filter(|s| !s.is_empty())
        .map(|s| s.trim().parse().map_err(|_| anyhow!("{name}: {s:?} does not parse")))
        .collect()
}

/// Where the machine-readable results go (`BENCH_OUT`), if anywhere.
pub fn write_results(value: &serde_json::Value) -> anyhow::Result<()> {
    if let Ok(path) = std::env::var("BENCH_OUT")
        && !path.is_empty()
    {
        std::fs::write(&path, serde_json::to_vec_pretty(value)?).with_context(|| format!("writing {path}"))?;
        eprintln!("bench: results written to {path}");
    }
    Ok(())
}
