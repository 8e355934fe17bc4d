//! The peak of a process's resident memory over a phase: /proc sampled every
//! 20 ms (or as often as asked) by a task of its own (a peak between two
//! samples is missed, so the figure is a lower bound of the true peak, within
//! a sampling period of allocation).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::procfs::rss_bytes;

pub struct PeakRss {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    pub fn start(pid: u32) -> Self {
        Self::every(pid, Duration::from_millis(20))
    }

    /// Sampled every `period`.
    pub fn every(pid: u32, period: Duration) -> Self {
        let peak = Arc::new(AtomicU64::new(rss_bytes(pid).unwrap_or(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (peak, stop) = (peak.clone(), stop.clone());
            async move {
                let mut tick = tokio::time::interval(period);
                // Bounded: a phase that forgets to stop its sampler ends with the bench.
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    if let Ok(rss) = rss_bytes(pid) {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                }
            }
        });
        Self { peak, stop, task }
    }

    /// The highest RSS seen, in bytes.
    pub async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.peak.load(Ordering::Relaxed)
    }
}
