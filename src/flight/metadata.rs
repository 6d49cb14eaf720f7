//! Flight SQL metadata: what a client's `adbc_get_objects`, `adbc_get_table_schema`,
//! `adbc_get_table_types` or JDBC `DatabaseMetaData` asks for — `GetSqlInfo`,
//! `GetCatalogs`, `GetDbSchemas`, `GetTables`, `GetTableTypes`, `GetPrimaryKeys`,
//! `GetXdbcTypeInfo`, and the (always empty) foreign-key commands.
//!
//! One catalog, named `--catalog-name`; its schemas are the namespaces, nested ones
//! joined by `.` (as a Flight SQL ingest names them); its tables are of type `TABLE`
//! (skade has no views), with the Arrow schema `DoGet` streams; a table's primary key is
//! its Iceberg identifier fields. Patterns (`%`, `_`) filter as Flight SQL defines, with
//! Arrow's `LIKE`.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, RecordBatch, StringArray, UInt8Array};
use arrow_flight::sql::metadata::{
    GetTablesBuilder, SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData,
    XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTableTypes,
    CommandGetTables, Nullable, Searchable, SqlInfo, SqlNullOrdering, SqlSupportedCaseSensitivity,
    SqlSupportedTransaction, SqlTransactionIsolationLevel, SupportedSqlGrammar, XdbcDataType,
    XdbcDatetimeSubcode,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use iceberg::{Catalog, NamespaceIdent, TableIdent};

use super::Service;
use crate::error::Error;

/// The only table type skade's catalog holds.
pub(crate) const TABLE_TYPE: &str = "TABLE";

fn internal<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> Error + '_ {
    move |e| Error::Internal {
        what: format!("cannot build the {what}: {e}"),
    }
}

/// What skade answers to `GetSqlInfo`: the server and the crates it was built with
/// (versions from `Cargo.lock`, `build.rs`), bulk ingest and transactions, the SQL
/// subset of [`crate::sql`], and the catalog's naming.
///
/// # Errors
/// Arrow's error building the info batch (not expected).
pub(crate) fn sql_info(svc: &Service) -> Result<SqlInfoData, Error> {
    let timeout_ms = i32::try_from(svc.transactions.timeout().as_millis()).unwrap_or(i32::MAX);
    let mut info = SqlInfoDataBuilder::new();
    append_fixed_sql_info(&mut info);
    info.append(SqlInfo::FlightSqlServerTransactionTimeout, timeout_ms);
    info.build().map_err(internal("SQL info"))
}

/// Appends every `GetSqlInfo` answer that does not depend on the server's settings:
/// the tables below, one loop per kind of value.
fn append_fixed_sql_info(info: &mut SqlInfoDataBuilder) {
    for &(name, text) in SQL_INFO_TEXT {
        info.append(name, text);
    }
    for &(name, flag) in SQL_INFO_FLAGS {
        info.append(name, flag);
    }
    for &(name, value) in SQL_INFO_INT32 {
        info.append(name, value);
    }
    for &name in SQL_INFO_EMPTY_LISTS {
        info.append(name, Vec::<String>::new());
    }
    for &name in SQL_INFO_NO_LIMIT {
        info.append(name, 0i64);
    }
}

