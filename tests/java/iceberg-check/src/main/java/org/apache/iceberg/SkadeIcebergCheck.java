package org.apache.iceberg;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.puffin.BlobMetadata;
import org.apache.iceberg.puffin.Puffin;
import org.apache.iceberg.puffin.PuffinReader;
import org.apache.iceberg.transforms.Transform;
import org.apache.iceberg.types.Comparators;
import org.apache.iceberg.types.Conversions;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.TypeUtil;
import org.apache.iceberg.types.Types;

/**
 * Iceberg Java (iceberg-core) as a second implementation of what skade writes: every
 * {@code *.metadata.json} under the directories given is parsed with {@link
 * TableMetadataParser}, every manifest list and manifest it references with Iceberg's own
 * readers ({@link Snapshot#allManifests}, {@link ManifestFiles}), every Puffin file with
 * {@link Puffin}, and checked against the spec beyond what the parsers enforce: schema and
 * field ids, partition specs, sequence numbers, row lineage (v3), manifest counts and
 * partition summaries, and each data file's partition tuple against its column bounds
 * (through Iceberg's own transforms).
 *
 * <pre>
 * java -cp ... org.apache.iceberg.SkadeIcebergCheck [--map PREFIX=DIR]... DIR...
 * </pre>
 *
 * {@code --map s3://bucket/=/tmp/mirror/} reads paths starting with PREFIX from DIR (a
 * local copy of an object store). Prints one {@code FAIL path: reason} line per problem in
 * a file skade wrote and one {@code FOREIGN path: reason} line per problem in a manifest
 * or manifest list another writer made ({@link #writtenBySkade}), then one summary line,
 * {@code summary {json}}; exits 1 when a file skade wrote failed.
 *
 * <p>It lives in package {@code org.apache.iceberg} to read manifest entries with their
 * status and sequence numbers ({@code ManifestReader.entries()} is package-private).
 */
public final class SkadeIcebergCheck {
  /** The reserved columns of a position delete file ({@code file_path}, {@code pos}, {@code row}). */
  private static final Set<Integer> DELETE_FILE_IDS =
      Set.of(
          MetadataColumns.DELETE_FILE_PATH.fieldId(),
          MetadataColumns.DELETE_FILE_POS.fieldId(),
          MetadataColumns.DELETE_FILE_ROW_FIELD_ID);

  private final FileIO io;
  private final List<String> failures = new ArrayList<>();
  private final List<String> foreign = new ArrayList<>();
  private final Set<String> checkedLists = new HashSet<>();
  private final Set<String> checkedManifests = new HashSet<>();
  private final Set<String> checkedPuffins = new HashSet<>();
  private final Map<String, Integer> counts = new TreeMap<>();
  private final Set<String> transforms = new TreeSet<>();
  private final Set<Integer> formatVersions = new TreeSet<>();
  private final Set<String> tables = new TreeSet<>();

  private SkadeIcebergCheck(FileIO io) {
    this.io = io;
  }

