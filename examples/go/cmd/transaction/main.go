// Command transaction runs transaction.IngestTogether against a skade server
// (tests/interop/test_go.py):
//
//	go run ./cmd/transaction -uri grpc://127.0.0.1:50051 -writer nightly -sequence 1 \
//	    -namespace scan -rows 100
//
// writes the tables hosts (id 0..rows-1, host "h<id>") and ports (3 rows per host: host_id,
// port 1000*k + id) in one transaction, and prints "committed" (or "rolled back" with
// -rollback).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"skade.examples/go/transaction"
)

func main() {
	uri := flag.String("uri", "grpc://127.0.0.1:50051", "skade's Flight address")
	writer := flag.String("writer", "", "the writer id (x-skade-writer-id)")
	sequence := flag.Uint64("sequence", 1, "this transaction's sequence (x-skade-sequence)")
	namespace := flag.String("namespace", "scan", "the tables' namespace")
	rows := flag.Int("rows", 100, "hosts")
	rollback := flag.Bool("rollback", false, "roll back instead of committing")
	flag.Parse()

	hostSchema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "host", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	hosts := array.NewRecordBuilder(memory.DefaultAllocator, hostSchema)
	defer hosts.Release()
	portSchema := arrow.NewSchema([]arrow.Field{
		{Name: "host_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "port", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, nil)
	ports := array.NewRecordBuilder(memory.DefaultAllocator, portSchema)
	defer ports.Release()
	for id := 0; id < *rows; id++ {
		hosts.Field(0).(*array.Int64Builder).Append(int64(id))
		hosts.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("h%d", id))
		for k := 1; k <= 3; k++ {
			ports.Field(0).(*array.Int64Builder).Append(int64(id))
			ports.Field(1).(*array.Int32Builder).Append(int32(1000*k + id))
		}
	}
	tables := map[string]arrow.RecordBatch{"hosts": hosts.NewRecordBatch(), "ports": ports.NewRecordBatch()}
	defer func() {
		for _, batch := range tables {
			batch.Release()
		}
	}()
	err := transaction.IngestTogether(context.Background(), *uri, *writer, *sequence, *namespace, tables, *rollback)
	if err != nil {
		log.Fatalf("transaction: %v", err)
	}
	if *rollback {
		fmt.Println("rolled back")
	} else {
		fmt.Println("committed")
	}
}
