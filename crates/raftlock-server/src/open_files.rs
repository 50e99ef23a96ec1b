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
/// group's directory lock and WAL segment (two per group, ~100 groups), snapshots being
/// written, the clock hint, Raft streams to and from its peers, TLS files.
pub const OWN_USE: u64 = 512;

/// The soft open-files limit before and after [`raise_soft_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    pub before: u64,
    pub after: u64,
    /// Why it could not be raised, if it could not (the limit stays at `before`).
    pub refused: Option<std::io::ErrorKind>,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. Fails only when the limit cannot be
/// read; when it cannot be raised, [`Raised::after`] is the limit as it was.
pub fn raise_soft_limit() -> std::io::Result<Raised> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the initialised struct passed to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    if before >= lim.rlim_max {
        return Ok(Raised {
            before,
            after: before,
            refused: None,
        });
    }
    let raised = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads the initialised struct passed to it.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Ok(Raised {
            before,
            after: before,
            refused: Some(std::io::Error::last_os_error().kind()),
        });
    }
    Ok(Raised {
        before,
        after: lim.rlim_max,
        refused: None,
    })
}

/// The client connections each of `listeners` listeners may hold open with `limit` open
/// files: at most `configured`, and no more than leaves [`OWN_USE`] descriptors free when every
/// counted connection is open with a call forwarded to a peer in flight. At least one.
///
/// Calls that peers forward here (and the relays of those to a shard's leader) are not
/// budgeted: a peer forwards only calls its own clients authenticated with a key, so they
/// grow with authenticated load, which quotas and rate limits bound, while this cap is what
/// clients without credentials can hold (idle connections, requests that will be refused).
pub fn connection_cap(configured: usize, limit: u64, listeners: usize) -> usize {
    // Per counted connection: itself and its forward out.
    let per_connection = (2 * listeners.max(1)) as u64;
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
        assert_eq!(connection_cap(8192, 1 << 20, 2), 8192);
        // The systemd unit's old LimitNOFILE, one listener.
        assert_eq!(connection_cap(8192, 65_536, 1), 8192);
    }

    #[test]
    fn a_small_limit_lowers_the_cap_to_what_fits() {
        let own = OWN_USE as usize;
        // One listener: a connection and its forward.
        assert_eq!(connection_cap(8192, 4096, 1), (4096 - own) / 2);
        // A peer listener doubles the connections the node may hold for clients.
        assert_eq!(connection_cap(8192, 4096, 2), (4096 - own) / 4);
    }

    #[test]
    fn the_cap_never_reaches_zero() {
        assert_eq!(connection_cap(8192, 100, 1), 1);
        assert_eq!(connection_cap(0, 1 << 20, 1), 1);
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let raised = raise_soft_limit().expect("getrlimit");
        assert_eq!(raised.refused, None);
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
