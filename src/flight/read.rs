//! Read back: `GetFlightInfo`, `DoGet` and `ListFlights` over the committed tables.

use super::Service;
use super::decode::BoxStream;
use super::names;
use crate::error::Error;
use crate::write;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use futures::{StreamExt, TryStreamExt};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};

/// The `FlightInfo` of `ident`: its Arrow schema, row count and Parquet bytes at the
/// current snapshot (from the snapshot summary's `total-records` / `total-files-size`;
/// the row count is -1, unknown, when the summary does not say the table has no delete
/// files: `total-records` counts rows that delete files hide),
/// one endpoint whose ticket `DoGet` accepts, and as `app_metadata` the UTF-8 path of the
/// current metadata JSON (the catalog's pointer), for handing to any Iceberg reader.
///
/// # Errors
/// `NotFound` for an unknown table; `Internal` for unreadable metadata.
pub(crate) async fn flight_info(svc: &Service, ident: &TableIdent) -> Result<FlightInfo, Error> {
    let table = load(svc, ident).await?;
    info_of(&table)
}

fn info_of(table: &Table) -> Result<FlightInfo, Error> {
    let ident = table.identifier();
    let schema = write::table_arrow_schema(table)?;
    let summary_total = |key: &str| -> i64 {
        table
            .metadata()
            .current_snapshot()
            .and_then(|s| s.summary().additional_properties.get(key).cloned())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let info = FlightInfo::new()
        .try_with_schema(&schema)
        .map_err(|e| {
            Error::catalog(
                ident,
                iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string()),
            )
        })?
        .with_descriptor(FlightDescriptor::new_path(names::path_of(ident)))
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(names::ticket_of(ident))))
        .with_total_records(total_records(table))
        .with_total_bytes(summary_total("total-files-size"))
        .with_app_metadata(table.metadata_location().unwrap_or_default().to_string());
    Ok(info)
}

/// The rows a reader of `table`'s current snapshot gets, when the snapshot summary
/// tells: its `total-records` when `total-delete-files` is 0 (Iceberg's summary counts
/// every data file's rows, whatever delete files hide); -1 (unknown, as Flight's
/// `total_records` allows) otherwise; 0 without a snapshot.
fn total_records(table: &Table) -> i64 {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return 0;
    };
    let summary = &snapshot.summary().additional_properties;
    let count = |key: &str| summary.get(key).and_then(|v| v.parse::<i64>().ok());
    match (count("total-delete-files"), count("total-records")) {
        (Some(0), Some(records)) => records,
        _ => -1,
    }
}

/// Streams the rows of `ident`'s current snapshot (schema only for a table with none).
///
/// # Errors
/// `NotFound` for an unknown table; errors while scanning end the stream with a status.
pub(crate) async fn do_get(
    svc: &Service,
    ident: &TableIdent,
) -> Result<BoxStream<FlightData>, Error> {
    let table = load(svc, ident).await?;
    let schema = write::table_arrow_schema(&table)?;
    let catalog_err = |source: iceberg::Error| Error::catalog(ident, source);
    let batches = crate::read::scan_in_write_order(&table)
        .await
        .map_err(catalog_err)?
        .map_err(|e| FlightError::ExternalError(Box::new(e)));
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(batches)
        .map_err(|e| match e {
            FlightError::Tonic(status) => *status,
            other => Error::Internal {
                what: format!("reading the table failed: {other}"),
            }
            .into_status(),
        });
    Ok(Box::pin(stream))
}

/// The `FlightInfo` of every table whose dotted name (`ns.table`, nested namespaces
/// joined by `.` too) starts with `prefix`, in name order. An empty prefix lists every
/// table; `demo.` lists the tables of namespace `demo` and of those nested in it;
/// `demo.pe` those of `demo` whose name starts with `pe`.
///
/// # Errors
/// Catalog failures while listing.
pub(crate) async fn list(svc: &Service, prefix: &str) -> Result<Vec<FlightInfo>, Error> {
    let mut idents: Vec<(String, TableIdent)> = svc
        .catalog
        .all_tables()
        .await
        .map_err(|source| Error::catalog(&"*", source))?
        .into_iter()
        .map(|ident| (ident.to_string(), ident))
        .filter(|(name, _)| name.starts_with(prefix))
        .collect();
    idents.sort_by(|a, b| a.0.cmp(&b.0));
    let mut infos = Vec::with_capacity(idents.len());
    for (_, ident) in idents {
        infos.push(info_of(&load(svc, &ident).await?)?);
    }
    Ok(infos)
}

async fn load(svc: &Service, ident: &TableIdent) -> Result<Table, Error> {
    svc.catalog
        .load_table(ident)
        .await
        .map_err(|source| Error::catalog(ident, source))
}

/// Boxes a ready-made stream of Flight infos.
pub(crate) fn info_stream(infos: Vec<FlightInfo>) -> BoxStream<FlightInfo> {
    Box::pin(futures::stream::iter(infos.into_iter().map(Ok)).boxed())
}