  public static void main(String[] args) throws IOException {
    Map<String, String> prefixes = new LinkedHashMap<>();
    List<Path> roots = new ArrayList<>();
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--map")) {
        String[] kv = args[++i].split("=", 2);
        prefixes.put(kv[0], kv[1]);
      } else {
        roots.add(Paths.get(args[i]));
      }
    }
    SkadeIcebergCheck check = new SkadeIcebergCheck(new LocalIO(prefixes));
    for (Path root : roots) {
      List<Path> found;
      try (Stream<Path> walk = Files.walk(root)) {
        found =
            walk.filter(p -> p.getFileName().toString().endsWith(".metadata.json"))
                .filter(Files::isRegularFile)
                .sorted()
                .toList();
      }
      // A table's newest metadata JSON (the highest version number in its directory) is
      // the current one, or an orphan of a commit that lost; an older one may name
      // snapshots expired since, whose manifest lists and manifests cleanup has removed.
      Map<Path, Path> newest = new HashMap<>();
      for (Path metadata : found) {
        newest.merge(metadata.getParent(), metadata, (a, b) -> version(a) >= version(b) ? a : b);
      }
      for (Path metadata : found) {
        check.metadataJson(metadata.toString(), !newest.get(metadata.getParent()).equals(metadata));
      }
    }
    check.failures.forEach(f -> System.out.println("FAIL " + f));
    check.foreign.forEach(f -> System.out.println("FOREIGN " + f));
    System.out.println("summary " + check.summary());
    System.exit(check.failures.isEmpty() ? 0 : 1);
  }

  /** The version number a metadata JSON's name starts with ({@code 00012-<uuid>...}), or -1. */
  private static long version(Path metadata) {
    String name = metadata.getFileName().toString();
    int dash = name.indexOf('-');
    try {
      return dash > 0 ? Long.parseLong(name.substring(0, dash)) : -1;
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  /**
   * Whether {@code path} (a manifest list or manifest) can be read. A missing file fails
   * the check unless the metadata JSON naming it is an older version of its table's
   * ({@code historical}): its snapshot may have been expired and its files removed since.
   */
  private boolean present(String path, boolean historical, String namedBy) {
    if (io.newInputFile(path).exists()) {
      return true;
    }
    if (historical) {
      count("missing_files_of_older_metadata");
    } else {
      fail(namedBy, "names " + path + ", which does not exist");
    }
    return false;
  }

  private String summary() {
    StringBuilder out = new StringBuilder("{");
    counts.forEach((k, v) -> out.append('"').append(k).append("\": ").append(v).append(", "));
    out.append("\"failures\": ").append(failures.size()).append(", ");
    out.append("\"foreign_failures\": ").append(foreign.size()).append(", ");
    out.append("\"tables\": ").append(tables.size()).append(", ");
    out.append("\"format_versions\": ").append(formatVersions).append(", ");
    out.append("\"transforms\": [");
    out.append(String.join(", ", transforms.stream().map(t -> '"' + t + '"').toList()));
    return out.append("]}").toString();
  }

  private void count(String what) {
    counts.merge(what, 1, Integer::sum);
  }

  private void fail(String path, String message) {
    if (writtenBySkade(path)) {
      failures.add(path + ": " + message);
    } else {
      foreign.add(path + ": " + message);
    }
  }

  /**
   * Whether skade wrote {@code path}: every metadata JSON counts as skade's, a manifest
   * list or manifest only when its name carries a version 7 UUID, as skade names them
   * ({@code <uuid-v7>-m0.avro}, {@code snap-<id>-<n>-<uuid-v7>.avro}). The suite's other
   * writers (pyiceberg's {@code SqlCatalog}, tests/interop/foreign_writer.py) name theirs
   * with version 4 UUIDs; their problems are reported apart, as {@code FOREIGN} lines.
   */
  static boolean writtenBySkade(String path) {
    String name = path.substring(path.lastIndexOf('/') + 1);
    if (!name.endsWith(".avro")) {
      return true;
    }
    java.util.regex.Matcher uuid =
        java.util.regex.Pattern.compile("[0-9a-f]{8}-[0-9a-f]{4}-([0-9a-f])[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}").matcher(name);
    return uuid.find() && uuid.group(1).equals("7");
  }

  private void require(boolean ok, String path, String message) {
    if (!ok) {
      fail(path, message);
    }
  }

  // ------------------------------------------------------------------ metadata JSON

  private void metadataJson(String path, boolean historical) {
    TableMetadata metadata;
    try {
      metadata = TableMetadataParser.read(io, path);
    } catch (RuntimeException e) {
      fail(path, "TableMetadataParser rejects it: " + e);
      return;
    }
    count("metadata_json");
    tables.add(metadata.location());
    formatVersions.add(metadata.formatVersion());
    try {
      checkMetadata(path, metadata, historical);
    } catch (RuntimeException e) {
      fail(path, "checking it threw " + e);
    }
  }

  private void checkMetadata(String path, TableMetadata metadata, boolean historical) {
    // Schemas: unique field ids, none above last-column-id.
    for (Schema schema : metadata.schemas()) {
      List<Integer> ids = TypeUtil.indexById(schema.asStruct()).keySet().stream().toList();
      require(
          ids.size() == new HashSet<>(ids).size(), path, "schema " + schema.schemaId() + ": duplicate field ids");
      for (int id : ids) {
        require(
            id <= metadata.lastColumnId(),
            path,
            "schema " + schema.schemaId() + ": field id " + id + " > last-column-id " + metadata.lastColumnId());
      }
    }
    require(metadata.schemasById().containsKey(metadata.currentSchemaId()), path, "no current schema");

    // Partition specs: partition field ids within last-partition-id, transforms that
    // apply to their source's type.
    Schema current = metadata.schema();
    for (PartitionSpec spec : metadata.specs()) {
      for (PartitionField field : spec.fields()) {
        transforms.add(field.transform().toString().replaceAll("\\[\\d+]", ""));
        require(
            spec.isUnpartitioned() || field.fieldId() <= metadata.lastAssignedPartitionId(),
            path,
            "spec " + spec.specId() + ": partition field id " + field.fieldId() + " > last-partition-id");
        Types.NestedField source = current.findField(field.sourceId());
        if (source != null && spec.specId() == metadata.defaultSpecId()) {
          require(
              field.transform().canTransform(source.type()),
              path,
              "spec " + spec.specId() + ": " + field.transform() + " cannot apply to " + source.type());
        }
      }
    }

    // Snapshots: sequence numbers, parents, schema ids, row lineage (v3).
    Map<Long, Snapshot> byId = new HashMap<>();
    metadata.snapshots().forEach(s -> byId.put(s.snapshotId(), s));
    for (Snapshot snapshot : metadata.snapshots()) {
      String what = "snapshot " + snapshot.snapshotId();
      require(
          snapshot.sequenceNumber() <= metadata.lastSequenceNumber(),
          path,
          what + ": sequence number " + snapshot.sequenceNumber() + " > last-sequence-number");
      Snapshot parent = snapshot.parentId() == null ? null : byId.get(snapshot.parentId());
      if (parent != null && metadata.formatVersion() >= 2) {
        require(
            parent.sequenceNumber() < snapshot.sequenceNumber(),
            path,
            what + ": sequence number not above its parent's");
      }
      if (snapshot.schemaId() != null) {
        require(
            metadata.schemasById().containsKey(snapshot.schemaId()),
            path,
            what + ": unknown schema id " + snapshot.schemaId());
      }
      if (metadata.formatVersion() >= 3) {
        require(snapshot.firstRowId() != null, path, what + ": no first-row-id on a v3 table");
        require(snapshot.addedRows() != null, path, what + ": no added-rows on a v3 table");
        if (snapshot.firstRowId() != null && snapshot.addedRows() != null) {
          require(
              snapshot.firstRowId() + snapshot.addedRows() <= metadata.nextRowId(),
              path,
              what + ": first-row-id + added-rows > next-row-id " + metadata.nextRowId());
        }
      }
      manifestList(path, metadata, snapshot, historical);
    }
    if (metadata.currentSnapshot() != null) {
      require(
          metadata.currentSnapshot().sequenceNumber() == metadata.lastSequenceNumber()
              || metadata.formatVersion() == 1,
          path,
          "current snapshot's sequence number is not last-sequence-number");
    }

    for (StatisticsFile statistics : metadata.statisticsFiles()) {
      puffin(statistics.path(), statistics.fileSizeInBytes());
    }
  }

  // ------------------------------------------------------------------ manifest lists

  private void manifestList(String metadataPath, TableMetadata metadata, Snapshot snapshot, boolean historical) {
    String list = snapshot.manifestListLocation();
    if (list == null || checkedLists.contains(list) || !present(list, historical, metadataPath)) {
      return;
    }
    checkedLists.add(list);
    List<ManifestFile> manifests;
    try {
      manifests = snapshot.allManifests(io);
    } catch (RuntimeException e) {
      fail(list, "the manifest list does not parse: " + e);
      return;
    }
    count("manifest_list");
    long addedByManifests = 0;
    for (ManifestFile manifest : manifests) {
      String what = "manifest " + manifest.path();
      require(
          metadata.specsById().containsKey(manifest.partitionSpecId()),
          list,
          what + ": unknown partition spec id " + manifest.partitionSpecId());
      if (metadata.formatVersion() >= 2) {
        require(
            manifest.sequenceNumber() <= snapshot.sequenceNumber(),
            list,
            what + ": sequence number " + manifest.sequenceNumber() + " above the snapshot's "
                + snapshot.sequenceNumber());
        require(
            manifest.minSequenceNumber() <= manifest.sequenceNumber(),
            list,
            what + ": min-sequence-number above sequence-number");
        if (Long.valueOf(snapshot.snapshotId()).equals(manifest.snapshotId())) {
          require(
              manifest.sequenceNumber() == snapshot.sequenceNumber(),
              list,
              what + ": added by this snapshot, but its sequence number is not the snapshot's");
        }
      }
      if (metadata.formatVersion() >= 3 && manifest.content() == ManifestContent.DATA) {
        require(manifest.firstRowId() != null, list, what + ": a v3 data manifest without first_row_id");
      }
      // Row ids go to the rows of data manifests only (spec "Row Lineage"; Java's
      // ManifestListWriter.V3Writer): a delete manifest's added rows are deletes.
      if (Long.valueOf(snapshot.snapshotId()).equals(manifest.snapshotId())
          && manifest.content() == ManifestContent.DATA
          && manifest.addedRowsCount() != null) {
        addedByManifests += manifest.addedRowsCount();
      }
      if (!checkedManifests.contains(manifest.path()) && present(manifest.path(), historical, list)) {
        checkedManifests.add(manifest.path());
        manifest(metadata, list, manifest);
      }
    }
    if (metadata.formatVersion() >= 3 && snapshot.addedRows() != null) {
      require(
          snapshot.addedRows() >= addedByManifests,
          list,
          "snapshot " + snapshot.snapshotId() + ": added-rows " + snapshot.addedRows()
              + " below the rows its manifests added, " + addedByManifests);
    }
  }

  // ------------------------------------------------------------------ manifests

  private void manifest(TableMetadata metadata, String list, ManifestFile manifest) {
    String path = manifest.path();
    Map<Integer, PartitionSpec> specs = metadata.specsById();
    PartitionSpec spec = specs.get(manifest.partitionSpecId());
    if (spec == null) {
      return; // reported with the list
    }
    int added = 0;
    int existing = 0;
    int deleted = 0;
    long addedRows = 0;
    long existingRows = 0;
    long deletedRows = 0;
    Long minLiveSequence = null;
    List<List<Object>> partitions = new ArrayList<>(); // copied: the reader reuses its entries
    try (ManifestReader<? extends ContentFile<?>> reader =
            manifest.content() == ManifestContent.DATA
                ? ManifestFiles.read(manifest, io, specs)
                : ManifestFiles.readDeleteManifest(manifest, io, specs);
        CloseableIterable<? extends ManifestEntry<? extends ContentFile<?>>> entries = reader.entries()) {
      for (ManifestEntry<? extends ContentFile<?>> entry : entries) {
        ContentFile<?> file = entry.file();
        String what = "entry " + file.location();
        switch (entry.status()) {
          case ADDED -> {
            added++;
            addedRows += file.recordCount();
          }
          case EXISTING -> {
            existing++;
            existingRows += file.recordCount();
          }
          case DELETED -> {
            deleted++;
            deletedRows += file.recordCount();
          }
        }
        require(file.specId() == manifest.partitionSpecId(), path, what + ": spec id differs from the manifest's");
        require(file.recordCount() >= 0, path, what + ": negative record count");
        require(file.fileSizeInBytes() > 0, path, what + ": file size " + file.fileSizeInBytes());
        if (metadata.formatVersion() >= 2) {
          Long dataSequence = entry.dataSequenceNumber();
          require(dataSequence != null, path, what + ": no data sequence number");
          require(entry.fileSequenceNumber() != null, path, what + ": no file sequence number");
          if (dataSequence != null) {
            require(
                dataSequence <= manifest.sequenceNumber(),
                path,
                what + ": data sequence number " + dataSequence + " above the manifest's " + manifest.sequenceNumber());
            if (entry.status() == ManifestEntry.Status.ADDED) {
              require(
                  dataSequence == manifest.sequenceNumber(),
                  path,
                  what + ": added with data sequence number " + dataSequence + ", the manifest's is "
                      + manifest.sequenceNumber());
              require(
                  entry.snapshotId() != null && entry.snapshotId().equals(manifest.snapshotId()),
                  path,
                  what + ": added by snapshot " + entry.snapshotId() + " in a manifest of " + manifest.snapshotId());
            }
            if (entry.isLive()) {
              minLiveSequence = minLiveSequence == null ? dataSequence : Math.min(minLiveSequence, dataSequence);
            }
          }
        }
        if (file.format() == FileFormat.PUFFIN) {
          puffin(file.location(), file.fileSizeInBytes());
        }
        if (entry.isLive()) {
          List<Object> values = new ArrayList<>();
          for (int i = 0; i < file.partition().size(); i++) {
            values.add(file.partition().get(i, Object.class));
          }
          partitions.add(values);
        }
        checkColumnIds(metadata, path, what, file);
        if (file instanceof DataFile dataFile) {
          checkPartition(metadata, spec, path, what, dataFile);
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (RuntimeException e) {
      fail(path, "the manifest does not parse: " + e);
      return;
    }
    count("manifest");
    count("manifest_entry", added + existing + deleted);
    requireCount(path, "added files", manifest.addedFilesCount(), added);
    requireCount(path, "existing files", manifest.existingFilesCount(), existing);
    requireCount(path, "deleted files", manifest.deletedFilesCount(), deleted);
    requireCount(path, "added rows", manifest.addedRowsCount(), addedRows);
    requireCount(path, "existing rows", manifest.existingRowsCount(), existingRows);
    requireCount(path, "deleted rows", manifest.deletedRowsCount(), deletedRows);
    if (metadata.formatVersion() >= 2 && minLiveSequence != null) {
      require(
          manifest.minSequenceNumber() == minLiveSequence,
          list,
          "manifest " + path + ": min-sequence-number " + manifest.minSequenceNumber()
              + ", its live entries' lowest is " + minLiveSequence);
    }
    checkSummaries(list, manifest, spec, partitions);
  }

  private void count(String what, int n) {
    counts.merge(what, n, Integer::sum);
  }

  private void requireCount(String path, String what, Number declared, long counted) {
    if (declared != null) {
      require(
          declared.longValue() == counted,
          path,
          what + ": the manifest list says " + declared + ", its entries count " + counted);
    }
  }

  /** Every field id in the file's metrics is a column some schema of the table has. */
  private void checkColumnIds(TableMetadata metadata, String path, String what, ContentFile<?> file) {
    Set<Integer> known = new HashSet<>();
    for (Schema schema : metadata.schemas()) {
      known.addAll(TypeUtil.indexById(schema.asStruct()).keySet());
    }
    for (Map<Integer, ?> metric :
        java.util.Arrays.asList(
            file.columnSizes(), file.valueCounts(), file.nullValueCounts(), file.lowerBounds(), file.upperBounds())) {
      if (metric != null) {
        for (int id : metric.keySet()) {
          require(
              known.contains(id) || MetadataColumns.isMetadataColumn(id) || DELETE_FILE_IDS.contains(id),
              path,
              what + ": metrics for field id " + id + " no schema has");
        }
      }
    }
  }

  /**
   * The file's partition tuple, checked with Iceberg's own transforms against the file's
   * column statistics: a partition value {@code p} of a file whose source column has bounds
   * [lo, hi] and no nulls satisfies T(lo) <= p <= T(hi) for an order-preserving transform
   * (identity, year, month, day, hour, truncate) and p = bucket(lo) when lo = hi; a null p
   * (other than void's) means every source value is null.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private void checkPartition(TableMetadata metadata, PartitionSpec spec, String path, String what, DataFile file) {
    StructLike partition = file.partition();
    Types.StructType partitionType = spec.partitionType();
    require(
        partition.size() == partitionType.fields().size(),
        path,
        what + ": partition tuple of " + partition.size() + " values for " + partitionType.fields().size() + " fields");
    if (partition.size() != partitionType.fields().size()) {
      return;
    }
    Map<Integer, Type> sourceTypes = sourceTypes(metadata);
    for (int i = 0; i < spec.fields().size(); i++) {
      PartitionField field = spec.fields().get(i);
      Type resultType = partitionType.fields().get(i).type();
      Object value = partition.get(i, Object.class);
      String at = what + ": partition " + field.name();
      if (value != null) {
        require(
            resultType.typeId().javaClass().isInstance(value),
            path,
            at + " is a " + value.getClass().getSimpleName() + ", not a " + resultType);
      }
      Type sourceType = sourceTypes.get(field.sourceId());
      Transform transform = field.transform();
      if (transform.isVoid()) {
        require(value == null, path, at + ": void partition value " + value);
        continue;
      }
      if (sourceType == null || !sourceType.isPrimitiveType()) {
        continue;
      }
      long rows = file.recordCount();
      Long nulls = file.nullValueCounts() == null ? null : file.nullValueCounts().get(field.sourceId());
      if (value == null) {
        require(nulls == null || nulls == rows, path, at + " is null, but the column has " + nulls + " nulls in " + rows + " rows");
        continue;
      }
      require(nulls == null || nulls == 0, path, at + " is " + value + ", but the column has " + nulls + " nulls");
      ByteBuffer lowerBytes = file.lowerBounds() == null ? null : file.lowerBounds().get(field.sourceId());
      ByteBuffer upperBytes = file.upperBounds() == null ? null : file.upperBounds().get(field.sourceId());
      if (lowerBytes == null || upperBytes == null) {
        continue;
      }
      Object lower = Conversions.fromByteBuffer(sourceType, lowerBytes);
      Object upper = Conversions.fromByteBuffer(sourceType, upperBytes);
      var bound = transform.bind(sourceType);
      Comparator<Object> order = (Comparator<Object>) Comparators.forType(resultType.asPrimitiveType());
      Object low = bound.apply(lower);
      Object high = bound.apply(upper);
      if (transform.preservesOrder()) {
        require(
            order.compare(low, value) <= 0 && order.compare(value, high) <= 0,
            path,
            at + " = " + value + " is outside [" + low + ", " + high + "], the transform of the column's bounds ["
                + lower + ", " + upper + "]");
        count("partition_values_checked_by_bounds", 1);
      } else if (Comparators.forType(sourceType.asPrimitiveType()).compare(lower, upper) == 0) {
        require(order.compare(low, value) == 0, path, at + " = " + value + ", " + transform + " of its only value is " + low);
        count("partition_values_checked_by_bounds", 1);
      }
    }
  }

  /** Each field id's type in the newest schema that has it. */
  private static Map<Integer, Type> sourceTypes(TableMetadata metadata) {
    Map<Integer, Type> types = new HashMap<>();
    metadata.schemas().stream()
        .sorted(Comparator.comparingInt(Schema::schemaId))
        .forEach(schema -> TypeUtil.indexById(schema.asStruct()).forEach((id, f) -> types.put(id, f.type())));
    TypeUtil.indexById(metadata.schema().asStruct()).forEach((id, f) -> types.put(id, f.type()));
    return types;
  }

  /**
   * The manifest list's partition summaries against the live entries' tuples: contains_null
   * exactly when some value is null, every non-null value within [lower, upper].
   */
  @SuppressWarnings("unchecked")
  private void checkSummaries(
      String list, ManifestFile manifest, PartitionSpec spec, List<List<Object>> partitions) {
    List<ManifestFile.PartitionFieldSummary> summaries = manifest.partitions();
    if (summaries == null || spec.isUnpartitioned()) {
      return;
    }
    Types.StructType partitionType = spec.partitionType();
    String what = "manifest " + manifest.path();
    require(
        summaries.size() == partitionType.fields().size(),
        list,
        what + ": " + summaries.size() + " partition summaries for " + partitionType.fields().size() + " fields");
    if (summaries.size() != partitionType.fields().size()) {
      return;
    }
    for (int i = 0; i < summaries.size(); i++) {
      Type type = partitionType.fields().get(i).type();
      ManifestFile.PartitionFieldSummary summary = summaries.get(i);
      Comparator<Object> order = (Comparator<Object>) Comparators.forType(type.asPrimitiveType());
      Object lower = summary.lowerBound() == null ? null : Conversions.fromByteBuffer(type, summary.lowerBound());
      Object upper = summary.upperBound() == null ? null : Conversions.fromByteBuffer(type, summary.upperBound());
      boolean anyNull = false;
      for (List<Object> partition : partitions) {
        Object value = partition.get(i);
        if (value == null) {
          anyNull = true;
        } else if (lower != null && upper != null) {
          require(
              order.compare(lower, value) <= 0 && order.compare(value, upper) <= 0,
              list,
              what + ": partition value " + value + " outside the summary [" + lower + ", " + upper + "]");
        }
      }
      if (!partitions.isEmpty()) {
        require(
            summary.containsNull() == anyNull,
            list,
            what + ": contains_null is " + summary.containsNull() + ", the entries say " + anyNull);
      }
    }
  }

  // ------------------------------------------------------------------ Puffin

  private void puffin(String path, long size) {
    if (!checkedPuffins.add(path)) {
      return;
    }
    try (PuffinReader reader = Puffin.read(io.newInputFile(path, size)).build()) {
      for (BlobMetadata blob : reader.fileMetadata().blobs()) {
        require(blob.offset() + blob.length() <= size, path, "blob " + blob.type() + " past the end of the file");
      }
      reader.readAll(reader.fileMetadata().blobs()).forEach(pair -> {});
      count("puffin");
    } catch (IOException | RuntimeException e) {
      fail(path, "Puffin does not read it: " + e);
    }
  }

  // ------------------------------------------------------------------ files

  /** Reads local paths (a {@code file:} URI or a plain path) and mapped prefixes. */
  static final class LocalIO implements FileIO {
    private final Map<String, String> prefixes;

    LocalIO(Map<String, String> prefixes) {
      this.prefixes = prefixes;
    }

    private String local(String location) {
      for (Map.Entry<String, String> prefix : prefixes.entrySet()) {
        if (location.startsWith(prefix.getKey())) {
          return prefix.getValue() + location.substring(prefix.getKey().length());
        }
      }
      if (location.startsWith("file://")) {
        return location.substring("file://".length());
      }
      if (location.startsWith("file:")) {
        return location.substring("file:".length());
      }
      return location;
    }

    @Override
    public InputFile newInputFile(String location) {
      return org.apache.iceberg.Files.localInput(local(location));
    }

    @Override
    public InputFile newInputFile(String location, long length) {
      return newInputFile(location);
    }

    @Override
    public OutputFile newOutputFile(String location) {
      throw new UnsupportedOperationException("the check only reads");
    }

    @Override
    public void deleteFile(String location) {
      throw new UnsupportedOperationException("the check only reads");
    }
  }
}
