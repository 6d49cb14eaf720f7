//! The PostgreSQL test fixture ([`crate::common::postgres::PgCluster`]) itself: what the
//! shared-catalog tests rely on — a private cluster whose URLs work with a real client
//! (psql), fresh databases per server, and a crash (`pg_ctl stop -m immediate`) followed by
//! a restart on the same URL that keeps every committed row.

use crate::common::postgres::{PgCluster, answers, psql};

#[test]
fn private_cluster_serves_databases_and_keeps_committed_rows_across_a_crash() {
    let pg = PgCluster::start();
    let port = pg
        .url()
        .strip_prefix("postgres://postgres@127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/skade"))
        .unwrap_or_else(|| panic!("unexpected cluster URL {}", pg.url()));
    assert!(port.parse::<u16>().is_ok(), "port in {}", pg.url());
    assert_eq!(psql(pg.url(), "SELECT 1"), "1");

    // A database per server: each URL reaches its own database.
    let a = pg.create_database("catalog_a");
    let b = pg.create_database("catalog_b");
    assert_eq!(a, pg.url().replace("/skade", "/catalog_a"));
    assert_eq!(psql(&a, "SELECT current_database()"), "catalog_a");
    assert_eq!(psql(&b, "SELECT current_database()"), "catalog_b");
    psql(
        &a,
        "CREATE TABLE pointers (id int PRIMARY KEY); INSERT INTO pointers VALUES (1), (2)",
    );
    assert_eq!(
        psql(
            &b,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'pointers'"
        ),
        "0"
    );

    // A crash: the server is gone, then back on the same URL with every committed row.
    pg.stop_immediate();
    assert!(
        !answers(&a),
        "the server still answers after stop -m immediate"
    );
    pg.restart();
    assert_eq!(
        psql(
            &a,
            "SELECT string_agg(id::text, ',' ORDER BY id) FROM pointers"
        ),
        "1,2"
    );

    // A restart of a running server keeps the URL too.
    pg.restart();
    assert_eq!(psql(&b, "SELECT current_database()"), "catalog_b");
}
