//! Power cuts with the REAL binary on a disk that forgets: what the crash test
//! (`tests/crash/`) cannot show, since a SIGKILL keeps the page cache.
//!
//! The disk is `forgetful_disk.py`, a FUSE filesystem with one image file whose writes
//! stay pending (in memory; reads see them) until an fsync of that file. A loop device
//! attached to it in buffered mode carries ext4, mounted, and skade runs with
//! `--data-dir` on it. ext4's journal barriers and skade's `syncfs`/fsync become flushes
//! of the loop device, which the loop driver turns into fsyncs of the image file: so the
//! disk's durable state is what a drive keeps after power loss.
//!
//! The workload is the crash test's (`tests/crash/clients.rs`: 5 streaming clients, two
//! of them exactly-once producers, and a Flight SQL transaction writer; maintenance at
//! its busiest) plus a REST DDL client (`ddl.rs`). Each cut, after a random 0.5..2.5 s:
//! SIGSTOP skade and wait until its group stop has begun (no thread runs user code
//! again; syscalls in flight go on), take the crash image — the durable state plus, by
//! policy, no pending page (`none`) or each pending 4 KiB page with probability 1/2
//! (`subset`: a drive cache that reordered writes within one flush interval) — or, for
//! half the cuts, let the disk take it itself just before the k-th write (k < 64, so
//! inside a flush interval, mostly mid-sync; it then blocks every write and fsync until
//! the kill); let acks already on the wire arrive, SIGKILL, unmount. Then power comes
//! back: the image on a fresh loop device is mounted (journal recovery) and unmounted,
//! `e2fsck -fn` must find nothing, it becomes the next generation's disk, the crash
//! test's checks run on it with the server stopped (every acked row present exactly as
//! sent, nothing doubled or never sent, every retained snapshot reads whole,
//! transactions all or nothing), the DDL check (every table the acked requests left
//! loads, every one they removed is gone), and skade must start on it and serve through
//! DoGet what the checks found. At the end the clients finish (every exactly-once
//! stream and transaction lands once) and DoGet and pyiceberg read every table through
//! the last server.
//!
//! ```sh
//! SKADE_POWERCUT_CUTS=10 cargo test --test powercut -- --ignored --nocapture   # CI
//! SKADE_POWERCUT_CUTS=200 cargo test --test powercut -- --ignored --nocapture \
//!     power_cuts_lose_no_acked_commit                                          # long
//! ```
//!
//! Environment: `SKADE_POWERCUT_CUTS` (default 10), `SKADE_POWERCUT_CONTROL_CUTS`
//! (default 5), `SKADE_POWERCUT_SEED` (default: the clock; printed: it fixes each cut's
//! moment, policy and page choice, and the clients' streams), `SKADE_POWERCUT_KEEP=1`
//! (keep the run directory), `SKADE_PYTHON` (a python with `mfusepy` and pyiceberg;
//! default `<repo>/.venv/bin/python`). A failing cut keeps its run directory: the
//! pristine crash image `cut-N.img`, `skade.log`, `fuse.log` and `records.txt` (the
//! recipe and what the clients were promised).
//!
//! Needs root, `/dev/fuse`, loop devices, `fusermount3` (Debian `fuse3`), e2fsprogs, a C
//! compiler and `mfusepy`; where one is missing the tests say so and pass, except with
//! `CI=true`, where they fail.
//!
//! The negative controls run the same cuts with skade under an `LD_PRELOAD` shim
//! (`nosync.c`): `power_cuts_without_syncs_lose_acked_rows` turns `fsync`, `fdatasync`,
//! `syncfs`, `sync_file_range`, `msync` and `sync` into no-ops,
//! `power_cuts_without_syncfs_lose_acked_rows` only `syncfs` (the catalog's fsyncs
//! intact: the failure a SIGKILL cannot show). Each must report lost acked rows, or the
//! harness could not see a missing sync.

#[path = "../integration/common/mod.rs"]
mod common;

#[path = "../crash/checks.rs"]
#[allow(dead_code)]
mod checks;
#[path = "../crash/clients.rs"]
#[allow(dead_code)]
mod clients;
#[path = "../crash/server.rs"]
#[allow(dead_code)]
mod server;

mod cuts;
mod ddl;
mod disk;
mod selftest;
