package skade.examples;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.CodedInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.ExecutionException;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallStatus;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightClient.ClientStreamListener;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.PutResult;
import org.apache.arrow.flight.Result;
import org.apache.arrow.flight.SyncPutListener;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * An exactly-once producer for skade with Arrow Flight's Java client (flight-core): the
 * recipe of docs/exactly-once.md. Batch {@code s} (from 1) is sent as sequence {@code s}
 * with the {@code x-skade-writer-id} header; after a lost connection or a restarted server
 * it asks {@code skade.v1.WriterMarks} where the table stands and sends the rest. Then it
 * reads the table back with {@code DoGet}.
 *
 * <pre>
 * java -cp "target/classes:$(cat target/classpath.txt)" skade.examples.ExactlyOncePut \
 *     grpc://127.0.0.1:50051 loader-1 demo.java_events 10 1000
 * </pre>
 *
 * sends 10 batches of 1000 rows ({@code id} = 0, 1, ...; {@code note} = "row-" + id) and
 * prints one line per ack and, after DoGet, {@code doget rows=N id_sum=S}.
 */
public final class ExactlyOncePut {
  private ExactlyOncePut() {}

  /** Fills {@code root} with the batch of sequence {@code sequence} (1, 2, ...). */
  public interface Batches {
    Schema schema();

    long count();

    void fill(long sequence, VectorSchemaRoot root);
  }

  // exactly-once:begin
  /**
   * Sends batches 1..count as sequences 1..count into the table {@code path} (namespace,
   * table) until all are durable. Retries what a resend can fix (the server down or
   * restarting, a lost connection: UNAVAILABLE; a passed deadline); throws every other
   * refusal.
   */
  public static void produce(Location server, String writerId, List<String> path, Batches batches)
      throws InterruptedException {
    FlightCallHeaders headers = new FlightCallHeaders();
    headers.insert("x-skade-writer-id", writerId);
    HeaderCallOption withWriterId = new HeaderCallOption(headers);
    String table = String.join(".", path);
    try (BufferAllocator allocator = new RootAllocator()) {
      while (true) {
        try (FlightClient client = FlightClient.builder(allocator, server).build();
            VectorSchemaRoot root = VectorSchemaRoot.create(batches.schema(), allocator)) {
          long done = committedSequence(client, writerId, table);
          if (done >= batches.count()) {
            return;
          }
          SyncPutListener acks = new SyncPutListener();
          ClientStreamListener stream =
              client.startPut(FlightDescriptor.path(path), root, acks, withWriterId);
          for (long sequence = done + 1; sequence <= batches.count(); sequence++) {
            batches.fill(sequence, root);
            byte[] appMetadata = Long.toUnsignedString(sequence).getBytes(StandardCharsets.UTF_8);
            ArrowBuf buf = allocator.buffer(appMetadata.length);
            buf.writeBytes(appMetadata);
            stream.putNext(buf); // the stream takes the buffer
          }
          stream.completed();
          PutResult ack;
          while ((ack = nextAck(acks)) != null) { // a skade.v1.CommitAck after each commit
            try (PutResult read = ack) {
              System.out.println("ack " + decodeCommitAck(read.getApplicationMetadata()));
            }
          }
          stream.getResult(); // throws the server's error, if the put failed
          acks.close();
        } catch (FlightRuntimeException e) {
          FlightStatusCode code = e.status().code();
          if (code != FlightStatusCode.UNAVAILABLE && code != FlightStatusCode.TIMED_OUT) {
            throw e;
          }
          System.out.println("retrying after " + code + ": " + e.getMessage());
          Thread.sleep(500); // server restarting or connection lost: resume from its mark
        }
      }
    }
  }

  // exactly-once:end

  /** The server's next {@code PutResult}, null at the end; its error as thrown by Flight. */
  static PutResult nextAck(SyncPutListener acks) throws InterruptedException {
    try {
      return acks.read();
    } catch (ExecutionException e) {
      throw e.getCause() instanceof FlightRuntimeException flight
          ? flight
          : CallStatus.UNKNOWN.withCause(e.getCause()).toRuntimeException();
    }
  }

