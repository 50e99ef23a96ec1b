//! Leader election on top of a project lock.
//!
//! The leader is whoever holds the election key; its **term** is the lock's fencing token,
//! which strictly increases from one leader to the next. A candidate [`Election::campaign`]s
//! (waits for the key), leads while its [`Leadership`] is not cancelled, and
//! [`Leadership::resign`]s (releases the key). Anyone can [`Election::leader`] or
//! [`Election::observe`] the current term. Project locks carry no value, so the leader's
//! identity is not stored here: publish it, fenced by the term, wherever the application
//! keeps state. See `docs/leader-election.md`.

use std::time::{Duration, SystemTime};

use futures::Stream;
use serde::Serialize;

use crate::error::Result;
use crate::guard::{HeldLock, Hold, LockGuard, LockOptions};
use crate::transport::Client;

/// An election among processes sharing a project-lock key.
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    key: String,
    ttl: Duration,
    poll: Duration,
}

/// A leader's term as observers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Term {
    /// The fencing token of the leader's lease: the term number.
    pub fencing_token: u64,
    /// When the leader's lease ends unless renewed.
    #[serde(with = "crate::rfc3339")]
    pub expires_at: SystemTime,
}

/// This process leads until [`Leadership::lost`] resolves or it resigns.
#[derive(Debug)]
pub struct Leadership {
    held: HeldLock,
}

impl Leadership {
    /// The term (fencing token); attach it to every write the leader makes.
    pub fn term(&self) -> u64 {
        self.held.guard().fencing_token()
    }

    /// The underlying lock guard (cancellation token, expiry).
    pub fn guard(&self) -> &LockGuard {
        self.held.guard()
    }

    /// Resolves when leadership is lost (renewal refused or lease expired).
    pub async fn lost(&self) {
        self.held.guard().cancelled().await
    }

    /// Steps down: releases the key so another candidate can win.
    pub async fn resign(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}

impl Election {
    /// An election on `key` with leader leases of `ttl` (≥ 5 s). Waiting candidates and
    /// observers poll every second by default.
    pub fn new(client: Client, key: impl Into<String>, ttl: Duration) -> Election {
        Election {
            client,
            key: key.into(),
            ttl,
            poll: Duration::from_secs(1),
        }
    }

    /// Sets how often waiting candidates and observers look at the key.
    pub fn poll_interval(mut self, every: Duration) -> Election {
        self.poll = every;
        self
    }

    /// The election key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// One attempt: leadership if the key is free now.
    pub async fn try_campaign(&self) -> Result<Option<Leadership>> {
        match self
            .client
            .hold(&self.key, LockOptions::new(self.ttl))
            .await?
        {
            Hold::Acquired(held) => Ok(Some(Leadership { held })),
            Hold::NotAcquired(_) => Ok(None),
        }
    }

    /// Waits until this process becomes leader. Cancel it by dropping the future.
    pub async fn campaign(&self) -> Result<Leadership> {
        loop {
            if let Some(l) = self.try_campaign().await? {
                return Ok(l);
            }
            // Wait for the current term to end before trying again.
            loop {
                tokio::time::sleep(crate::guard::jittered(self.poll)).await;
                if self.leader().await?.is_none() {
                    break;
                }
            }
        }
    }

    /// The current leader's term, or `None` when nobody leads.
    pub async fn leader(&self) -> Result<Option<Term>> {
        let s = self.client.get(&self.key).await?;
        Ok(match (s.held, s.fencing_token, s.expires_at) {
            (true, Some(fencing_token), Some(expires_at)) => Some(Term {
                fencing_token,
                expires_at,
            }),
            _ => None,
        })
    }

    /// A stream that yields the current term first and then every change (new leader, or
    /// no leader). Errors are yielded too; the stream goes on after them.
    pub fn observe(&self) -> impl Stream<Item = Result<Option<Term>>> + '_ {
        futures::stream::unfold(
            (None::<Option<u64>>, true),
            move |(last, mut first)| async move {
                loop {
                    if !first {
                        tokio::time::sleep(self.poll).await;
                    }
                    first = false;
                    match self.leader().await {
                        Ok(term) => {
                            let id = term.map(|t| t.fencing_token);
                            if last != Some(id) {
                                return Some((Ok(term), (Some(id), false)));
                            }
                        }
                        Err(e) => return Some((Err(e), (last, false))),
                    }
                }
            },
        )
    }
}

/// Compiles the example of `docs/leader-election.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/leader-election.md")]
pub struct LeaderElectionDoc;
