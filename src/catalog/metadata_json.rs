//! The bytes of a table's metadata JSON, written without iceberg's whole-metadata clone.
//!
//! iceberg 0.10.1 serializes `TableMetadata` by cloning all of it — every snapshot with
//! its summary map, every schema with its indexes — into its private v1/v2/v3 forms, then
//! serializing that copy. A commit writes a new metadata JSON, so every commit pays for
//! that clone, in proportion to the snapshots the table keeps (its share of the CPU:
//! `docs/performance.md`, "Table age (`table_age` arm)"). For format v2 this module
//! serializes the same document from borrowed parts instead.
//!
//! One part is not reachable through iceberg's public API: the table's refs (branches
//! and tags with their retention). They are carried beside the metadata instead
//! ([`Refs`]): taken from the JSON when iceberg wrote it, then advanced by each commit's
//! updates as iceberg's `TableMetadataBuilder` applies them (`set_ref`, `remove_ref`,
//! and `remove_snapshots`, which drops every ref whose snapshot is gone). The result is
//! checked against the new metadata — every carried ref resolves to its snapshot and
//! `main` agrees with the current snapshot — and anything not modelled (another update
//! kind, a v1 or v3 table, a compressed metadata codec) falls back to iceberg's own
//! serializer. Debug builds (every test) compare each document written here, up to
//! 32 KiB, with iceberg's as JSON values ([`same_document`]).
//!
//! Field names and the fields omitted when empty are those of iceberg's
//! `TableMetadataV2` (Iceberg table spec, "Table Metadata Fields"); snapshots are written
//! oldest first, as Java writes them.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::compression::CompressionCodec;
use iceberg::spec::PartitionStatisticsFile;
use iceberg::spec::{
    FormatVersion, MAIN_BRANCH, MetadataLog, PartitionSpec, Schema, Snapshot, SnapshotLog,
    SnapshotReference, SortOrder, StatisticsFile, Summary, TableMetadata,
};
use iceberg::{Error, ErrorKind, Result, TableUpdate};
use serde::{Deserialize, Serialize};

/// A table's refs by name: what its metadata JSON's `refs` object holds.
pub(crate) type Refs = HashMap<String, SnapshotReference>;

/// What is carried beside a metadata version this process wrote: its refs, and the JSON
/// of each of its snapshots with the snapshot it was made from. The next version is
/// built from a clone of this one, which shares the snapshots' `Arc`s, so a snapshot's
/// JSON is reused only for that very `Arc` (an id removed and added again in one commit
/// is a new snapshot, serialized afresh).
#[derive(Debug, Default)]
pub(crate) struct Written {
    pub(crate) refs: Refs,
    snapshots: HashMap<i64, (Arc<Snapshot>, Arc<str>)>,
}

impl Written {
    /// Refs alone, with no snapshot JSON to reuse (a version iceberg wrote).
    pub(crate) fn of_refs(refs: Refs) -> Self {
        Written {
            refs,
            snapshots: HashMap::new(),
        }
    }
}

/// The refs of the metadata built from a base with refs `base` by applying `updates`,
/// or `None` when an update might change refs in a way not modelled here:
/// [`advance_refs`], then [`consistent`] with `built`.
pub(crate) fn refs_after(
    base: &Refs,
    updates: &[TableUpdate],
    built: &TableMetadata,
) -> Option<Refs> {
    advance_refs(base, updates).filter(|refs| consistent(refs, built))
}

