//! raftlock-raft
