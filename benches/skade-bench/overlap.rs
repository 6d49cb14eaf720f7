//! `committer_overlap`: serial vs overlapped committer on a commit-bound shape.

use crate::common::*;

pub(crate) async fn committer_overlap(runs: usize) {
    let files = env_usize("SKADE_OVL_FILES", 200);
    let rows = env_usize("SKADE_OVL_ROWS", 2000);
    let fpc = env_usize("SKADE_OVL_FPC", 2);
    let depth = env_usize("SKADE_OVL_DEPTH", 4);
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = RedbCatalog::open(&dir.path().join("catalog.redb"), &dir.path().join("wh"))
        .expect("catalog");
    let props = WriteProps {
        channel_depth: depth,
    };
    let mut serial = Vec::new();
    let mut overlap = Vec::new();
    let mut commits = (0, 0);
    for run in 0..runs {
        for lane in ["serial", "overlap"] {
            let table = new_table(&catalog, &format!("{lane}_{run}")).await;
            let groups = file_groups(&table, files, rows);
            let started = Instant::now();
            let (_, stats): (Table, IngestStats) = if lane == "serial" {
                write::ingest_pipelined(&catalog, &table, groups, fpc, &props).await
            } else {
                write::ingest_pipelined_overlap(&catalog, &table, groups, fpc, &props).await
            }
            .expect("ingest");
            let secs = started.elapsed().as_secs_f64();
            let rate = stats.rows as f64 / secs;
            if lane == "serial" {
                serial.push(rate);
                commits.0 = stats.commits;
            } else {
                overlap.push(rate);
                commits.1 = stats.commits;
            }
        }
    }
    let (s, s_min, s_max) = summary(&serial);
    let (o, o_min, o_max) = summary(&overlap);
    println!(
        "committer_overlap: {files} files x {rows} rows, files_per_commit={fpc}, channel_depth={depth}, {runs} runs"
    );
    println!("| lane | rows/s median | min | max | commits |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| serial (ingest_pipelined) | {s:.0} | {s_min:.0} | {s_max:.0} | {} |",
        commits.0
    );
    println!(
        "| overlap (ingest_pipelined_overlap) | {o:.0} | {o_min:.0} | {o_max:.0} | {} |",
        commits.1
    );
    println!(
        "committer_overlap: overlap/serial = {:.2} (overlap {:.0} rows/s, serial {:.0} rows/s, commits {} vs {})",
        o / s,
        o,
        s,
        commits.1,
        commits.0
    );
}
