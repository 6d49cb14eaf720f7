//! Security of the Flight address (docs/SERVICE.md, "Security"): TLS with a self-signed
//! certificate made here, bearer tokens on every Flight and Flight SQL RPC, the Handshake
//! that trades a token, token reload, and the health service and HTTP endpoints that stay
//! open. Real servers on 127.0.0.1:0, real tonic/arrow-flight clients.

use crate::common;

use std::path::Path;

use arrow_flight::sql::{ActionBeginTransactionRequest, ProstMessageExt};
use arrow_flight::{Action, FlightClient, FlightDescriptor};
use common::{TestServer, client_at, count, get, parquet_files, put, synthetic_batch, within};
use futures::TryStreamExt;
use prost::Message;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const GOOD: &str = "tok-good-7f3a";
const OTHER: &str = "tok-other-19c2";

/// Writes a token file (with a comment and a blank line, which are skipped).
fn token_file(dir: &Path, tokens: &[&str]) -> std::path::PathBuf {
    let path = dir.join("tokens");
    let mut text = String::from("# skade tokens\n\n");
    for t in tokens {
        text.push_str(&format!("  {t}  \n"));
    }
    std::fs::write(&path, text).expect("write tokens");
    path
}

async fn auth_server(tokens: &[&str]) -> (TestServer, tempfile::TempDir) {
    let secrets = tempfile::tempdir().expect("temp dir");
    let file = token_file(secrets.path(), tokens);
    let server = TestServer::start_with(|c| c.security.auth_token_file = Some(file)).await;
    (server, secrets)
}

async fn client_with(server: &TestServer, token: Option<&str>) -> FlightClient {
    let mut client = client_at(server.running.flight_addr).await;
    if let Some(token) = token {
        client
            .add_header("authorization", &format!("Bearer {token}"))
            .expect("header");
    }
    client
}

fn code_of(e: &arrow_flight::error::FlightError) -> Code {
    match e {
        arrow_flight::error::FlightError::Tonic(status) => status.code(),
        other => panic!("not a gRPC status: {other}"),
    }
}

fn begin_action() -> Action {
    Action {
        r#type: "BeginTransaction".to_string(),
        body: ActionBeginTransactionRequest {}
            .as_any()
            .encode_to_vec()
            .into(),
    }
}

/// No token and a wrong token get `Unauthenticated` on every kind of RPC, and nothing is
/// written; the right token works.
/// RED once: with `FlightGuard::call` passing every request through, the token-less put
/// succeeded and wrote a data file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpcs_without_a_valid_token_are_unauthenticated_and_write_nothing() {
    let (server, _secrets) = auth_server(&[GOOD, OTHER]).await;
    within(60, async {
        for token in [None, Some("wrong"), Some("")] {
            let mut client = client_with(&server, token).await;
            let e = put(&mut client, &["sec", "t"], vec![synthetic_batch(0, 10)])
                .await
                .expect_err("put without a valid token");
            assert_eq!(code_of(&e), Code::Unauthenticated, "{token:?}: {e}");
            assert!(!e.to_string().contains("wrong"), "the token is echoed: {e}");

            let e = client
                .list_flights("")
                .await
                .err()
                .expect("list_flights refused");
            assert_eq!(code_of(&e), Code::Unauthenticated);
            let e = client
                .get_flight_info(FlightDescriptor::new_path(vec!["sec".into(), "t".into()]))
                .await
                .expect_err("get_flight_info refused");
            assert_eq!(code_of(&e), Code::Unauthenticated);
            // Flight SQL rides the same service.
            let e = client
                .do_action(begin_action())
                .await
                .err()
                .expect("BeginTransaction refused");
            assert_eq!(code_of(&e), Code::Unauthenticated);
        }
        assert!(parquet_files(&server.warehouse()).is_empty());
        assert_eq!(server.running.service.transactions.open_count(), 0);
        // Operators see the refusals: 3 clients x 4 refused calls each.
        // RED once: before `skade_auth_failures_total` existed this read 0.
        let (_, body) = server.http_get("/metrics").await;
        assert_eq!(
            common::metric(&body, r#"skade_auth_failures_total{surface="flight"}"#),
            12.0,
            "{body}"
        );

        // Either configured token works.
        for token in [GOOD, OTHER] {
            let mut client = client_with(&server, Some(token)).await;
            put(&mut client, &["sec", "t"], vec![synthetic_batch(0, 10)])
                .await
                .expect("put with a valid token");
        }
        let mut client = client_with(&server, Some(GOOD)).await;
        assert_eq!(count(&get(&mut client, &["sec", "t"]).await), 20);
    })
    .await;
    server.stop().await;
}

