// Command produce runs exactlyonce.Produce against a skade server, then reads the table
// back with DoGet (tests/interop/test_go.py):
//
//	go run ./cmd/produce -uri grpc://127.0.0.1:50051 -writer loader-1 -table demo.go_events \
//	    -batches 10 -rows 1000
//
// sends 10 batches of 1000 rows (id = 0, 1, ...; note = "row-" + id) and prints, after
// DoGet, "doget rows=N id_sum=S". With -hold-after K it reads a line from standard input
// before it makes batch K+1 the first time (a test kills and restarts the server then).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"skade.examples/go/exactlyonce"
)

type numbered struct {
	count     uint64
	rows      int
	holdAfter uint64
	held      bool
}

func (n *numbered) Schema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
}

func (n *numbered) Count() uint64 { return n.count }

func (n *numbered) Batch(sequence uint64) arrow.RecordBatch {
	if n.holdAfter > 0 && sequence == n.holdAfter+1 && !n.held {
		n.held = true
		fmt.Println("holding before batch", sequence)
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			log.Fatalf("reading standard input: %v", err)
		}
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, n.Schema())
	defer b.Release()
	for i := 0; i < n.rows; i++ {
		id := int64(sequence-1)*int64(n.rows) + int64(i)
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d", id))
	}
	return b.NewRecordBatch()
}

func main() {
	uri := flag.String("uri", "grpc://127.0.0.1:50051", "skade's Flight address")
	writer := flag.String("writer", "", "the writer id (x-skade-writer-id)")
	table := flag.String("table", "", "namespace.table")
	batches := flag.Uint64("batches", 10, "batches to send")
	rows := flag.Int("rows", 1000, "rows per batch")
	holdAfter := flag.Uint64("hold-after", 0, "wait for a line on stdin before batch K+1")
	flag.Parse()

	ctx := context.Background()
	addr := strings.TrimPrefix(*uri, "grpc://")
	path := strings.Split(*table, ".")
	source := &numbered{count: *batches, rows: *rows, holdAfter: *holdAfter}
	if err := exactlyonce.Produce(ctx, addr, *writer, path, source); err != nil {
		log.Fatalf("produce: %v", err)
	}

	client, err := flight.NewClientWithMiddleware(addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	info, err := client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: path})
	if err != nil {
		log.Fatalf("GetFlightInfo: %v", err)
	}
	stream, err := client.DoGet(ctx, info.Endpoint[0].Ticket)
	if err != nil {
		log.Fatalf("DoGet: %v", err)
	}
	reader, err := flight.NewRecordReader(stream)
	if err != nil {
		log.Fatalf("DoGet: %v", err)
	}
	defer reader.Release()
	var n, sum int64
	for reader.Next() {
		batch := reader.RecordBatch()
		ids := batch.Column(batch.Schema().FieldIndices("id")[0]).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			sum += ids.Value(i)
		}
		n += batch.NumRows()
	}
	if err := reader.Err(); err != nil {
		log.Fatalf("DoGet: %v", err)
	}
	fmt.Printf("doget rows=%d id_sum=%d\n", n, sum)
}
