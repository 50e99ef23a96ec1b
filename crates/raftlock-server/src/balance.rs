//! Spreading leaderships: each node leads about as many groups as its peers. Every node runs
//! a balancer that, when it leads at least two groups more than some member of one of those
//! groups, hands that group over to the member leading the fewest (today's hand-off, per
//! group: no pause beyond one election). A node counts only the groups it hosts a replica
//! of — the leaders it can see — so the spread is even among nodes that share groups, which
//! is where it matters: those are the nodes whose CPUs and disks the groups' writes share.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use raftlock_raft::GroupId;

use crate::node::SharedNode;

/// How often a node looks at the spread.
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// Bound on one hand-off the balancer asks for.
const MOVE_BOUND: Duration = Duration::from_secs(3);

/// One group as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub group: GroupId,
    pub voters: BTreeSet<u64>,
    pub leader: Option<u64>,
}

/// The hand-off that evens out leaderships, if one is due: a group `me` leads, to the voter
/// of it that leads the fewest of the groups seen, when `me` leads at least two more.
pub fn next_move(me: u64, seen: &[Seen]) -> Option<(GroupId, u64)> {
    let mut led: BTreeMap<u64, usize> = (seen.iter())
        .flat_map(|s| s.voters.iter().map(|v| (*v, 0)))
        .collect();
    for leader in seen.iter().filter_map(|s| s.leader) {
        *led.entry(leader).or_default() += 1;
    }
    let mine = led.get(&me).copied().unwrap_or(0);
    (seen.iter())
        .filter(|s| s.leader == Some(me))
        .flat_map(|s| {
            (s.voters.iter())
                .filter(|v| **v != me)
                .map(move |v| (s.group, *v))
        })
        .min_by_key(|(group, voter)| (led[voter], *group, *voter))
        .filter(|(_, voter)| led[voter] + 2 <= mine)
}

/// Starts `node`'s balancer.
pub fn spawn(node: SharedNode) {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(LOOK_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if node.is_stopping() {
                return;
            }
            let seen: Vec<Seen> = (node.groups().iter())
                .map(|g| Seen {
                    group: g.id,
                    voters: g.voters(),
                    leader: g.leader().map(|(id, _)| id),
                })
                .collect();
            let Some((group_id, target)) = next_move(node.config.node_id, &seen) else {
                continue;
            };
            let Some(group) = node.group(group_id) else {
                continue;
            };
            tracing::info!(
                group = group_id,
                target,
                "moving a leadership to even out leaders"
            );
            metrics::counter!("raftlock_leaderships_balanced_total").increment(1);
            if let Err(e) = crate::handoff::hand_off(&node, &group, Some(target), MOVE_BOUND).await
            {
                tracing::info!(group = group_id, target, error = %e, "balancing move failed");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(group: GroupId, voters: &[u64], leader: Option<u64>) -> Seen {
        Seen {
            group,
            voters: voters.iter().copied().collect(),
            leader,
        }
    }

    #[test]
    fn a_node_leading_every_group_gives_them_away_until_the_spread_is_even() {
        let mut groups: Vec<Seen> = (0..4).map(|g| seen(g, &[1, 2, 3], Some(1))).collect();
        let mut moves = 0;
        while let Some((group, to)) = next_move(1, &groups) {
            groups[group as usize].leader = Some(to);
            moves += 1;
            assert!(moves <= 4, "converges");
        }
        let mut led = [0; 4];
        for g in &groups {
            led[g.leader.unwrap() as usize] += 1;
        }
        assert_eq!(moves, 2, "{groups:?}");
        assert!(led[1..].iter().all(|n| (1..=2).contains(n)), "{led:?}");
    }

    #[test]
    fn a_spread_off_by_one_stays_and_off_by_two_moves() {
        let mut groups = vec![
            seen(0, &[1, 2, 3], Some(1)),
            seen(1, &[1, 2, 3], Some(1)),
            seen(2, &[1, 2, 3], Some(2)),
        ];
        assert_eq!(
            next_move(1, &groups),
            Some((0, 3)),
            "2, 1, 0: to the idle node"
        );
        groups[0].leader = Some(3);
        for me in 1..=3 {
            assert_eq!(next_move(me, &groups), None, "1, 1, 1 stays");
        }
        groups.pop();
        assert_eq!(next_move(1, &groups), None, "1, 0, 1 is not worth a pause");
        let one = [seen(0, &[1, 2, 3], Some(1))];
        assert_eq!(next_move(1, &one), None, "a single group stays where it is");
    }

    #[test]
    fn leadership_goes_only_to_a_voter_of_the_group() {
        let groups = [
            seen(0, &[1, 2, 3], Some(1)),
            seen(1, &[1, 4, 5], Some(1)),
            seen(2, &[1, 2, 3], Some(1)),
        ];
        let (group, to) = next_move(1, &groups).expect("a move");
        assert!(groups[group as usize].voters.contains(&to));
    }
}