/// `base` advanced by `updates` as iceberg's builder applies them, before the result is
/// built (so the updates can then be consumed by the builder); `None` for an update
/// kind not modelled. Check the result against the built metadata with [`consistent`].
pub(crate) fn advance_refs(base: &Refs, updates: &[TableUpdate]) -> Option<Refs> {
    let mut refs = base.clone();
    for update in updates {
        match update {
            TableUpdate::SetSnapshotRef {
                ref_name,
                reference,
            } => {
                refs.insert(ref_name.clone(), reference.clone());
            }
            TableUpdate::RemoveSnapshotRef { ref_name } => {
                refs.remove(ref_name);
            }
            // As the builder's `remove_snapshots`: a ref whose snapshot it removes goes
            // (its snapshot may be added again later in the same commit; the ref is not).
            TableUpdate::RemoveSnapshots { snapshot_ids } => {
                refs.retain(|_, r| !snapshot_ids.contains(&r.snapshot_id));
            }
            TableUpdate::AddSnapshot { .. }
            | TableUpdate::SetProperties { .. }
            | TableUpdate::RemoveProperties { .. }
            | TableUpdate::AddSchema { .. }
            | TableUpdate::SetCurrentSchema { .. }
            | TableUpdate::AddSpec { .. }
            | TableUpdate::SetDefaultSpec { .. }
            | TableUpdate::AddSortOrder { .. }
            | TableUpdate::SetDefaultSortOrder { .. }
            | TableUpdate::SetStatistics { .. }
            | TableUpdate::RemoveStatistics { .. } => {}
            _ => return None,
        }
    }
    Some(refs)
}

/// Whether `refs` can be `metadata`'s: each resolves to its snapshot, and `main` names
/// the current snapshot (or is absent exactly when there is none). A ref the metadata
/// has beyond `refs` cannot be seen here (iceberg does not expose them): that none
/// exists rests on [`advance_refs`] modelling every update that changes refs in iceberg
/// 0.10.1's builder (`set_ref`, `remove_ref`, `remove_snapshots`, and `build`'s
/// `construct_refs`, which this check catches).
pub(crate) fn consistent(refs: &Refs, metadata: &TableMetadata) -> bool {
    let resolved = refs.iter().all(|(name, r)| {
        metadata
            .snapshot_for_ref(name)
            .is_some_and(|s| s.snapshot_id() == r.snapshot_id)
    });
    resolved && refs.get(MAIN_BRANCH).map(|r| r.snapshot_id) == metadata.current_snapshot_id()
}

/// The metadata JSON of `metadata` with `refs`, and what to carry beside it; `None`
/// when this module does not write it (not format v2, or a metadata compression codec
/// is set): the caller then uses iceberg's writer. The JSON of snapshots `previous` (the
/// base version's carried state) already holds is reused, not serialized again.
///
/// # Errors
/// `DataInvalid` for table properties that do not parse (an unknown codec), or
/// serde_json's error.
pub(crate) fn v2_bytes(
    metadata: &TableMetadata,
    refs: Refs,
    previous: Option<&Written>,
) -> Result<Option<(Vec<u8>, Written)>> {
    if metadata.format_version() != FormatVersion::V2
        || metadata.metadata_compression_codec()? != CompressionCodec::None
    {
        return Ok(None);
    }
    let mut snapshots: Vec<&Arc<Snapshot>> = metadata.snapshots().collect();
    snapshots.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms(), s.snapshot_id()));
    let mut written = Written {
        refs,
        snapshots: HashMap::with_capacity(snapshots.len()),
    };
    let mut ordered = Vec::with_capacity(snapshots.len());
    for snapshot in snapshots {
        let id = snapshot.snapshot_id();
        let reused = previous
            .and_then(|p| p.snapshots.get(&id))
            .filter(|(was, _)| Arc::ptr_eq(was, snapshot))
            .map(|(_, json)| json.clone());
        let json = match reused {
            Some(json) => json,
            None => Arc::from(serde_json::to_string(&SnapshotV2::of(snapshot))?),
        };
        ordered.push(json.clone());
        written.snapshots.insert(id, (snapshot.clone(), json));
    }
    let document = MetadataV2 {
        format_version: 2,
        table_uuid: metadata.uuid(),
        location: metadata.location(),
        last_sequence_number: metadata.last_sequence_number(),
        last_updated_ms: metadata.last_updated_ms(),
        last_column_id: metadata.last_column_id(),
        schemas: sorted_by(metadata.schemas_iter().map(|s| s.as_ref()), |s| {
            i64::from(s.schema_id())
        }),
        current_schema_id: metadata.current_schema_id(),
        partition_specs: sorted_by(metadata.partition_specs_iter().map(|s| s.as_ref()), |s| {
            i64::from(s.spec_id())
        }),
        default_spec_id: metadata.default_partition_spec_id(),
        last_partition_id: metadata.last_partition_id(),
        properties: Some(metadata.properties()).filter(|p| !p.is_empty()),
        current_snapshot_id: metadata.current_snapshot_id(),
        snapshot_log: Some(metadata.history()).filter(|l| !l.is_empty()),
        metadata_log: Some(metadata.metadata_log()).filter(|l| !l.is_empty()),
        sort_orders: sorted_by(metadata.sort_orders_iter().map(|s| s.as_ref()), |s| {
            s.order_id
        }),
        default_sort_order_id: metadata.default_sort_order_id(),
        refs: &written.refs,
        statistics: sorted_by(metadata.statistics_iter(), |s| s.snapshot_id),
        partition_statistics: sorted_by(metadata.partition_statistics_iter(), |s| s.snapshot_id),
    };
    let mut bytes = serde_json::to_vec(&document)?;
    // `snapshots` is the document's last member (as in iceberg's v2 form): spliced in
    // from the snapshots' own JSON, omitted when there are none.
    if !ordered.is_empty() && bytes.pop() == Some(b'}') {
        bytes.extend_from_slice(br#","snapshots":["#);
        for (i, json) in ordered.iter().enumerate() {
            if i > 0 {
                bytes.push(b',');
            }
            bytes.extend_from_slice(json.as_bytes());
        }
        bytes.extend_from_slice(b"]}");
    }
    Ok(Some((bytes, written)))
}

