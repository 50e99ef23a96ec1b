//! Cluster time: the rule by which the leader stamps log entries and judges reads, so that no
//! wall clock — skewed, stepping forward or back — can make a lease end early in real time.
//!
//! Pure code like the rest of this crate: the caller passes in every clock reading (`wall`:
//! the node's wall clock; `mono`: its monotonic clock, in nanoseconds from any origin).
//!
//! ## The rule
//! Each node remembers the latest applied cluster time and the monotonic instant it saw it
//! applied ([`ClusterClock::observe`]). When a node starts leading a term it draws a *line*:
//! `line(now) = base + (now − base_mono)`, where `base` is that observation carried forward on
//! its own monotonic clock. A stamp is
//!
//! ```text
//! stamp = max(issued, clamp(wall, line − MAX_LAG, line))
//! ```
//!
//! * **Never faster than real time.** A stamp never exceeds the line, and the line advances at
//!   the leader's monotonic rate from a value that was already cluster time when it was
//!   observed (so it was stamped no later than that). Whatever any wall clock says, cluster
//!   time gains at most the real time that passed. The only exception is *slew*: when the
//!   wall clock is ahead of the line by at most [`SLEW_WINDOW`], the line may catch up at
//!   [`SLEW_RATE_PER_1000`]/1000 of the elapsed time. That lets cluster time converge to true
//!   time after the small losses of leader changes, and bounds what a wrong clock can do: a
//!   clock more than `SLEW_WINDOW` ahead never moves the line at all, and slew adds at most
//!   `SLEW_WINDOW` over a whole term.
//! * **Never much slower.** A stamp is at least `line − MAX_LAG`, so a slow or stepped-back
//!   wall clock costs at most `MAX_LAG` of lateness, and time still advances at the real rate.
//! * **Never backwards.** Stamps and read times handed out by one node never decrease
//!   (`issued`), and apply keeps `max(stamp, last)`.
//!
//! Where the wall clock is trusted at all: at the genesis of a cluster and after a cold start
//! of every node (no node has seen a live entry), the first leader's line starts at its wall
//! clock. The server keeps such a node from campaigning for a grace period so that a node with
//! a live observation wins whenever one exists.

use crate::Nanos;

/// How far a stamp may trail the line to follow a wall clock that is behind.
pub const MAX_LAG: Nanos = 500_000_000;
/// A wall clock at most this far ahead of the line pulls the line forward (slowly); one further
/// ahead is ignored.
pub const SLEW_WINDOW: Nanos = 500_000_000;
/// How fast the line may catch up with such a wall clock: this many ‰ of the elapsed time.
pub const SLEW_RATE_PER_1000: Nanos = 100;

/// A cluster time seen applied at a monotonic instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub time: Nanos,
    pub mono: Nanos,
}

/// The line a leader stamps along during one term.
#[derive(Debug, Clone, Copy)]
struct Lead {
    term: u64,
    base: Nanos,
    base_mono: Nanos,
    /// Catch-up gained so far by slew.
    slewed: Nanos,
    /// When slew was last accounted.
    slew_mono: Nanos,
}

/// One node's view of cluster time; see the module doc.
#[derive(Debug, Clone, Default)]
pub struct ClusterClock {
    /// The latest applied cluster time and when this node saw it.
    observed: Option<Observed>,
    /// Whether `observed` came from an entry committed while this process ran (a fresh
    /// observation), rather than from replaying old entries after a restart.
    live: bool,
    /// Whether a restart hint carried cluster time across this node's downtime (see
    /// [`Self::restore`]).
    restored: bool,
    /// Set while this node leads.
    lead: Option<Lead>,
    /// The largest time this node has handed out (stamps and read times).
    issued: Nanos,
}

