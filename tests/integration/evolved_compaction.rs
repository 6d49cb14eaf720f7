//! Compaction of a table whose schema evolved between its data files: every schema
//! change the Iceberg spec allows ("Schema Evolution": add, drop, rename, reorder, type
//! promotion, required → optional, in the top-level struct and nested ones, list
//! elements and map values; not a field added to an existing struct, which skade's REST
//! catalog refuses because DoGet's reader cannot read the older files then) is made
//! between two small files, then compaction
//! rewrites them, and every row reads the same before and after (iceberg's scan, the
//! reader DoGet serves), as the spec's "Column Projection" says it must: by field id, a
//! field the file lacks reading its `initial-default` or null.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, Decimal128Array, Float32Array, Float64Array, Int32Array, Int64Array,
    ListArray, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema};
use iceberg::spec::{
    ListType, Literal, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType,
    Type,
};
use iceberg::{Catalog, TableIdent, TableUpdate};
use skade::catalog::RedbCatalog;
use skade::config::MaintenanceConfig;
use skade::maintenance::Maintainer;
use skade::metrics::Metrics;
use skade::write::{self, WriteProps};

use crate::common::{self, open_catalog, rows_of};

fn ident(name: &str) -> TableIdent {
    TableIdent::from_strs(["evo", name]).unwrap()
}

fn compactor(catalog: &Arc<RedbCatalog>) -> Maintainer {
    Maintainer::new(
        catalog.clone(),
        MaintenanceConfig {
            enabled: true,
            maintenance_interval: Duration::from_millis(50),
            max_snapshots: 100,
            cleanup_grace: Duration::ZERO,
            metadata_cleanup_grace: Duration::ZERO,
            cleanup_max_waiting: u64::MAX,
            compaction: true,
        },
        Metrics::new(),
    )
}

fn p(t: PrimitiveType) -> Type {
    Type::Primitive(t)
}

fn opt(id: i32, name: &str, t: Type) -> NestedFieldRef {
    Arc::new(NestedField::optional(id, name, t))
}

/// Makes `fields` the table's current schema in one commit (`add-schema` +
/// `set-current-schema`), as a REST client's schema update does.
async fn evolve(catalog: &RedbCatalog, name: &str, fields: Vec<NestedFieldRef>) {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    let schema = Schema::builder()
        .with_schema_id(table.metadata().current_schema_id() + 1)
        .with_fields(fields)
        .build()
        .unwrap();
    catalog
        .atomic_release_raw(vec![(
            ident(name),
            vec![],
            vec![
                TableUpdate::AddSchema { schema },
                TableUpdate::SetCurrentSchema { schema_id: -1 },
            ],
        )])
        .await
        .unwrap();
}

/// One row for whatever the current schema of `name` holds, each value derived from
/// `row` and the column's current name (so a value read under a field's old name, or a
/// dropped field's value under a new field, is visible), committed as one small file.
async fn append_row(catalog: &RedbCatalog, name: &str, row: i64) {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    let target = write::table_arrow_schema(&table).unwrap();
    let columns: Vec<ArrayRef> = target
        .fields()
        .iter()
        .map(|f| value(f, f.name(), row))
        .collect();
    let plain = ArrowSchema::new(
        target
            .fields()
            .iter()
            .zip(&columns)
            .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), f.is_nullable()))
            .collect::<Vec<_>>(),
    );
    let batch = RecordBatch::try_new(Arc::new(plain), columns).unwrap();
    let batch = write::conform_batch("test", &batch, &target).unwrap();
    write::append(catalog, &table, vec![batch], &WriteProps::default())
        .await
        .unwrap();
}

/// `field` without its metadata, at every depth (what a client sends).
fn plain_field(field: &Field) -> Field {
    Field::new(
        field.name(),
        plain_type(field.data_type()),
        field.is_nullable(),
    )
}

fn plain_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(|f| plain_field(f)).collect())
        }
        DataType::List(element) => DataType::List(Arc::new(plain_field(element))),
        DataType::Map(entries, sorted) => DataType::Map(Arc::new(plain_field(entries)), *sorted),
        other => other.clone(),
    }
}