/// The refs in a metadata JSON document (`{}` when it has none).
///
/// # Errors
/// `DataInvalid` when `json` is not a metadata document.
pub(crate) fn refs_of(json: &[u8]) -> Result<Refs> {
    #[derive(Deserialize)]
    struct OnlyRefs {
        #[serde(default)]
        refs: Option<Refs>,
    }
    let parsed: OnlyRefs = serde_json::from_slice(json).map_err(|e| {
        Error::new(
            ErrorKind::DataInvalid,
            "metadata JSON without a readable refs object",
        )
        .with_source(e)
    })?;
    Ok(parsed.refs.unwrap_or_default())
}

/// Whether `ours` is the document iceberg writes for `metadata`: equal as JSON values,
/// with the arrays iceberg writes in hash-map order sorted by their ids.
pub(crate) fn same_document(ours: &[u8], metadata: &TableMetadata) -> bool {
    use serde_json::Value;
    fn normalized(mut document: Value) -> Value {
        for (array, id) in [
            ("schemas", "schema-id"),
            ("partition-specs", "spec-id"),
            ("sort-orders", "order-id"),
            ("snapshots", "snapshot-id"),
            ("statistics", "snapshot-id"),
            ("partition-statistics", "snapshot-id"),
        ] {
            if let Some(Value::Array(items)) = document.get_mut(array) {
                items.sort_by_key(|item| item.get(id).and_then(Value::as_i64));
            }
        }
        document
    }
    match (serde_json::from_slice(ours), serde_json::to_value(metadata)) {
        (Ok(ours), Ok(theirs)) => normalized(ours) == normalized(theirs),
        _ => false,
    }
}

fn sorted_by<'a, T: 'a>(items: impl Iterator<Item = &'a T>, key: impl Fn(&T) -> i64) -> Vec<&'a T> {
    let mut items: Vec<&T> = items.collect();
    items.sort_by_key(|item| key(item));
    items
}

/// iceberg's `TableMetadataV2` over borrowed parts, fields in the same order, but for
/// `snapshots` ([`v2_bytes`] appends it).
#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct MetadataV2<'a> {
    format_version: u8,
    table_uuid: uuid::Uuid,
    location: &'a str,
    last_sequence_number: i64,
    last_updated_ms: i64,
    last_column_id: i32,
    schemas: Vec<&'a Schema>,
    current_schema_id: i32,
    partition_specs: Vec<&'a PartitionSpec>,
    default_spec_id: i32,
    last_partition_id: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<&'a HashMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_snapshot_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_log: Option<&'a [SnapshotLog]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata_log: Option<&'a [MetadataLog]>,
    sort_orders: Vec<&'a SortOrder>,
    default_sort_order_id: i64,
    refs: &'a Refs,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statistics: Vec<&'a StatisticsFile>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    partition_statistics: Vec<&'a PartitionStatisticsFile>,
    // `snapshots` follows, spliced in by `v2_bytes`.
}

