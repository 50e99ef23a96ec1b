//! The node's budget of open files, so client connections cannot take the descriptors its
//! own files and peers need.
//!
//! Every accepted connection is a descriptor, and so is every WAL segment, snapshot, clock
//! hint and peer connection the node opens. Under a soft `RLIMIT_NOFILE` of 1,024 (what a
//! login shell or a plain `docker run` without `--ulimit` may give), a few hundred idle
//! connections without credentials filled a node's table below `--max-connections`: it could
//! no longer accept a peer's forward nor write its clock hint ("Too many open files"), and a
//! WAL segment or snapshot would have failed next. So at start the node raises its soft limit
//! to the hard one ([`raise_soft_limit`], as Go's runtime does for every program), and when
//! even that is too small for `--max-connections`, it lowers the connection cap to what fits
//! ([`connection_cap`]) and says so: clients past the cap wait in the accept queue, as they
//! would past `--max-connections`.

/// Descriptors kept for the node's own use: listeners, the runtime's epoll and wake-ups, each
/// group's WAL segments, vote and snapshot files, the clock hint, the peer streams, TLS files.
pub const OWN_USE: u64 = 256;

/// The soft open-files limit before and after raising it to the hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    pub before: u64,
    pub after: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (`RLIM_INFINITY` counted as
/// `u64::MAX`).
pub fn raise_soft_limit() -> std::io::Result<Raised> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the initialised struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let before = lim.rlim_cur;
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(Raised {
            before,
            after: lim.rlim_cur,
        })
    }
}

/// The client connections each of `listeners` listeners may hold open with `limit` open
/// files in a cluster of `nodes` nodes: at most `configured`, and no more than leaves
/// [`OWN_USE`] descriptors free when every counted connection is open, each has a call
/// forwarded to the leader in flight (an outgoing connection), and every other node forwards
/// as many calls here (peer connections are not counted against the cap, so they are
/// counted here). At least one.
pub fn connection_cap(configured: usize, limit: u64, nodes: usize, listeners: usize) -> usize {
    // Per counted connection: itself, its forward out, and one forward in from each peer.
    let per_connection = (listeners * (nodes + 1)).max(1) as u64;
    let fits = limit.saturating_sub(OWN_USE) / per_connection;
    configured
        .min(usize::try_from(fits).unwrap_or(usize::MAX))
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generous_limit_keeps_the_configured_cap() {
        assert_eq!(connection_cap(8192, 1 << 20, 3, 1), 8192);
        // The systemd unit's LimitNOFILE=65536: 4 descriptors per connection fit.
        assert_eq!(connection_cap(8192, 65_536, 3, 1), 8192);
    }

    #[test]
    fn a_small_limit_lowers_the_cap_to_what_fits() {
        // 3 nodes, one listener: a connection, its forward, and two peers' forwards.
        assert_eq!(
            connection_cap(8192, 1024, 3, 1),
            (1024 - OWN_USE as usize) / 4
        );
        // A peer listener doubles the connections the node may hold for clients, and so
        // what each peer may forward here.
        assert_eq!(
            connection_cap(8192, 4096, 5, 2),
            (4096 - OWN_USE as usize) / 12
        );
    }

    #[test]
    fn the_cap_never_reaches_zero() {
        assert_eq!(connection_cap(8192, 100, 3, 1), 1);
        assert_eq!(connection_cap(0, 1 << 20, 3, 1), 1);
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let raised = raise_soft_limit().expect("getrlimit");
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the initialised struct.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
        assert_eq!(raised.after, lim.rlim_cur);
        assert!(raised.before <= raised.after);
    }
}
