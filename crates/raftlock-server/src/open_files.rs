//! The node's budget of open files, so client connections cannot take the descriptors its
//! own files need.
//!
//! Every accepted connection is a descriptor, and so is every WAL segment, snapshot, clock
//! hint and peer connection the node opens. Under a soft `RLIMIT_NOFILE` of 256, 300 idle
//! connections without credentials per node (far below `--max-connections`) filled each
//! node's table: it could no longer accept new connections, a peer's forward among them, nor
//! write its clock hint ("Too many open files"), and a WAL segment or snapshot would have
//! failed next; login shells and some container engines give 1,024. So at start the node
//! raises its soft limit to the hard one ([`raise_soft_limit`], as Go's runtime does for every
//! program), and when even that is too small for `--max-connections`, it lowers the
//! connection cap to what fits ([`connection_cap`]) and says so: clients past the cap wait in
//! the accept queue, as they would past `--max-connections`.

/// Descriptors kept for the node's own use: listeners, the runtime's epoll and wake-ups, each
/// group's directory lock and WAL segment (two per group), snapshots being written, the clock
/// hint, Raft streams to and from its peers, TLS files. Sized for the tens of groups a node
/// hosts; one that hosts a hundred or more needs a larger limit than the cap assumes.
pub const OWN_USE: u64 = 512;

/// The cap is never lowered below this many connections per listener (or `--max-connections`,
/// if smaller): a node under a limit too small for [`OWN_USE`] still serves some clients.
pub const MIN_CAP: usize = 64;

/// Soft limits tried, in order, when the hard limit itself is refused (macOS reports an
/// unlimited hard limit but refuses a soft one above `kern.maxfilesperproc`).
const FALLBACK_TARGETS: [u64; 3] = [1 << 20, 65_536, 10_240];

/// The soft open-files limit before and after [`raise_soft_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    pub before: u64,
    pub after: u64,
    /// Why the hard limit could not be reached, if it could not (`after` is then the highest
    /// of the fallback targets that was taken, or `before`).
    pub refused: Option<std::io::ErrorKind>,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, or as near as the system allows. Fails
/// only when the limit cannot be read.
pub fn raise_soft_limit() -> std::io::Result<Raised> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the initialised struct passed to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (before, hard) = (lim.rlim_cur, lim.rlim_max);
    if before >= hard {
        return Ok(Raised {
            before,
            after: before,
            refused: None,
        });
    }
    let refused = match set_soft_limit(hard, hard) {
        Ok(()) => {
            return Ok(Raised {
                before,
                after: hard,
                refused: None,
            })
        }
        Err(e) => e.kind(),
    };
    let after = FALLBACK_TARGETS
        .into_iter()
        .filter(|target| *target > before && *target < hard)
        .find(|target| set_soft_limit(*target, hard).is_ok())
        .unwrap_or(before);
    Ok(Raised {
        before,
        after,
        refused: Some(refused),
    })
}

fn set_soft_limit(soft: u64, hard: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the initialised struct passed to it.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Raises the soft limit ([`raise_soft_limit`]) and returns the connection cap per listener
/// for `--max-connections` `configured` ([`connection_cap`]), logging what it changed.
pub fn fit_connection_cap(configured: usize, listeners: usize) -> usize {
    let limit = match raise_soft_limit() {
        Ok(raised) => {
            if let Some(why) = raised.refused {
                tracing::warn!(from = raised.before, to = raised.after, error = %std::io::Error::from(why), "cannot raise the open-files limit to the hard limit; raised it as far as allowed");
            } else if raised.after > raised.before {
                tracing::info!(
                    from = raised.before,
                    to = raised.after,
                    "raised the open-files limit to the hard limit"
                );
            }
            raised.after
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-files limit; keeping --max-connections");
            return configured;
        }
    };
    let cap = connection_cap(configured, limit, listeners);
    if cap < configured {
        tracing::warn!(
            max_connections = configured,
            cap,
            open_files_limit = limit,
            "the open-files limit holds fewer client connections than --max-connections: \
             capped lower (clients past the cap wait in the accept queue); raise the hard \
             limit (systemd LimitNOFILE, docker --ulimit nofile) to lift it"
        );
    }
    cap
}

/// The client connections each of `listeners` listeners may hold open with `limit` open
/// files: at most `configured`, and no more than leaves [`OWN_USE`] descriptors free when every
/// counted connection is open with a call forwarded to a peer in flight — but not below
/// [`MIN_CAP`].
///
/// Calls that peers forward here (and the relays of those to a shard's leader) are not
/// budgeted: a peer forwards only calls its own clients authenticated with a key, so they
/// grow with authenticated load, which quotas and rate limits bound, while this cap is what
/// clients without credentials can hold (idle connections, requests that will be refused).
pub fn connection_cap(configured: usize, limit: u64, listeners: usize) -> usize {
    // Per counted connection: itself and its forward out.
    let per_connection = (2 * listeners.max(1)) as u64;
    let fits = limit.saturating_sub(OWN_USE) / per_connection;
    let fits = usize::try_from(fits).unwrap_or(usize::MAX);
    configured.min(fits.max(MIN_CAP)).max(1)
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
    fn a_limit_too_small_for_the_nodes_own_files_still_serves_some_clients() {
        assert_eq!(connection_cap(8192, 100, 1), MIN_CAP);
        assert_eq!(connection_cap(8192, 600, 2), MIN_CAP);
        // Never above what the operator asked for, and never zero.
        assert_eq!(connection_cap(16, 100, 1), 16);
        assert_eq!(connection_cap(0, 1 << 20, 1), 1);
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let raised = raise_soft_limit().expect("getrlimit");
        if raised.refused.is_some() {
            // Not here (Linux takes its finite hard limit); macOS may refuse it.
            return;
        }
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