/// iceberg's `SnapshotV2` over a borrowed snapshot.
#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct SnapshotV2<'a> {
    snapshot_id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_snapshot_id: Option<i64>,
    sequence_number: i64,
    timestamp_ms: i64,
    manifest_list: &'a str,
    summary: &'a Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema_id: Option<i32>,
}

impl<'a> SnapshotV2<'a> {
    fn of(snapshot: &'a Snapshot) -> Self {
        SnapshotV2 {
            snapshot_id: snapshot.snapshot_id(),
            parent_snapshot_id: snapshot.parent_snapshot_id(),
            sequence_number: snapshot.sequence_number(),
            timestamp_ms: snapshot.timestamp_ms(),
            manifest_list: snapshot.manifest_list(),
            summary: snapshot.summary(),
            schema_id: snapshot.schema_id(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use iceberg::spec::{
        FormatVersion, NestedField, Operation, PrimitiveType, Schema, Snapshot, SnapshotReference,
        SnapshotRetention, SortOrder, StatisticsFile, Summary, TableMetadata, TableMetadataBuilder,
        Transform, Type, UnboundPartitionSpec,
    };
    use iceberg::{TableCreation, TableUpdate};

    use super::*;

    fn schema(id: i32, extra: bool) -> Schema {
        let mut fields = vec![
            Arc::new(NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            )),
            Arc::new(NestedField::optional(
                2,
                "v",
                Type::Primitive(PrimitiveType::String),
            )),
        ];
        if extra {
            fields.push(Arc::new(NestedField::optional(
                3,
                "w",
                Type::Primitive(PrimitiveType::Double),
            )));
        }
        Schema::builder()
            .with_schema_id(id)
            .with_identifier_field_ids([1])
            .with_fields(fields)
            .build()
            .expect("schema")
    }

    fn snapshot(id: i64, parent: Option<i64>, sequence: i64) -> Snapshot {
        Snapshot::builder()
            .with_snapshot_id(id)
            .with_parent_snapshot_id(parent)
            .with_sequence_number(sequence)
            .with_timestamp_ms(now_ms() + sequence)
            .with_manifest_list(format!("/w/t/metadata/snap-{id}-{sequence}.avro"))
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: HashMap::from([
                    ("added-records".to_string(), "10".to_string()),
                    ("note \"quoted\"".to_string(), "ü\n".to_string()),
                ]),
            })
            .with_schema_id(0)
            .build()
    }