/// `GetSqlInfo` answers that are text: the server, its versions, and SQL's names and
/// characters.
const SQL_INFO_TEXT: &[(SqlInfo, &str)] = &[
    (SqlInfo::FlightSqlServerName, "skade"),
    (SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION")),
    (
        SqlInfo::FlightSqlServerArrowVersion,
        env!("SKADE_DEP_VERSION_ARROW"),
    ),
    (SqlInfo::SqlIdentifierQuoteChar, "\""),
    (SqlInfo::SqlSearchStringEscape, "\\"),
    (SqlInfo::SqlExtraNameCharacters, "-"),
    (SqlInfo::SqlSchemaTerm, "namespace"),
    (SqlInfo::SqlProcedureTerm, "procedure"),
    (SqlInfo::SqlCatalogTerm, "catalog"),
];

/// `GetSqlInfo` answers that are yes or no.
const SQL_INFO_FLAGS: &[(SqlInfo, bool)] = &[
    // The server: SQL and bulk ingest in transactions, no Substrait, no cancel.
    (SqlInfo::FlightSqlServerReadOnly, false),
    (SqlInfo::FlightSqlServerSql, true),
    (SqlInfo::FlightSqlServerSubstrait, false),
    (SqlInfo::FlightSqlServerCancel, false),
    (SqlInfo::FlightSqlServerBulkIngestion, true),
    (SqlInfo::FlightSqlServerIngestTransactionsSupported, true),
    // SQL: namespaces and tables are made over REST or by ingest, never by SQL DDL.
    (SqlInfo::SqlDdlCatalog, false),
    (SqlInfo::SqlDdlSchema, false),
    (SqlInfo::SqlDdlTable, false),
    (SqlInfo::SqlAllTablesAreSelectable, true),
    (SqlInfo::SqlSupportsColumnAliasing, true),
    (SqlInfo::SqlNullPlusNullIsNull, true),
    (SqlInfo::SqlSupportsTableCorrelationNames, true),
    (SqlInfo::SqlSupportsDifferentTableCorrelationNames, false),
    (SqlInfo::SqlSupportsExpressionsInOrderBy, false),
    (SqlInfo::SqlSupportsOrderByUnrelated, false),
    (SqlInfo::SqlSupportsLikeEscapeClause, false),
    (SqlInfo::SqlSupportsNonNullableColumns, true),
    (SqlInfo::SqlSupportsIntegrityEnhancementFacility, false),
    (SqlInfo::SqlCatalogAtStart, true),
    (SqlInfo::SqlSelectForUpdateSupported, false),
    (SqlInfo::SqlStoredProceduresSupported, false),
    (SqlInfo::SqlCorrelatedSubqueriesSupported, false),
    (SqlInfo::SqlMaxRowSizeIncludesBlobs, false),
    // Transactions: Flight SQL ingest transactions, all or nothing; reads see committed
    // snapshots only.
    (SqlInfo::SqlTransactionsSupported, true),
    (SqlInfo::SqlDataDefinitionCausesTransactionCommit, false),
    (SqlInfo::SqlDataDefinitionsInTransactionsIgnored, false),
    (SqlInfo::SqlBatchUpdatesSupported, false),
    (SqlInfo::SqlSavepointsSupported, false),
    (SqlInfo::SqlNamedParametersSupported, false),
    (SqlInfo::SqlLocatorsUpdateCopy, false),
    (SqlInfo::SqlStoredFunctionsUsingCallSyntaxSupported, false),
];

/// `GetSqlInfo` answers that are 32-bit integers: one value of a Flight SQL enum, or a
/// bitmask of them (0: none).
const SQL_INFO_INT32: &[(SqlInfo, i32)] = &[
    (
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::Transaction as i32,
    ),
    (SqlInfo::FlightSqlServerStatementTimeout, 0),
    (
        SqlInfo::SqlIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive as i32,
    ),
    // Quoted names match exactly, which the enum has no value for.
    (
        SqlInfo::SqlQuotedIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityUnknown as i32,
    ),
    (
        SqlInfo::SqlNullOrdering,
        SqlNullOrdering::SqlNullsSortedAtEnd as i32,
    ),
    (SqlInfo::SqlSupportedGroupBy, 0),
    (
        SqlInfo::SqlSupportedGrammar,
        SupportedSqlGrammar::SqlMinimumGrammar as i32,
    ),
    (SqlInfo::SqlSchemasSupportedActions, 0),
    (SqlInfo::SqlCatalogsSupportedActions, 0),
    (SqlInfo::SqlSupportedPositionedCommands, 0),
    (SqlInfo::SqlSupportedSubqueries, 0),
    (SqlInfo::SqlSupportedUnions, 0),
    (
        SqlInfo::SqlDefaultTransactionIsolation,
        SqlTransactionIsolationLevel::SqlTransactionSerializable as i32,
    ),
    (
        SqlInfo::SqlSupportedTransactionsIsolationLevels,
        1 << SqlTransactionIsolationLevel::SqlTransactionSerializable as i32,
    ),
    (
        SqlInfo::SqlSupportedResultSetTypes,
        1 << 1, // SQL_RESULT_SET_TYPE_FORWARD_ONLY
    ),
];

/// `GetSqlInfo` answers that are lists, all empty: skade advertises no keywords or
/// functions.
const SQL_INFO_EMPTY_LISTS: &[SqlInfo] = &[
    SqlInfo::SqlKeywords,
    SqlInfo::SqlNumericFunctions,
    SqlInfo::SqlStringFunctions,
    SqlInfo::SqlSystemFunctions,
    SqlInfo::SqlDatetimeFunctions,
];

/// `GetSqlInfo` limits skade answers with 0 (an `int64`): no limit known.
const SQL_INFO_NO_LIMIT: &[SqlInfo] = &[
    SqlInfo::SqlMaxBinaryLiteralLength,
    SqlInfo::SqlMaxCharLiteralLength,
    SqlInfo::SqlMaxColumnNameLength,
    SqlInfo::SqlMaxColumnsInGroupBy,
    SqlInfo::SqlMaxColumnsInIndex,
    SqlInfo::SqlMaxColumnsInOrderBy,
    SqlInfo::SqlMaxColumnsInSelect,
    SqlInfo::SqlMaxColumnsInTable,
    SqlInfo::SqlMaxConnections,
    SqlInfo::SqlMaxCursorNameLength,
    SqlInfo::SqlMaxIndexLength,
    SqlInfo::SqlDbSchemaNameLength,
    SqlInfo::SqlMaxProcedureNameLength,
    SqlInfo::SqlMaxCatalogNameLength,
    SqlInfo::SqlMaxRowSize,
    SqlInfo::SqlMaxStatementLength,
    SqlInfo::SqlMaxStatements,
    SqlInfo::SqlMaxTableNameLength,
    SqlInfo::SqlMaxTablesInSelect,
    SqlInfo::SqlMaxUsernameLength,
];

/// Every namespace of the catalog, nested ones too, each as its levels.
async fn all_namespaces(svc: &Service) -> Result<Vec<NamespaceIdent>, Error> {
    let catalog_error = |e| Error::catalog(&"*", e);
    let mut found = Vec::new();
    let mut pending = svc
        .catalog
        .list_namespaces(None)
        .await
        .map_err(catalog_error)?;
    while let Some(ns) = pending.pop() {
        pending.extend(
            svc.catalog
                .list_namespaces(Some(&ns))
                .await
                .map_err(catalog_error)?,
        );
        found.push(ns);
    }
    Ok(found)
}

/// Whether `catalog` (a command's catalog filter) names skade's catalog: unset matches,
/// `""` ("no catalog") and any other name do not.
fn catalog_matches(svc: &Service, catalog: Option<&str>) -> bool {
    catalog.is_none_or(|c| c == svc.catalog_name)
}

/// Which of `names` match the Flight SQL pattern `pattern` (unset matches all), with
/// Arrow's `LIKE`.
fn matching(names: &[String], pattern: Option<&str>) -> Result<Vec<bool>, Error> {
    let Some(pattern) = pattern else {
        return Ok(vec![true; names.len()]);
    };
    let array = StringArray::from(names.to_vec());
    let pattern = arrow_array::Scalar::new(StringArray::from(vec![pattern]));
    let mask = arrow_string::like::like(&array, &pattern).map_err(internal("pattern match"))?;
    Ok((0..names.len())
        .map(|i| arrow_array::Array::is_valid(&mask, i) && mask.value(i))
        .collect())
}

/// `GetCatalogs`: one row, `--catalog-name`.
pub(crate) fn catalogs(svc: &Service, cmd: CommandGetCatalogs) -> Result<RecordBatch, Error> {
    let mut builder = cmd.into_builder();
    builder.append(&svc.catalog_name);
    builder.build().map_err(internal("catalog list"))
}

/// `GetDbSchemas`: the namespaces (dotted) matching the command's filters.
///
/// # Errors
/// The catalog's error listing namespaces.
pub(crate) async fn db_schemas(
    svc: &Service,
    cmd: CommandGetDbSchemas,
) -> Result<RecordBatch, Error> {
    let catalog = cmd.catalog.clone();
    let mut builder = cmd.into_builder();
    if catalog_matches(svc, catalog.as_deref()) {
        for ns in all_namespaces(svc).await? {
            builder.append(&svc.catalog_name, ns.join("."));
        }
    }
    builder.build().map_err(internal("namespace list"))
}

/// `GetTables`: the tables matching the command's filters, with their Arrow schema when
/// asked (`include_schema`). Only tables that pass the filters are loaded.
///
/// # Errors
/// The catalog's error listing or loading tables.
pub(crate) async fn tables(svc: &Service, cmd: CommandGetTables) -> Result<RecordBatch, Error> {
    let wanted_type = cmd.table_types.is_empty() || cmd.table_types.iter().any(|t| t == TABLE_TYPE);
    let candidates = if catalog_matches(svc, cmd.catalog.as_deref()) && wanted_type {
        filtered_tables(
            svc,
            cmd.db_schema_filter_pattern.as_deref(),
            cmd.table_name_filter_pattern.as_deref(),
        )
        .await?
    } else {
        Vec::new()
    };
    let include_schema = cmd.include_schema;
    let mut builder: GetTablesBuilder = cmd.into_builder();
    let empty = Schema::empty();
    for ident in candidates {
        let schema = if include_schema {
            let table = svc
                .catalog
                .load_table(&ident)
                .await
                .map_err(|e| Error::catalog(&ident, e))?;
            Some(crate::write::table_arrow_schema(&table)?)
        } else {
            None
        };
        builder
            .append(
                &svc.catalog_name,
                ident.namespace().join("."),
                ident.name(),
                TABLE_TYPE,
                schema.as_deref().unwrap_or(&empty),
            )
            .map_err(|e| Error::Internal {
                what: format!("cannot list table {ident}: {e}"),
            })?;
    }
    builder.build().map_err(|e| Error::Internal {
        what: format!("cannot build the table list: {e}"),
    })
}

/// The catalog's tables whose namespace (dotted) and name match the patterns.
async fn filtered_tables(
    svc: &Service,
    schema_pattern: Option<&str>,
    table_pattern: Option<&str>,
) -> Result<Vec<TableIdent>, Error> {
    let mut all = svc
        .catalog
        .all_tables()
        .await
        .map_err(|e| Error::catalog(&"*", e))?;
    all.sort_by_key(|ident| ident.to_string());
    let schemas: Vec<String> = all.iter().map(|i| i.namespace().join(".")).collect();
    let names: Vec<String> = all.iter().map(|i| i.name().to_string()).collect();
    let schema_ok = matching(&schemas, schema_pattern)?;
    let name_ok = matching(&names, table_pattern)?;
    Ok(all
        .into_iter()
        .enumerate()
        .filter(|(i, _)| schema_ok[*i] && name_ok[*i])
        .map(|(_, ident)| ident)
        .collect())
}

/// `GetTableTypes`: `TABLE`.
pub(crate) fn table_types(cmd: CommandGetTableTypes) -> Result<RecordBatch, Error> {
    let mut builder = cmd.into_builder();
    builder.append(TABLE_TYPE);
    builder.build().map_err(internal("table type list"))
}

/// The schema of a `GetPrimaryKeys` answer (Flight SQL's).
pub(crate) fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// `GetPrimaryKeys`: the table's Iceberg identifier fields (its `identifier-field-ids`,
/// nested ones by their dotted name), in the schema's order, numbered from 1; none for a
/// table without.
///
/// # Errors
/// `NotFound` for an unknown table (a name that is not skade's is an empty answer).
pub(crate) async fn primary_keys(
    svc: &Service,
    cmd: CommandGetPrimaryKeys,
) -> Result<RecordBatch, Error> {
    let schema = primary_keys_schema();
    let mut columns: Vec<String> = Vec::new();
    let mut namespace = String::new();
    if catalog_matches(svc, cmd.catalog.as_deref()) {
        namespace = cmd
            .db_schema
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| super::names::DEFAULT_NAMESPACE.to_string());
        let mut path: Vec<String> = namespace.split('.').map(str::to_string).collect();
        path.push(cmd.table.clone());
        let ident = super::names::table_from_path(&path)?;
        let table = svc
            .catalog
            .load_table(&ident)
            .await
            .map_err(|e| Error::catalog(&ident, e))?;
        let current = table.metadata().current_schema();
        let mut ids: Vec<i32> = current.identifier_field_ids().collect();
        ids.sort_unstable();
        columns = ids
            .into_iter()
            .filter_map(|id| current.name_by_field_id(id).map(str::to_string))
            .collect();
    }
    let n = columns.len();
    let key_sequence: Vec<i32> = (1..=n)
        .map(|i| i32::try_from(i).unwrap_or(i32::MAX))
        .collect();
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![svc.catalog_name.clone(); n])),
        Arc::new(StringArray::from(vec![namespace; n])),
        Arc::new(StringArray::from(vec![cmd.table.clone(); n])),
        Arc::new(StringArray::from(columns)),
        Arc::new(StringArray::from(vec![None::<String>; n])),
        Arc::new(Int32Array::from(key_sequence)),
    ];
    RecordBatch::try_new(schema, arrays).map_err(internal("primary key list"))
}

