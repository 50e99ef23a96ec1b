//! A simulated disk for crash tests: it keeps what was written apart from what was synced, and
//! [`SimDir::power_cut`] throws away what a real disk may lose when the power goes.
//!
//! What a power cut does, following the contract in [`crate::fs`]:
//! - each file keeps its synced bytes, except that a page overwritten since its last sync
//!   holds the old bytes, the new ones or garbage where they differ; of the bytes appended
//!   since its last sync it keeps none, a random prefix, or all of them with random pages
//!   zeroed or scrambled (torn and reordered page writes);
//! - of the creates, renames and removes since the last directory sync, a random prefix
//!   survives (in order; a rename is atomic).
//!
//! Power can also fail *during* a run: after `fuel` mutating calls every call fails, like a
//! machine that died in the middle of a write.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex};

use crate::fs::{Dir, DirFile, FileStat};

/// Bytes per simulated page: the unit a torn write keeps or loses.
const PAGE: usize = 64;

#[derive(Default)]
struct Inode {
    /// What reads see now.
    data: Vec<u8>,
    /// What survives a power cut for sure.
    synced: Vec<u8>,
}

enum DirOp {
    Link(String, u64),
    Rename(String, String),
    Unlink(String),
}

#[derive(Default)]
struct State {
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    /// The directory as reads see it.
    names: BTreeMap<String, u64>,
    /// The directory as of the last directory sync.
    synced_names: BTreeMap<String, u64>,
    /// Directory changes since the last directory sync.
    pending: Vec<DirOp>,
    /// Mutating calls left before the power fails; `None` means unlimited.
    fuel: Option<u64>,
}

