//! The column-parallel encoder (`skade::write::parallel::encode_file`) against iceberg's
//! own `ParquetWriter`: same batches and properties → byte-identical Parquet files and
//! equal `DataFile` metrics (sizes, value/null/NaN counts, bounds, split offsets).
//!
//! Users rely on this: readers (pyiceberg, Spark) prune files by the bounds, and the
//! files must stay what iceberg itself would write. RED seen once: with
//! `data_file_from_footer` taking bounds without the `min_is_exact` check, the long
//! string column got a truncated upper bound iceberg does not write, and
//! `metrics_equal_iceberg_parquet_writer` failed on `upper_bounds`.

use std::sync::Arc;

use arrow_array::builder::{Float32Builder, Int32Builder, ListBuilder, MapBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
    Int32Array, Int64Array, RecordBatch, StringArray, StructArray, Time64MicrosecondArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema};
use bytes::Bytes;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, DataFileBuilder, Schema};
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder, ParquetWriterBuilder};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use skade::write::{conform_batch, iceberg_schema_for, parallel};

/// Every primitive type skade maps, plus a list, a struct and a map; floats with NaNs,
/// strings longer than Parquet's 64-byte statistics truncation, nulls everywhere allowed.
fn source_schema() -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(vec![
        Field::new("i", DataType::Int32, false),
        Field::new("l", DataType::Int64, true),
        Field::new("f", DataType::Float32, true),
        Field::new("d", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("long_s", DataType::Utf8, true),
        Field::new("bin", DataType::Binary, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("date", DataType::Date32, true),
        Field::new(
            "t",
            DataType::Time64(arrow_schema::TimeUnit::Microsecond),
            true,
        ),
        Field::new(
            "ts",
            DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None),
            true,
        ),
        Field::new(
            "tstz",
            DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("dec", DataType::Decimal128(10, 2), true),
        Field::new("wide_dec", DataType::Decimal128(38, 6), true),
        Field::new(
            "list",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ),
        Field::new(
            "st",
            DataType::Struct(Fields::from(vec![
                Field::new("x", DataType::Float32, true),
                Field::new("y", DataType::Utf8, true),
            ])),
            true,
        ),
        Field::new(
            "m",
            DataType::Map(
                Arc::new(Field::new(
                    "entries",
                    DataType::Struct(Fields::from(vec![
                        Field::new("keys", DataType::Utf8, false),
                        Field::new("values", DataType::Float32, true),
                    ])),
                    false,
                )),
                false,
            ),
            true,
        ),
    ]))
}

/// `v` unless row `i` is one of the null rows.
fn opt<T>(i: &i64, v: T) -> Option<T> {
    (i % 7 != 3).then_some(v)
}

