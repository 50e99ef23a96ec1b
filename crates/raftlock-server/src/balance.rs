//! Spreading leaderships: each node leads about as many data shards as its peers, and the
//! meta group goes to a node with few. Every node runs a balancer that, when it leads at
//! least two shards more than some member of one of them, hands that shard over to the
//! member leading the fewest (today's hand-off, per group: no pause beyond one election);
//! the meta group moves the same way, counted with the shards ([`next_move`]). A node counts
//! only the groups it hosts a replica of — the leaders it can see — so the spread is even among nodes that share groups, which
//! is where it matters: those are the nodes whose CPUs and disks the groups' writes share.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use raftlock_raft::{GroupId, META_GROUP};

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

/// The hand-off that evens out leaderships, if one is due. Data shards first, since they
/// carry the writes: a shard `me` leads goes to the voter of it leading the fewest shards when
/// `me` leads at least two more. Then the meta group, which is light but still one more
/// leader's work: `me` hands it over when it leads at least two groups more than one of its
/// voters. Counting the meta group with the shards instead would let one node keep two
/// shards beside a node that leads only the meta group.
pub fn next_move(me: u64, seen: &[Seen]) -> Option<(GroupId, u64)> {
    let data: Vec<&Seen> = seen.iter().filter(|s| s.group != META_GROUP).collect();
    let shards_led = leaderships(&data);
    let all: Vec<&Seen> = seen.iter().collect();
    let groups_led = leaderships(&all);
    let shard_move = (data.iter())
        .filter(|s| s.leader == Some(me))
        .flat_map(|s| other_voters(s, me))
        .min_by_key(|(group, voter)| (shards_led[voter], groups_led[voter], *group, *voter))
        .filter(|(_, voter)| shards_led[voter] + 2 <= shards_led[&me]);
    shard_move.or_else(|| {
        (seen.iter())
            .filter(|s| s.group == META_GROUP && s.leader == Some(me))
            .flat_map(|s| other_voters(s, me))
            .min_by_key(|(_, voter)| (groups_led[voter], *voter))
            .filter(|(_, voter)| groups_led[voter] + 2 <= groups_led[&me])
    })
}

/// How many of `groups` each of their voters leads (0 for a voter leading none).
fn leaderships(groups: &[&Seen]) -> BTreeMap<u64, usize> {
    let mut led: BTreeMap<u64, usize> = (groups.iter())
        .flat_map(|s| s.voters.iter().map(|v| (*v, 0)))
        .collect();
    for leader in groups.iter().filter_map(|s| s.leader) {
        *led.entry(leader).or_default() += 1;
    }
    led
}

/// `(group, voter)` for every voter of `group` other than `me`.
fn other_voters(group: &Seen, me: u64) -> impl Iterator<Item = (GroupId, u64)> + '_ {
    (group.voters.iter())
        .filter(move |v| **v != me)
        .map(move |v| (group.group, *v))
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
    fn two_shards_on_one_node_beside_a_node_leading_only_the_meta_group_are_split() {
        let mut groups = vec![
            seen(0, &[1, 2, 3], Some(1)),
            seen(1, &[1, 2, 3], Some(2)),
            seen(2, &[1, 2, 3], Some(2)),
            seen(3, &[1, 2, 3], Some(3)),
        ];
        assert_eq!(
            next_move(1, &groups),
            None,
            "the meta leader leads no shard"
        );
        let (group, to) = next_move(2, &groups).expect("2 leads two shards, 1 none");
        assert_eq!((group, to), (1, 1), "a shard goes to the node leading none");
        groups[group as usize].leader = Some(to);
        for me in 1..=3 {
            assert_eq!(
                next_move(me, &groups),
                None,
                "shards 1, 1, 1 and the meta group stay"
            );
        }
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
