package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/internal/bytesize"
)

// savepointID is a new savepoint's id from "<id>" or "savepoints/<id>".
func savepointID(arg string) (string, error) {
	id := strings.TrimPrefix(strings.Trim(arg, "/"), catalog.SavepointsDir+"/")
	if err := catalog.ValidateSavepointID(id); err != nil {
		return "", err
	}
	return id, nil
}

// pairs parses repeated OLD=NEW flags.
func pairs(flag string, vs []string) (map[string]string, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range vs {
		a, b, ok := strings.Cut(v, "=")
		if !ok || a == "" || b == "" {
			return nil, fmt.Errorf("--%s %q: give OLD=NEW", flag, v)
		}
		if _, dup := out[a]; dup {
			return nil, fmt.Errorf("--%s names %q twice", flag, a)
		}
		out[a] = b
	}
	return out, nil
}

func keyGroupRanges(flag string, vs []string) ([]backend.KeyGroupRange, error) {
	var out []backend.KeyGroupRange
	for _, v := range vs {
		r, err := parseKeyGroups(v)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flag, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// writeTarget opens the store a new savepoint is written into.
func writeTarget(ctx context.Context, f *stateFlags, id string) (inspect.Target, func(), error) {
	s, err := openCLIStore(ctx, f.store, true)
	if err != nil {
		return inspect.Target{}, nil, err
	}
	return inspect.Target{Store: s, ID: id, TempDir: f.tempDir}, func() { s.Close() }, nil
}

func printNewSavepoint(out io.Writer, m *catalog.Manifest, took time.Duration) {
	fmt.Fprintf(out, "wrote savepoint %s: job %s, %d tasks, %s, in %s\n", catalog.SavepointDir(m.SavepointID), m.Job,
		len(m.Tasks), bytesize.Format(m.FullSize), took.Round(time.Millisecond))
}

const newSavepointNote = `The new savepoint is canonical (backend-neutral files: it restores into any
backend kind, at any parallelism, rescaled as usual), self-contained and
relocatable; "stated verify savepoints/<id>" checks it. A running daemon finds
savepoints when it starts: restart it (or restore on another node started
after) to restore from the new one.`

func newSavepointEditCmd() *cobra.Command {
	var f stateFlags
	var drop, rename, keep, dropKG, copyOp []string
	cmd := &cobra.Command{
		Use:   "edit <source> <new-id>",
		Short: "Write an edited copy of a savepoint or checkpoint as a new savepoint",
		Long: `edit reads <source> (a savepoint "savepoints/<id>", or a checkpoint
"<job>/chk-<N>" or "<job>/latest", as "stated state" names them) from the
checkpoint store, never changing it, and writes its state, edited, as the new
savepoint "savepoints/<new-id>" in the same store:

  --drop-state S          leave state S out (every operator's)
  --rename-state A=B      rename state A to B (B must not exist)
  --keep-key-groups R     keep only the entries of key groups R (N or START-END)
  --drop-key-groups R     leave out the entries of key groups R
  --copy-operator X=Y     also write operator X's state as operator Y's

Each flag may be repeated. Tasks keep their key-group ranges: dropped key groups
are empty, so the savepoint still covers every key group. Entries keep their TTL
expiry; entries already expired are left out. A name the source does not have
is refused before anything is written, and a failure deletes what was written.

` + newSavepointNote,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			id, err := savepointID(args[1])
			if err != nil {
				return err
			}
			e := inspect.Edit{DropStates: drop}
			if e.RenameStates, err = pairs("rename-state", rename); err != nil {
				return err
			}
			if e.CopyOperators, err = pairs("copy-operator", copyOp); err != nil {
				return err
			}
			if e.KeepKeyGroups, err = keyGroupRanges("keep-key-groups", keep); err != nil {
				return err
			}
			if e.DropKeyGroups, err = keyGroupRanges("drop-key-groups", dropKG); err != nil {
				return err
			}
			r, closeSrc, err := openState(cmd, args[0], &f, nil)
			if err != nil {
				return err
			}
			defer closeSrc()
			t, closeDst, err := writeTarget(ctx, &f, id)
			if err != nil {
				return err
			}
			defer closeDst()
			start := time.Now()
			m, err := r.Rewrite(ctx, e, t)
			if err != nil {
				return err
			}
			printNewSavepoint(cmd.OutOrStdout(), m, time.Since(start))
			return nil
		},
	}
	storeFlags(cmd, &f.store)
	fl := cmd.Flags()
	fl.StringVar(&f.tempDir, "temp-dir", "", "where a task's state is staged while it is copied (default the system's temporary directory)")
	fl.StringArrayVar(&drop, "drop-state", nil, "leave this state out (repeatable)")
	fl.StringArrayVar(&rename, "rename-state", nil, "OLD=NEW: rename a state (repeatable)")
	fl.StringArrayVar(&keep, "keep-key-groups", nil, "keep only these key groups: N or START-END (repeatable)")
	fl.StringArrayVar(&dropKG, "drop-key-groups", nil, "leave these key groups out: N or START-END (repeatable)")
	fl.StringArrayVar(&copyOp, "copy-operator", nil, "FROM=TO: also write operator FROM's state as operator TO's (repeatable)")
	return cmd
}

func newSavepointBootstrapCmd() *cobra.Command {
	var f stateFlags
	var from, job, enc string
	var aggs []string
	var maxPar, par int
	cmd := &cobra.Command{
		Use:   "bootstrap --from <file.jsonl> --job <job> <new-id>",
		Short: "Write a new savepoint from JSON lines (the format \"stated state export\" writes)",
		Long: `bootstrap reads entries as JSON lines, one entry a line, in the format
"stated state export" writes (its --bytes encoding given by --bytes here), and
writes them as the new savepoint "savepoints/<new-id>" of job --job in the
checkpoint store: the write side of reading state without the job's code.

Each line needs operator, state, kind, keyGroup, key and namespace, and by kind
userKey and value (map), value (value, list element), number (aggregate) or
timestamp (timers); expiry (unix milliseconds) is kept. subtask and index are
not read: the key group places an entry in a task (--parallelism tasks per
operator over --max-parallelism key groups), and list elements are appended in
the order of the lines. A later line with the address of an earlier one
replaces it. Aggregate states need their function and number type, which the
lines do not carry: --aggregate STATE=FUNC:TYPE (FUNC sum, min, max or count;
TYPE int64 or float64). The first bad line fails the command, naming its line
number, and nothing of the savepoint is left.

` + newSavepointNote,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			id, err := savepointID(args[0])
			if err != nil {
				return err
			}
			if from == "" {
				return errors.New("--from: give the JSON lines file to read (- for stdin)")
			}
			decode, err := bytesDecoder(enc)
			if err != nil {
				return err
			}
			b := inspect.Bootstrap{Job: job, MaxParallelism: maxPar, Parallelism: par}
			for _, a := range aggs {
				d, err := parseAggregateFlag(a)
				if err != nil {
					return err
				}
				b.States = append(b.States, d)
			}
			in := cmd.InOrStdin()
			if from != "-" {
				file, err := os.Open(from)
				if err != nil {
					return err
				}
				defer file.Close()
				in = file
			}
			f.store.announce(cmd.ErrOrStderr())
			t, closeDst, err := writeTarget(ctx, &f, id)
			if err != nil {
				return err
			}
			defer closeDst()
			start := time.Now()
			var line int
			m, err := inspect.WriteBootstrap(ctx, b, t, jsonlEntries(in, decode, b.States, &line))
			if err != nil {
				if line > 0 {
					return fmt.Errorf("%w (at line %d of %s)", err, line, from)
				}
				return err
			}
			printNewSavepoint(cmd.OutOrStdout(), m, time.Since(start))
			return nil
		},
	}
	storeFlags(cmd, &f.store)
	fl := cmd.Flags()
	fl.StringVar(&f.tempDir, "temp-dir", "", "where the tasks are staged while they are written (default the system's temporary directory)")
	fl.StringVar(&from, "from", "", "the JSON lines file to read (-: stdin)")
	fl.StringVar(&job, "job", "", "the job the savepoint is of")
	fl.StringVar(&enc, "bytes", "base64", "how byte strings are written in the lines: base64, hex or text")
	fl.StringArrayVar(&aggs, "aggregate", nil, "STATE=FUNC:TYPE: an aggregate state's function (sum, min, max, count) and number type (int64, float64) (repeatable)")
	fl.IntVar(&maxPar, "max-parallelism", backend.DefaultMaxParallelism, "the job's number of key groups")
	fl.IntVar(&par, "parallelism", 1, "tasks per operator in the savepoint (a restore at another parallelism rescales)")
	return cmd
}