impl ClusterClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that cluster time `time` was applied, seen at `mono`; `live` tells whether the
    /// entry was committed while this process ran.
    ///
    /// Every observation bounds the line from below: `time` was stamped no later than `mono`,
    /// so `time + (now − mono)` is never ahead of where the stamping leader's line is now. The
    /// node keeps the *largest* such bound. An observation that extrapolates lower says nothing
    /// new — an old stamp committed late (after a partition), or a time seen again with no
    /// newer stamp — and anchoring on it would make cluster time fall behind.
    pub fn observe(&mut self, time: Nanos, mono: Nanos, live: bool) {
        let ahead = self
            .observed
            .is_none_or(|o| time > o.time + (mono - o.mono).max(0));
        if ahead {
            self.observed = Some(Observed { time, mono });
        }
        self.live |= live;
    }

    /// Carries cluster time across a restart: `time` is what this node estimated before it
    /// stopped, already advanced by the downtime as this node's own wall clock measured it.
    /// A constant wall-clock error cancels out of that difference; only a clock stepped while
    /// the node was down shifts it. A cold-start leader then starts its line here instead of
    /// at its wall clock.
    pub fn restore(&mut self, time: Nanos, mono: Nanos) {
        self.observe(time, mono, false);
        self.restored = true;
    }

    /// Whether this node has seen a live entry (see [`Self::observe`]).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// This node's best estimate of cluster time now: the leader's line, or the latest
    /// observation carried forward on the monotonic clock. `None` before any observation.
    pub fn estimate(&self, mono: Nanos) -> Option<Nanos> {
        if let Some(lead) = &self.lead {
            return Some(lead.line(mono));
        }
        self.observed.map(|o| o.time + (mono - o.mono).max(0))
    }

    /// `wall − estimate`: how far this node's wall clock is from cluster time.
    pub fn offset(&self, wall: Nanos, mono: Nanos) -> Option<Nanos> {
        self.estimate(mono).map(|e| wall - e)
    }

    /// Stops leading (the next [`Self::stamp`] draws a new line).
    pub fn step_down(&mut self) {
        self.lead = None;
    }

    /// The time for an entry proposed (or a read answered) now by the leader of `term`, whose
    /// state machine has applied up to cluster time `applied`.
    pub fn stamp(&mut self, term: u64, wall: Nanos, mono: Nanos, applied: Nanos) -> Nanos {
        if self.lead.is_none_or(|l| l.term != term) {
            self.lead = Some(self.begin_term(term, wall, mono, applied));
        }
        let lead = self.lead.as_mut().expect("set above");
        lead.slew_towards(wall, mono);
        let line = lead.line(mono);
        let stamp = wall
            .clamp(line - MAX_LAG, line)
            .max(self.issued)
            .max(applied);
        self.issued = stamp;
        stamp
    }

    fn begin_term(&self, term: u64, wall: Nanos, mono: Nanos, applied: Nanos) -> Lead {
        let carried = self.observed.map(|o| o.time + (mono - o.mono).max(0));
        let base = match carried {
            Some(carried) if self.live || self.restored => carried,
            // Genesis, or a cold start without a restart hint: nothing better than the wall
            // clock exists.
            _ => wall,
        };
        Lead {
            term,
            base: base.max(applied).max(self.issued),
            base_mono: mono,
            slewed: 0,
            slew_mono: mono,
        }
    }
}

impl Lead {
    fn line(&self, mono: Nanos) -> Nanos {
        self.base + (mono - self.base_mono).max(0) + self.slewed
    }

