//! What operators load next to skade, checked against what a real server exports:
//! every metric the alert rules (`deploy/prometheus/skade-rules.yaml`) and the dashboard
//! (`deploy/grafana/skade-dashboard.json`) read is one the server registers, and every
//! recording rule the dashboard reads is defined; `/metrics` carries the process
//! metrics and the build info, with plausible values.

use crate::common::{TestServer, metric};

const RULES: &str = include_str!("../../deploy/prometheus/skade-rules.yaml");
const DASHBOARD: &str = include_str!("../../deploy/grafana/skade-dashboard.json");

/// The metric names (`skade_…`, `process_…`) and recording-rule names (`skade:…`)
/// `text` mentions.
fn names_in(text: &str) -> (Vec<String>, Vec<String>) {
    let mut metrics = Vec::new();
    let mut recorded = Vec::new();
    let bytes = text.as_bytes();
    let is_name = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut i = 0;
    while i < bytes.len() {
        let starts = (i == 0 || !is_name(bytes[i - 1]))
            && (text[i..].starts_with("skade_")
                || text[i..].starts_with("skade:")
                || text[i..].starts_with("process_"));
        if !starts {
            i += 1;
            continue;
        }
        let end = (i..bytes.len())
            .find(|&j| !is_name(bytes[j]))
            .unwrap_or(bytes.len());
        let name = text[i..end].to_string();
        if name.contains(':') {
            // A recording rule is `level:metric:operations` (a `skade:` in prose is not).
            if name.split(':').filter(|p| !p.is_empty()).count() >= 3 {
                recorded.push(name);
            }
        } else {
            metrics.push(name);
        }
        i = end;
    }
    metrics.sort();
    metrics.dedup();
    recorded.sort();
    recorded.dedup();
    (metrics, recorded)
}

/// Catches a metric renamed (or dropped) in the server but not in the rules or the
/// dashboard, and a dashboard query on a recording rule the rules do not define: each
/// would show an empty panel or an alert that can never fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_rules_and_dashboard_read_is_exported() {
    let server = TestServer::start().await;
    let exported = server.running.service.metrics.exported_names();
    let known = |name: &str| {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        // The live-heap gauge exists only where the binary's counting allocator runs
        // (not in this test process): its name is checked against the constant.
        exported.iter().any(|e| e == name || e == base)
            || name == skade::metrics::HEAP_ALLOCATED_BYTES
    };
    let (rule_metrics, _) = names_in(RULES);
    let (dash_metrics, dash_recorded) = names_in(DASHBOARD);
    assert!(
        rule_metrics.len() > 15 && dash_metrics.len() > 15,
        "{rule_metrics:?}"
    );
    let unknown: Vec<&String> = rule_metrics
        .iter()
        .chain(&dash_metrics)
        .filter(|n| !known(n))
        .collect();
    assert!(
        unknown.is_empty(),
        "not exported: {unknown:?}; exported: {exported:?}"
    );
    let defined: Vec<String> = RULES
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .map(str::to_string)
        .collect();
    let undefined: Vec<&String> = dash_recorded
        .iter()
        .filter(|r| !defined.contains(r))
        .collect();
    assert!(
        undefined.is_empty(),
        "recording rules the dashboard reads but the rules lack: {undefined:?}"
    );
    server.stop().await;
}

/// Catches `/metrics` without process metrics (operators size pods from the resident
/// memory) or build info, and values that cannot be the process's own: the start time
/// must lie between the test's start and now, the resident memory between 1 MiB and the
/// machine's memory, and the build info's arrow version be Cargo.lock's (read here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_carry_plausible_process_figures_and_build_info() {
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let server = TestServer::start().await;
    let (status, body) = server.http_get("/metrics").await;
    assert_eq!(status, 200);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let start = metric(&body, "process_start_time_seconds");
    // The test binary (this process) started before the test did; a day is plenty.
    assert!(
        start > before - 86_400.0 && start <= now + 1.0,
        "start {start}, now {now}"
    );
    let resident = metric(&body, "process_resident_memory_bytes");
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kib| kib * 1024.0)
        .expect("MemTotal");
    assert!(
        resident > (1 << 20) as f64 && resident < total,
        "resident {resident}"
    );
    assert!(metric(&body, "process_open_fds") >= 3.0, "{body}");
    // Whole seconds (the collector's counter): present, possibly 0 this early.
    assert!(
        body.lines()
            .any(|l| l.starts_with("process_cpu_seconds_total ")),
        "{body}"
    );
    let lock = include_str!("../../Cargo.lock");
    let arrow = lock
        .split("[[package]]")
        .find(|b| b.lines().any(|l| l.trim() == "name = \"arrow\""))
        .and_then(|b| {
            b.lines()
                .find_map(|l| l.trim().strip_prefix("version = \""))
        })
        .and_then(|v| v.strip_suffix('"'))
        .expect("arrow in Cargo.lock");
    let info = body
        .lines()
        .find(|l| l.starts_with("skade_build_info{"))
        .unwrap_or_else(|| panic!("no build info in\n{body}"));
    assert!(info.contains(&format!("arrow=\"{arrow}\"")), "{info}");
    assert!(
        info.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{info}"
    );
    assert!(info.ends_with(" 1"), "{info}");
    server.stop().await;
}
