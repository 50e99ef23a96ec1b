//! raftlock-server