impl State {
    /// Spends one unit of fuel; fails once the power is gone.
    fn spend(&mut self) -> io::Result<()> {
        match &mut self.fuel {
            Some(0) => Err(io::Error::other("simulated power failure")),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// A simulated directory; clones share the same disk.
#[derive(Clone, Default)]
pub struct SimDir {
    state: Arc<Mutex<State>>,
}

/// A small deterministic random source (splitmix64), so a failing case replays from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

impl SimDir {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets `fuel` more mutating calls succeed, then fails every call until [`Self::power_cut`].
    pub fn fail_after(&self, fuel: u64) {
        self.lock().fuel = Some(fuel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The existing file `name`, for appending or for writes at offsets.
    fn open_existing(&self, name: &str, appending: bool) -> io::Result<Box<dyn DirFile>> {
        let st = self.lock();
        let ino = *st
            .names
            .get(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(Box::new(SimFile {
            dir: self.clone(),
            ino,
            appending,
        }))
    }

    /// Loses power: keeps only what a real disk would be guaranteed or allowed to keep, then
    /// comes back up with that as the (fully synced) content and unlimited fuel.
    pub fn power_cut(&self, rng: &mut Rng) {
        let mut st = self.lock();
        let mut names = st.synced_names.clone();
        let keep_ops = rng.below(st.pending.len() as u64 + 1) as usize;
        for op in st.pending.drain(..).take(keep_ops) {
            match op {
                DirOp::Link(name, ino) => {
                    names.insert(name, ino);
                }
                DirOp::Rename(from, to) => {
                    if let Some(ino) = names.remove(&from) {
                        names.insert(to, ino);
                    }
                }
                DirOp::Unlink(name) => {
                    names.remove(&name);
                }
            }
        }
        let mut inodes = HashMap::new();
        for &ino in names.values() {
            // A file with two names (a hard link) survives once, the same under both.
            let Some(inode) = st.inodes.remove(&ino) else {
                continue;
            };
            let data = surviving_bytes(&inode, rng);
            inodes.insert(
                ino,
                Inode {
                    synced: data.clone(),
                    data,
                },
            );
        }
        st.inodes = inodes;
        st.synced_names = names.clone();
        st.names = names;
        st.fuel = None;
    }
}

/// The bytes of a file after a power cut.
fn surviving_bytes(inode: &Inode, rng: &mut Rng) -> Vec<u8> {
    let (synced, data) = (&inode.synced, &inode.data);
    if data.len() < synced.len() {
        // Cut shorter since the last sync: the cut may or may not have reached the disk.
        return if rng.below(2) == 0 {
            synced.clone()
        } else {
            data.clone()
        };
    }
    // Bytes written over synced ones (an overwrite): each page holds the old bytes, the new
    // ones or garbage. A file only appended to has no such page.
    let mut out = Vec::with_capacity(data.len());
    for (old, new) in synced.chunks(PAGE).zip(data[..synced.len()].chunks(PAGE)) {
        if old == new {
            out.extend_from_slice(old);
            continue;
        }
        match rng.below(3) {
            0 => out.extend_from_slice(old),
            1 => out.extend_from_slice(new),
            // Garbage where the write changed bytes: the bytes of a page a write did not
            // change (a synced frame sharing a page with the next one) are kept, as for an
            // append past them.
            _ => out.extend(
                old.iter()
                    .zip(new)
                    .map(|(o, n)| if o == n { *o } else { rng.next() as u8 }),
            ),
        }
    }
    let unsynced = &data[synced.len()..];
    match rng.below(3) {
        0 => {}
        1 => out.extend_from_slice(&unsynced[..rng.below(unsynced.len() as u64 + 1) as usize]),
        _ => {
            for page in unsynced.chunks(PAGE) {
                match rng.below(3) {
                    0 => out.extend_from_slice(page),
                    1 => out.extend(std::iter::repeat_n(0, page.len())),
                    _ => out.extend(page.iter().map(|_| rng.next() as u8)),
                }
            }
        }
    }
    out
}

impl Dir for SimDir {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.lock().names.keys().cloned().collect())
    }

    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let st = self.lock();
        Ok(st.names.get(name).map(|ino| st.inodes[ino].data.clone()))
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        let mut st = self.lock();
        st.spend()?;
        let ino = st.next_inode;
        st.next_inode += 1;
        st.inodes.insert(ino, Inode::default());
        st.names.insert(name.to_string(), ino);
        st.pending.push(DirOp::Link(name.to_string(), ino));
        Ok(Box::new(SimFile {
            dir: self.clone(),
            ino,
            appending: false,
        }))
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        self.open_existing(name, true)
    }

    fn open_write(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        self.open_existing(name, false)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut st = self.lock();
        st.spend()?;
        let ino = st
            .names
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.names.insert(to.to_string(), ino);
        st.pending
            .push(DirOp::Rename(from.to_string(), to.to_string()));
        Ok(())
    }

    fn link(&self, existing: &str, new: &str) -> io::Result<()> {
        let mut st = self.lock();
        st.spend()?;
        if st.names.contains_key(new) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let ino = *st
            .names
            .get(existing)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.names.insert(new.to_string(), ino);
        st.pending.push(DirOp::Link(new.to_string(), ino));
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut st = self.lock();
        st.spend()?;
        if st.names.remove(name).is_some() {
            st.pending.push(DirOp::Unlink(name.to_string()));
        }
        Ok(())
    }

    fn stat(&self, name: &str) -> io::Result<Option<FileStat>> {
        let st = self.lock();
        Ok(st.names.get(name).map(|ino| FileStat {
            len: st.inodes[ino].data.len() as u64,
            links: st.names.values().filter(|other| *other == ino).count() as u64,
        }))
    }

    /// Cuts the inode, so every name of it sees the cut (as on a real disk). The cut is not
    /// durable: a power cut keeps the file's synced length or the cut one.
    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        let mut st = self.lock();
        st.spend()?;
        let ino = *st
            .names
            .get(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let inode = st.inodes.get_mut(&ino).expect("a named inode");
        inode.data.resize(len as usize, 0);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut st = self.lock();
        st.spend()?;
        st.synced_names = st.names.clone();
        st.pending.clear();
        Ok(())
    }

    fn describe(&self, name: &str) -> String {
        format!("sim/{name}")
    }
}

struct SimFile {
    dir: SimDir,
    ino: u64,
    /// From [`Dir::open_append`]: refuses [`DirFile::overwrite`], as a real one does.
    appending: bool,
}

impl DirFile for SimFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut st = self.dir.lock();
        st.spend()?;
        let inode = st.inodes.get_mut(&self.ino).expect("open file");
        // A write may be cut short by the power failing half-way.
        inode.data.extend_from_slice(buf);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut st = self.dir.lock();
        st.spend()?;
        let inode = st.inodes.get_mut(&self.ino).expect("open file");
        inode.synced = inode.data.clone();
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let mut st = self.dir.lock();
        st.spend()?;
        let inode = st.inodes.get_mut(&self.ino).expect("open file");
        inode.data.truncate(len as usize);
        inode.synced = inode.data.clone();
        Ok(())
    }

    fn overwrite(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if self.appending {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        let mut st = self.dir.lock();
        st.spend()?;
        let inode = st.inodes.get_mut(&self.ino).expect("open file");
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        if start > inode.data.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a write that starts past the end of the file",
            ));
        }
        let end = start + buf.len();
        if inode.data.len() < end {
            inode.data.resize(end, 0);
        }
        inode.data[start..end].copy_from_slice(buf);
        Ok(())
    }

    /// Grows the file with zeros; like an append, the growth is not durable until a sync.
    fn preallocate(&mut self, len: u64) -> io::Result<bool> {
        let mut st = self.dir.lock();
        st.spend()?;
        let inode = st.inodes.get_mut(&self.ino).expect("open file");
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if inode.data.len() < len {
            inode.data.resize(len, 0);
        }
        Ok(true)
    }
}
