//! A witness for the disk itself: how long a tiny synced write took while a test ran.
//!
//! Tests that bound how long writes may pause (rolling restarts, leader hand-offs) measure the
//! cluster *and* the disk under it: every acknowledged write waits for an fsync, so when the
//! machine's disk stalls for 800 ms (another tenant flushing, a CI host's shared volume), no
//! Raft cluster can commit for 800 ms. The probe syncs a 512-byte write next to the nodes'
//! data every few milliseconds from its own thread and keeps every slow one, so a test can
//! report the disk's stall beside the cluster's pause and hold the cluster to its bound on
//! top of the time the disk itself was stalled during that pause.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The probe's pace: one synced write, then this pause.
const PAUSE: Duration = Duration::from_millis(5);

/// A synced write at least this slow is kept as a stall (a healthy one takes ~1 ms here).
const SLOW: Duration = Duration::from_millis(20);

/// A running probe; [`DiskProbe::finish`] stops it.
pub struct DiskProbe {
    /// Set to stop the writer thread.
    stop: Arc<AtomicBool>,
    /// Every synced write slower than [`SLOW`]: (when it started, how long it took).
    stalls: Arc<Mutex<Vec<(Instant, Duration)>>>,
    writer: Option<JoinHandle<()>>,
}

impl DiskProbe {
    /// Starts writing and syncing `probe.bin` in `dir` (the directory the nodes' data lives
    /// in, so the same file system and device).
    pub fn start(dir: &Path) -> std::io::Result<DiskProbe> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(dir.join("probe.bin"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stalls = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let (stop, stalls) = (stop.clone(), stalls.clone());
            std::thread::spawn(move || {
                let block = [0u8; 512];
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    // Appends, as a WAL does, so each sync has data and metadata to flush.
                    if file
                        .write_all(&block)
                        .and_then(|_| file.sync_data())
                        .is_err()
                    {
                        return;
                    }
                    let took = started.elapsed();
                    if took >= SLOW {
                        stalls.lock().unwrap().push((started, took));
                    }
                    std::thread::sleep(PAUSE);
                }
            })
        };
        Ok(DiskProbe {
            stop,
            stalls,
            writer: Some(writer),
        })
    }

    /// Stops the probe; returns every stall it saw (start, duration), oldest first.
    pub fn finish(mut self) -> Vec<(Instant, Duration)> {
        self.stop_writer();
        std::mem::take(&mut *self.stalls.lock().unwrap())
    }

    fn stop_writer(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl Drop for DiskProbe {
    fn drop(&mut self) {
        self.stop_writer();
    }
}

/// How much of `from..to` the disk spent inside the given stalls (overlaps counted once).
pub fn stalled_within(stalls: &[(Instant, Duration)], from: Instant, to: Instant) -> Duration {
    let mut covered = Duration::ZERO;
    let mut reached = from;
    for &(start, took) in stalls {
        let (start, end) = (start.max(reached), (start + took).min(to));
        if end > start {
            covered += end - start;
            reached = end;
        }
    }
    covered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_part_of_a_stall_inside_the_window_counts() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let stalls = [
            (t0, ms(100)),
            (t0 + ms(150), ms(100)),
            (t0 + ms(400), ms(50)),
        ];
        assert_eq!(stalled_within(&stalls, t0 + ms(50), t0 + ms(200)), ms(100));
        assert_eq!(stalled_within(&stalls, t0 + ms(260), t0 + ms(390)), ms(0));
        assert_eq!(stalled_within(&stalls, t0, t0 + ms(1000)), ms(250));
    }
}
