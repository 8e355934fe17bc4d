//! The watchmux binary: parse flags, set up logging, run.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use watchmux::config::{Args, LogFormat};

fn main() -> ExitCode {
    // The chart's static-pod installer runs the image's one binary (no shell).
    if std::env::args().nth(1).as_deref() == Some(watchmux::install::SUBCOMMAND) {
        return match watchmux::install::main(std::env::args().skip(2)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("{err}");
                ExitCode::FAILURE
            }
        };
    }
    let args = Args::parse();
    // RUST_LOG wins over -v when set; one that does not parse is ignored
    // (-v's level then), as before -v existed.
    let rust_log = std::env::var(EnvFilter::DEFAULT_ENV).ok();
    let filter = EnvFilter::try_new(args.log_filter_directives(rust_log.as_deref()))
        .unwrap_or_else(|_| EnvFilter::new(args.log_filter_directives(None)));
    // Colours only for a person at a terminal: a log collector would keep
    // the escape codes as text.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match args.logging_format {
        LogFormat::Text => subscriber.init(),
        LogFormat::Json => subscriber.json().init(),
    }
    watchmux::allocator::start();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(watchmux::run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Logged once, in the log's own format; not printed again on exit.
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}