/// A one-row column for `field` whose values come from `row` and `path`.
fn value(field: &Field, path: &str, row: i64) -> ArrayRef {
    match field.data_type() {
        DataType::Int32 => Arc::new(Int32Array::from(vec![row as i32 + 1000])),
        DataType::Int64 => Arc::new(Int64Array::from(vec![row + 1000])),
        DataType::Float32 => Arc::new(Float32Array::from(vec![row as f32 + 0.5])),
        DataType::Float64 => Arc::new(Float64Array::from(vec![row as f64 + 0.25])),
        DataType::Decimal128(precision, scale) => Arc::new(
            Decimal128Array::from(vec![row as i128 * 100 + 25])
                .with_precision_and_scale(*precision, *scale)
                .unwrap(),
        ),
        DataType::Utf8 => Arc::new(StringArray::from(vec![format!("{path}-{row}")])),
        DataType::Struct(fields) => {
            let children: Vec<ArrayRef> = fields
                .iter()
                .map(|f| value(f, &format!("{path}.{}", f.name()), row))
                .collect();
            let plain: Fields = fields.iter().map(|f| plain_field(f)).collect();
            Arc::new(StructArray::new(plain, children, None))
        }
        DataType::List(element) => {
            let values = value(element, &format!("{path}.element"), row);
            let values = arrow_select::concat::concat(&[values.as_ref(), values.as_ref()]).unwrap();
            Arc::new(ListArray::new(
                Arc::new(plain_field(element)),
                arrow::buffer::OffsetBuffer::from_lengths([2]),
                values,
                None,
            ))
        }
        DataType::Map(entries, sorted) => {
            // Keys are strings; values are sent as int (widened to a promoted long).
            let DataType::Struct(kv) = entries.data_type() else {
                panic!("map entries are a struct");
            };
            let kv: Fields = vec![
                Field::new(kv[0].name(), DataType::Utf8, false),
                Field::new(kv[1].name(), DataType::Int32, kv[1].is_nullable()),
            ]
            .into();
            let entries_array = StructArray::new(
                kv.clone(),
                vec![
                    Arc::new(StringArray::from(vec![format!("{path}-{row}")])) as ArrayRef,
                    Arc::new(Int32Array::from(vec![row as i32 + 7])),
                ],
                None,
            );
            Arc::new(arrow_array::MapArray::new(
                Arc::new(Field::new(entries.name(), DataType::Struct(kv), false)),
                arrow::buffer::OffsetBuffer::from_lengths([1]),
                entries_array,
                None,
                *sorted,
            ))
        }
        other => panic!("no test value for {other}"),
    }
}

/// Rows of the current snapshot, sorted (iceberg's scan: DoGet's reader). iceberg
/// 0.10.1's reader keeps a renamed struct child's old name for files written before the
/// rename (its values are right), so struct child names are left out: values only.
async fn read(catalog: &RedbCatalog, name: &str) -> Vec<String> {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    let batches: Vec<RecordBatch> = common::scan(&table, None)
        .await
        .iter()
        .map(|b| {
            let columns: Vec<ArrayRef> = b.columns().iter().map(|c| unnamed(c)).collect();
            let fields: Vec<Field> = b
                .schema()
                .fields()
                .iter()
                .zip(&columns)
                .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), true))
                .collect();
            RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), columns).unwrap()
        })
        .collect();
    let mut rows = rows_of(&batches);
    rows.sort();
    rows
}

/// `array` with every struct's children named by position (`0`, `1`, …).
fn unnamed(array: &ArrayRef) -> ArrayRef {
    match array.as_struct_opt() {
        Some(s) => {
            let columns: Vec<ArrayRef> = s.columns().iter().map(unnamed).collect();
            let fields: Fields = columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(i.to_string(), c.data_type().clone(), true))
                .collect();
            Arc::new(StructArray::new(fields, columns, s.nulls().cloned()))
        }
        None => array.clone(),
    }
}

async fn live_files(catalog: &RedbCatalog, name: &str) -> usize {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties["total-data-files"]
        .parse()
        .unwrap()
}

/// Compacts `name` until its files are merged, asserting no pass fails.
async fn compact(catalog: &Arc<RedbCatalog>, name: &str) {
    let before = live_files(catalog, name).await;
    let m = compactor(catalog);
    let mut compacted = 0;
    for _ in 0..3 {
        let report = m.run_pass().await.expect("pass");
        assert!(
            report.errors.is_empty(),
            "compaction failed: {:?}",
            report.errors
        );
        compacted += report.files_compacted;
    }
    if compacted < 5 {
        let table = catalog.load_table(&ident(name)).await.unwrap();
        let dir = table
            .metadata()
            .location()
            .trim_start_matches("file://")
            .to_string();
        let sizes: Vec<u64> = common::parquet_files(std::path::Path::new(&dir))
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect();
        panic!("nothing was compacted ({before} files, sizes {sizes:?})");
    }
    assert!(live_files(catalog, name).await < before);
}

fn list_of(element_id: i32, t: PrimitiveType) -> Type {
    Type::List(ListType::new(Arc::new(NestedField::list_element(
        element_id,
        p(t),
        false,
    ))))
}

fn map_of(key_id: i32, value_id: i32, t: PrimitiveType) -> Type {
    Type::Map(MapType::new(
        Arc::new(NestedField::map_key_element(
            key_id,
            p(PrimitiveType::String),
        )),
        Arc::new(NestedField::map_value_element(value_id, p(t), false)),
    ))
}

