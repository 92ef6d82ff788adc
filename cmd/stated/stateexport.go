package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/tiered"
)

func newStateExportCmd() *cobra.Command {
	var f stateFlags
	var output, enc, format string
	cmd := &cobra.Command{
		Use:   "export <target>",
		Short: "Write the selected entries as JSON lines or Parquet",
		Long: `export writes one row per entry (a value, a list element, a map entry, an
aggregate or a timer), for DuckDB, pandas, Spark or jq: as JSON lines (--format
jsonl, the default), one JSON object a line,

  {"operator":"op","subtask":0,"state":"counts","kind":"map","keyGroup":17,
   "key":"...","namespace":"...","userKey":"...","value":"..."}

userKey is set for map entries, value for values, list elements and map
entries, index for list elements (their position), number for aggregates,
timestamp for timers, expiry (unix milliseconds) for entries with a TTL.
Byte strings are written as --bytes says: base64 (the default: any bytes),
hex, or text (refused for bytes that are not UTF-8, naming the entry).

--format parquet writes one Parquet file (zstd, row groups of 128Ki rows) with
the same columns: key, namespace, userKey and value as binary (empty where the
kind has none), index, numberInt or numberFloat, timestamp and expiry null
where the kind has none. --bytes does not apply.

Progress (bytes of files read, entries written) goes to stderr.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			encode, err := bytesEncoder(enc)
			if err != nil {
				return err
			}
			if format != "jsonl" && format != "parquet" {
				return fmt.Errorf("--format %q: give jsonl or parquet", format)
			}
			flt, err := f.filter()
			if err != nil {
				return err
			}
			r, closeFn, err := openCountedState(cmd, args[0], &f)
			if err != nil {
				return err
			}
			defer closeFn()
			out := cmd.OutOrStdout()
			var file *os.File
			if output != "" && output != "-" {
				if file, err = os.Create(output); err != nil {
					return err
				}
				out = file
			}
			var n int64
			if format == "parquet" {
				n, err = runStateExportParquet(cmd.Context(), out, r, flt, stderrProgress())
			} else {
				n, err = runStateExport(cmd.Context(), out, r, flt, encode, stderrProgress())
			}
			if file != nil {
				if cerr := file.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					// A partial export must not pass for a whole one.
					_ = os.Remove(output)
				}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %d entries of %s\n", n, r.What())
			return nil
		},
	}
	addStateFlags(cmd, &f)
	cmd.Flags().StringVarP(&output, "output", "o", "-", "the file to write (-: stdout)")
	cmd.Flags().StringVar(&enc, "bytes", "base64", "JSON lines: how byte strings are written: base64, hex or text (UTF-8 only)")
	cmd.Flags().StringVar(&format, "format", "jsonl", "jsonl (JSON lines) or parquet")
	return cmd
}

// counted is the reader of an export and the bytes read so far.
type counted struct {
	*inspect.Reader
	cs *countingStore
}

// openCountedState is openState with the store's reads counted for the
// progress. countingStore passes writes on, but inspect wraps its store
// read-only.
func openCountedState(cmd *cobra.Command, target string, f *stateFlags) (*counted, func(), error) {
	var cs *countingStore
	r, closeFn, err := openState(cmd, target, f, func(s tiered.Store) tiered.Store {
		cs = &countingStore{Store: s}
		return cs
	})
	if err != nil {
		return nil, nil, err
	}
	return &counted{Reader: r, cs: cs}, closeFn, nil
}

// bytesEncoder returns the encoding of --bytes.
func bytesEncoder(name string) (func([]byte) (string, error), error) {
	switch name {
	case "base64":
		return func(b []byte) (string, error) { return base64.StdEncoding.EncodeToString(b), nil }, nil
	case "hex":
		return func(b []byte) (string, error) { return hex.EncodeToString(b), nil }, nil
	case "text":
		return func(b []byte) (string, error) {
			if !utf8.Valid(b) {
				return "", fmt.Errorf("%x is not UTF-8 text: export with --bytes base64 or hex", b)
			}
			return string(b), nil
		}, nil
	}
	return nil, fmt.Errorf("--bytes %q: give base64, hex or text", name)
}

// exportRow is one line of an export. Field names are part of the
// format users query: keep them.
type exportRow struct {
	Operator  string  `json:"operator"`
	Subtask   int     `json:"subtask"`
	State     string  `json:"state"`
	Kind      string  `json:"kind"`
	KeyGroup  int     `json:"keyGroup"`
	Key       string  `json:"key"`
	Namespace string  `json:"namespace"`
	UserKey   *string `json:"userKey,omitempty"`
	Value     *string `json:"value,omitempty"`
	Index     *int    `json:"index,omitempty"`
	Number    any     `json:"number,omitempty"`
	Timestamp *int64  `json:"timestamp,omitempty"`
	Expiry    int64   `json:"expiry,omitempty"`
}

func runStateExport(ctx context.Context, w io.Writer, r *counted, flt inspect.Filter, encode func([]byte) (string, error), prog progressOpts) (int64, error) {
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
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	str := func(e *inspect.Entry, what string, b []byte) (string, error) {
		s, err := encode(b)
		if err != nil {
			return "", fmt.Errorf("%s/%d state %s key group %d: %s %w", e.Operator, e.Subtask, e.State, e.KeyGroup, what, err)
		}
		return s, nil
	}
	err := r.Scan(ctx, flt, func(e *inspect.Entry) error {
		row := exportRow{Operator: e.Operator, Subtask: e.Subtask, State: e.State, Kind: e.Kind.String(),
			KeyGroup: e.KeyGroup, Expiry: e.Expiry}
		var err error
		if row.Key, err = str(e, "key", e.Key); err != nil {
			return err
		}
		if row.Namespace, err = str(e, "namespace", e.Namespace); err != nil {
			return err
		}
		switch e.Kind {
		case backend.KindMap:
			uk, err := str(e, "user key", e.UserKey)
			if err != nil {
				return err
			}
			row.UserKey = &uk
			fallthrough
		case backend.KindValue, backend.KindList:
			v, err := str(e, "value", e.Value)
			if err != nil {
				return err
			}
			row.Value = &v
			if e.Kind == backend.KindList {
				i := e.Index
				row.Index = &i
			}
		case backend.KindAggregate:
			if e.Number.Type == backend.NumFloat64 {
				row.Number = e.Number.Float
			} else {
				row.Number = e.Number.Int
			}
		case backend.KindTimers:
			ts := e.Timestamp
			row.Timestamp = &ts
		}
		n.Add(1)
		return enc.Encode(&row)
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	stop()
	if err != nil {
		return n.Load(), err
	}
	return n.Load(), nil
}
