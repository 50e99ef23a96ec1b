//! Cost of the hot paths of the state machine as the state grows.
//!
//! * `hier_acquire_release/{10,1000000}`: one hierarchical exclusive acquire + release (two applies)
//!   with 10 or 1,000,000 locks already held in the namespace (1,000 leases × paths
//!   `d{i%1000}/l{i}`, half shared, half exclusive). The target is ≤ 2× between the two.
//! * `project_acquire_release/{10,1000000}`: the same for a project lock with 10 or
//!   1,000,000 held keys in the project.
//! * `project_acquire_release_minted/10`: the same with 10 held, each op under a freshly
//!   minted request id, as a node proposes every write that came without one.
//! * `project_acquire_fresh_minted/20_per_entry_100k_held`: one log entry of 20 acquires of
//!   fresh keys under minted ids in a project of 100,000 held locks, as a replica applies
//!   them under `raftlock-bench scaleout` (keys with a run's long shared prefix; the minted
//!   table full, so each write also forgets one id).
//! * `tick_reap_100_of_1m_leases`: one `Tick` that reaps 100 expiring leases (each holding one
//!   lock) while ~1,000,000 other leases stay live. The state is built once; the 100 expiring
//!   leases are created untimed before each tick, staggered by 1 ns so each tick reaps
//!   exactly one batch (see `ReapBench`).
//! * `snapshot/encode_1m_project_locks`: encoding a state of 1,000,000 project locks (random
//!   128-bit tokens, as clients' UUIDs are) through the CRC32C-summing writer a snapshot file
//!   is written with, into nothing: a snapshot's CPU without the disk.
//!   `snapshot/decode_1m_project_locks`: decoding it (which builds the eligibility index,
//!   not encoded) and counting usage (`count_usage`), as a node does on restart or when a
//!   snapshot is installed.
//! * `list_filtered/650k_leases`: one `ListLockLeases` page filtered by a `process_id` that
//!   no lease has, in a namespace of 650,000 leases (what the project's byte budget allows):
//!   the most a list call holds the state's read lock on the leader. It looks at
//!   `paging::MAX_SCANNED` entries, not the namespace.
//!
//! Everything goes through `StateMachine::apply`, as a replica would.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use raftlock_core::command::{HierOp, LockAction};
use raftlock_core::hierarchy::{AcquireOutcome, Quotas};
use raftlock_core::{codec, Command, Limits, Op, Reply, StateMachine, SECOND};

const T0: i64 = 1_700_000_000 * SECOND;
const P: &str = "p";
const NS: &str = "ns";
const CHUNK: usize = 10_000;

fn hier(op: HierOp) -> Op {
    Op::Hier {
        project: P.into(),
        op,
    }
}

/// Applies `ops` at `stamp` in log entries of `CHUNK` ops, checking every answer.
fn apply_all(sm: &mut StateMachine, stamp: i64, ops: impl Iterator<Item = Op>) {
    let ops: Vec<Op> = ops.collect();
    for chunk in ops.chunks(CHUNK) {
        let outs = sm.apply(&Command {
            stamp,
            ops: chunk.to_vec(),
        });
        for out in outs {
            match out {
                Ok(Reply::Acquire(r)) => assert_eq!(r.outcome, AcquireOutcome::Acquired),
                Ok(_) => {}
                Err(e) => panic!("setup op refused: {e}"),
            }
        }
    }
}

fn create_namespace(name: &str) -> Op {
    hier(HierOp::CreateNamespace {
        name: name.into(),
        description: String::new(),
        metadata: BTreeMap::new(),
    })
}

fn create_lease(ns: &str, lease_id: String, ttl_seconds: u64) -> Op {
    hier(HierOp::CreateLease {
        namespace: ns.into(),
        lease_id,
        process_id: "bench".into(),
        ttl_seconds,
    })
}

fn acquire(ns: &str, lock_name: String, exclusive: bool, lease_id: String) -> Op {
    hier(HierOp::AcquireLock {
        namespace: ns.into(),
        lock_name,
        exclusive,
        lease_id,
        metadata: BTreeMap::new(),
        wait: None,
    })
}