/// The schema of a `GetExportedKeys`, `GetImportedKeys` or `GetCrossReference` answer.
pub(crate) fn foreign_keys_schema() -> SchemaRef {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
}

/// The answer to a foreign-key command: Iceberg tables have no foreign keys.
pub(crate) fn no_foreign_keys() -> RecordBatch {
    let schema = foreign_keys_schema();
    let columns = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Int32 => Arc::new(Int32Array::from(Vec::<i32>::new())) as ArrayRef,
            DataType::UInt8 => Arc::new(UInt8Array::from(Vec::<u8>::new())) as ArrayRef,
            _ => Arc::new(StringArray::from(Vec::<String>::new())) as ArrayRef,
        })
        .collect();
    RecordBatch::try_new(schema.clone(), columns).unwrap_or_else(|_| RecordBatch::new_empty(schema))
}

/// The SQL types of skade's columns, for `GetXdbcTypeInfo`: one per Iceberg primitive
/// type, named as Iceberg names it, with the XDBC type its Arrow type reads as.
pub(crate) fn xdbc_types() -> Result<XdbcTypeInfoData, Error> {
    let mut builder = XdbcTypeInfoDataBuilder::new();
    let ty = |name: &str, data_type: XdbcDataType, column_size: Option<i32>| XdbcTypeInfo {
        type_name: name.to_string(),
        data_type,
        column_size,
        literal_prefix: None,
        literal_suffix: None,
        create_params: None,
        nullable: Nullable::NullabilityNullable,
        case_sensitive: false,
        searchable: Searchable::Basic,
        unsigned_attribute: Some(false),
        fixed_prec_scale: false,
        auto_increment: Some(false),
        local_type_name: Some(name.to_string()),
        minimum_scale: None,
        maximum_scale: None,
        sql_data_type: data_type,
        datetime_subcode: None,
        num_prec_radix: None,
        interval_precision: None,
    };
    let quoted = |mut t: XdbcTypeInfo| {
        t.literal_prefix = Some("'".into());
        t.literal_suffix = Some("'".into());
        t
    };
    let numeric = |mut t: XdbcTypeInfo| {
        t.num_prec_radix = Some(10);
        t
    };
    let temporal = |mut t: XdbcTypeInfo, subcode| {
        t.datetime_subcode = Some(subcode);
        t.sql_data_type = XdbcDataType::XdbcDatetime;
        t
    };
    builder.append(ty("boolean", XdbcDataType::XdbcBit, Some(1)));
    builder.append(numeric(ty("int", XdbcDataType::XdbcInteger, Some(10))));
    builder.append(numeric(ty("long", XdbcDataType::XdbcBigint, Some(19))));
    builder.append(numeric(ty("float", XdbcDataType::XdbcReal, Some(7))));
    builder.append(numeric(ty("double", XdbcDataType::XdbcDouble, Some(15))));
    let mut decimal = numeric(ty("decimal", XdbcDataType::XdbcDecimal, Some(38)));
    decimal.create_params = Some(vec!["precision".into(), "scale".into()]);
    decimal.fixed_prec_scale = true;
    decimal.minimum_scale = Some(0);
    decimal.maximum_scale = Some(38);
    builder.append(decimal);
    builder.append(temporal(
        quoted(ty("date", XdbcDataType::XdbcDate, Some(10))),
        XdbcDatetimeSubcode::XdbcSubcodeYear,
    ));
    builder.append(temporal(
        quoted(ty("time", XdbcDataType::XdbcTime, Some(15))),
        XdbcDatetimeSubcode::XdbcSubcodeTime,
    ));
    builder.append(temporal(
        quoted(ty("timestamp", XdbcDataType::XdbcTimestamp, Some(26))),
        XdbcDatetimeSubcode::XdbcSubcodeTimestamp,
    ));
    builder.append(temporal(
        quoted(ty("timestamptz", XdbcDataType::XdbcTimestamp, Some(32))),
        XdbcDatetimeSubcode::XdbcSubcodeTimestampWithTimezone,
    ));
    let mut string = quoted(ty("string", XdbcDataType::XdbcVarchar, None));
    string.case_sensitive = true;
    string.searchable = Searchable::Full;
    builder.append(string);
    builder.append(quoted(ty("uuid", XdbcDataType::XdbcBinary, Some(16))));
    builder.append(ty("fixed", XdbcDataType::XdbcBinary, None));
    builder.append(ty("binary", XdbcDataType::XdbcVarbinary, None));
    builder.build().map_err(internal("type info"))
}