/// Handshake trades a token (as the payload, or as pyarrow's basic-auth header) for
/// the bearer header; a wrong one is `Unauthenticated`.
/// RED once: with the handshake ignoring the payload, the Rust client's handshake was
/// `Unauthenticated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_returns_the_bearer_token_for_a_valid_one() {
    let (server, _secrets) = auth_server(&[GOOD]).await;
    within(60, async {
        let mut client = client_with(&server, None).await;
        let e = client.handshake("nope").await.expect_err("wrong token");
        assert_eq!(code_of(&e), Code::Unauthenticated);

        let back = client.handshake(GOOD).await.expect("handshake");
        assert_eq!(back.as_ref(), GOOD.as_bytes());
        client
            .add_header(
                "authorization",
                &format!("Bearer {}", String::from_utf8_lossy(&back)),
            )
            .expect("header");
        put(&mut client, &["sec", "hs"], vec![synthetic_batch(0, 5)])
            .await
            .expect("put after handshake");

        // Basic auth with the token as password, as pyarrow's authenticate_basic_token.
        let channel = Channel::from_shared(format!("http://{}", server.running.flight_addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let mut raw = arrow_flight::flight_service_client::FlightServiceClient::new(channel);
        use base64::Engine;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("someone:{GOOD}"));
        let mut request = tonic::Request::new(futures::stream::empty());
        request.metadata_mut().insert(
            "authorization",
            format!("Basic {basic}").parse().expect("value"),
        );
        let response = raw.handshake(request).await.expect("basic handshake");
        assert_eq!(
            response
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok()),
            Some(format!("Bearer {GOOD}").as_str())
        );
    })
    .await;
    server.stop().await;
}

/// Re-reading the token file (what SIGHUP does) revokes a removed token and admits a new
/// one.
/// RED once: with `Tokens::reload` not storing the new set, the removed token still
/// worked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloading_the_token_file_swaps_the_tokens() {
    let (server, secrets) = auth_server(&[GOOD]).await;
    within(60, async {
        token_file(secrets.path(), &[OTHER]);
        let tokens = server.running.service.tokens.clone().expect("auth is on");
        assert_eq!(tokens.reload().expect("reload"), 1);
        let mut old = client_with(&server, Some(GOOD)).await;
        let e = put(&mut old, &["sec", "r"], vec![synthetic_batch(0, 5)])
            .await
            .expect_err("revoked token");
        assert_eq!(code_of(&e), Code::Unauthenticated);
        let mut new = client_with(&server, Some(OTHER)).await;
        put(&mut new, &["sec", "r"], vec![synthetic_batch(0, 5)])
            .await
            .expect("new token");

        // An unreadable file keeps the tokens in force.
        std::fs::remove_file(secrets.path().join("tokens")).expect("rm");
        assert!(tokens.reload().is_err());
        put(&mut new, &["sec", "r"], vec![synthetic_batch(5, 5)])
            .await
            .expect("tokens kept");
    })
    .await;
    server.stop().await;
}

/// A missing or empty token file stops the start with a clear error.
/// RED once: with `Tokens::load` accepting an empty set, the server started and refused
/// every call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_without_tokens_fails_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = token_file(dir.path(), &[]);
    let mut config = skade::Config::for_tests(dir.path().join("data"));
    config.security.auth_token_file = Some(empty);
    let e = skade::start(config.clone()).await.expect_err("empty file");
    assert!(e.to_string().contains("holds no token"), "{e}");
    config.security.auth_token_file = Some(dir.path().join("missing"));
    let e = skade::start(config).await.expect_err("missing file");
    assert!(e.to_string().contains("cannot read the token file"), "{e}");
}

