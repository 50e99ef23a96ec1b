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
//!   requests that present the cluster secret ([`ReservedForPeers`]; others are answered
//!   `503` and the connection closed). Clients that fill the cap (slow bodies, idle
//!   keep-alives) so cannot keep a peer from opening a Raft stream or forwarding a request.
//! - **TLS** (optional, [`crate::tls`]): the handshake runs on the connection's own task
//!   and must finish within the header-read timeout too; a failed handshake closes the
//!   connection and is counted in `raftlock_tls_handshake_failures_total`.
//! - **Upgrades**: a peer opening a Raft stream (`raftlock_raft::peer_stream`) upgrades its
//!   connection; from then on the stream is the peer router's, outside these limits.
//! - **Graceful stop**: on SIGTERM/Ctrl-C, stop accepting, let open connections finish their
//!   requests (bounded by [`DRAIN_TIMEOUT`]), then return.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::tls::ServerTls;

/// How long a client may take to send a request head (and how long an idle keep-alive
/// connection stays open).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections accepted past `--max-connections` for node-to-node traffic only.
pub const PEER_RESERVE: usize = 8;

/// Marks a request that arrived on a connection of the [`PEER_RESERVE`]: it is served only if
/// it presents the cluster secret (`http::refuse_clients_on_reserve`).
#[derive(Debug, Clone, Copy)]
pub struct ReservedForPeers;

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
        let service = if reserved {
            TowerToHyperService::new(app.clone().layer(axum::Extension(ReservedForPeers)))
        } else {
            TowerToHyperService::new(app.clone())
        };
        let (builder, stop) = (builder.clone(), stop.clone());
        let acceptor = tls.as_ref().map(|tls| tls.acceptor());
        metrics::gauge!("raftlock_http_connections").increment(1.0);
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
            drop(permit);
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every open connection holds a permit until it closes.
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    let drained = async {
        let _clients = permits.acquire_many(all).await;
        let _peers = reserve.acquire_many(PEER_RESERVE as u32).await;
    };
    if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
        tracing::warn!("open requests did not finish within the drain timeout");
    }
    Ok(())
}

/// Serves one HTTP/1 connection (upgrades allowed: a peer opening a Raft stream) until it
/// closes, or until `stop` turns `true`; then lets the request in progress finish and closes.
async fn serve_connection<I>(
    builder: &http1::Builder,
    io: I,
    service: TowerToHyperService<Router>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => return served,
        _ = stop.wait_for(|stopping| *stopping) => {}
    }
    conn.as_mut().graceful_shutdown();
    conn.await
}