/// A namespace with `held` locks held by up to 1,000 leases, plus the lease `bench`.
fn hier_state(held: usize) -> StateMachine {
    // The default quota is exactly 1,000,000 locks per namespace, and 1M holds take ~1 GiB,
    // past the project's byte budget: raise both so the measured acquire is not refused.
    let mut sm = StateMachine::new(Limits {
        quotas: Quotas {
            locks_per_namespace: 2_000_000,
            ..Quotas::default()
        },
    })
    .with_byte_quotas(1 << 40, 1 << 40);
    let leases = held.div_ceil(1000).max(1);
    apply_all(
        &mut sm,
        T0,
        std::iter::once(create_namespace(NS))
            .chain((0..leases).map(|j| create_lease(NS, format!("ls{j}"), 300)))
            .chain(std::iter::once(create_lease(NS, "bench".into(), 300))),
    );
    apply_all(
        &mut sm,
        T0,
        (0..held).map(|i| {
            acquire(
                NS,
                format!("d{}/l{i}", i % 1000),
                i % 2 == 0,
                format!("ls{}", i / 1000),
            )
        }),
    );
    assert_eq!(sm.hierarchy().totals(), (1, leases + 1, held));
    sm
}

fn bench_hier_acquire_release(c: &mut Criterion) {
    let mut group = c.benchmark_group("hier_acquire_release");
    group.sample_size(50);
    for held in [10usize, 1_000_000] {
        let mut sm = hier_state(held);
        let acquire_cmd = Command {
            stamp: T0,
            ops: vec![acquire(NS, "d500/bench".into(), true, "bench".into())],
        };
        let release_cmd = Command {
            stamp: T0,
            ops: vec![hier(HierOp::ReleaseLock {
                namespace: NS.into(),
                lock_name: "d500/bench".into(),
                lease_id: "bench".into(),
            })],
        };
        match &sm.apply(&acquire_cmd)[0] {
            Ok(Reply::Acquire(r)) => assert_eq!(r.outcome, AcquireOutcome::Acquired),
            other => panic!("{other:?}"),
        }
        sm.apply(&release_cmd);
        group.bench_with_input(BenchmarkId::from_parameter(held), &held, |b, _| {
            b.iter(|| {
                black_box(sm.apply(black_box(&acquire_cmd)));
                black_box(sm.apply(black_box(&release_cmd)));
            })
        });
        assert_eq!(sm.hierarchy().totals().2, held);
    }
    group.finish();
}

fn project_lock(key: String, action: LockAction) -> Op {
    Op::ProjectLock {
        project: P.into(),
        key,
        action,
    }
}

fn bench_project_acquire_release(c: &mut Criterion) {
    let mut group = c.benchmark_group("project_acquire_release");
    group.sample_size(50);
    for held in [10usize, 1_000_000] {
        let mut sm = StateMachine::default();
        apply_all(
            &mut sm,
            T0,
            (0..held).map(|i| {
                project_lock(
                    format!("k{i}"),
                    LockAction::Acquire {
                        token: i as u128 + 1,
                        ttl_seconds: 7_776_000,
                    },
                )
            }),
        );
        assert_eq!(sm.project_lock_count(), held);
        let cmd = |action| Command {
            stamp: T0,
            ops: vec![project_lock("bench".into(), action)],
        };
        let acquire_cmd = cmd(LockAction::Acquire {
            token: u128::MAX,
            ttl_seconds: 60,
        });
        let release_cmd = cmd(LockAction::Release { token: u128::MAX });
        group.bench_with_input(BenchmarkId::from_parameter(held), &held, |b, _| {
            b.iter(|| {
                let out = sm.apply(black_box(&acquire_cmd));
                assert!(out[0].is_ok());
                black_box(out);
                black_box(sm.apply(black_box(&release_cmd)));
            })
        });
        assert_eq!(sm.project_lock_count(), held);
    }
    group.finish();
}

