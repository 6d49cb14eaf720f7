// Package transaction writes several skade tables as one unit with the ADBC Flight SQL
// driver for Go (github.com/apache/arrow-adbc/go/adbc/driver/flightsql), as
// docs/transactions.md shows it.
package transaction

import (
	"context"
	"sort"
	"strconv"

	"github.com/apache/arrow-adbc/go/adbc"
	"github.com/apache/arrow-adbc/go/adbc/driver/flightsql"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// transaction:begin

// IngestTogether appends each batch of tables (table name → rows) to that table of
// namespace, creating the tables it needs, in ONE skade commit: every table gains its
// rows, or none does. writerID and sequence make it exactly-once: a retry with the same
// pair after any failure lands once. Rollback instead of Commit when rollback is set.
func IngestTogether(ctx context.Context, uri, writerID string, sequence uint64,
	namespace string, tables map[string]arrow.RecordBatch, rollback bool) error {
	const header = "adbc.flight.sql.rpc.call_header."
	db, err := flightsql.NewDriver(memory.DefaultAllocator).NewDatabase(map[string]string{
		adbc.OptionKeyURI:            uri,
		header + "x-skade-writer-id": writerID,
	})
	if err != nil {
		return err
	}
	defer db.Close()
	cnxn, err := db.Open(ctx)
	if err != nil {
		return err
	}
	defer cnxn.Close()
	options := cnxn.(adbc.PostInitOptions)
	if err := options.SetOption(adbc.OptionKeyAutoCommit, adbc.OptionValueDisabled); err != nil {
		return err
	}
	if err := options.SetOption(header+"x-skade-sequence", strconv.FormatUint(sequence, 10)); err != nil {
		return err
	}
	names := make([]string, 0, len(tables))
	for name := range tables {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := ingest(ctx, cnxn, namespace, name, tables[name]); err != nil {
			return err
		}
	}
	if rollback {
		return cnxn.Rollback(ctx)
	}
	return cnxn.Commit(ctx)
}

// transaction:end

func ingest(ctx context.Context, cnxn adbc.Connection, namespace, table string, rows arrow.RecordBatch) error {
	stmt, err := cnxn.NewStatement()
	if err != nil {
		return err
	}
	defer stmt.Close()
	for key, value := range map[string]string{
		adbc.OptionKeyIngestTargetTable:      table,
		adbc.OptionValueIngestTargetDBSchema: namespace,
		adbc.OptionKeyIngestMode:             adbc.OptionValueIngestModeCreateAppend,
	} {
		if err := stmt.SetOption(key, value); err != nil {
			return err
		}
	}
	if err := stmt.Bind(ctx, rows); err != nil {
		return err
	}
	_, err = stmt.ExecuteUpdate(ctx)
	return err
}