    fn slew_towards(&mut self, wall: Nanos, mono: Nanos) {
        let elapsed = (mono - self.slew_mono).max(0);
        self.slew_mono = self.slew_mono.max(mono);
        let gap = wall - self.line(mono);
        if gap > 0 && gap <= SLEW_WINDOW {
            // Capped per term: a wall clock that keeps running fast inside the window gains
            // cluster time at most SLEW_WINDOW over real time while this node leads.
            let step = gap.min(elapsed * SLEW_RATE_PER_1000 / 1000);
            self.slewed = (self.slewed + step).min(SLEW_WINDOW);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;
    const S: Nanos = 1_000 * MS;

    #[test]
    fn a_fast_or_slow_leader_clock_does_not_move_cluster_time() {
        let mut c = ClusterClock::new();
        c.observe(100 * S, 0, true);
        // Wall 60 s ahead: stamps follow the monotonic line.
        assert_eq!(c.stamp(2, 160 * S, 10 * MS, 100 * S), 100 * S + 10 * MS);
        assert_eq!(c.stamp(2, 161 * S, S, 100 * S), 101 * S);
        // Wall stepped 60 s back: stamps trail the line by at most MAX_LAG, and move on.
        assert_eq!(c.stamp(2, 41 * S, 2 * S, 101 * S), 102 * S - MAX_LAG);
        assert_eq!(c.stamp(2, 42 * S, 3 * S, 101 * S), 103 * S - MAX_LAG);
    }

    #[test]
    fn a_new_term_starts_from_the_observation_carried_forward() {
        let mut c = ClusterClock::new();
        c.observe(100 * S, 0, true);
        assert_eq!(c.stamp(1, 200 * S, 5 * S, 100 * S), 105 * S);
        c.step_down();
        c.observe(106 * S, 6 * S, true);
        assert_eq!(c.stamp(2, 0, 7 * S, 106 * S), 107 * S - MAX_LAG);
    }

    #[test]
    fn slew_gains_at_most_the_window_per_term() {
        let mut c = ClusterClock::new();
        c.observe(100 * S, 0, true);
        // A wall clock stepped 400 ms forward every 5 s (a misbehaving time source) is always
        // back inside the window after the line catches up, so it keeps pulling; an hour later
        // the line has still gained no more than SLEW_WINDOW.
        let mut stamp = 0;
        for sec in 1..=3600 {
            let real = sec * S;
            let wall_ahead = (sec / 5) * 400 * MS;
            stamp = c.stamp(1, 100 * S + real + wall_ahead, real, 0);
        }
        assert!(stamp <= 100 * S + 3600 * S + SLEW_WINDOW, "{stamp}");
    }

    #[test]
    fn seeing_the_same_time_again_does_not_stop_the_clock() {
        let mut c = ClusterClock::new();
        c.observe(100 * S, 0, true);
        c.observe(100 * S, 2 * S, true);
        assert_eq!(c.estimate(3 * S), Some(103 * S));
    }

    #[test]
    fn an_old_stamp_committed_late_does_not_drag_the_estimate_back() {
        let mut c = ClusterClock::new();
        c.observe(100 * S, 0, true);
        // Stamped at 101 s but committed only 3 s later (a partition healed).
        c.observe(101 * S, 4 * S, true);
        assert_eq!(c.estimate(5 * S), Some(105 * S));
        c.observe(105 * S + MS, 5 * S, true);
        assert_eq!(c.estimate(6 * S), Some(106 * S + MS));
    }

    #[test]
    fn a_cold_start_with_a_hint_ignores_a_skewed_wall_clock() {
        let mut c = ClusterClock::new();
        c.observe(10 * S, 0, false); // replayed, old
        c.restore(500 * S, 0); // the hint, carried over the downtime
        assert_eq!(c.stamp(3, 1100 * S, MS, 10 * S), 500 * S + MS);
    }

    #[test]
    fn genesis_and_cold_start_trust_the_wall_clock_once() {
        let mut c = ClusterClock::new();
        assert_eq!(c.stamp(1, 50 * S, 0, 0), 50 * S);
        let mut restarted = ClusterClock::new();
        restarted.observe(10 * S, 0, false);
        assert_eq!(restarted.stamp(3, 3600 * S, MS, 10 * S), 3600 * S);
    }

    /// One simulated node: its clock error over time and when it sees applied entries.
    #[derive(Debug, Clone)]
    struct Skew {
        /// Wall-clock error at start.
        start: Nanos,
        /// A step applied at `step_at` (ms of the run).
        step: Nanos,
        step_at: Nanos,
    }

    fn skew() -> impl Strategy<Value = Skew> {
        (
            prop_oneof![Just(0), -60 * S..60 * S, -SLEW_WINDOW..SLEW_WINDOW],
            prop_oneof![Just(0), -60 * S..60 * S],
            0..20 * S,
        )
            .prop_map(|(start, step, step_at)| Skew {
                start,
                step,
                step_at,
            })
    }

    impl Skew {
        fn wall(&self, real: Nanos) -> Nanos {
            real + self.start + if real >= self.step_at { self.step } else { 0 }
        }
    }

    #[derive(Debug, Clone)]
    enum Event {
        /// Real time passes.
        Wait(Nanos),
        /// Node `n` becomes leader of the next term.
        Elect(usize),
        /// The leader stamps an entry; every node sees it applied `delay` later.
        Write(Nanos),
    }

    /// Three nodes' clocks, one leader at a time, on one true (monotonic) time line.
    struct SimCluster {
        genesis: Nanos,
        nodes: Vec<ClusterClock>,
        leader: usize,
        term: u64,
        /// True time since genesis (also every node's monotonic reading).
        real: Nanos,
        applied: Nanos,
        elections: i64,
    }

    impl SimCluster {
        /// A cluster whose time starts at the true time, seen live by every node.
        fn new() -> Self {
            let genesis = 1_000 * S;
            let mut nodes = vec![ClusterClock::new(); 3];
            for n in &mut nodes {
                n.observe(genesis, 0, true);
            }
            SimCluster {
                genesis,
                nodes,
                leader: 0,
                term: 1,
                real: 0,
                applied: genesis,
                elections: 0,
            }
        }

        fn true_now(&self) -> Nanos {
            self.genesis + self.real
        }

        fn elect(&mut self, n: usize) {
            self.nodes[self.leader].step_down();
            self.leader = n;
            self.term += 1;
            self.elections += 1;
        }

        /// The leader stamps an entry with its wall clock reading `wall` (since genesis).
        fn stamp(&mut self, wall: Nanos) -> Nanos {
            let (term, real, applied) = (self.term, self.real, self.applied);
            self.nodes[self.leader].stamp(term, self.genesis + wall, real, applied)
        }

        /// The entry stamped `stamp` is applied, and seen by every node `delay` later.
        fn apply(&mut self, stamp: Nanos, delay: Nanos) {
            self.applied = self.applied.max(stamp);
            self.real += delay;
            for n in &mut self.nodes {
                n.observe(self.applied, self.real, true);
            }
        }
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => (MS..2 * S).prop_map(Event::Wait),
            1 => (0usize..3).prop_map(Event::Elect),
            6 => (0..20 * MS).prop_map(Event::Write),
        ]
    }

    proptest! {
        /// Over random leader changes, skewed and stepping wall clocks and delayed
        /// observations: cluster time never runs ahead of real time by more than the slew can
        /// add (at most `SLEW_WINDOW` ahead of any leader's wall, at a bounded rate), never
        /// goes backwards, and never lags real time by more than MAX_LAG plus the observation
        /// delays.
        #[test]
        fn stamps_follow_real_time_whatever_the_wall_clocks(
            skews in proptest::collection::vec(skew(), 3),
            events in proptest::collection::vec(event(), 1..200),
        ) {
            let mut c = SimCluster::new();
            let mut last_stamp = c.applied;
            let mut total_delay = 0;
            // Slew moves the line at most up to a leader's wall clock that is within
            // SLEW_WINDOW of it; a chain of such clocks (at most one rung per distinct skew
            // value) bounds how far ahead cluster time can get.
            let ladder = 6 * SLEW_WINDOW;
            let ahead_allowance = skews
                .iter()
                .flat_map(|s| [s.start, s.start + s.step])
                .filter(|&s| s <= ladder)
                .max()
                .unwrap_or(0)
                .max(0);
            for e in events {
                match e {
                    Event::Wait(d) => c.real += d,
                    Event::Elect(n) => c.elect(n),
                    Event::Write(delay) => {
                        let stamp = c.stamp(skews[c.leader].wall(c.real));
                        prop_assert!(stamp >= last_stamp, "never backwards");
                        let true_now = c.true_now();
                        prop_assert!(
                            stamp <= true_now + ahead_allowance,
                            "stamp {} ahead of real time {} by more than a slewed clock",
                            stamp, true_now
                        );
                        prop_assert!(
                            // Each leader may trail its line by MAX_LAG, and the next one
                            // starts from that: lateness adds up per leader change (slew
                            // recovers it once a leader's clock is close again).
                            stamp >= true_now - MAX_LAG * (c.elections + 1) - total_delay,
                            "stamp {} lags real time {} too much", stamp, true_now
                        );
                        last_stamp = stamp;
                        total_delay += delay;
                        c.apply(stamp, delay);
                    }
                }
            }
        }

        /// With every wall clock right, cluster time stays within a few ms of real time.
        #[test]
        fn with_correct_clocks_cluster_time_is_real_time(
            events in proptest::collection::vec(event(), 1..100),
        ) {
            let mut c = SimCluster::new();
            for e in events {
                match e {
                    Event::Wait(d) => c.real += d,
                    Event::Elect(n) => c.elect(n),
                    Event::Write(delay) => {
                        let stamp = c.stamp(c.real);
                        prop_assert!(stamp <= c.true_now());
                        // Apply delays of a healthy cluster: a few ms.
                        c.apply(stamp, delay / 4);
                    }
                }
            }
            // After a quiet second under one leader, stamps are back on real time.
            c.real += S;
            let stamp = c.stamp(c.real);
            c.apply(stamp, 5 * S);
            let later = c.stamp(c.real);
            prop_assert!(c.true_now() - later <= 60 * MS, "lag {} ms", (c.true_now() - later) / MS);
        }
    }
}
