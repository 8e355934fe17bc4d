//! The watchmux binary: parse flags, set up logging, run.

use clap::Parser;
use tracing_subscriber::EnvFilter;
use watchmux::config::{Args, LogFormat};

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => subscriber.init(),
        LogFormat::Json => subscriber.json().init(),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(watchmux::run(args)).inspect_err(|err| tracing::error!("{err:#}"))
}
