//! The process's allocator: mimalloc, with a count of the bytes the program holds.
//!
//! A node's resident memory (RSS) is what the program holds *plus* what the allocator keeps
//! after the program freed it. When RSS steps up and stays (seen in `make soak`: a node flat
//! for 20 minutes, then +30 MiB for good), only the first part is the program's to fix; this
//! count tells the two apart, live, as the gauge `raftlock_heap_live_bytes` beside
//! `raftlock_resident_bytes`.
//!
//! And the process keeps transparent huge pages off ([`keep_huge_pages_off`]): they made
//! exactly such steps.
//!
//! The count is kept in a few cache-line-sized shards picked by thread, so two cores
//! allocating at once rarely touch the same line; a shard may go negative (one thread frees
//! what another allocated), only the sum means anything.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicIsize, Ordering};

/// mimalloc instead of glibc's malloc. A node frees a whole log's worth of entries (tens of
/// thousands of small allocations) after each snapshot; under glibc those frees consolidate
/// and lock the arena the request path allocates from, and with 1M locks held that stalled
/// every request for 100–300 ms once a snapshot (seen in `make soak` and in `perf`:
/// `malloc_consolidate`, `__lll_lock_wait_private`). mimalloc frees into per-thread pages
/// and returns memory to the OS by itself (docs/benchmarks.md, *Soak*).
///
/// Built with the crate's `no_thp` feature (workspace `Cargo.toml`): otherwise mimalloc
/// advises its 1 GiB arena `MADV_HUGEPAGE` (see [`keep_huge_pages_off`] for why that hurts).
pub struct CountingMimalloc;

/// Turns transparent huge pages off for this process and its children
/// (`prctl(PR_SET_THP_DISABLE)`), whatever the host's THP mode; call it first thing in
/// `main`. With them, khugepaged (which by default collapses a 2 MiB region with a single
/// page in use) turned scattered small pages of the heap into whole resident huge pages
/// minutes after the fact: RSS steps of tens of MiB that no allocation made and no free gives
/// back (the soaks of 2026-12-03, git history of docs/benchmarks.md). Not advising the arena (`no_thp`) is
/// enough where THP is `madvise`; on an `always` host only this keeps them off.
/// Best effort: a kernel without the call leaves things as they were.
pub fn keep_huge_pages_off() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Shards of the count (a power of two).
const SHARDS: usize = 16;
const _: () = assert!(SHARDS.is_power_of_two());

/// One shard on a cache line of its own.
#[repr(align(64))]
struct Shard(AtomicIsize);

static LIVE: [Shard; SHARDS] = [const { Shard(AtomicIsize::new(0)) }; SHARDS];

thread_local! {
    /// Only its address is used: distinct per thread, known without allocating (a const
    /// initialiser and no destructor, so reading it never allocates or fails).
    static ANCHOR: u8 = const { 0 };
}

/// This thread's shard.
fn shard() -> &'static AtomicIsize {
    let addr = ANCHOR.with(|a| a as *const u8 as u64);
    // Thread-local blocks lie pages apart; mix the page number into the top bits, keep them.
    let mixed = (addr >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let index = (mixed >> (64 - SHARDS.trailing_zeros())) as usize;
    &LIVE[index].0
}

fn count(delta: isize) {
    shard().fetch_add(delta, Ordering::Relaxed);
}

/// Bytes the program holds from the allocator now (requested sizes, not the allocator's
/// rounding or its retained pages). Zero in a process whose global allocator is not
/// [`CountingMimalloc`].
pub fn live_bytes() -> usize {
    let sum: isize = LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
    sum.max(0) as usize
}

// SAFETY: every call is passed to mimalloc unchanged; the count only observes its results.
unsafe impl GlobalAlloc for CountingMimalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count is one per process: tests that read it run one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_count_follows_allocations_and_frees() {
        // Unit tests run on the system allocator, so the count is driven by hand here
        // through the same calls the global allocator makes.
        let _serial = SERIAL.lock().unwrap();
        let a = CountingMimalloc;
        let before = live_bytes();
        let layout = Layout::from_size_align(1 << 20, 8).unwrap();
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(live_bytes() - before, 1 << 20);
            let p = a.realloc(p, layout, 3 << 20);
            assert!(!p.is_null());
            assert_eq!(live_bytes() - before, 3 << 20);
            a.dealloc(p, Layout::from_size_align(3 << 20, 8).unwrap());
        }
        assert_eq!(live_bytes(), before);
    }

    #[test]
    fn frees_on_another_thread_cancel_out_in_the_sum() {
        let _serial = SERIAL.lock().unwrap();
        let a = CountingMimalloc;
        let before = live_bytes();
        let layout = Layout::from_size_align(4096, 8).unwrap();
        let p = unsafe { a.alloc(layout) } as usize;
        std::thread::spawn(move || unsafe { CountingMimalloc.dealloc(p as *mut u8, layout) })
            .join()
            .unwrap();
        assert_eq!(live_bytes(), before);
    }
}
