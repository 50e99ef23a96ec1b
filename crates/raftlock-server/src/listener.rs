//! The HTTP listener: hyper's HTTP/1 server with the limits `axum::serve` does not set, so a
//! slow or hostile client cannot hold a node's port.
//!
//! - **Header-read timeout** ([`HEADER_READ_TIMEOUT`]): a connection that has not sent a
//!   whole request head in time is closed. This also bounds how long an idle keep-alive
//!   connection is kept (hyper starts the timer whenever it waits for the next request head),
//!   which is why the node's own HTTP clients drop idle connections sooner.
//! - **Connection cap** (`--max-connections`): past it, new connections wait in the kernel's
//!   accept queue instead of each taking memory and a task — except [`PEER_RESERVE`] more,
//!   kept for node-to-node traffic: a connection accepted on the reserve serves only
//!   requests that present the cluster secret (others are answered `503` and the connection
//!   closed). Clients that fill the cap (slow bodies, idle keep-alives) so cannot keep a peer
//!   from opening a Raft stream or forwarding a request.
//! - **Peers are counted apart**: a connection that presents the cluster secret
//!   ([`ConnectionSlot::release_for_peer`], from `http::guard`) gives its slot — of the cap or
//!   of the reserve — back at once: node-to-node connections (a follower's pool of forwarding
//!   connections, pre-votes, a Raft stream's upgrade) never take a client's place, and the
//!   reserve is free again for the next peer. They are few and authenticated; the drain on
//!   stop still waits for them.
//! - **Accept backlog** ([`LISTEN_BACKLOG`], [`bind`]): thousands of clients reconnecting at
//!   once (after a failover or a restart) wait in the kernel's queue instead of having their
//!   handshakes dropped.
//! - **TLS** (optional, [`crate::tls`]): the handshake runs on the connection's own task
//!   and must finish within the header-read timeout too; a failed handshake closes the
//!   connection and is counted in `raftlock_tls_handshake_failures_total`.
//! - **Upgrades**: a peer opening a Raft stream (`raftlock_raft::peer_stream`) upgrades its
//!   connection; from then on the stream is the peer router's, outside these limits.
//! - **Graceful stop**: on SIGTERM/Ctrl-C, stop accepting, let open connections finish their
//!   requests (bounded by [`DRAIN_TIMEOUT`]), then return.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use crate::tls::ServerTls;

/// How long a client may take to send a request head (and how long an idle keep-alive
/// connection stays open).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections accepted past `--max-connections` for node-to-node traffic only.
pub const PEER_RESERVE: usize = 8;

/// The slot a connection holds against `--max-connections` (or the [`PEER_RESERVE`]), in
/// every request's extensions, so the router can free it for a peer and refuse clients on the
/// reserve (`http::guard`).
#[derive(Debug, Clone)]
pub struct ConnectionSlot(Arc<SlotInner>);

#[derive(Debug)]
struct SlotInner {
    reserved: bool,
    permit: std::sync::Mutex<Option<OwnedSemaphorePermit>>,
}

impl ConnectionSlot {
    fn new(permit: OwnedSemaphorePermit, reserved: bool) -> Self {
        ConnectionSlot(Arc::new(SlotInner {
            reserved,
            permit: std::sync::Mutex::new(Some(permit)),
        }))
    }

    /// Accepted past `--max-connections`, on the peers' reserve.
    pub fn reserved(&self) -> bool {
        self.0.reserved
    }

    /// Whether the connection still holds its slot (it has not shown itself a peer's).
    pub fn counted(&self) -> bool {
        self.lock().is_some()
    }

