package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/internal/buildinfo"
)

// parquetRow is one row of a Parquet export: the fields of a JSON line,
// with byte strings as Parquet binary (no encoding needed). Column names
// are part of the format users query: keep them. key, namespace, userKey
// and value are always present (empty where the kind has none: kind tells
// an empty value from none); the others are null where the kind has none.
type parquetRow struct {
	Operator    string   `parquet:"operator,dict"`
	Subtask     int32    `parquet:"subtask"`
	State       string   `parquet:"state,dict"`
	Kind        string   `parquet:"kind,dict"`
	KeyGroup    int32    `parquet:"keyGroup"`
	Key         []byte   `parquet:"key"`
	Namespace   []byte   `parquet:"namespace"`
	UserKey     []byte   `parquet:"userKey"`
	Value       []byte   `parquet:"value"`
	Index       *int32   `parquet:"index,optional"`
	NumberInt   *int64   `parquet:"numberInt,optional"`
	NumberFloat *float64 `parquet:"numberFloat,optional"`
	Timestamp   *int64   `parquet:"timestamp,optional"`
	Expiry      *int64   `parquet:"expiry,optional"`
}

// Bounds of a Parquet export's memory: rows are handed to the writer in
// batches (their bytes copied into one arena, since an Entry's bytes are
// valid only during the callback), and a row group is written out after
// parquetRowGroupRows rows or parquetRowGroupBytes bytes of keys and
// values, whichever comes first (values may be up to 4 MiB each).
const (
	parquetBatchRows     = 1024
	parquetBatchBytes    = 4 << 20
	parquetRowGroupRows  = 128 << 10
	parquetRowGroupBytes = 64 << 20
)

func runStateExportParquet(ctx context.Context, w io.Writer, r *counted, flt inspect.Filter, prog progressOpts) (int64, error) {
	var total int64
	for _, h := range r.Manifest().Tasks {
		total += h.FullSize
	}
	var n atomic.Int64
	stop := prog.start("export "+r.What(), total, func() (int64, string) {
		read := r.cs.read.Load()
		return read, fmt.Sprintf("%s, %d entries", readText(read, total), n.Load())
	})
	defer stop()
	bi := buildinfo.Read()
	pw := parquet.NewGenericWriter[parquetRow](w,
		parquet.Compression(&parquet.Zstd),
		parquet.MaxRowsPerRowGroup(parquetRowGroupRows),
		parquet.CreatedBy("stated", bi.Version, bi.Revision))
	batch := make([]parquetRow, 0, parquetBatchRows)
	arena := make([]byte, 0, parquetBatchBytes)
	var groupBytes int64 // bytes handed to the writer since its last row group
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := pw.Write(batch); err != nil {
			return fmt.Errorf("parquet: %w", err)
		}
		n.Add(int64(len(batch)))
		for _, r := range batch {
			groupBytes += int64(len(r.Key) + len(r.Namespace) + len(r.UserKey) + len(r.Value))
		}
		batch, arena = batch[:0], arena[:0]
		if groupBytes >= parquetRowGroupBytes {
			groupBytes = 0
			if err := pw.Flush(); err != nil {
				return fmt.Errorf("parquet: %w", err)
			}
		}
		return nil
	}
	keep := func(b []byte) []byte {
		if len(arena)+len(b) > cap(arena) {
			return append([]byte{}, b...) // a large value: its own copy
		}
		arena = append(arena, b...)
		return arena[len(arena)-len(b) : len(arena) : len(arena)]
	}
	err := r.Scan(ctx, flt, func(e *inspect.Entry) error {
		row := parquetRow{Operator: e.Operator, Subtask: int32(e.Subtask), State: e.State, Kind: e.Kind.String(),
			KeyGroup: int32(e.KeyGroup), Key: keep(e.Key), Namespace: keep(e.Namespace),
			UserKey: keep(e.UserKey), Value: keep(e.Value)}
		if e.Expiry != 0 {
			x := e.Expiry
			row.Expiry = &x
		}
		switch e.Kind {
		case backend.KindList:
			i := int32(e.Index)
			row.Index = &i
		case backend.KindAggregate:
			if e.Number.Type == backend.NumFloat64 {
				f := e.Number.Float
				row.NumberFloat = &f
			} else {
				i := e.Number.Int
				row.NumberInt = &i
			}
		case backend.KindTimers:
			ts := e.Timestamp
			row.Timestamp = &ts
		}
		batch = append(batch, row)
		if len(batch) == cap(batch) || len(arena) > parquetBatchBytes/2 || len(e.Value) > parquetBatchBytes/2 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n.Load(), err
	}
	if err := pw.Close(); err != nil {
		return n.Load(), fmt.Errorf("parquet: %w", err)
	}
	stop()
	return n.Load(), nil
}
