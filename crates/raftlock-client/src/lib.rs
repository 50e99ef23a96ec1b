//! raftlock-client