    /// The connection carries node-to-node traffic (a request presented the cluster secret):
    /// its slot goes back to the cap (or the reserve) for the next client (or peer).
    pub fn release_for_peer(&self) {
        self.lock().take();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<OwnedSemaphorePermit>> {
        self.0.permit.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Connections the kernel completes and queues for `accept` before it drops handshakes
/// (capped by `net.core.somaxconn`, 4,096 by default since Linux 5.4). tokio's `bind` left
/// 128 (the 129th handshake of a burst was dropped, in the test below): 4,600 clients connecting at once (a project's 4,096 blocking waits and its other
/// calls, `tests/tests/waiter_budget.rs`) overflowed it 6,936 times, and each dropped handshake
/// cost its client a SYN retransmit (1 s, then 3 s, …) or, on a loaded machine, a connect
/// that timed out (221 of 100,000 calls).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` (`host:port`, the first address it resolves to that binds) with
/// [`LISTEN_BACKLOG`] and `SO_REUSEADDR`, as `std` and tokio set it (a restarted node rebinds
/// its port while the old connections linger in `TIME_WAIT`).
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(addr).await? {
        // As tokio does, any failure (an address family the host lacks, say) moves on to the
        // next address.
        match listen_on(addr) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

fn listen_on(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How long a stopping node waits for open requests to finish.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown` resolves, with at most `max_connections` open;
/// over TLS when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    max_connections: usize,
    tls: Option<Arc<ServerTls>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let max_connections = max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max_connections));
    let reserve = Arc::new(Semaphore::new(PEER_RESERVE));
    // Connections open, whether or not they hold a slot.
    let open = Arc::new(watch::Sender::new(0usize));
    // Flipped to `true` on shutdown: every connection finishes its request and closes.
    let (stopping, stop) = watch::channel(false);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        // A client slot when there is one; else one of the peers' reserve.
        let (permit, reserved) = tokio::select! {
            biased;
            permit = permits.clone().acquire_owned() => (permit.expect("semaphore never closed"), false),
            permit = reserve.clone().acquire_owned() => (permit.expect("semaphore never closed"), true),
            _ = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let slot = ConnectionSlot::new(permit, reserved);
        // Every request of the connection carries its slot.
        let service = {
            let slot = slot.clone();
            app.clone().map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(slot.clone());
                req
            })
        };
        let (builder, stop) = (builder.clone(), stop.clone());
        let acceptor = tls.as_ref().map(|tls| tls.acceptor());
        metrics::gauge!("raftlock_http_connections").increment(1.0);
        open.send_modify(|n| *n += 1);
        let open = open.clone();
        tokio::spawn(async move {
            let served = match acceptor {
                None => serve_connection(&builder, TokioIo::new(stream), service, stop).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(tls)) => {
                            serve_connection(&builder, TokioIo::new(tls), service, stop).await
                        }
                        Ok(Err(e)) => {
                            metrics::counter!("raftlock_tls_handshake_failures_total").increment(1);
                            tracing::debug!(error = %e, "TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => {
                            metrics::counter!("raftlock_tls_handshake_failures_total").increment(1);
                            Ok(())
                        }
                    }
                }
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            metrics::gauge!("raftlock_http_connections").decrement(1.0);
            slot.release_for_peer();
            open.send_modify(|n| *n -= 1);
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every open connection is counted in `open` until it closes (peers' too: their slots
    // are given back early, their requests must still finish).
    let mut open = open.subscribe();
    let drained = open.wait_for(|n| *n == 0);
    if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
        tracing::warn!("open requests did not finish within the drain timeout");
    }
    Ok(())
}

/// Serves one HTTP/1 connection (upgrades allowed: a peer opening a Raft stream) until it
/// closes, or until `stop` turns `true`; then lets the request in progress finish and closes.
async fn serve_connection<I, S>(
    builder: &http1::Builder,
    io: I,
    service: S,
    mut stop: watch::Receiver<bool>,
) -> Result<(), hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: tower::Service<Request<Incoming>, Response = axum::response::Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let service = TowerToHyperService::new(service);
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => return served,
        _ = stop.wait_for(|stopping| *stopping) => {}
    }
    conn.as_mut().graceful_shutdown();
    conn.await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past tokio's default backlog, a burst of connections to a node that has not accepted
    /// them yet still completes its handshakes: with `TcpListener::bind` the 129th had its SYN
    /// dropped and waited out a retransmit (seen failing).
    #[tokio::test]
    async fn a_burst_past_tokios_default_backlog_waits_in_the_queue() {
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let burst = 1_500;
        if somaxconn < burst {
            eprintln!("net.core.somaxconn is {somaxconn}: the kernel caps the backlog below {burst}; skipped");
            return;
        }
        // 1,500 client sockets in this process.
        crate::open_files::raise_soft_limit().expect("the open-files limit");
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for _ in 0..burst {
            // A dropped SYN is retransmitted after 1 s: half that tells a queued handshake
            // from a dropped one.
            let connect = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(Duration::from_millis(500), connect).await {
                Ok(Ok(stream)) => clients.push(stream),
                Ok(Err(e)) => panic!("connect {} failed: {e}", clients.len()),
                Err(_) => panic!(
                    "connect {} of {burst} was not completed in 500 ms: the accept queue is full",
                    clients.len()
                ),
            }
        }
        drop(listener);
    }
}