func parseAggregateFlag(v string) (backend.StateDescriptor, error) {
	name, spec, ok := strings.Cut(v, "=")
	fn, typ, ok2 := strings.Cut(spec, ":")
	if !ok || !ok2 || name == "" {
		return backend.StateDescriptor{}, fmt.Errorf("--aggregate %q: give STATE=FUNC:TYPE, e.g. counts=sum:int64", v)
	}
	agg, err := backend.ParseAggregateFunc(fn)
	if err != nil {
		return backend.StateDescriptor{}, fmt.Errorf("--aggregate %q: %w", v, err)
	}
	d := backend.StateDescriptor{Name: name, Kind: backend.KindAggregate, Aggregate: agg}
	switch typ {
	case "int64":
		d.Number = backend.NumInt64
	case "float64":
		d.Number = backend.NumFloat64
	default:
		return backend.StateDescriptor{}, fmt.Errorf("--aggregate %q: number type %q is not int64 or float64", v, typ)
	}
	return d, nil
}

// bytesDecoder is the inverse of bytesEncoder.
func bytesDecoder(name string) (func(string) ([]byte, error), error) {
	switch name {
	case "base64":
		return base64.StdEncoding.DecodeString, nil
	case "hex":
		return hex.DecodeString, nil
	case "text":
		return func(s string) ([]byte, error) { return []byte(s), nil }, nil
	}
	return nil, fmt.Errorf("--bytes %q: give base64, hex or text", name)
}

