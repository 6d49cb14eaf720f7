// Package exactlyonce is an exactly-once producer for skade with Arrow Flight's Go client
// (github.com/apache/arrow-go/v18/arrow/flight): the recipe of docs/exactly-once.md.
package exactlyonce

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Batches are the batches to send: Batch(s) is the batch of sequence s (1..Count()),
// released by the caller.
type Batches interface {
	Schema() *arrow.Schema
	Count() uint64
	Batch(sequence uint64) arrow.RecordBatch
}

// exactly-once:begin

// Produce sends batches 1..Count() as sequences 1..Count() into the table path
// (namespace, table) of the skade server at addr (host:port) until all are durable.
// It retries what a resend can fix (the server down or restarting, a lost connection:
// Unavailable; a passed deadline) and returns every other refusal.
func Produce(ctx context.Context, addr, writerID string, path []string, batches Batches) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-skade-writer-id", writerID)
	for {
		err := putOnce(ctx, addr, writerID, path, batches)
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			return err // nil: every batch is durable
		}
		log.Printf("retrying after %v", err)
		time.Sleep(500 * time.Millisecond) // server restarting or connection lost: resume
	}
}

func putOnce(ctx context.Context, addr, writerID string, path []string, batches Batches) error {
	client, err := flight.NewClientWithMiddleware(addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer client.Close()
	done, err := CommittedSequence(ctx, client, writerID, strings.Join(path, "."))
	if err != nil || done >= batches.Count() {
		return err
	}
	put, err := client.DoPut(ctx)
	if err != nil {
		return err
	}
	writer := flight.NewRecordWriter(put, ipc.WithSchema(batches.Schema()))
	writer.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: path})
	for sequence := done + 1; sequence <= batches.Count(); sequence++ {
		batch := batches.Batch(sequence)
		err = writer.WriteWithAppMetadata(batch, []byte(strconv.FormatUint(sequence, 10)))
		batch.Release()
		if err != nil {
			break // the server ended the stream: its status comes with the acks below
		}
	}
	if err == nil {
		err = writer.Close()
	}
	if err == nil {
		err = put.CloseSend()
	}
	for { // a skade.v1.CommitAck after each commit, then the stream's status
		ack, recvErr := put.Recv()
		if recvErr == io.EOF {
			return err
		}
		if recvErr != nil {
			return recvErr
		}
		log.Printf("ack %s", DecodeCommitAck(ack.AppMetadata))
	}
}

// exactly-once:end

// CommittedSequence is the writer's high-water mark in table (ns.table; 0 when it has
// committed nothing there), from the skade.v1.WriterMarks action.
func CommittedSequence(ctx context.Context, client flight.Client, writerID, table string) (uint64, error) {
	results, err := client.DoAction(ctx, &flight.Action{Type: "skade.v1.WriterMarks", Body: []byte(writerID)})
	if err != nil {
		return 0, err
	}
	result, err := results.Recv()
	if err != nil {
		return 0, err
	}
	var reply struct {
		Marks []struct {
			Table    string `json:"table"`
			Sequence uint64 `json:"sequence"`
		} `json:"marks"`
	}
	if err := json.Unmarshal(result.Body, &reply); err != nil {
		return 0, fmt.Errorf("bad WriterMarks reply: %w", err)
	}
	for _, mark := range reply.Marks {
		if mark.Table == table {
			return mark.Sequence, nil
		}
	}
	return 0, nil
}

// DecodeCommitAck renders a skade.v1.CommitAck (proto/skade/v1/skade.proto), decoded
// with protobuf's wire reader and no generated code: "{field=value, ...}".
func DecodeCommitAck(buf []byte) string {
	names := map[protowire.Number]string{1: "table", 2: "snapshot_id", 3: "committed_rows",
		4: "committed_data_files", 5: "commits", 6: "final", 7: "committed_sequence"}
	var fields []string
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 {
			return fmt.Sprintf("<not a CommitAck: %v>", protowire.ParseError(n))
		}
		buf = buf[n:]
		value := ""
		switch typ {
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(buf)
			n = m
			switch num {
			case 2:
				value = strconv.FormatInt(int64(v), 10)
			case 6:
				value = strconv.FormatBool(v != 0)
			default:
				value = strconv.FormatUint(v, 10)
			}
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(buf)
			n, value = m, string(v)
		default:
			n = protowire.ConsumeFieldValue(num, typ, buf) // a field of a newer skade
		}
		if n < 0 {
			return fmt.Sprintf("<not a CommitAck: %v>", protowire.ParseError(n))
		}
		buf = buf[n:]
		if name, ok := names[num]; ok {
			fields = append(fields, name+"="+value)
		}
	}
	return "{" + strings.Join(fields, ", ") + "}"
}