/// The gRPC health service answers on the Flight port without a token, `SERVING` for
/// the Flight service; `/healthz`, `/readyz` and `/metrics` stay open too.
/// RED once: with the health service added behind `FlightGuard`, the check was
/// `Unauthenticated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_http_endpoints_stay_open_with_auth_on() {
    let (server, _secrets) = auth_server(&[GOOD]).await;
    within(60, async {
        let channel = Channel::from_shared(format!("http://{}", server.running.flight_addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let mut health = HealthClient::new(channel);
        for service in ["", "arrow.flight.protocol.FlightService"] {
            let reply = health
                .check(HealthCheckRequest {
                    service: service.to_string(),
                })
                .await
                .expect("health check")
                .into_inner();
            assert_eq!(reply.status(), ServingStatus::Serving, "{service:?}");
        }
        for path in ["/healthz", "/readyz", "/metrics"] {
            assert_eq!(server.http_get(path).await.0, 200, "{path}");
        }
    })
    .await;
    server.stop().await;
}

/// With tokens configured, the REST catalog needs the same bearer token as Flight (401
/// with the spec's `NotAuthorizedException` body otherwise, the token never echoed).
/// RED once: with the REST routes merged without the token layer, the unauthenticated
/// `GET /v1/namespaces` answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_catalog_takes_the_same_bearer_tokens() {
    let (server, _secrets) = auth_server(&[GOOD]).await;
    let addr = server.running.metrics_addr;
    let (status, body) = server.http_get("/v1/namespaces").await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("NotAuthorizedException"), "{body}");
    let wrong = format!("Bearer {GOOD}x");
    let (status, body) =
        common::http_request_with(addr, "GET", "/v1/config", &[("authorization", &wrong)]).await;
    assert_eq!(status, 401);
    assert!(!body.contains(GOOD), "the token must not be echoed: {body}");
    let (_, metrics) = server.http_get("/metrics").await;
    assert_eq!(
        common::metric(&metrics, r#"skade_auth_failures_total{surface="rest"}"#),
        2.0,
        "both refused REST calls are counted: {metrics}"
    );
    let right = format!("Bearer {GOOD}");
    let (status, body) =
        common::http_request_with(addr, "GET", "/v1/namespaces", &[("authorization", &right)])
            .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        server.http_get("/metrics").await.0,
        200,
        "metrics stay open"
    );
    server.stop().await;
}

/// A self-signed certificate for `localhost` and `127.0.0.1`, as (cert PEM, key PEM).
fn self_signed() -> (String, String) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("certificate");
    (certified.cert.pem(), certified.signing_key.serialize_pem())
}

async fn tls_client(addr: std::net::SocketAddr, ca_pem: &str) -> Result<FlightClient, String> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://localhost:{}", addr.port()))
        .map_err(|e| e.to_string())?
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(FlightClient::new(channel))
}

/// With `--tls-cert`/`--tls-key`, a client trusting the certificate puts and reads back
/// over TLS (with a bearer token too); a plain-text client gets no answer.
/// RED once: with the `tls_config` call removed from `start`, the TLS client could not
/// connect (`InvalidMessage(InvalidContentType)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_over_tls_with_a_self_signed_certificate() {
    let secrets = tempfile::tempdir().expect("temp dir");
    let (cert, key) = self_signed();
    let cert_path = secrets.path().join("cert.pem");
    let key_path = secrets.path().join("key.pem");
    std::fs::write(&cert_path, &cert).expect("cert");
    std::fs::write(&key_path, &key).expect("key");
    let tokens = token_file(secrets.path(), &[GOOD]);
    let server = TestServer::start_with(|c| {
        c.security.tls_cert = Some(cert_path.clone());
        c.security.tls_key = Some(key_path.clone());
        c.security.auth_token_file = Some(tokens);
    })
    .await;
    within(60, async {
        let mut client = tls_client(server.running.flight_addr, &cert)
            .await
            .expect("TLS connect");
        let e = put(&mut client, &["tls", "t"], vec![synthetic_batch(0, 10)])
            .await
            .expect_err("no token");
        assert_eq!(code_of(&e), Code::Unauthenticated);
        client
            .add_header("authorization", &format!("Bearer {GOOD}"))
            .expect("header");
        let acks = put(&mut client, &["tls", "t"], vec![synthetic_batch(0, 10)])
            .await
            .expect("put over TLS");
        assert_eq!(acks.last().expect("final ack").committed_rows, 10);
        assert_eq!(count(&get(&mut client, &["tls", "t"]).await), 10);

        // Plain text to a TLS port: the call fails.
        let mut plain = client_at(server.running.flight_addr).await;
        plain
            .add_header("authorization", &format!("Bearer {GOOD}"))
            .expect("header");
        let listed: Result<Vec<_>, _> = match plain.list_flights("").await {
            Ok(stream) => stream.try_collect().await,
            Err(e) => Err(e),
        };
        assert!(listed.is_err(), "plain text must not be served");
    })
    .await;
    server.stop().await;
}

