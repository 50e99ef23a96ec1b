//! The file operations durable storage is built from, behind a trait so that the same WAL and
//! snapshot code runs over the real disk ([`OsDir`]) and, in tests, over a simulated disk that
//! can lose power at any point (see `sim_fs`).
//!
//! The contract is the POSIX one, spelled out because everything else relies on it:
//! - bytes written to a file are durable only after [`DirFile::sync`] returns (`fdatasync`);
//!   before that a power cut may keep none, a prefix, or a scrambled part of them;
//! - creating, renaming and removing names are durable only after [`Dir::sync`] (an `fsync`
//!   of the directory itself);
//! - [`Dir::rename`] replaces the target atomically: after a crash the name holds the old or
//!   the new file, whole.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One flat directory of files. Names are plain file names, never paths.
pub trait Dir: Send + Sync + 'static {
    /// The names in the directory, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// The whole content of `name`, or `None` if it does not exist.
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// `len` bytes of `name` from `offset` (what the process wrote, synced or not). A missing
    /// file or a range past its end is an error. The default reads the whole file: enough for
    /// test directories; a real one reads only the range.
    fn read_range(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let whole = self
            .read(name)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_string()))?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        whole
            .get(start..start.saturating_add(len))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, name.to_string()))
    }
    /// Creates `name` empty (truncating it if it exists), open for writing at its end (and
    /// over what it holds: [`DirFile::overwrite`]).
    fn create(&self, name: &str) -> io::Result<Box<dyn DirFile>>;
    /// Opens an existing `name` for appending at its end.
    fn open_append(&self, name: &str) -> io::Result<Box<dyn DirFile>>;
    /// Opens an existing `name` for writing at offsets ([`DirFile::overwrite`]), its content
    /// kept: how the write-ahead log writes into a segment it preallocated.
    fn open_write(&self, name: &str) -> io::Result<Box<dyn DirFile>>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Gives the file `existing` a second name `new` (a hard link); `new` must not exist.
    fn link(&self, existing: &str, new: &str) -> io::Result<()>;
    /// Removes `name`; a missing file is not an error.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// The size of `name` and how many names it has (hard links), or `None` if it does not
    /// exist.
    fn stat(&self, name: &str) -> io::Result<Option<FileStat>>;
    /// Cuts `name` to `len` bytes (not durable). Every name of the file sees the cut: it is
    /// the file, not the name, that shrinks.
    fn set_len(&self, name: &str, len: u64) -> io::Result<()>;
    /// Removes `name` a piece at a time: its tail cut off `step` bytes at a time with `pause`
    /// after each cut, then the rest. For a large file nobody needs any more (a purged WAL
    /// segment, a replaced snapshot). On a file system mounted with `discard`, freeing 64 MiB at once sends the
    /// device one large discard that every fsync queued behind it waits for (writes of all
    /// three nodes of a soak stalled 80–250 ms at each segment removal; git history of docs/benchmarks.md);
    /// freed piece by piece, a sync waits for one small discard at most. Not durable, and not
    /// meant to be: the caller has given the file a temporary name the next start
    /// deletes.
    ///
    /// Only a file's last name frees it piece by piece: cutting a file that has another name
    /// cuts that name's content too. A crash between [`retire`]'s link and the rename leaves
    /// `snapshot.old.tmp` as a second name of the live `snapshot`; freeing it by cuts would
    /// truncate the live snapshot. Such a name is only unlinked.
    fn remove_gradually(&self, name: &str, step: u64, pause: Duration) -> io::Result<()> {
        let Some(stat) = self.stat(name)? else {
            return Ok(());
        };
        if stat.links == 1 {
            let mut len = stat.len;
            while len > step {
                len -= step;
                self.set_len(name, len)?;
                std::thread::sleep(pause);
            }
        }
        self.remove(name)
    }
    /// Makes every create, rename, link and remove so far durable (`fsync` of the directory).
    fn sync(&self) -> io::Result<()>;
    /// How to name `name` in an error message an operator reads (the full path on disk).
    fn describe(&self, name: &str) -> String;
}