  /** The writer's high-water mark in {@code table} (0 when it has committed nothing). */
  static long committedSequence(FlightClient client, String writerId, String table) {
    Iterator<Result> results =
        client.doAction(new Action("skade.v1.WriterMarks", writerId.getBytes(StandardCharsets.UTF_8)));
    try {
      JsonNode reply = new ObjectMapper().readTree(results.next().getBody());
      for (JsonNode mark : reply.get("marks")) {
        if (mark.get("table").asText().equals(table)) {
          return Long.parseUnsignedLong(mark.get("sequence").asText());
        }
      }
      return 0;
    } catch (IOException e) {
      throw CallStatus.INTERNAL.withDescription("bad WriterMarks reply: " + e).toRuntimeException();
    }
  }

  /**
   * Decodes a {@code skade.v1.CommitAck} (proto/skade/v1/skade.proto) with protobuf-java's
   * wire reader, without generated code: {@code {field=value, ...}}.
   */
  static String decodeCommitAck(ArrowBuf buf) {
    byte[] bytes = new byte[(int) buf.readableBytes()];
    buf.getBytes(buf.readerIndex(), bytes);
    StringBuilder out = new StringBuilder("{");
    try {
      CodedInputStream in = CodedInputStream.newInstance(bytes);
      int tag;
      while ((tag = in.readTag()) != 0) {
        switch (tag >>> 3) {
          case 1 -> out.append("table=").append(in.readString());
          case 2 -> out.append("snapshot_id=").append(in.readInt64());
          case 3 -> out.append("committed_rows=").append(Long.toUnsignedString(in.readUInt64()));
          case 4 -> out.append("committed_data_files=").append(Long.toUnsignedString(in.readUInt64()));
          case 5 -> out.append("commits=").append(Long.toUnsignedString(in.readUInt64()));
          case 6 -> out.append("final=").append(in.readBool());
          case 7 -> out.append("committed_sequence=").append(Long.toUnsignedString(in.readUInt64()));
          default -> {
            in.skipField(tag); // a field of a newer skade
            continue;
          }
        }
        out.append(", ");
      }
    } catch (IOException e) {
      throw new IllegalArgumentException("not a CommitAck", e);
    }
    return out.append("}").toString().replace(", }", "}");
  }

  /** {@code rowsPerBatch} rows per batch: id = (sequence - 1) * rowsPerBatch + i, note = "row-" + id. */
  static Batches numbered(long count, int rowsPerBatch) {
    Schema schema =
        new Schema(
            List.of(
                Field.nullable("id", new ArrowType.Int(64, true)),
                Field.nullable("note", ArrowType.Utf8.INSTANCE)));
    return new Batches() {
      @Override
      public Schema schema() {
        return schema;
      }

      @Override
      public long count() {
        return count;
      }

      @Override
      public void fill(long sequence, VectorSchemaRoot root) {
        BigIntVector id = (BigIntVector) root.getVector("id");
        VarCharVector note = (VarCharVector) root.getVector("note");
        id.allocateNew(rowsPerBatch);
        note.allocateNew(rowsPerBatch);
        for (int i = 0; i < rowsPerBatch; i++) {
          long value = (sequence - 1) * rowsPerBatch + i;
          id.set(i, value);
          note.setSafe(i, ("row-" + value).getBytes(StandardCharsets.UTF_8));
        }
        root.setRowCount(rowsPerBatch);
      }
    };
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: ExactlyOncePut URI WRITER_ID NAMESPACE.TABLE BATCHES ROWS_PER_BATCH");
      System.exit(2);
    }
    Location server = new Location(args[0]);
    List<String> path = List.of(args[2].split("\\."));
    produce(server, args[1], path, numbered(Long.parseLong(args[3]), Integer.parseInt(args[4])));

    try (BufferAllocator allocator = new RootAllocator();
        FlightClient client = FlightClient.builder(allocator, server).build()) {
      FlightInfo info = client.getInfo(FlightDescriptor.path(path));
      long rows = 0;
      long idSum = 0;
      try (FlightStream stream = client.getStream(info.getEndpoints().get(0).getTicket())) {
        while (stream.next()) {
          BigIntVector id = (BigIntVector) stream.getRoot().getVector("id");
          for (int i = 0; i < stream.getRoot().getRowCount(); i++) {
            idSum += id.get(i);
          }
          rows += stream.getRoot().getRowCount();
        }
      }
      System.out.println("doget rows=" + rows + " id_sum=" + idSum);
    }
  }
}