/// Six files, each written under a different schema: the original, then a rename (top
/// level and nested), the promotions (int → long, float → double, decimal precision,
/// a nested int, a list element, a map value), a drop and re-add under the same name
/// (a new field id; defect: the dropped column's values came back after compaction), a
/// nested drop, a reorder, and a required column made optional. Compaction
/// merges them; every row reads the same before and after, and the spec's own answers
/// hold (the renamed column kept its values, the re-added `x` is null on old rows).
/// Catches: compaction conforming old files by name (it failed with "column is not in
/// the table" after the rename, and brought the dropped `x` back), promotions not
/// widened, a nested field or a list/map not resolved by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_schema_change_survives_compaction_by_field_id() {
    use PrimitiveType as P;
    let c = open_catalog();
    let catalog = c.catalog.clone();
    let ns = iceberg::NamespaceIdent::new("evo".into());
    catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    let struct_v0 = StructType::new(vec![opt(9, "x", p(P::String)), opt(10, "y", p(P::Int))]);
    let v0 = vec![
        Arc::new(NestedField::required(1, "id", p(P::Long))),
        opt(2, "a", p(P::Int)),
        opt(3, "f", p(P::Float)),
        opt(
            4,
            "d",
            p(P::Decimal {
                precision: 5,
                scale: 2,
            }),
        ),
        opt(5, "s", Type::Struct(struct_v0)),
        opt(6, "x", p(P::String)),
        opt(7, "l", list_of(11, P::Int)),
        opt(8, "m", map_of(12, 13, P::Int)),
    ];
    let creation = iceberg::TableCreation::builder()
        .name("t".into())
        .schema(Schema::builder().with_fields(v0).build().unwrap())
        .build();
    let created = catalog.create_table(&ns, creation).await.unwrap();
    // iceberg assigns fresh ids at creation, top-level fields first: the ids above are
    // those, so the evolved schemas below keep them.
    let schema = created.metadata().current_schema();
    for (name, id) in [
        ("x", 6),
        ("l", 7),
        ("m", 8),
        ("s.x", 9),
        ("s.y", 10),
        ("l.element", 11),
    ] {
        assert_eq!(schema.field_by_name(name).map(|f| f.id), Some(id), "{name}");
    }
    append_row(&catalog, "t", 0).await;

    // 1. Renames: a → a2, s.x → s.x2.
    let s1 = StructType::new(vec![opt(9, "x2", p(P::String)), opt(10, "y", p(P::Int))]);
    let v1 = vec![
        Arc::new(NestedField::required(1, "id", p(P::Long))),
        opt(2, "a2", p(P::Int)),
        opt(3, "f", p(P::Float)),
        opt(
            4,
            "d",
            p(P::Decimal {
                precision: 5,
                scale: 2,
            }),
        ),
        opt(5, "s", Type::Struct(s1)),
        opt(6, "x", p(P::String)),
        opt(7, "l", list_of(11, P::Int)),
        opt(8, "m", map_of(12, 13, P::Int)),
    ];
    evolve(&catalog, "t", v1).await;
    append_row(&catalog, "t", 1).await;

    // 2. Promotions, top level and nested.
    let s2 = StructType::new(vec![opt(9, "x2", p(P::String)), opt(10, "y", p(P::Long))]);
    let v2 = vec![
        Arc::new(NestedField::required(1, "id", p(P::Long))),
        opt(2, "a2", p(P::Long)),
        opt(3, "f", p(P::Double)),
        opt(
            4,
            "d",
            p(P::Decimal {
                precision: 9,
                scale: 2,
            }),
        ),
        opt(5, "s", Type::Struct(s2)),
        opt(6, "x", p(P::String)),
        opt(7, "l", list_of(11, P::Long)),
        opt(8, "m", map_of(12, 13, P::Long)),
    ];
    evolve(&catalog, "t", v2).await;
    append_row(&catalog, "t", 2).await;

    // 3. Drop x and add a new x (id 14); drop s.y.
    let s3 = StructType::new(vec![opt(9, "x2", p(P::String))]);
    let v3 = vec![
        Arc::new(NestedField::required(1, "id", p(P::Long))),
        opt(2, "a2", p(P::Long)),
        opt(3, "f", p(P::Double)),
        opt(
            4,
            "d",
            p(P::Decimal {
                precision: 9,
                scale: 2,
            }),
        ),
        opt(5, "s", Type::Struct(s3.clone())),
        opt(7, "l", list_of(11, P::Long)),
        opt(8, "m", map_of(12, 13, P::Long)),
        opt(14, "x", p(P::String)),
    ];
    evolve(&catalog, "t", v3).await;
    append_row(&catalog, "t", 3).await;

    // 4. Reorder: x first, s before id.
    let v4 = vec![
        opt(14, "x", p(P::String)),
        opt(5, "s", Type::Struct(s3.clone())),
        Arc::new(NestedField::required(1, "id", p(P::Long))),
        opt(2, "a2", p(P::Long)),
        opt(3, "f", p(P::Double)),
        opt(
            4,
            "d",
            p(P::Decimal {
                precision: 9,
                scale: 2,
            }),
        ),
        opt(7, "l", list_of(11, P::Long)),
        opt(8, "m", map_of(12, 13, P::Long)),
    ];
    evolve(&catalog, "t", v4).await;
    append_row(&catalog, "t", 4).await;

    // 5. id required → optional.
    let v5 = vec![
        opt(14, "x", p(P::String)),
        opt(5, "s", Type::Struct(s3)),
        opt(1, "id", p(P::Long)),
        opt(2, "a2", p(P::Long)),
        opt(3, "f", p(P::Double)),
        opt(
            4,
            "d",
            p(P::Decimal {
                precision: 9,
                scale: 2,
            }),
        ),
        opt(7, "l", list_of(11, P::Long)),
        opt(8, "m", map_of(12, 13, P::Long)),
    ];
    evolve(&catalog, "t", v5).await;
    append_row(&catalog, "t", 5).await;

    let before = read(&catalog, "t").await;
    assert_eq!(before.len(), 6);
    compact(&catalog, "t").await;
    let after = read(&catalog, "t").await;
    assert_eq!(after, before, "rows changed by compaction");

    // The spec's answers, column by column, on the compacted table.
    let table = catalog.load_table(&ident("t")).await.unwrap();
    let batches = common::scan(&table, None).await;
    let mut seen = 0;
    for batch in &batches {
        let ids = batch
            .column_by_name("id")
            .unwrap()
            .as_primitive::<arrow_array::types::Int64Type>();
        let a2 = batch
            .column_by_name("a2")
            .unwrap()
            .as_primitive::<arrow_array::types::Int64Type>();
        let x = batch.column_by_name("x").unwrap().as_string::<i32>();
        let s = batch.column_by_name("s").unwrap().as_struct();
        let x2 = s.column_by_name("x2").unwrap().as_string::<i32>();
        let f = batch
            .column_by_name("f")
            .unwrap()
            .as_primitive::<arrow_array::types::Float64Type>();
        for i in 0..batch.num_rows() {
            let row = ids.value(i) - 1000;
            seen += 1;
            // Renamed: the values written under `a` and `s.x` are kept.
            assert_eq!(a2.value(i), row + 1000, "a2 of row {row}");
            let name = if row == 0 { "s.x" } else { "s.x2" };
            assert_eq!(x2.value(i), format!("{name}-{row}"), "s.x2 of row {row}");
            // Re-added under the old name with a new id: null for rows before it.
            if row < 3 {
                assert!(
                    x.is_null(i),
                    "row {row}: the dropped x came back: {}",
                    x.value(i)
                );
            } else {
                assert_eq!(x.value(i), format!("x-{row}"));
            }
            // Promoted float → double, exactly (x.5 is exact in binary).
            let want = if row < 2 {
                row as f64 + 0.5
            } else {
                row as f64 + 0.25
            };
            assert_eq!(f.value(i), want, "f of row {row}");
        }
    }
    assert_eq!(seen, 6);
}