/// What [`Dir::stat`] tells of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// Its size in bytes.
    pub len: u64,
    /// How many names it has: 1 unless hard-linked ([`Dir::link`]).
    pub links: u64,
}

/// A file open for writing at its end.
pub trait DirFile: Send {
    /// Appends `buf` at the end of the file (not yet durable).
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes and makes the cut durable; on a file from
    /// [`Dir::open_append`], later appends go at `len`.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Writes `buf` at `offset`, over bytes already in the file and past its end (the file
    /// grows); `offset` itself is at most the file's length (not yet durable, like an append).
    /// Only for a file from [`Dir::create`] or [`Dir::open_write`]: on Linux a write at an
    /// offset into a file opened for appending lands at its end instead, so such a file
    /// refuses.
    fn overwrite(&mut self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes the file at least `len` bytes long, the new bytes zero, with their blocks
    /// reserved (`fallocate`) so that a later write into them does not grow the file: the
    /// `fdatasync` after it then has no file size to write (the write-ahead log's small
    /// writes cost ~30 % less CPU and wall time each, `make bench-wal`). `Ok(false)` when the
    /// file system cannot reserve blocks: the file is left as it was, and writes past its end
    /// still work. Not durable until a sync.
    fn preallocate(&mut self, len: u64) -> io::Result<bool>;
}

/// A real directory on disk.
pub struct OsDir {
    /// The directory every name is relative to.
    root: PathBuf,
}

impl OsDir {
    /// Uses `root`, creating it (and its parents) when missing.
    pub fn open(root: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(root)?;
        Ok(OsDir {
            root: root.to_path_buf(),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

impl Dir for OsDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.root)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.path(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read_range(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0; len];
        File::open(self.path(name))?.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(self.path(name))?;
        Ok(Box::new(OsFile {
            file,
            appending: false,
        }))
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        let file = OpenOptions::new().append(true).open(self.path(name))?;
        Ok(Box::new(OsFile {
            file,
            appending: true,
        }))
    }

    fn open_write(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        let file = OpenOptions::new().write(true).open(self.path(name))?;
        Ok(Box::new(OsFile {
            file,
            appending: false,
        }))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.path(from), self.path(to))
    }

    fn link(&self, existing: &str, new: &str) -> io::Result<()> {
        std::fs::hard_link(self.path(existing), self.path(new))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        match std::fs::remove_file(self.path(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn stat(&self, name: &str) -> io::Result<Option<FileStat>> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::symlink_metadata(self.path(name)) {
            Ok(meta) => Ok(Some(FileStat {
                len: meta.len(),
                links: meta.nlink(),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .open(self.path(name))?
            .set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        File::open(&self.root)?.sync_all()
    }

    fn describe(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// A real file opened by [`OsDir`].
struct OsFile {
    file: File,
    /// Opened with `O_APPEND` ([`Dir::open_append`]): every write lands at the end, so
    /// [`DirFile::overwrite`] must refuse.
    appending: bool,
}

impl DirFile for OsFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        // A file opened for appending writes at the new end by itself (the WAL's case).
        self.file.set_len(len)?;
        self.file.sync_all()
    }

    fn overwrite(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.appending {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a file opened for appending cannot be written at an offset",
            ));
        }
        self.file.write_all_at(buf, offset)
    }

    #[cfg(target_os = "linux")]
    fn preallocate(&mut self, len: u64) -> io::Result<bool> {
        use std::os::fd::AsRawFd;
        if self.file.metadata()?.len() >= len {
            return Ok(true);
        }
        let len = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length out of range"))?;
        // Mode 0: the blocks are reserved and the size grows to `len`; the range reads as zeros.
        // SAFETY: `fallocate` only reads its integer arguments; the descriptor is open and
        // owned by `self.file` for the whole call.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, len) } == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(false),
            _ => Err(err),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn preallocate(&mut self, _len: u64) -> io::Result<bool> {
        Ok(false)
    }
}

/// Data [`write_atomically`] writes between two syncs. A large file (a snapshot of a big
/// state is ~100 MB) written whole and then synced leaves that much dirty data, and the
/// write-ahead log's next `fdatasync` queues behind its flush (seen as 0.5 s stalls of every
/// write); synced piece by piece, a WAL sync waits for at most one piece.
pub const SYNC_CHUNK_BYTES: usize = 1 << 20;

/// Writes `name` so that after any crash it holds either its previous content or `parts`
/// one after the other, whole (see [`write_atomically_with`]). Taking the content in parts
/// lets a caller write a large value where it lies instead of joining it into one buffer.
pub fn write_atomically(dir: &dyn Dir, name: &str, parts: &[&[u8]]) -> io::Result<()> {
    write_atomically_with(dir, name, |out| {
        parts.iter().try_for_each(|part| out.write_all(part))
    })
}

/// Writes `name` so that after any crash it holds either its previous content or whatever
/// `write` writes, whole: `write` fills a temporary file (synced every [`SYNC_CHUNK_BYTES`]),
/// which is synced and renamed over `name`, then the directory is synced. If `write` fails,
/// `name` is left as it was. Writing as it goes lets a caller encode a large value straight
/// into the file.
///
/// The file replaced is not freed by the rename: it is first given a second, temporary name
/// ([`retire`]) and freed a piece at a time once the new one is in place
/// ([`Dir::remove_gradually`]). On a file system mounted with `discard`, the rename over a
/// ~100 MB snapshot freed it whole, in the rename itself: one large discard that took the
/// rename 75–156 ms and held another file's `fdatasync` up to 280 ms (git history of docs/benchmarks.md, 2026-12-04). A
/// crash leaves at most a temporary file, which the next start deletes.
pub fn write_atomically_with(
    dir: &dyn Dir,
    name: &str,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    write_atomically_with_head(dir, name, |out| write(out).map(|()| Vec::new()))
}

/// [`write_atomically_with`] for content whose first bytes depend on the rest (a header with
/// its length and checksum): `write` writes the whole content with a placeholder of the
/// header's size first, and returns the header, which is written over the placeholder before
/// the last sync. One pass: the rest need not be produced twice, once to measure it and once
/// to write it (a snapshot of a large state is ~100 MB to encode).
pub fn write_atomically_with_head(
    dir: &dyn Dir,
    name: &str,
    write: impl FnOnce(&mut dyn Write) -> io::Result<Vec<u8>>,
) -> io::Result<()> {
    let tmp = format!("{name}{TMP_SUFFIX}");
    let mut out = ChunkedWriter {
        file: dir.create(&tmp)?,
        buf: Vec::with_capacity(SYNC_CHUNK_BYTES),
    };
    let head = write(&mut out)?;
    // The last piece and the head, then one sync for both.
    let ChunkedWriter { mut file, buf } = out;
    if !buf.is_empty() {
        file.append(&buf)?;
    }
    if !head.is_empty() {
        file.overwrite(0, &head)?;
    }
    file.sync()?;
    drop(file);
    let retired = retire(dir, name)?;
    dir.rename(&tmp, name)?;
    dir.sync()?;
    if let Some(retired) = retired {
        free_retired(dir, &retired);
    }
    Ok(())
}

/// How much of a file nobody needs any more is freed at a time, and the pause after each piece
/// ([`Dir::remove_gradually`]): a 16 MiB WAL segment goes in ~0.2 s, a 100 MB snapshot in
/// ~1.2 s, and an fsync meanwhile waits for a 1 MiB discard at most.
pub const GRADUAL_STEP_BYTES: u64 = 1 << 20;
pub const GRADUAL_PAUSE: Duration = Duration::from_millis(10);

/// Gives `name` a second, temporary name so that replacing it does not free it; returns that
/// name, or `None` when there is no `name` yet. A file system without hard links replaces
/// as before (the file is then freed at once).
fn retire(dir: &dyn Dir, name: &str) -> io::Result<Option<String>> {
    let retired = format!("{name}.old{TMP_SUFFIX}");
    // One left by a crash or by a failed free: its own name is needed again.
    dir.remove(&retired)?;
    match dir.link(name, &retired) {
        Ok(()) => Ok(Some(retired)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => {
            tracing::debug!(file = %dir.describe(name), error = %e,
                "cannot link the file being replaced; it is freed at once");
            Ok(None)
        }
    }
}

/// Frees a file [`retire`]d and replaced. Not an error when it fails: the replacement is
/// durable by then, and the next start deletes the temporary file.
fn free_retired(dir: &dyn Dir, retired: &str) {
    if let Err(e) = dir.remove_gradually(retired, GRADUAL_STEP_BYTES, GRADUAL_PAUSE) {
        tracing::warn!(file = %dir.describe(retired), error = %e,
            "cannot free a replaced file; the next start deletes it");
    }
}

/// How long a large file's writer rests after each synced piece, as a multiple of the time
/// the piece took to write and sync ([`pause_after_piece`]): the file then has the disk a
/// quarter of the time, whatever the disk's speed (more only while a piece takes over ~67 ms,
/// past [`MAX_PIECE_PAUSE`]).
///
/// Why: every `fdatasync` flushes the device's cache, so the write-ahead log's next sync pays
/// for whatever the snapshot wrote before it. Written flat out, a 56 MB snapshot of 1M locks
/// on the leader slowed every log sync for the ~0.5 s it took, the leader's commits fell
/// below the offered rate, and jobs queued 100–260 ms; in 1M-held soaks every job over
/// 100 ms but one second's ended within 1.1 s of a node starting a snapshot. With the rests,
/// an 8-minute run had none (the soak of the night of 2026-12-04, git history of docs/benchmarks.md).
const PIECE_PAUSE_FACTOR: u32 = 3;
/// The longest rest after one piece: a disk that stalls for seconds on one piece is not
/// waited for three times as long again.
const MAX_PIECE_PAUSE: Duration = Duration::from_millis(200);

/// The rest after a piece that took `took` to write and sync ([`PIECE_PAUSE_FACTOR`]).
fn pause_after_piece(took: Duration) -> Duration {
    (took * PIECE_PAUSE_FACTOR).min(MAX_PIECE_PAUSE)
}

/// Appends to a file in [`SYNC_CHUNK_BYTES`] pieces, each synced and followed by a rest
/// ([`pause_after_piece`]); the last, shorter piece is left in `buf` for the caller. Only a
/// file over one piece ever rests: snapshots (written on the snapshot thread) and a restored
/// backup (the offline `raftlock snapshot restore`). The small files written from runtime
/// tasks through `spawn_blocking` (vote, identity, clock hint) never reach a whole piece.
struct ChunkedWriter {
    file: Box<dyn DirFile>,
    /// What is not yet appended: less than a chunk between writes.
    buf: Vec<u8>,
}

impl ChunkedWriter {
    fn write_chunk(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        self.file.append(&self.buf)?;
        self.buf.clear();
        self.file.sync()?;
        std::thread::sleep(pause_after_piece(started.elapsed()));
        Ok(())
    }
}

impl Write for ChunkedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(SYNC_CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == SYNC_CHUNK_BYTES {
            self.write_chunk()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Suffix of the temporary files [`write_atomically`] renames into place, of the files it
/// replaced being freed, and of purged WAL segments being freed
/// ([`crate::wal::remove_segments`]); leftovers of a crash are removed when the store opens.
pub const TMP_SUFFIX: &str = ".tmp";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_removed_gradually_is_gone_and_a_missing_one_is_no_error() {
        let root = tempfile::tempdir().unwrap();
        let dir = OsDir::open(root.path()).unwrap();
        let mut file = dir.create("big").unwrap();
        file.append(&vec![7u8; (3 << 20) + 12_345]).unwrap();
        file.sync().unwrap();
        dir.remove_gradually("big", 1 << 20, Duration::ZERO)
            .unwrap();
        assert_eq!(dir.list().unwrap(), Vec::<String>::new());
        dir.remove_gradually("big", 1 << 20, Duration::ZERO)
            .unwrap();
    }

    /// A file preallocated on a real disk reads as zeros to its new length, and a write into
    /// that space does not grow it. (Where the file system cannot preallocate, the file is
    /// left as it was.)
    #[test]
    fn a_preallocated_file_is_zeros_and_a_write_into_it_keeps_its_size() {
        let root = tempfile::tempdir().unwrap();
        let dir = OsDir::open(root.path()).unwrap();
        let mut file = dir.create("seg").unwrap();
        file.overwrite(0, b"head").unwrap();
        let len = 1 << 20;
        if !file.preallocate(len).unwrap() {
            assert_eq!(dir.stat("seg").unwrap().unwrap().len, 4);
            return;
        }
        file.sync().unwrap();
        drop(file);
        let mut file = dir.open_write("seg").unwrap();
        file.overwrite(4, b"next").unwrap();
        file.sync().unwrap();
        let bytes = dir.read("seg").unwrap().unwrap();
        assert_eq!(bytes.len() as u64, len, "not grown by the write");
        assert_eq!(&bytes[..8], b"headnext");
        assert!(bytes[8..].iter().all(|&b| b == 0));
        assert!(file.preallocate(len / 2).unwrap(), "never shrinks");
        assert_eq!(dir.stat("seg").unwrap().unwrap().len, len);
    }

    /// A file whose every sync takes `sync_takes`: a disk slow enough to measure against.
    struct SlowSync {
        sync_takes: Duration,
    }

    impl DirFile for SlowSync {
        fn append(&mut self, _buf: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            std::thread::sleep(self.sync_takes);
            Ok(())
        }
        fn truncate(&mut self, _len: u64) -> io::Result<()> {
            Ok(())
        }
        fn overwrite(&mut self, _offset: u64, _buf: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn preallocate(&mut self, _len: u64) -> io::Result<bool> {
            Ok(false)
        }
    }

    #[test]
    fn a_large_file_rests_after_each_piece_for_three_times_what_it_took() {
        let sync_takes = Duration::from_millis(20);
        let mut out = ChunkedWriter {
            file: Box::new(SlowSync { sync_takes }),
            buf: Vec::new(),
        };
        let pieces = 3;
        let started = std::time::Instant::now();
        out.write_all(&vec![1u8; pieces * SYNC_CHUNK_BYTES])
            .unwrap();
        let took = started.elapsed();
        // Each piece: its own 20 ms, then a rest of at least 60 ms. Sleeps never end early,
        // so this bound holds on any machine; flat out it is 60 ms.
        let at_least = (sync_takes + pause_after_piece(sync_takes)) * pieces as u32;
        assert!(took >= at_least, "{took:?} < {at_least:?}");
        assert_eq!(
            pause_after_piece(sync_takes),
            sync_takes * PIECE_PAUSE_FACTOR
        );
        assert_eq!(
            pause_after_piece(Duration::from_secs(5)),
            MAX_PIECE_PAUSE,
            "a stalled disk is not waited for again three times over"
        );
    }

    /// A [`SimDir`](crate::sim_fs::SimDir) that records the directory calls made on it.
    #[derive(Default)]
    struct Recording {
        inner: crate::sim_fs::SimDir,
        calls: std::sync::Mutex<Vec<String>>,
    }

    impl Recording {
        fn record(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
    }

    impl Dir for Recording {
        fn list(&self) -> io::Result<Vec<String>> {
            self.inner.list()
        }
        fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
            self.inner.read(name)
        }
        fn create(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
            self.inner.create(name)
        }
        fn open_append(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
            self.inner.open_append(name)
        }
        fn open_write(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
            self.inner.open_write(name)
        }
        fn rename(&self, from: &str, to: &str) -> io::Result<()> {
            self.record(format!("rename {from} {to}"));
            self.inner.rename(from, to)
        }
        fn link(&self, existing: &str, new: &str) -> io::Result<()> {
            self.record(format!("link {existing} {new}"));
            self.inner.link(existing, new)
        }
        fn remove(&self, name: &str) -> io::Result<()> {
            self.inner.remove(name)
        }
        fn stat(&self, name: &str) -> io::Result<Option<FileStat>> {
            self.inner.stat(name)
        }
        fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
            self.inner.set_len(name, len)
        }
        fn remove_gradually(&self, name: &str, step: u64, pause: Duration) -> io::Result<()> {
            self.record(format!("remove_gradually {name} {step} {pause:?}"));
            self.inner.remove_gradually(name, step, pause)
        }
        fn sync(&self) -> io::Result<()> {
            self.record("sync".into());
            self.inner.sync()
        }
        fn describe(&self, name: &str) -> String {
            self.inner.describe(name)
        }
    }

    #[test]
    fn a_replaced_file_is_freed_gradually_after_the_new_one_is_in_place() {
        let dir = Recording::default();
        write_atomically(&dir, "snapshot", &[b"old"]).unwrap();
        assert_eq!(
            *dir.calls.lock().unwrap(),
            [
                "link snapshot snapshot.old.tmp",
                "rename snapshot.tmp snapshot",
                "sync"
            ],
            "nothing to free the first time (the link finds no file)"
        );
        dir.calls.lock().unwrap().clear();

        write_atomically(&dir, "snapshot", &[b"new"]).unwrap();

        // Not freed by the rename: it keeps a second name until the new file is durable.
        assert_eq!(
            *dir.calls.lock().unwrap(),
            [
                "link snapshot snapshot.old.tmp",
                "rename snapshot.tmp snapshot",
                "sync",
                "remove_gradually snapshot.old.tmp 1048576 10ms",
            ]
        );
        assert_eq!(dir.list().unwrap(), ["snapshot"]);
        assert_eq!(dir.read("snapshot").unwrap().unwrap(), b"new");
    }

    #[test]
    fn a_power_cut_anywhere_in_a_replacement_leaves_the_old_file_or_the_new_one_whole() {
        use crate::sim_fs::{Rng, SimDir};
        let old = vec![1u8; SYNC_CHUNK_BYTES * 2 + 100];
        let new = vec![2u8; SYNC_CHUNK_BYTES * 3 + 7];
        let mut rng = Rng::new(18);
        for fuel in 0..16 {
            for _ in 0..8 {
                let dir = SimDir::new();
                write_atomically(&dir, "snapshot", &[&old]).unwrap();
                dir.fail_after(fuel);
                let finished = write_atomically(&dir, "snapshot", &[&new]).is_ok();
                dir.power_cut(&mut rng);
                let kept = dir.read("snapshot").unwrap().expect("a snapshot file");
                assert!(kept == old || kept == new, "fuel {fuel}: a torn file");
                assert!(
                    !finished || kept == new,
                    "fuel {fuel}: a finished write lost"
                );
            }
        }
    }

    #[test]
    fn a_replaced_file_left_by_a_crash_does_not_stop_the_next_replacement() {
        let dir = crate::sim_fs::SimDir::new();
        write_atomically(&dir, "snapshot", &[b"v1"]).unwrap();
        dir.link("snapshot", "snapshot.old.tmp").unwrap();
        write_atomically(&dir, "snapshot", &[b"v2"]).unwrap();
        assert_eq!(dir.list().unwrap(), ["snapshot"]);
        assert_eq!(dir.read("snapshot").unwrap().unwrap(), b"v2");
    }

    #[test]
    fn a_head_written_last_lands_at_the_start_of_the_file_on_disk() {
        let root = tempfile::tempdir().unwrap();
        let dir = OsDir::open(root.path()).unwrap();
        let body = vec![9u8; SYNC_CHUNK_BYTES + 5];
        write_atomically_with_head(&dir, "f", |out| {
            out.write_all(&[0; 4])?;
            out.write_all(&body)?;
            Ok(b"HEAD".to_vec())
        })
        .unwrap();
        let kept = dir.read("f").unwrap().unwrap();
        assert_eq!(kept.len(), 4 + body.len());
        assert_eq!(&kept[..4], b"HEAD");
        assert!(kept[4..] == body[..], "the body moved");

        // Opened for appending (O_APPEND), a write at an offset would land at the end.
        let mut appending = dir.open_append("f").unwrap();
        let refused = appending.overwrite(0, b"XXXX").unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::Unsupported);
        assert_eq!(dir.read("f").unwrap().unwrap(), kept);
    }
}
