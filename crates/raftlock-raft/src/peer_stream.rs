//! The wire format of peer RPCs: kept-open streams between nodes, carrying frames.
//!
//! A node opens a stream with `GET` [`STREAM_PATH`] carrying `Connection: upgrade`,
//! `Upgrade:` [`STREAM_PROTOCOL`], the cluster secret and (once known) the cluster id; the peer
//! checks them and answers `101 Switching Protocols`. From then on the connection (inside TLS
//! when peers speak it) carries frames, strictly one request then its answer, so neither side
//! needs request ids:
//!
//! ```text
//! request = kind   (1 byte: 1 append, 2 vote, 3 snapshot chunk) · length (u32 BE) · body
//! answer  = status (1 byte: 0 answer, 1 refused, 2 undecodable, 3 not hosted)
//!                  · length (u32 BE) · body
//! ```
//!
//! A request body is the Raft group it is for (u32 BE, see [`GroupId`]) then the
//! codec-encoded openraft request: one stream carries every group the two nodes share, so a
//! node running many groups keeps one pool of streams per peer, not one per group. An answer
//! body is the codec-encoded `Result<Response, RaftError>` (status 0), or a message saying why
//! the frame was refused (after which the receiver closes the stream), or — status 3 — that
//! the receiver hosts no replica of that group (the stream stays open: the frame was sound).
//!
//! Protocol 1 (`raftlock-raft/1`, the release before groups) had no group in the body: a node
//! still accepts it, as group [`META_GROUP`], and a sender whose peer refuses protocol 2 (an
//! older node during a rolling upgrade) opens a protocol-1 stream for that group instead. openraft 0.9 sends one RPC at a time per
//! connection and awaits its answer, so a stream carries one call at a time and loses no
//! pipelining; a node keeps a small pool of idle streams per peer for its connections.
//!
//! Why not one HTTP request per RPC (as before): each cost a request head to write and parse,
//! routing, the pool's hand-off to a connection task and back, and the secret check, for every
//! append and heartbeat — measured in the peer-transport measurements of 2026-12-01 (git history of `docs/benchmarks.md`).

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::typ::{GroupId, META_GROUP};

/// Path a node asks to upgrade to a peer stream.
pub const STREAM_PATH: &str = "/internal/raft/stream";
/// The `Upgrade` protocol token of a peer stream (versioned: a future frame format gets a new
/// token, and a node that does not know it answers 400 instead of misreading frames).
pub const STREAM_PROTOCOL: &str = "raftlock-raft/2";
/// The token of the release before groups: request bodies carry no group.
pub const STREAM_PROTOCOL_V1: &str = "raftlock-raft/1";

/// The frame format a stream speaks, from its `Upgrade` token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `raftlock-raft/1`: no group in a request body; every frame is for [`META_GROUP`].
    V1,
    /// `raftlock-raft/2`: a request body starts with its group.
    V2,
}

impl Protocol {
    /// The protocol an `Upgrade` token names, if any (case-insensitive, as HTTP tokens are).
    pub fn from_token(token: &[u8]) -> Option<Protocol> {
        if token.eq_ignore_ascii_case(STREAM_PROTOCOL.as_bytes()) {
            Some(Protocol::V2)
        } else if token.eq_ignore_ascii_case(STREAM_PROTOCOL_V1.as_bytes()) {
            Some(Protocol::V1)
        } else {
            None
        }
    }

    /// Its `Upgrade` token.
    pub fn token(self) -> &'static str {
        match self {
            Protocol::V1 => STREAM_PROTOCOL_V1,
            Protocol::V2 => STREAM_PROTOCOL,
        }
    }

    /// Whether a stream of this protocol can carry a request for `group`.
    pub fn carries(self, group: GroupId) -> bool {
        self == Protocol::V2 || group == META_GROUP
    }

    /// Splits a request body into its group and the encoded request.
    pub fn split_request(self, body: &[u8]) -> Option<(GroupId, &[u8])> {
        match self {
            Protocol::V1 => Some((META_GROUP, body)),
            Protocol::V2 => {
                let (group, rest) = body.split_first_chunk::<4>()?;
                Some((GroupId::from_be_bytes(*group), rest))
            }
        }
    }
}
/// A stream with no request for this long is closed by the receiving node, so streams of a
/// peer that went away do not pile up.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// A sender opens a new stream instead of reusing one idle this long: far below
/// [`STREAM_IDLE_TIMEOUT`], so it never writes into a stream the peer is closing.
pub const STREAM_REUSE_LIMIT: Duration = Duration::from_secs(30);

/// A sender stops reusing a stream this old, so a renewed certificate or CA (TLS is
/// negotiated once per stream) reaches replication within this time.
pub const STREAM_MAX_AGE: Duration = Duration::from_secs(600);

/// Length of a frame head: the tag byte and the u32 length.
const HEAD_LEN: usize = 5;

/// What a request frame asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Append = 1,
    Vote = 2,
    Snapshot = 3,
}

impl Kind {
    /// The kind a request frame's tag names, if any.
    pub fn from_tag(tag: u8) -> Option<Kind> {
        match tag {
            1 => Some(Kind::Append),
            2 => Some(Kind::Vote),
            3 => Some(Kind::Snapshot),
            _ => None,
        }
    }

