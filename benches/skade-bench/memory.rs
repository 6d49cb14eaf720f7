//! `memory`: peak RSS during a multi-GiB streaming put vs the memory budget.

use crate::common::*;

/// Peak resident set size of this process in bytes (`VmHWM`).
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

pub(crate) async fn memory() {
    let gib = env_usize("SKADE_MEM_GIB", 5);
    let budget_mib = env_usize("SKADE_MEM_BUDGET_MIB", 512);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = skade::Config::for_tests(dir.path());
    config.ingest.memory_budget = (budget_mib as u64) << 20;
    config.ingest.target_file_size = 64 << 20;
    let running = skade::start(config).await.expect("server");
    let mut client = connect(running.flight_addr).await;
    let rows_per_batch = 65_536;
    let batch_bytes = arrow_bytes(&[batch(0, rows_per_batch)]);
    let batches = (gib << 30).div_ceil(batch_bytes);
    // Start the peak over from the current RSS (Linux ≥ 4.0: writing 5 to clear_refs
    // resets VmHWM), so earlier arms' peaks do not count. Memory they freed but the
    // allocator kept still does: `all` runs this arm first.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let baseline = peak_rss_bytes();
    let started = Instant::now();
    let stream = futures::stream::iter(0..batches)
        .map(move |i| Ok(batch((i * rows_per_batch) as i64, rows_per_batch)));
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            "bench".into(),
            "memory".into(),
        ])))
        .build(stream);
    let acks: Vec<_> = client
        .do_put(data)
        .await
        .expect("put")
        .try_collect()
        .await
        .expect("acks");
    let secs = started.elapsed().as_secs_f64();
    let peak = peak_rss_bytes();
    running.shutdown_and_wait().await.expect("shutdown");
    let sent = (batches * batch_bytes) as f64;
    println!(
        "memory: streamed {:.2} GiB of Arrow ({} rows) in {:.1} s ({:.0} MiB/s), {} acks",
        sent / (1u64 << 30) as f64,
        batches * rows_per_batch,
        secs,
        sent / (1u64 << 20) as f64 / secs,
        acks.len()
    );
    println!(
        "memory: peak_rss/budget = {:.2} (peak RSS {} MiB incl. client and baseline {} MiB, budget {} MiB)",
        peak as f64 / ((budget_mib as u64) << 20) as f64,
        peak >> 20,
        baseline >> 20,
        budget_mib
    );
}
