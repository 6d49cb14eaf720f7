//! A DDL client beside the crash test's workload: through the REST catalog it creates
//! tables in namespace `ddl`, renames them and drops them (every other drop purges the
//! table's files), one request at a time, and records each answer. After a cut the
//! catalog must hold exactly what the acked requests left: every table an acked create
//! made (and no acked drop or rename removed) loads, every acked drop or rename source is
//! gone. Only the request in flight at the cut may have gone either way; on the next
//! server the client asks which, before its next request.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iceberg::{Catalog, NamespaceIdent, TableIdent};
use tokio::sync::watch;

use crate::clients::*;

pub(crate) const DDL_NS: &str = "ddl";

/// How a DDL client's error starts when the server answered but refused: a cut cannot
/// explain that, so the test fails on it.
pub(crate) const REFUSED: &str = "refused: ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DdlKind {
    Create(String),
    Rename(String, String),
    Drop { name: String, purge: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DdlOutcome {
    /// Sent, no answer (the cut): either way, until resolved on the next server.
    Unknown,
    /// Answered with success, or found applied on the next server.
    Applied,
    /// Found not applied on the next server.
    NotApplied,
}

#[derive(Debug, Clone)]
pub(crate) struct DdlOp {
    pub(crate) kind: DdlKind,
    pub(crate) outcome: DdlOutcome,
}

/// The REST address of the current server, by generation (`None` between servers).
pub(crate) type RestAddr = watch::Sender<Option<(u64, SocketAddr)>>;

/// One HTTP/1.0 request to `addr`; its status and body, or why it got no answer.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let content = if body.is_empty() {
            String::new()
        } else {
            format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            )
        };
        let request = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{content}\r\n{body}");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no HTTP status in {response:?}"))?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    };
    match tokio::time::timeout(RPC_TIMEOUT, exchange).await {
        Ok(result) => result,
        Err(_) => Err(format!("{method} {path}: no answer in {RPC_TIMEOUT:?}")),
    }
}

fn create_body(name: &str) -> String {
    serde_json::json!({
        "name": name,
        "schema": {"type": "struct", "fields": [
            {"id": 1, "name": "id", "required": false, "type": "long"},
            {"id": 2, "name": "name", "required": false, "type": "string"}
        ]}
    })
    .to_string()
}

/// Whether `ddl.<name>` exists on the server at `addr`.
async fn exists(addr: SocketAddr, name: &str) -> Result<bool, String> {
    match http(
        addr,
        "GET",
        &format!("/v1/namespaces/{DDL_NS}/tables/{name}"),
        "",
    )
    .await?
    {
        (200, _) => Ok(true),
        (404, _) => Ok(false),
        (status, body) => Err(format!("load {name}: {status} {body}")),
    }
}

/// The tables the applied ops leave, in order of creation.
fn live(ops: &[DdlOp]) -> Vec<String> {
    let mut tables: Vec<String> = Vec::new();
    for op in ops.iter().filter(|o| o.outcome == DdlOutcome::Applied) {
        match &op.kind {
            DdlKind::Create(name) => tables.push(name.clone()),
            DdlKind::Rename(from, to) => {
                tables.retain(|t| t != from);
                tables.push(to.clone());
            }
            DdlKind::Drop { name, .. } => tables.retain(|t| t != name),
        }
    }
    tables
}

/// The DDL client: requests until stopped; after a failure it waits for the next server
/// and first finds out whether its unanswered request was applied.
pub(crate) async fn ddl_client(
    client: usize,
    shared: Arc<Shared>,
    rest: Arc<RestAddr>,
    ops: Arc<Mutex<Vec<DdlOp>>>,
    seed: u64,
) {
    let mut rng = Rng(seed ^ 0xdd1d_dd1d);
    let mut rx = rest.subscribe();
    let mut failed_gen = 0;
    let mut next = 0u64;
    loop {
        let Some((generation, addr)) = next_rest(&mut rx, failed_gen, &shared).await else {
            return;
        };
        match ddl_once(addr, &mut rng, &mut next, &ops, &shared).await {
            Ok(()) => return, // stopping
            Err(e) => {
                failed_gen = generation;
                failed(&shared, client, generation, e);
            }
        }
    }
}

async fn next_rest(
    rx: &mut watch::Receiver<Option<(u64, SocketAddr)>>,
    after: u64,
    shared: &Shared,
) -> Option<(u64, SocketAddr)> {
    loop {
        if let Some(g) = *rx.borrow_and_update()
            && g.0 > after
        {
            return Some(g);
        }
        if shared.stop.load(Ordering::SeqCst) || rx.changed().await.is_err() {
            return None;
        }
    }
}