/// The same acquire + release with 10 keys held, each op proposed as a node proposes a write
/// that came without a client's request id: under a freshly minted id (`Op::Once`), so the
/// table of minted ids runs full (10,000 per project) and evicts as it does in service.
fn bench_project_acquire_release_minted(c: &mut Criterion) {
    use raftlock_core::request_ids::node_minted;
    let mut sm = StateMachine::default();
    apply_all(
        &mut sm,
        T0,
        std::iter::once(Op::CreateProject { name: P.into() }),
    );
    let mut next_id = 0u128;
    let mut once = |op: Op| {
        next_id += 1;
        Command {
            stamp: T0,
            ops: vec![Op::Once {
                request_id: node_minted(next_id),
                op: Box::new(op),
            }],
        }
    };
    let acquire = LockAction::Acquire {
        token: u128::MAX,
        ttl_seconds: 60,
    };
    let release = LockAction::Release { token: u128::MAX };
    let mut group = c.benchmark_group("project_acquire_release_minted");
    group.sample_size(50);
    group.bench_function("10", |b| {
        b.iter_batched(
            || {
                (
                    once(project_lock("bench".into(), acquire.clone())),
                    once(project_lock("bench".into(), release.clone())),
                )
            },
            |(acquire_cmd, release_cmd)| {
                let out = sm.apply(black_box(&acquire_cmd));
                assert!(out[0].is_ok());
                black_box(out);
                black_box(sm.apply(black_box(&release_cmd)));
            },
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// What a replica applies under `raftlock-bench scaleout`: log entries of `FRESH_BATCH`
/// acquires of keys never used before (named as the bench names them, with the long shared
/// prefix of one run), each under a freshly minted request id, in a project holding
/// `FRESH_HELD` locks whose table of minted ids is full. Per iteration: one such entry,
/// timed; then, untimed, an entry releasing its keys, so the project holds `FRESH_HELD`
/// locks at every iteration.
fn bench_project_acquire_fresh_minted(c: &mut Criterion) {
    use raftlock_core::request_ids::{node_minted, MAX_PER_PROJECT};
    const FRESH_HELD: usize = 100_000;
    const FRESH_BATCH: usize = 20;
    let key = |n: usize| format!("so1-1796604084-w1-c64-{}-{n}", n % 64);
    let acquire = |n: usize| {
        project_lock(
            key(n),
            LockAction::Acquire {
                token: n as u128,
                ttl_seconds: 7_776_000,
            },
        )
    };
    let mut sm = StateMachine::default();
    apply_all(
        &mut sm,
        T0,
        std::iter::once(Op::CreateProject { name: P.into() }).chain((1..=FRESH_HELD).map(acquire)),
    );
    let mut next = FRESH_HELD;
    let mut stamp = T0;
    // Entries of `FRESH_BATCH` fresh acquires under minted ids, and the entry releasing them.
    let mut entries = move || {
        stamp += 1;
        let keys = next + 1..=next + FRESH_BATCH;
        next += FRESH_BATCH;
        let acquires = keys
            .clone()
            .map(|n| Op::Once {
                request_id: node_minted(n as u128),
                op: Box::new(acquire(n)),
            })
            .collect();
        let releases = keys
            .map(|n| project_lock(key(n), LockAction::Release { token: n as u128 }))
            .collect();
        (
            Command {
                stamp,
                ops: acquires,
            },
            Command {
                stamp,
                ops: releases,
            },
        )
    };
    for _ in 0..MAX_PER_PROJECT.div_ceil(FRESH_BATCH) {
        let (acquire, release) = entries();
        assert!(sm.apply(&acquire).iter().all(|o| o.is_ok()));
        sm.apply(&release);
    }
    assert_eq!(sm.project_lock_count(), FRESH_HELD);
    let mut group = c.benchmark_group("project_acquire_fresh_minted");
    group.sample_size(50);
    group.bench_function("20_per_entry_100k_held", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let (acquire, release) = entries();
                let started = Instant::now();
                let out = sm.apply(black_box(&acquire));
                timed += started.elapsed();
                assert!(out.iter().all(|o| o.is_ok()));
                sm.apply(&release);
            }
            timed
        })
    });
    assert_eq!(sm.project_lock_count(), FRESH_HELD);
    group.finish();
}

/// ~1,000,000 live leases; ticks that each reap exactly 100 leases holding one lock each.
///
/// Time only moves forward, and a lease lives at least 1 s, so expiring leases are created
/// in rounds of `BATCHES` log entries stamped 1 ns apart: entry `j` of a round creates 100
/// leases (TTL 1 s) that expire at `round + 1 s + j ns`, and the tick of iteration `j` runs
/// exactly then. A round costs the machine 1 s of its time; the 1,000,000 background leases
/// (TTL 300 s) outlive ~290 rounds, far more than a run needs. Between 0 and
/// `BATCHES × 100` expiring leases are live on top of the background ones.
struct ReapBench {
    sm: StateMachine,
    round_start: i64,
    next: usize,
    round: usize,
}

const BATCHES: usize = 500;
const PER_TICK: usize = 100;
const BACKGROUND: usize = 1_000_000;

impl ReapBench {
    fn new() -> Self {
        // 1M leases are past the project's hierarchical byte budget (a setup op was refused
        // since the budget counted leases): raise it, as `hier_state` does.
        let mut sm = StateMachine::default().with_byte_quotas(1 << 40, 1 << 40);
        apply_all(
            &mut sm,
            T0,
            [create_namespace(NS), create_namespace("hot")]
                .into_iter()
                .chain((0..BACKGROUND).map(|i| create_lease(NS, format!("ls_{i:028}"), 300))),
        );
        ReapBench {
            sm,
            round_start: T0,
            next: BATCHES,
            round: 0,
        }
    }