    /// A short label (metrics, errors).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Append => "append",
            Kind::Vote => "vote",
            Kind::Snapshot => "snapshot",
        }
    }
}

/// What an answer frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The codec-encoded `Result<Response, RaftError>` of the peer's Raft.
    Answer = 0,
    /// Refused (another cluster's id, or none where one is required); the stream then closes.
    Refused = 1,
    /// The request did not decode (or named an unknown kind); the stream then closes.
    Undecodable = 2,
    /// The receiver hosts no replica of the group the request is for; the stream stays open.
    NotHosted = 3,
}

impl Status {
    /// The status an answer frame's tag names, if any.
    pub fn from_tag(tag: u8) -> Option<Status> {
        match tag {
            0 => Some(Status::Answer),
            1 => Some(Status::Refused),
            2 => Some(Status::Undecodable),
            3 => Some(Status::NotHosted),
            _ => None,
        }
    }
}

/// Writes one frame and flushes it (one `write` for a small frame behind a buffered stream).
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, tag: u8, body: &[u8]) -> io::Result<()> {
    write_parts(w, tag, &[], body).await
}

/// Writes one request frame for `group` in `protocol`'s format (the group goes before the
/// body without copying it).
pub async fn write_request<W: AsyncWrite + Unpin>(
    w: &mut W,
    protocol: Protocol,
    kind: Kind,
    group: GroupId,
    body: &[u8],
) -> io::Result<()> {
    match protocol {
        Protocol::V1 => write_parts(w, kind as u8, &[], body).await,
        Protocol::V2 => write_parts(w, kind as u8, &group.to_be_bytes(), body).await,
    }
}

async fn write_parts<W: AsyncWrite + Unpin>(
    w: &mut W,
    tag: u8,
    prefix: &[u8],
    body: &[u8],
) -> io::Result<()> {
    let len = u32::try_from(prefix.len() + body.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame body over 4 GiB"))?;
    let mut head = [0u8; HEAD_LEN];
    head[0] = tag;
    head[1..].copy_from_slice(&len.to_be_bytes());
    w.write_all(&head).await?;
    w.write_all(prefix).await?;
    w.write_all(body).await?;
    w.flush().await
}

/// Reads one frame: its tag and body. A body over `max` bytes is refused before anything is
/// allocated for it, so a peer cannot make this node buffer more than it accepts.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; HEAD_LEN];
    r.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the limit of {max}"),
        ));
    }
    // Grown as bytes arrive rather than allocated whole from the declared length.
    let mut body = Vec::with_capacity(len.min(64 * 1024));
    (&mut *r).take(len as u64).read_to_end(&mut body).await?;
    if body.len() < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok((head[0], body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_back_to_back() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, Kind::Vote as u8, b"first")
            .await
            .unwrap();
        write_frame(&mut a, Kind::Append as u8, &[]).await.unwrap();
        write_frame(&mut a, Status::Refused as u8, &[7u8; 3000])
            .await
            .unwrap();
        assert_eq!(
            read_frame(&mut b, 4096).await.unwrap(),
            (2, b"first".to_vec())
        );
        assert_eq!(read_frame(&mut b, 4096).await.unwrap(), (1, Vec::new()));
        assert_eq!(
            read_frame(&mut b, 4096).await.unwrap(),
            (1, vec![7u8; 3000])
        );
    }

    #[tokio::test]
    async fn a_request_names_its_group_in_protocol_2_and_none_in_protocol_1() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_request(&mut a, Protocol::V2, Kind::Vote, 7, b"req")
            .await
            .unwrap();
        write_request(&mut a, Protocol::V1, Kind::Vote, META_GROUP, b"old")
            .await
            .unwrap();
        let (_, body) = read_frame(&mut b, 4096).await.unwrap();
        assert_eq!(
            Protocol::V2.split_request(&body),
            Some((7, b"req".as_slice()))
        );
        let (_, body) = read_frame(&mut b, 4096).await.unwrap();
        assert_eq!(
            Protocol::V1.split_request(&body),
            Some((META_GROUP, b"old".as_slice()))
        );
        assert_eq!(Protocol::V2.split_request(&[0, 1]), None, "too short");
        assert!(Protocol::V1.carries(META_GROUP) && !Protocol::V1.carries(1));
        for p in [Protocol::V1, Protocol::V2] {
            assert_eq!(Protocol::from_token(p.token().as_bytes()), Some(p));
        }
    }

    #[tokio::test]
    async fn a_frame_over_the_limit_is_refused_unread() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, 1, &[0u8; 101]).await.unwrap();
        let err = read_frame(&mut b, 100).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn a_stream_cut_inside_a_frame_is_an_error_not_a_short_frame() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&[1, 0, 0, 0, 10, 1, 2, 3]).await.unwrap();
        drop(a);
        let err = read_frame(&mut b, 100).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn tags_map_back_to_what_they_name() {
        for kind in [Kind::Append, Kind::Vote, Kind::Snapshot] {
            assert_eq!(Kind::from_tag(kind as u8), Some(kind));
        }
        for status in [
            Status::Answer,
            Status::Refused,
            Status::Undecodable,
            Status::NotHosted,
        ] {
            assert_eq!(Status::from_tag(status as u8), Some(status));
        }
        assert_eq!(Kind::from_tag(0), None);
        assert_eq!(Status::from_tag(9), None);
    }
}