/// Runs requests on the server at `addr` until stopping (`Ok`) or a request fails.
async fn ddl_once(
    addr: SocketAddr,
    rng: &mut Rng,
    next: &mut u64,
    ops: &Mutex<Vec<DdlOp>>,
    shared: &Shared,
) -> Result<(), String> {
    match http(
        addr,
        "POST",
        "/v1/namespaces",
        &serde_json::json!({ "namespace": [DDL_NS] }).to_string(),
    )
    .await?
    {
        (200 | 409, _) => {}
        (status, body) => return Err(format!("create namespace: {status} {body}")),
    }
    // The request the last cut left unanswered: applied or not?
    let unknown = lock(ops)
        .iter()
        .position(|o| o.outcome == DdlOutcome::Unknown);
    if let Some(i) = unknown {
        let kind = lock(ops)[i].kind.clone();
        let applied = match &kind {
            DdlKind::Create(name) => exists(addr, name).await?,
            DdlKind::Rename(_, to) => exists(addr, to).await?,
            DdlKind::Drop { name, .. } => !exists(addr, name).await?,
        };
        lock(ops)[i].outcome = if applied {
            DdlOutcome::Applied
        } else {
            DdlOutcome::NotApplied
        };
    }
    while !shared.stop.load(Ordering::SeqCst) {
        let tables = live(&lock(ops));
        let kind = match rng.range(0, 4) {
            2 if !tables.is_empty() => {
                let from = tables[rng.range(0, tables.len() as u64) as usize].clone();
                *next += 1;
                DdlKind::Rename(from, format!("r{next}"))
            }
            3 if !tables.is_empty() => DdlKind::Drop {
                name: tables[rng.range(0, tables.len() as u64) as usize].clone(),
                purge: rng.range(0, 2) == 0,
            },
            _ => {
                *next += 1;
                DdlKind::Create(format!("t{next}"))
            }
        };
        let index = {
            let mut ops = lock(ops);
            ops.push(DdlOp {
                kind: kind.clone(),
                outcome: DdlOutcome::Unknown,
            });
            ops.len() - 1
        };
        let (method, path, body, ok) = match &kind {
            DdlKind::Create(name) => (
                "POST",
                format!("/v1/namespaces/{DDL_NS}/tables"),
                create_body(name),
                200,
            ),
            DdlKind::Rename(from, to) => (
                "POST",
                "/v1/tables/rename".to_string(),
                serde_json::json!({
                    "source": {"namespace": [DDL_NS], "name": from},
                    "destination": {"namespace": [DDL_NS], "name": to}
                })
                .to_string(),
                204,
            ),
            DdlKind::Drop { name, purge } => (
                "DELETE",
                format!("/v1/namespaces/{DDL_NS}/tables/{name}?purgeRequested={purge}"),
                String::new(),
                204,
            ),
        };
        let (status, answer) = http(addr, method, &path, &body).await?;
        if status != ok {
            // The server answered but refused (or failed) the request: the cut cannot
            // explain that unless the answer is a 5xx of a dying server.
            return Err(format!("{REFUSED}{kind:?}: {status} {answer}"));
        }
        lock(ops)[index].outcome = DdlOutcome::Applied;
        tokio::time::sleep(Duration::from_millis(rng.range(0, 40))).await;
    }
    Ok(())
}

/// Checks the catalog of a stopped server against the recorded ops: every table the
/// applied ops leave loads (its metadata JSON reads back), every one they removed is
/// gone, nothing else is in `ddl`; an op still unknown may have gone either way.
pub(crate) async fn check_ddl(catalog: &skade::catalog::RedbCatalog, ops: &[DdlOp]) -> Vec<String> {
    let mut violations = Vec::new();
    let ns = NamespaceIdent::new(DDL_NS.to_string());
    let present: Vec<String> = if catalog.namespace_exists(&ns).await.unwrap_or(false) {
        match catalog.list_tables(&ns).await {
            Ok(tables) => tables.into_iter().map(|t| t.name().to_string()).collect(),
            Err(e) => return vec![format!("ddl: tables do not list: {e}")],
        }
    } else {
        Vec::new()
    };
    let expected = live(ops);
    // Names the unknown op touches may be either way.
    let either: Vec<String> = ops
        .iter()
        .filter(|o| o.outcome == DdlOutcome::Unknown)
        .flat_map(|o| match &o.kind {
            DdlKind::Create(name) | DdlKind::Drop { name, .. } => vec![name.clone()],
            DdlKind::Rename(from, to) => vec![from.clone(), to.clone()],
        })
        .collect();
    for name in &expected {
        if either.contains(name) {
            continue;
        }
        if !present.contains(name) {
            violations.push(format!("ddl.{name}: acked as existing, but missing"));
            continue;
        }
    }
    for name in &present {
        if !expected.contains(name) && !either.contains(name) {
            violations.push(format!(
                "ddl.{name}: present, but an acked drop or rename removed it (or it was never created)"
            ));
        }
        let ident = TableIdent::new(ns.clone(), name.clone());
        if let Err(e) = catalog.load_table(&ident).await {
            violations.push(format!("ddl.{name}: listed but does not load: {e}"));
        }
    }
    violations
}