    fn now_ms() -> i64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock");
        i64::try_from(since.as_millis()).expect("ms") + 1_000
    }

    fn branch(snapshot_id: i64) -> SnapshotReference {
        SnapshotReference::new(
            snapshot_id,
            SnapshotRetention::Branch {
                min_snapshots_to_keep: None,
                max_snapshot_age_ms: None,
                max_ref_age_ms: None,
            },
        )
    }

    fn created() -> TableMetadata {
        created_as(FormatVersion::V2)
    }

    fn created_as(version: FormatVersion) -> TableMetadata {
        let creation = TableCreation::builder()
            .format_version(version)
            .name("t".to_string())
            .location("/w/t".to_string())
            .schema(schema(0, false))
            .properties(HashMap::from([("p".to_string(), "1".to_string())]))
            .build();
        TableMetadataBuilder::from_table_creation(creation)
            .expect("builder")
            .build()
            .expect("build")
            .metadata
    }

    /// Asserts that `ours` is the document iceberg writes for `built`.
    fn assert_icebergs(ours: &[u8], built: &TableMetadata) {
        assert!(
            same_document(ours, built),
            "{}",
            String::from_utf8_lossy(ours)
        );
    }

    /// Applies `updates` as the catalog does, and checks the refs carried and the
    /// document written against iceberg's own serializer.
    fn step(
        base: &TableMetadata,
        carried: &Written,
        updates: Vec<TableUpdate>,
    ) -> (TableMetadata, Written) {
        let mut builder = base
            .clone()
            .into_builder(Some("/w/t/metadata/0.json".to_string()));
        for update in updates.iter().cloned() {
            builder = update.apply(builder).expect("apply");
        }
        let built = builder.build().expect("build").metadata;
        let refs = refs_after(&carried.refs, &updates, &built).expect("refs modelled");
        let theirs = serde_json::to_vec(&built).expect("iceberg json");
        assert_eq!(refs, refs_of(&theirs).expect("refs"), "carried refs");
        // The base's snapshot JSON is reused here, as a commit reuses it.
        let (ours, written) = v2_bytes(&built, refs, Some(carried))
            .expect("ours")
            .expect("v2");
        assert_icebergs(&ours, &built);
        let read: TableMetadata = serde_json::from_slice(&ours).expect("iceberg reads ours");
        assert_eq!(read, built, "iceberg reads back the same metadata");
        (built, written)
    }

    /// Catches: a metadata JSON field written differently from iceberg (names, omitted
    /// empties, refs with retention, statistics, several schemas/specs/sort orders), and
    /// a retained snapshot's JSON serialized again instead of reused.
    #[test]
    fn documents_equal_icebergs_through_a_tables_life() {
        let base = created();
        let refs = Written::default();
        assert!(same_document(
            &v2_bytes(&base, Refs::new(), None).unwrap().unwrap().0,
            &base
        ));
        let (m, refs) = step(
            &base,
            &refs,
            vec![
                TableUpdate::AddSnapshot {
                    snapshot: snapshot(11, None, 1),
                },
                TableUpdate::SetSnapshotRef {
                    ref_name: MAIN_BRANCH.to_string(),
                    reference: branch(11),
                },
            ],
        );
        let first_json = refs.snapshots[&11].1.clone();
        let (m, refs) = step(
            &m,
            &refs,
            vec![
                TableUpdate::AddSnapshot {
                    snapshot: snapshot(12, Some(11), 2),
                },
                TableUpdate::SetSnapshotRef {
                    ref_name: MAIN_BRANCH.to_string(),
                    reference: branch(12),
                },
                TableUpdate::SetSnapshotRef {
                    ref_name: "audit".to_string(),
                    reference: SnapshotReference::new(
                        11,
                        SnapshotRetention::Branch {
                            min_snapshots_to_keep: Some(3),
                            max_snapshot_age_ms: Some(60_000),
                            max_ref_age_ms: Some(86_400_000),
                        },
                    ),
                },
                TableUpdate::SetSnapshotRef {
                    ref_name: "v1".to_string(),
                    reference: SnapshotReference::new(
                        11,
                        SnapshotRetention::Tag {
                            max_ref_age_ms: Some(1),
                        },
                    ),
                },
                TableUpdate::SetProperties {
                    updates: HashMap::from([(
                        "write.metadata.previous-versions-max".to_string(),
                        "5".to_string(),
                    )]),
                },
            ],
        );
        // Snapshot 11's JSON was reused, not serialized again.
        assert!(Arc::ptr_eq(&first_json, &refs.snapshots[&11].1));
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(1, "id_bucket", Transform::Bucket(8))
            .expect("field")
            .build();
        let order = SortOrder::builder()
            .with_order_id(1)
            .with_sort_field(
                iceberg::spec::SortField::builder()
                    .source_id(2)
                    .transform(Transform::Identity)
                    .direction(iceberg::spec::SortDirection::Ascending)
                    .null_order(iceberg::spec::NullOrder::First)
                    .build(),
            )
            .build_unbound()
            .expect("order");
        let (m, refs) = step(
            &m,
            &refs,
            vec![
                TableUpdate::AddSchema {
                    schema: schema(1, true),
                },
                TableUpdate::SetCurrentSchema { schema_id: -1 },
                TableUpdate::AddSpec { spec },
                TableUpdate::SetDefaultSpec { spec_id: -1 },
                TableUpdate::AddSortOrder { sort_order: order },
                TableUpdate::SetDefaultSortOrder { sort_order_id: -1 },
                TableUpdate::SetStatistics {
                    statistics: StatisticsFile {
                        snapshot_id: 12,
                        statistics_path: "/w/t/metadata/12.stats".to_string(),
                        file_size_in_bytes: 100,
                        file_footer_size_in_bytes: 10,
                        key_metadata: None,
                        blob_metadata: Vec::new(),
                    },
                },
            ],
        );
        // Expiring the tagged snapshot drops the tag and the branch on it, as iceberg does.
        let (m, refs) = step(
            &m,
            &refs,
            vec![
                TableUpdate::RemoveSnapshotRef {
                    ref_name: "audit".to_string(),
                },
                TableUpdate::RemoveSnapshots {
                    snapshot_ids: vec![11],
                },
            ],
        );
        assert_eq!(refs.refs.keys().collect::<Vec<_>>(), vec![MAIN_BRANCH]);
        let _ = step(
            &m,
            &refs,
            vec![TableUpdate::RemoveProperties {
                removals: vec!["p".to_string()],
            }],
        );
    }

    /// Catches: a snapshot id removed and added again in one commit written with the old
    /// snapshot's JSON, or with the old `main` (iceberg rebuilds `main` with default
    /// retention then).
    #[test]
    fn a_snapshot_id_removed_and_added_again_is_written_afresh() {
        let retained = SnapshotReference::new(
            11,
            SnapshotRetention::Branch {
                min_snapshots_to_keep: Some(7),
                max_snapshot_age_ms: None,
                max_ref_age_ms: None,
            },
        );
        let (m, carried) = step(
            &created(),
            &Written::default(),
            vec![
                TableUpdate::AddSnapshot {
                    snapshot: snapshot(11, None, 1),
                },
                TableUpdate::SetSnapshotRef {
                    ref_name: MAIN_BRANCH.to_string(),
                    reference: retained,
                },
            ],
        );
        // The same id, another manifest list.
        let updates = vec![
            TableUpdate::RemoveSnapshots {
                snapshot_ids: vec![11],
            },
            TableUpdate::AddSnapshot {
                snapshot: snapshot(11, None, 2),
            },
        ];
        let mut builder = m.clone().into_builder(None);
        for update in updates.iter().cloned() {
            builder = update.apply(builder).expect("apply");
        }
        let built = builder.build().expect("build").metadata;
        let theirs = refs_of(&serde_json::to_vec(&built).expect("json")).expect("refs");
        // The refs are not carried through (iceberg's writer takes over) ...
        assert_eq!(refs_after(&carried.refs, &updates, &built), None);
        // ... and even with the right refs, the old snapshot's JSON is not reused.
        let (ours, _) = v2_bytes(&built, theirs, Some(&carried))
            .expect("ours")
            .expect("v2");
        assert_icebergs(&ours, &built);
    }

    /// Catches: carrying refs through an update whose effect on refs is not modelled.
    #[test]
    fn an_update_not_modelled_falls_back() {
        let base = created();
        let updates = vec![TableUpdate::SetLocation {
            location: "/w/u".to_string(),
        }];
        let mut builder = base.clone().into_builder(None);
        for update in updates.iter().cloned() {
            builder = update.apply(builder).expect("apply");
        }
        let built = builder.build().expect("build").metadata;
        assert!(refs_after(&Refs::new(), &updates, &built).is_none());
    }

    /// Catches: refs that do not match the metadata (a stale carried map) being written.
    #[test]
    fn refs_that_do_not_resolve_are_refused() {
        let base = created();
        let stale = Refs::from([(MAIN_BRANCH.to_string(), branch(99))]);
        assert!(refs_after(&stale, &[], &base).is_none());
    }

    /// Catches: writing a v1 table (or a compressed codec) in the v2 form.
    #[test]
    fn other_format_versions_and_codecs_are_left_to_iceberg() {
        for version in [FormatVersion::V1, FormatVersion::V3] {
            let other = created_as(version);
            assert!(
                v2_bytes(&other, Refs::new(), None)
                    .expect("parses")
                    .is_none()
            );
        }
        let gz = created()
            .into_builder(None)
            .set_properties(HashMap::from([(
                "write.metadata.compression-codec".to_string(),
                "gzip".to_string(),
            )]))
            .expect("set")
            .build()
            .expect("build")
            .metadata;
        assert!(v2_bytes(&gz, Refs::new(), None).expect("parses").is_none());
    }
}
