//! skade's own protobuf messages (`proto/skade/v1/skade.proto`), compiled by `build.rs`:
//! the `CommitAck` a streaming put sends after each commit, and the handles and tickets
//! of Flight SQL queries (`PreparedQuery`, `QueryTicket`).

#![allow(missing_docs, unreachable_pub)]

include!(concat!(env!("OUT_DIR"), "/skade.v1.rs"));
