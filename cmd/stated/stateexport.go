package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
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
timestamp for timers, expiry (unix milliseconds) for entries with a TTL. A
float aggregate that is NaN or infinite is written as the string "NaN", "+Inf"
or "-Inf", which JSON has no number for.
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

// bytesEncoder returns the encoding of --bytes: it appends b to dst as a
// JSON string, quotes included.
func bytesEncoder(name string) (func(dst, b []byte) ([]byte, error), error) {
	switch name {
	case "base64":
		return func(dst, b []byte) ([]byte, error) {
			dst = append(dst, '"')
			return append(base64.StdEncoding.AppendEncode(dst, b), '"'), nil
		}, nil
	case "hex":
		return func(dst, b []byte) ([]byte, error) {
			dst = append(dst, '"')
			return append(hex.AppendEncode(dst, b), '"'), nil
		}, nil
	case "text":
		return func(dst, b []byte) ([]byte, error) {
			if !utf8.Valid(b) {
				return dst, fmt.Errorf("%x is not UTF-8 text: export with --bytes base64 or hex", b)
			}
			return appendJSONString(dst, string(b)), nil
		}, nil
	}
	return nil, fmt.Errorf("--bytes %q: give base64, hex or text", name)
}

// appendJSONString appends s as a JSON string. Names and most text need
// no escape; the rest goes through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a valid UTF-8 string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	return append(append(dst, s...), '"')
}

// appendJSONFloat appends f as a JSON number; NaN and the infinities,
// which JSON has no number for, as the strings "NaN", "+Inf", "-Inf".
func appendJSONFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"+Inf"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Inf"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// A line of an export has the fields operator, subtask, state, kind,
// keyGroup, key, namespace, then by kind userKey, value, index, number,
// timestamp, and expiry for entries with a TTL. The names are part of the
// format users query: keep them (and parquetRow's).

func runStateExport(ctx context.Context, w io.Writer, r *counted, flt inspect.Filter, encode func(dst, b []byte) ([]byte, error), prog progressOpts) (int64, error) {
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
	var line []byte
	err := r.Scan(ctx, flt, func(e *inspect.Entry) error {
		field := func(name string, b []byte) error {
			line = append(append(line, `,"`...), name...)
			line = append(line, `":`...)
			var err error
			if line, err = encode(line, b); err != nil {
				return fmt.Errorf("%s/%d state %s key group %d: %s %w", e.Operator, e.Subtask, e.State, e.KeyGroup, name, err)
			}
			return nil
		}
		line = append(line[:0], `{"operator":`...)
		line = appendJSONString(line, e.Operator)
		line = strconv.AppendInt(append(line, `,"subtask":`...), int64(e.Subtask), 10)
		line = appendJSONString(append(line, `,"state":`...), e.State)
		line = appendJSONString(append(line, `,"kind":`...), e.Kind.String())
		line = strconv.AppendInt(append(line, `,"keyGroup":`...), int64(e.KeyGroup), 10)
		if err := field("key", e.Key); err != nil {
			return err
		}
		if err := field("namespace", e.Namespace); err != nil {
			return err
		}
		switch e.Kind {
		case backend.KindMap:
			if err := field("userKey", e.UserKey); err != nil {
				return err
			}
			if err := field("value", e.Value); err != nil {
				return err
			}
		case backend.KindValue:
			if err := field("value", e.Value); err != nil {
				return err
			}
		case backend.KindList:
			if err := field("value", e.Value); err != nil {
				return err
			}
			line = strconv.AppendInt(append(line, `,"index":`...), int64(e.Index), 10)
		case backend.KindAggregate:
			line = append(line, `,"number":`...)
			if e.Number.Type == backend.NumFloat64 {
				line = appendJSONFloat(line, e.Number.Float)
			} else {
				line = strconv.AppendInt(line, e.Number.Int, 10)
			}
		case backend.KindTimers:
			line = strconv.AppendInt(append(line, `,"timestamp":`...), e.Timestamp, 10)
		}
		if e.Expiry != 0 {
			line = strconv.AppendInt(append(line, `,"expiry":`...), e.Expiry, 10)
		}
		line = append(line, '}', '\n')
		n.Add(1)
		_, err := bw.Write(line)
		return err
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