    /// Untimed: makes sure the next tick has a batch to reap; returns that tick's stamp.
    fn prepare(&mut self) -> i64 {
        if self.next == BATCHES {
            self.round += 1;
            self.round_start = self.sm.time() + SECOND;
            for j in 0..BATCHES {
                let ops = (0..PER_TICK)
                    .flat_map(|k| {
                        let id = format!("x{}_{j}_{k}", self.round);
                        [
                            create_lease("hot", id.clone(), 1),
                            acquire("hot", format!("r{}/b{j}/l{k}", self.round), true, id),
                        ]
                    })
                    .collect();
                let outs = self.sm.apply(&Command {
                    stamp: self.round_start + j as i64,
                    ops,
                });
                assert!(outs.iter().all(|o| o.is_ok()));
            }
            self.next = 0;
        }
        let stamp = self.round_start + SECOND + self.next as i64;
        self.next += 1;
        stamp
    }
}

fn bench_tick_reap(c: &mut Criterion) {
    let mut group = c.benchmark_group("tick");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mut st = ReapBench::new();
    let before = st.sm.hierarchy().totals();
    group.bench_function("reap_100_of_1m_leases", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let stamp = st.prepare();
                let tick = Command {
                    stamp,
                    ops: vec![Op::Tick],
                };
                let (_, leases_before, _) = st.sm.hierarchy().totals();
                let start = Instant::now();
                black_box(st.sm.apply(black_box(&tick)));
                total += start.elapsed();
                assert_eq!(
                    st.sm.hierarchy().totals().1,
                    leases_before - PER_TICK,
                    "each tick reaps exactly one batch"
                );
            }
            total
        })
    });
    let after = st.sm.hierarchy().totals();
    assert!(after.1 >= BACKGROUND, "background leases stayed live");
    assert!(after.1 >= before.1);
    group.finish();
}

fn bench_snapshot(c: &mut Criterion) {
    const HELD: usize = 1_000_000;
    let mut sm = StateMachine::default().with_byte_quotas(1 << 40, 1 << 40);
    apply_all(
        &mut sm,
        T0,
        (0..HELD).map(|i| {
            // An odd 128-bit multiplier spreads the ids: tokens as wide as UUIDs, reproducible.
            let spread = (i as u128 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
            project_lock(
                format!("job-{i:07}"),
                LockAction::Acquire {
                    token: spread,
                    ttl_seconds: 3_600,
                },
            )
        }),
    );
    assert_eq!(sm.project_lock_count(), HELD);
    let encoded = codec::encode(&sm).unwrap();
    eprintln!("snapshot of {HELD} project locks: {} bytes", encoded.len());
    let mut group = c.benchmark_group("snapshot");
    group.sample_size(10);
    group.bench_function("encode_1m_project_locks", |b| {
        b.iter(|| {
            let mut out = codec::Checksummed::new(std::io::sink());
            codec::encode_to_writer(black_box(&sm), &mut out).unwrap();
            black_box(out.checksum())
        })
    });
    group.bench_function("decode_1m_project_locks", |b| {
        b.iter_with_large_drop(|| {
            let mut back: StateMachine = codec::decode(black_box(&encoded)).unwrap();
            back.count_usage();
            assert_eq!(back.project_lock_count(), HELD);
            back
        })
    });
    group.finish();
}

/// Leases the hierarchical byte budget allows in one namespace (512 MiB / ~820 B).
const BUDGET_LEASES: usize = 650_000;

fn bench_list_filtered(c: &mut Criterion) {
    let mut sm = StateMachine::default().with_byte_quotas(1 << 40, 1 << 40);
    let lease = |i: usize| {
        hier(HierOp::CreateLease {
            namespace: NS.into(),
            lease_id: format!("ls_{i:028}"),
            process_id: format!("worker-{}", i % 1000),
            ttl_seconds: 300,
        })
    };
    apply_all(
        &mut sm,
        T0,
        std::iter::once(create_namespace(NS)).chain((0..BUDGET_LEASES).map(lease)),
    );
    assert_eq!(sm.hierarchy().totals().1, BUDGET_LEASES);
    let mut group = c.benchmark_group("list_filtered");
    group.sample_size(20);
    group.bench_function("650k_leases", |b| {
        b.iter(|| {
            let (items, next, _) = sm
                .hierarchy()
                .list_leases(P, NS, "nobody", "", 100, T0 + SECOND)
                .unwrap();
            assert!(items.is_empty() && !next.is_empty());
            black_box(next)
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    bench_list_filtered,
    bench_hier_acquire_release,
    bench_project_acquire_release,
    bench_project_acquire_release_minted,
    bench_project_acquire_fresh_minted,
    bench_tick_reap,
    bench_snapshot
);
criterion_main!(benches);
