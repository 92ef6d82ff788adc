package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

func newStateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Read the keyed state of a checkpoint or savepoint: list, get, scan, export",
		Long: `The state commands read a checkpoint or savepoint from the checkpoint store
offline, as "stated verify" does: no daemon needs to run, and nothing in the
store is changed.

  ls      operators, states, kinds, entries and bytes per state, the largest key groups
  get     the entries of one key
  scan    the entries of a state, a key prefix or a key-group range
  export  every selected entry as JSON lines, one entry a line

The target is "<job>/chk-<N>" (or "<job>/<N>"), "<job>/latest" (or just
"<job>") for the job's newest retained checkpoint, "savepoints/<id>", or a
local checkpoint or savepoint directory when no store is named (as for
"stated verify"). Each task is restored into a temporary directory
(--temp-dir) and read from there, one task at a time: the disk needs room for
the largest task's state.

Checkpoints in changelog mode are read as a restore reads them: the base, then
the log window replayed (give --changelog-store if the daemon has one).
Checkpoints in lsm remote mode are read in place from the store, every SST
checked whole before any entry is shown. Heap checkpoints (whose files live in
the daemon's memory) cannot be read offline: the commands refuse them with an
error; read a savepoint of the job ("stated savepoint trigger") instead.`,
	}
	cmd.AddCommand(newStateLsCmd(), newStateGetCmd(), newStateScanCmd(), newStateExportCmd())
	return cmd
}

func init() { rootCmd.AddCommand(newStateCmd()) }

// stateFlags are the flags every state command takes.
type stateFlags struct {
	store          cliStore
	tempDir        string
	operator       string
	subtask        int
	state          string
	keyGroups      string
	includeExpired bool
}

func addStateFlags(cmd *cobra.Command, f *stateFlags) {
	storeFlags(cmd, &f.store)
	fl := cmd.Flags()
	fl.StringVar(&f.tempDir, "temp-dir", "", "where a task's state is restored while it is read (default the system's temporary directory)")
	fl.StringVar(&f.operator, "operator", "", "read only this operator")
	fl.IntVar(&f.subtask, "subtask", -1, "read only this subtask (-1: all)")
	fl.StringVar(&f.state, "state", "", "read only this state")
	fl.StringVar(&f.keyGroups, "key-groups", "", "read only these key groups: N or START-END (inclusive)")
	fl.BoolVar(&f.includeExpired, "include-expired", false, "also show entries past their TTL, which a restore would drop")
}

// filter is the inspect.Filter of the flags.
func (f *stateFlags) filter() (inspect.Filter, error) {
	flt := inspect.Filter{Operator: f.operator, State: f.state}
	switch {
	case f.subtask < -1:
		return flt, fmt.Errorf("--subtask %d: give a subtask index, or -1 for all", f.subtask)
	case f.subtask >= 0:
		sub := f.subtask
		flt.Subtask = &sub
	}
	if f.keyGroups != "" {
		r, err := parseKeyGroups(f.keyGroups)
		if err != nil {
			return flt, err
		}
		flt.KeyGroups = &r
	}
	return flt, nil
}

// parseKeyGroups parses N or START-END.
func parseKeyGroups(s string) (backend.KeyGroupRange, error) {
	a, b, isRange := strings.Cut(s, "-")
	start, err := strconv.Atoi(a)
	end := start
	if err == nil && isRange {
		end, err = strconv.Atoi(b)
	}
	if err != nil || start < 0 || end < start || end > backend.MaxMaxParallelism-1 {
		return backend.KeyGroupRange{}, fmt.Errorf("--key-groups %q: give a key group N or a range START-END with 0 <= START <= END < %d", s, backend.MaxMaxParallelism)
	}
	return backend.KeyGroupRange{Start: start, End: end}, nil
}

// checkpointNumber is "<job>/<N>", a checkpoint named by its id alone.
var checkpointNumber = regexp.MustCompile(`^([^/]+)/([0-9]+)$`)

// openState opens the reader of a state command's target: a name in the
// checkpoint store, or a local directory when no store was named (as
// "stated verify" reads it). closeFn closes what it opened. wrap, when
// set, wraps the store the reader reads (export counts its reads).
func openState(cmd *cobra.Command, target string, f *stateFlags, wrap func(tiered.Store) tiered.Store) (r *inspect.Reader, closeFn func(), err error) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	var s tiered.Store
	var dir string
	if f.store.explicit || !isDir(target) {
		f.store.announce(cmd.ErrOrStderr())
		if s, err = openCLIStore(ctx, f.store, false); err != nil {
			return nil, nil, err
		}
		target = strings.Trim(target, "/")
		if m := checkpointNumber.FindStringSubmatch(target); m != nil {
			target = m[1] + "/chk-" + m[2]
		}
		if dir, err = resolveVerifyTarget(ctx, s, target, f.store.url); err != nil {
			s.Close()
			return nil, nil, err
		}
	} else {
		fmt.Fprintf(cmd.ErrOrStderr(), "reading the local directory %s\n", target)
		root, d, err := catalog.ResolveVerifyPath(filepath.ToSlash(filepath.Clean(target)), func(p string) ([]byte, error) {
			return os.ReadFile(filepath.FromSlash(p))
		})
		if err != nil {
			return nil, nil, err
		}
		ro, err := localfs.OpenWith(filepath.FromSlash(root), localfs.Options{ReadOnly: true})
		if err != nil {
			return nil, nil, err
		}
		s, dir = ro, d
	}
	logStore, err := openCLILogStore(ctx, f.store, false)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	closeFn = func() {
		s.Close()
		if logStore != nil {
			logStore.Close()
		}
	}
	read := s
	if wrap != nil {
		read = wrap(s)
	}
	r, err = inspect.Open(ctx, inspect.Options{Store: read, LogStore: logStore, Dir: dir, TempDir: f.tempDir, IncludeExpired: f.includeExpired})
	if err != nil {
		closeFn()
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, nil, fmt.Errorf("%w: \"stated checkpoints\" lists the retained checkpoints and savepoints of %s, and \"<job>/latest\" names a job's newest", err, f.store.url)
		}
		return nil, nil, err
	}
	return r, closeFn, nil
}

// showBytes renders b for a terminal as --show says: text, hex, json, or
// auto (JSON if it is a JSON object or array, text if it is printable
// UTF-8, else hex).
func showBytes(b []byte, how string) string {
	if len(b) == 0 && how != "json" {
		return `""`
	}
	switch how {
	case "hex":
		return hex.EncodeToString(b)
	case "text":
		return strconv.Quote(string(b))
	case "json":
		var out bytes.Buffer
		if json.Compact(&out, b) == nil {
			return out.String()
		}
		return "(not JSON) " + hex.EncodeToString(b)
	}
	t := bytes.TrimSpace(b)
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t) {
		var out bytes.Buffer
		_ = json.Compact(&out, t)
		return out.String()
	}
	if printable(b) {
		return string(b)
	}
	return "0x" + hex.EncodeToString(b)
}

// printable reports whether b is UTF-8 without control characters or
// spaces that would make a column ambiguous.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) || r == ' ' {
			return false
		}
	}
	return true
}

func validShow(how string) error {
	switch how {
	case "auto", "text", "hex", "json":
		return nil
	}
	return fmt.Errorf("--show %q: give auto, text, hex or json", how)
}