// jsonlLine is one line of "stated state export" as bootstrap reads it.
type jsonlLine struct {
	Operator  string          `json:"operator"`
	State     string          `json:"state"`
	Kind      string          `json:"kind"`
	KeyGroup  *int            `json:"keyGroup"`
	Key       *string         `json:"key"`
	Namespace *string         `json:"namespace"`
	UserKey   *string         `json:"userKey"`
	Value     *string         `json:"value"`
	Number    json.RawMessage `json:"number"`
	Timestamp *int64          `json:"timestamp"`
	Expiry    int64           `json:"expiry"`
}

var kindByName = map[string]backend.StateKind{"value": backend.KindValue, "list": backend.KindList,
	"map": backend.KindMap, "aggregate": backend.KindAggregate, "timers": backend.KindTimers}

// jsonlEntries returns the entries of the lines of in, one a call, io.EOF
// at the end, and keeps *line at the line last read. Errors name the line.
func jsonlEntries(in io.Reader, decode func(string) ([]byte, error), aggs []backend.StateDescriptor, line *int) func() (*inspect.Entry, error) {
	numType := map[string]backend.NumberType{}
	for _, d := range aggs {
		numType[d.Name] = d.Number
	}
	sc := bufio.NewScanner(in)
	// A line holds a key, a namespace, a user key and a value of up to
	// backend.DefaultMaxValueSize each, base64-encoded.
	sc.Buffer(make([]byte, 1<<20), 4*(4*backend.DefaultMaxValueSize*4/3+64))
	n := 0
	var e inspect.Entry
	return func() (*inspect.Entry, error) {
		for {
			if !sc.Scan() {
				if err := sc.Err(); err != nil {
					return nil, fmt.Errorf("line %d: %w", n+1, err)
				}
				return nil, io.EOF
			}
			n++
			*line = n
			if len(strings.TrimSpace(sc.Text())) == 0 {
				continue
			}
			var l jsonlLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			if err := lineEntry(&l, &e, decode, numType); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			return &e, nil
		}
	}
}

func lineEntry(l *jsonlLine, e *inspect.Entry, decode func(string) ([]byte, error), numType map[string]backend.NumberType) error {
	kind, ok := kindByName[l.Kind]
	if !ok {
		return fmt.Errorf("kind %q is not value, list, map, aggregate or timers", l.Kind)
	}
	if l.Operator == "" || l.State == "" || l.KeyGroup == nil || l.Key == nil || l.Namespace == nil {
		return errors.New("operator, state, keyGroup, key and namespace are required")
	}
	*e = inspect.Entry{Operator: l.Operator, State: l.State, Kind: kind, KeyGroup: *l.KeyGroup, Expiry: l.Expiry}
	bytesOf := func(name string, s *string, need bool) ([]byte, error) {
		if s == nil {
			if need {
				return nil, fmt.Errorf("a %s entry needs %s", l.Kind, name)
			}
			return nil, nil
		}
		b, err := decode(*s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (is --bytes right?)", name, err)
		}
		return b, nil
	}
	var err error
	if e.Key, err = bytesOf("key", l.Key, true); err != nil {
		return err
	}
	if e.Namespace, err = bytesOf("namespace", l.Namespace, true); err != nil {
		return err
	}
	switch kind {
	case backend.KindMap:
		if e.UserKey, err = bytesOf("userKey", l.UserKey, true); err != nil {
			return err
		}
		e.Value, err = bytesOf("value", l.Value, true)
	case backend.KindValue, backend.KindList:
		e.Value, err = bytesOf("value", l.Value, true)
	case backend.KindAggregate:
		if len(l.Number) == 0 {
			return errors.New("an aggregate entry needs number")
		}
		t, ok := numType[l.State]
		if !ok {
			return fmt.Errorf("aggregate state %q needs its function and number type, which the lines do not carry: --aggregate %s=FUNC:TYPE", l.State, l.State)
		}
		e.Number, err = parseNumber(l.Number, t)
	case backend.KindTimers:
		if l.Timestamp == nil {
			return errors.New("a timers entry needs timestamp")
		}
		e.Timestamp = *l.Timestamp
	}
	return err
}

// parseNumber reads what appendJSONFloat or AppendInt wrote.
func parseNumber(raw json.RawMessage, t backend.NumberType) (backend.Number, error) {
	s := string(raw)
	if t == backend.NumFloat64 {
		switch s {
		case `"NaN"`:
			return backend.Float64(math.NaN()), nil
		case `"+Inf"`:
			return backend.Float64(math.Inf(1)), nil
		case `"-Inf"`:
			return backend.Float64(math.Inf(-1)), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return backend.Number{}, fmt.Errorf("number %s is not a float64", s)
		}
		return backend.Float64(f), nil
	}
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return backend.Number{}, fmt.Errorf("number %s is not an int64 (is the state's --aggregate type float64?)", s)
	}
	return backend.Int64(i), nil
}
