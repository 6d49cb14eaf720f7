//! `multi`: 8 tables in one transaction vs 8 single-table commits.

use crate::common::*;

/// 8 new tables `<prefix>_0..7`, each with one group of `rows` conformed synthetic rows.
async fn eight_tables(
    catalog: &RedbCatalog,
    prefix: &str,
    rows: usize,
) -> Vec<(Table, Vec<Vec<RecordBatch>>)> {
    let mut inputs = Vec::new();
    for t in 0..8 {
        let table = new_table(catalog, &format!("{prefix}_{t}")).await;
        let arrow = write::table_arrow_schema(&table).expect("schema");
        let b = write::conform_batch("bench", &batch(0, rows), &arrow).expect("conform");
        inputs.push((table, vec![vec![b]]));
    }
    inputs
}

/// 8 tables as ONE multi-table flush (`ingest_multi`, one redb transaction) vs 8
/// single-table ingests (`ingest_parallel`), in-process on one catalog.
pub(crate) async fn multi(runs: usize) {
    let rows = env_usize("SKADE_MULTI_ROWS", 100_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = RedbCatalog::open(&dir.path().join("catalog.redb"), &dir.path().join("wh"))
        .expect("catalog");
    let props = WriteProps::default();
    let (mut multi_wall, mut single_wall) = (Vec::new(), Vec::new());
    let (mut multi_commits, mut single_commits) = (0, 0);
    for run in 0..runs {
        let inputs = eight_tables(&catalog, &format!("multi_{run}"), rows / 8).await;
        let before = catalog.commit_count();
        let started = Instant::now();
        write::ingest_multi(&catalog, inputs, &props)
            .await
            .expect("multi");
        multi_wall.push(started.elapsed().as_secs_f64());
        multi_commits = catalog.commit_count() - before;

        let inputs = eight_tables(&catalog, &format!("single_{run}"), rows / 8).await;
        let before = catalog.commit_count();
        let started = Instant::now();
        for (table, groups) in inputs {
            write::ingest_parallel(&catalog, &table, groups, &props)
                .await
                .expect("single");
        }
        single_wall.push(started.elapsed().as_secs_f64());
        single_commits = catalog.commit_count() - before;
    }
    let (m, m_min, m_max) = summary(&multi_wall);
    let (s, s_min, s_max) = summary(&single_wall);
    println!(
        "multi: 8 tables x {} rows, {runs} runs (in-process library lanes)",
        rows / 8
    );
    println!("| lane | wall ms | min–max ms | catalog commits (fsyncs) |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| ingest_multi (one transaction) | {:.1} | {:.1}–{:.1} | {multi_commits} |",
        m * 1e3,
        m_min * 1e3,
        m_max * 1e3
    );
    println!(
        "| 8 x ingest_parallel | {:.1} | {:.1}–{:.1} | {single_commits} |",
        s * 1e3,
        s_min * 1e3,
        s_max * 1e3
    );
    println!(
        "multi: commits {multi_commits} vs {single_commits}; wall multi/single = {:.2}",
        m / s
    );
}