fn source_batch(first: i64, rows: usize) -> RecordBatch {
    let ids: Vec<i64> = (first..first + rows as i64).collect();
    let null = |i: &i64| i % 7 == 3;
    let mut list = ListBuilder::new(Int32Builder::new());
    let mut map = MapBuilder::new(None, StringBuilder::new(), Float32Builder::new());
    for i in &ids {
        if null(i) {
            list.append_null();
            map.append(false).expect("map");
        } else {
            for k in 0..(i % 3) {
                list.values().append_value((i * 3 + k) as i32);
                map.keys().append_value(format!("k{k}"));
                map.values()
                    .append_option((k != 1).then_some(if i % 11 == 0 {
                        f32::NAN
                    } else {
                        k as f32
                    }));
            }
            list.append(true);
            map.append(true).expect("map");
        }
    }
    let st = StructArray::from(vec![
        (
            Arc::new(Field::new("x", DataType::Float32, true)),
            Arc::new(Float32Array::from(
                ids.iter()
                    .map(|i| opt(i, if i % 5 == 0 { f32::NAN } else { *i as f32 }))
                    .collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            Arc::new(Field::new("y", DataType::Utf8, true)),
            Arc::new(StringArray::from(
                ids.iter()
                    .map(|i| opt(i, format!("y{i}")))
                    .collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(
            ids.iter().map(|i| *i as i32).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            ids.iter()
                .map(|i| opt(i, i * 1000 - 500_000))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Float32Array::from(
            ids.iter()
                .map(|i| {
                    opt(
                        i,
                        if i % 13 == 0 {
                            f32::NAN
                        } else {
                            *i as f32 / 3.0
                        },
                    )
                })
                .collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            ids.iter()
                .map(|i| opt(i, if i % 17 == 0 { f64::NAN } else { -(*i as f64) }))
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            ids.iter()
                .map(|i| opt(i, format!("name-{}", i % 100)))
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            ids.iter()
                .map(|i| opt(i, format!("{}{i:08}", "z".repeat(80))))
                .collect::<Vec<_>>(),
        )),
        Arc::new(BinaryArray::from(
            ids.iter()
                .map(|i| (!null(i)).then(|| i.to_be_bytes().to_vec()))
                .collect::<Vec<_>>()
                .iter()
                .map(|v| v.as_deref())
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            ids.iter().map(|i| opt(i, i % 2 == 0)).collect::<Vec<_>>(),
        )),
        Arc::new(Date32Array::from(
            ids.iter()
                .map(|i| opt(i, 19_000 + (*i as i32 % 400)))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Time64MicrosecondArray::from(
            ids.iter()
                .map(|i| opt(i, (i % 86_400) * 1_000_000))
                .collect::<Vec<_>>(),
        )),
        Arc::new(TimestampMicrosecondArray::from(
            ids.iter()
                .map(|i| opt(i, 1_700_000_000_000_000 + i))
                .collect::<Vec<_>>(),
        )),
        Arc::new(
            TimestampMicrosecondArray::from(
                ids.iter()
                    .map(|i| opt(i, 1_600_000_000_000_000 - i))
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(
            Decimal128Array::from(
                ids.iter()
                    .map(|i| opt(i, (*i as i128) * 101 - 5000))
                    .collect::<Vec<_>>(),
            )
            .with_precision_and_scale(10, 2)
            .expect("decimal"),
        ),
        Arc::new(
            Decimal128Array::from(
                ids.iter()
                    .map(|i| opt(i, (*i as i128 - 300) * 10_i128.pow(30)))
                    .collect::<Vec<_>>(),
            )
            .with_precision_and_scale(38, 6)
            .expect("decimal"),
        ),
        Arc::new(list.finish()),
        Arc::new(st),
        Arc::new(map.finish()),
    ];
    RecordBatch::try_new(source_schema(), columns).expect("batch")
}

/// The table schema and `batches` conformed to it, as the write path hands them over.
fn conformed(sizes: &[usize]) -> (Arc<Schema>, Vec<RecordBatch>) {
    let schema = Arc::new(iceberg_schema_for("t", &source_schema()).expect("schema"));
    let arrow = Arc::new(schema_to_arrow_schema(&schema).expect("arrow"));
    let mut first = 0;
    let batches = sizes
        .iter()
        .map(|&rows| {
            let b = source_batch(first, rows);
            first += rows as i64;
            conform_batch("t", &b, &arrow).expect("conform")
        })
        .collect();
    (schema, batches)
}

/// iceberg's own ParquetWriter into an in-memory FileIO: the reference.
fn iceberg_reference(
    schema: &Arc<Schema>,
    props: &WriterProperties,
    batches: &[RecordBatch],
) -> (Bytes, DataFileBuilder) {
    futures::executor::block_on(async {
        let memory = FileIO::new_with_memory();
        let path = "memory:///reference.parquet";
        let mut writer = ParquetWriterBuilder::new(props.clone(), schema.clone())
            .build(memory.new_output(path).expect("output"))
            .await
            .expect("writer");
        for batch in batches {
            writer.write(batch).await.expect("write");
        }
        let mut builders = writer.close().await.expect("close");
        let bytes = memory
            .new_input(path)
            .expect("input")
            .read()
            .await
            .expect("read");
        (bytes, builders.pop().expect("one data file"))
    })
}

fn build(mut builder: DataFileBuilder) -> DataFile {
    builder
        .file_path("memory:///same.parquet".to_string())
        .partition_spec_id(0)
        .build()
        .expect("data file")
}

fn assert_same(props: WriterProperties, sizes: &[usize]) {
    let (schema, batches) = conformed(sizes);
    let (ours, our_file) = parallel::encode_file(&schema, &props, &batches)
        .expect("encode")
        .expect("rows");
    let (theirs, their_file) = iceberg_reference(&schema, &props, &batches);
    assert_eq!(ours.len(), theirs.len(), "file sizes differ");
    assert!(
        ours == theirs,
        "Parquet bytes differ from iceberg's ParquetWriter"
    );
    let (ours, theirs) = (build(our_file), build(their_file));
    assert_eq!(ours.record_count(), theirs.record_count());
    assert_eq!(ours.column_sizes(), theirs.column_sizes());
    assert_eq!(ours.value_counts(), theirs.value_counts());
    assert_eq!(ours.null_value_counts(), theirs.null_value_counts());
    assert_eq!(ours.nan_value_counts(), theirs.nan_value_counts());
    assert_eq!(ours.lower_bounds(), theirs.lower_bounds());
    assert_eq!(ours.upper_bounds(), theirs.upper_bounds());
    assert_eq!(ours.split_offsets(), theirs.split_offsets());
    assert_eq!(ours, theirs);
}

#[test]
fn metrics_equal_iceberg_parquet_writer() {
    // Small row groups so batches are sliced across row-group boundaries; page-level
    // statistics (parquet-rs's default).
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(1000))
        .build();
    assert_same(props, &[777, 1500, 1, 2222, 0, 500]);
}

#[test]
fn tuned_properties_match_too() {
    // Chunk statistics, zstd, delta encodings on the ints: skade's tuned layout.
    let props = WriterProperties::builder()
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .set_column_encoding("l".into(), parquet::basic::Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled("l".into(), false)
        .set_max_row_group_row_count(Some(4096))
        .build();
    assert_same(props, &[4096, 4096, 10_000, 3]);
}

#[test]
fn empty_input_has_no_file() {
    let (schema, batches) = conformed(&[0, 0]);
    let props = WriterProperties::builder().build();
    assert!(
        parallel::encode_file(&schema, &props, &batches)
            .expect("encode")
            .is_none()
    );
}
