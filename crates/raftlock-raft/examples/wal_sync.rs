//! `make bench-wal`: what one synced write of the write-ahead log costs, with its segment
//! preallocated (how raftlock writes it) and growing the file (a file system that cannot
//! preallocate, and every release before preallocation), through the real [`Wal`] on the
//! disk under `target/`. Rounds alternate the two, so a slow minute of the machine hits both.
//!
//! Knobs (environment): `WAL_BENCH_WRITES` (3000 per cell), `WAL_BENCH_ROUNDS` (3),
//! `WAL_BENCH_OPS` (ops per entry, so per frame: 30 makes a frame of ~50 bytes of ticks; the
//! frames of a real log carry requests, so the figures are the fixed cost of a write),
//! `WAL_BENCH_DIR` (target/wal-bench).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{CommittedLeaderId, EntryPayload};
use raftlock_core::{Command, Op};
use raftlock_raft::fs::{Dir, DirFile, FileStat, OsDir};
use raftlock_raft::typ::{Entry, LogId};
use raftlock_raft::wal::{PendingFrame, Wal, WalOpRef};

fn main() -> anyhow::Result<()> {
    let writes = knob("WAL_BENCH_WRITES", 3000);
    let rounds = knob("WAL_BENCH_ROUNDS", 3);
    let ops = knob("WAL_BENCH_OPS", 30);
    let root = std::env::var("WAL_BENCH_DIR").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/wal-bench"),
        PathBuf::from,
    );
    println!("| segment | CPU µs per write | wall µs per write | frame bytes |");
    println!("|---|---|---|---|");
    for _ in 0..rounds {
        for preallocated in [true, false] {
            let _ = std::fs::remove_dir_all(&root);
            let os = OsDir::open(&root)?;
            let dir: Arc<dyn Dir> = if preallocated {
                Arc::new(os)
            } else {
                Arc::new(Growing(os))
            };
            let cell = measure(dir, writes, ops)?;
            println!(
                "| {} | {:.1} | {:.1} | {} |",
                if preallocated {
                    "preallocated"
                } else {
                    "growing"
                },
                cell.cpu.as_secs_f64() * 1e6 / writes as f64,
                cell.wall.as_secs_f64() * 1e6 / writes as f64,
                cell.frame_bytes
            );
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Cell {
    cpu: Duration,
    wall: Duration,
    frame_bytes: usize,
}

/// `writes` frames of one entry of `ops` ticks each, written and synced one after another on
/// this thread, timed from the first to the last.
fn measure(dir: Arc<dyn Dir>, writes: usize, ops: usize) -> anyhow::Result<Cell> {
    let (mut wal, _) = Wal::open(dir, raftlock_raft::wal::DEFAULT_SEGMENT_BYTES, 1)?;
    let frames: Vec<PendingFrame> = (1..=writes as u64)
        .map(|index| {
            let entry = Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
                payload: EntryPayload::Normal(Command {
                    stamp: index as i64,
                    ops: vec![Op::Tick; ops],
                }),
            };
            PendingFrame::new(None, &[WalOpRef::Append(&[entry])]).map_err(anyhow::Error::msg)
        })
        .collect::<Result<_, _>>()?;
    let (cpu_before, started) = (thread_cpu(), Instant::now());
    for frame in &frames {
        wal.write(frame)?;
    }
    Ok(Cell {
        cpu: thread_cpu() - cpu_before,
        wall: started.elapsed(),
        frame_bytes: frames[0].len(),
    })
}

/// CPU time of this thread, user and system (the syscalls of `write` and `fdatasync`).
fn thread_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `rusage` into the pointer it is given, which points to one.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// A real directory whose files cannot preallocate: every write of the WAL grows its segment.
struct Growing(OsDir);

/// A file of [`Growing`].
struct GrowingFile(Box<dyn DirFile>);

impl DirFile for GrowingFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.append(buf)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.0.truncate(len)
    }
    fn overwrite(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.0.overwrite(offset, buf)
    }
    fn preallocate(&mut self, _len: u64) -> io::Result<bool> {
        Ok(false)
    }
}

impl Dir for Growing {
    fn list(&self) -> io::Result<Vec<String>> {
        self.0.list()
    }
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        self.0.read(name)
    }
    fn read_range(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.0.read_range(name, offset, len)
    }
    fn create(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        Ok(Box::new(GrowingFile(self.0.create(name)?)))
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        Ok(Box::new(GrowingFile(self.0.open_append(name)?)))
    }
    fn open_write(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        Ok(Box::new(GrowingFile(self.0.open_write(name)?)))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn link(&self, existing: &str, new: &str) -> io::Result<()> {
        self.0.link(existing, new)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.0.remove(name)
    }
    fn stat(&self, name: &str) -> io::Result<Option<FileStat>> {
        self.0.stat(name)
    }
    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        self.0.set_len(name, len)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync()
    }
    fn describe(&self, name: &str) -> String {
        self.0.describe(name)
    }
}