/// Bad TLS files stop the start naming the file.
/// RED once: with `server_config` skipping the PEM check, the certificate given as the
/// key failed later, inside tonic, as "TLS: transport error: Error parsing TLS private
/// key - no RSA or PKCS8-encoded keys found." — naming no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_tls_files_fail_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, _key) = self_signed();
    let cert_path = dir.path().join("cert.pem");
    std::fs::write(&cert_path, &cert).expect("cert");
    let mut config = skade::Config::for_tests(dir.path().join("data"));
    config.security.tls_cert = Some(cert_path.clone());
    config.security.tls_key = Some(cert_path.clone());
    let e = skade::start(config.clone())
        .await
        .expect_err("a cert as key");
    assert!(e.to_string().contains("PRIVATE KEY"), "{e}");
    assert!(e.to_string().contains("cert.pem"), "{e}");
    config.security.tls_key = Some(dir.path().join("missing.pem"));
    let e = skade::start(config).await.expect_err("missing key");
    assert!(e.to_string().contains("missing.pem"), "{e}");
}

/// One HTTP/1.0 request over TLS to `addr`, trusting only `ca_pem` for `localhost`;
/// the status and body, or the connection's error.
async fn https_send(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, String), String> {
    use rustls_pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls_pki_types::ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: localhost\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // The server may close without a TLS close_notify after HTTP/1.0: keep what came.
    let _ = tls.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response).into_owned();
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
}

/// With `--tls-cert`/`--tls-key` the HTTP address serves the REST catalog, metrics and
/// probes over TLS with the same certificate as Flight, and no longer plain text; REST
/// writes need the bearer token as reads do (issue #16). Catches a plain-text HTTP
/// listener beside a TLS Flight one, and a REST write that skips the token check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_address_serves_tls_and_guards_rest_writes_with_the_token() {
    let secrets = tempfile::tempdir().expect("temp dir");
    let (cert, key) = self_signed();
    let cert_path = secrets.path().join("cert.pem");
    let key_path = secrets.path().join("key.pem");
    std::fs::write(&cert_path, &cert).expect("cert");
    std::fs::write(&key_path, &key).expect("key");
    let tokens = token_file(secrets.path(), &[GOOD]);
    let server = TestServer::start_with(|c| {
        c.security.tls_cert = Some(cert_path.clone());
        c.security.tls_key = Some(key_path.clone());
        c.security.auth_token_file = Some(tokens);
    })
    .await;
    let addr = server.running.metrics_addr;
    within(60, async {
        let (status, body) = https_send(addr, &cert, "GET", "/healthz", &[], "")
            .await
            .expect("https");
        assert_eq!((status, body.as_str()), (200, "ok\n"));
        let create = r#"{"namespace": ["secure"]}"#;
        let (status, body) = https_send(addr, &cert, "POST", "/v1/namespaces", &[], create)
            .await
            .expect("https");
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("NotAuthorizedException"), "{body}");
        let catalog = server.running.service.catalog.clone();
        let secure = iceberg::NamespaceIdent::new("secure".to_string());
        assert!(
            !iceberg::Catalog::namespace_exists(catalog.as_ref(), &secure)
                .await
                .unwrap()
        );
        let bearer = format!("Bearer {GOOD}");
        let auth = [("authorization", bearer.as_str())];
        let (status, body) = https_send(addr, &cert, "POST", "/v1/namespaces", &auth, create)
            .await
            .expect("https");
        assert_eq!(status, 200, "{body}");
        assert!(
            iceberg::Catalog::namespace_exists(catalog.as_ref(), &secure)
                .await
                .unwrap()
        );
        // Plain text to the TLS address gets no HTTP answer.
        let (status, _) = common::http_request(addr, "GET", "/healthz").await;
        assert_eq!(status, 0, "plain HTTP must not be served");
    })
    .await;
    server.stop().await;
}
