//! skade's integration tests, one binary with a module per topic (one link instead of
//! fifteen on a 2-core CI machine). Every module runs against real parts: a real
//! server on 127.0.0.1 port 0 with a temp data dir ([`common::TestServer`]), real redb
//! files, the Rust Flight client. The crash test (`tests/crash/`) is its own binary: it
//! SIGKILLs the real `skade` binary.
//!
//! The design notes' own tests keep their names: [`ingest_multi`]
//! (`docs/design/ingest_multi.md` §f5) and [`ingest_overlap`]
//! (`docs/design/ingest_pipelined_overlap.md` §f4).

mod common;

mod auto_create;
mod bad_input;
mod catalog;
mod commit_policy;
mod concurrency;
mod evolved_compaction;
mod exactly_once;
mod flight_sql;
mod flight_sql_read;
mod foreign_changes;
mod gc;
mod ingest_multi;
mod ingest_overlap;
mod lifecycle;
mod maintenance;
mod merge_append;
mod operability;
mod ops_kit;
mod parallel_encode;
mod partitioning;
mod pg_cluster;
mod rest;
mod rest_ddl;
mod rest_validation;
mod row_changes;
mod schema_evolution;
mod security;
mod service;
mod shared_catalog;
mod streaming_put;
mod write_path;