/// A v2 table whose column carries an `initial-default` (accepted by older skade
/// versions, so tables holding one exist): files written before the column read the
/// default, before compaction and after it. Catches: compaction filling the column with
/// nulls, so the visible value changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_default_reads_the_same_after_compaction() {
    use PrimitiveType as P;
    let c = open_catalog();
    let catalog = c.catalog.clone();
    let ns = iceberg::NamespaceIdent::new("evo".into());
    catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    let v0 = vec![Arc::new(NestedField::required(1, "id", p(P::Long)))];
    let creation = iceberg::TableCreation::builder()
        .name("d".into())
        .schema(Schema::builder().with_fields(v0).build().unwrap())
        .build();
    catalog.create_table(&ns, creation).await.unwrap();
    // Six files before the column exists (one size tier, so they compact together).
    for row in 0..6 {
        append_row(&catalog, "d", row).await;
    }
    let with_default = vec![
        Arc::new(NestedField::required(1, "id", p(P::Long))),
        Arc::new(NestedField::optional(2, "w", p(P::Int)).with_initial_default(Literal::int(42))),
    ];
    evolve(&catalog, "d", with_default).await;
    append_row(&catalog, "d", 6).await;
    let before = read(&catalog, "d").await;
    let defaulted = before.iter().filter(|r| r.ends_with("|42")).count();
    assert_eq!(
        defaulted, 6,
        "the reader shows the default for old rows: {before:?}"
    );
    compact(&catalog, "d").await;
    assert_eq!(
        read(&catalog, "d").await,
        before,
        "rows changed by compaction"
    );
}
