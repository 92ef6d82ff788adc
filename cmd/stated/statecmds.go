package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/internal/bytesize"
)

func newStateLsCmd() *cobra.Command {
	var f stateFlags
	var top int
	cmd := &cobra.Command{
		Use:   "ls <job>[/latest] | <job>/chk-<N> | savepoints/<id> | <local-dir>",
		Short: "List the operators, states, kinds and sizes of a checkpoint or savepoint",
		Long: `ls reads every selected entry and prints, per operator and state, the kind,
the number of entries (one per value, list element, map entry, aggregate or
timer) and the stored bytes they take, then the key groups with the most bytes
(--top; -1 lists every key group that holds entries, in key-group order).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if top < -1 {
				return fmt.Errorf("--top %d: give a count, 0 for none or -1 for every key group", top)
			}
			flt, err := f.filter()
			if err != nil {
				return err
			}
			r, closeFn, err := openState(cmd, args[0], &f, nil)
			if err != nil {
				return err
			}
			defer closeFn()
			return runStateLs(cmd, r, flt, top)
		},
	}
	addStateFlags(cmd, &f)
	cmd.Flags().IntVar(&top, "top", 10, "how many of the largest key groups to list (0: none, -1: all)")
	return cmd
}

func runStateLs(cmd *cobra.Command, r *inspect.Reader, flt inspect.Filter, top int) error {
	out := cmd.OutOrStdout()
	m := r.Manifest()
	var files int64
	for _, h := range m.Tasks {
		files += h.FullSize
	}
	fmt.Fprintf(out, "%s: %d tasks, %s in files\n", r.What(), len(m.Tasks), bytesize.Format(files))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	// Operator (non-keyed) state is small and inline in the handle: its
	// lists and elements are counted here, not read as entries.
	fmt.Fprintln(tw, "TASK\tBACKEND\tKEY GROUPS\tSTATES\tOPERATOR STATE")
	for _, h := range m.Tasks {
		if !flt.MatchTask(h) {
			continue
		}
		backendKind := string(h.Backend)
		if h.IsChangelog() {
			backendKind += " (changelog)"
		}
		elems := 0
		for _, l := range h.OperatorState {
			elems += len(l.Elements)
		}
		fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%d\t%d lists, %d elements\n", h.Task.Operator, h.Task.Subtask, backendKind, h.KeyGroups,
			len(h.States), len(h.OperatorState), elems)
	}
	tw.Flush()
	s, err := r.Summarize(cmd.Context(), flt)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	printStateSizes(out, s)
	if top == 0 || len(s.KeyGroups) == 0 {
		return nil
	}
	groups := s.KeyGroups
	if top > 0 {
		groups = s.Largest(top)
		fmt.Fprintf(out, "\n%d key groups hold entries; the largest:\n", len(s.KeyGroups))
	} else {
		fmt.Fprintf(out, "\n%d key groups hold entries:\n", len(s.KeyGroups))
	}
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tKEY GROUP\tENTRIES\tBYTES\tSHARE\t")
	for _, g := range groups {
		share := float64(g.Bytes) * 100 / float64(max(1, s.Total.Bytes))
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.1f%%\t\n", g.Operator, g.KeyGroup, g.Entries, bytesize.Format(g.Bytes), share)
	}
	return tw.Flush()
}

// keyFlags name a key as text or hex.
type keyFlags struct {
	text, hexa string
	set        bool
}

func (k *keyFlags) add(cmd *cobra.Command, name, what string) {
	cmd.Flags().StringVar(&k.text, name, "", what+", as text")
	cmd.Flags().StringVar(&k.hexa, name+"-hex", "", what+", as hex")
}

func (k *keyFlags) bytes(cmd *cobra.Command, name string) ([]byte, error) {
	t, h := cmd.Flags().Changed(name), cmd.Flags().Changed(name+"-hex")
	k.set = t || h
	switch {
	case t && h:
		return nil, fmt.Errorf("give --%s or --%s-hex, not both", name, name)
	case h:
		b, err := hex.DecodeString(k.hexa)
		if err != nil {
			return nil, fmt.Errorf("--%s-hex %q: %v", name, k.hexa, err)
		}
		return b, nil
	case t:
		return []byte(k.text), nil
	}
	return nil, nil
}

func newStateGetCmd() *cobra.Command {
	var f stateFlags
	var key, ns keyFlags
	var show string
	cmd := &cobra.Command{
		Use:   "get <target> --state <state> --key <key>",
		Short: "Show the entries of one key",
		Long: `get shows every entry of one key in the states selected (--state, or every
state): its value, the elements of its list, the entries of its map, its
aggregate or its timers, in every namespace unless --namespace names one.

Without --key-groups every key group is read: give the key's key group (the
engine computes it from the key's hash) to read one task alone. get exits
non-zero when the key has no entry.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validShow(show); err != nil {
				return err
			}
			flt, err := f.filter()
			if err != nil {
				return err
			}
			if flt.Key, err = key.bytes(cmd, "key"); err != nil {
				return err
			}
			if !key.set {
				return errors.New("give the key with --key or --key-hex")
			}
			if flt.Key == nil {
				flt.Key = []byte{}
			}
			nsb, err := ns.bytes(cmd, "namespace")
			if err != nil {
				return err
			}
			r, closeFn, err := openState(cmd, args[0], &f, nil)
			if err != nil {
				return err
			}
			defer closeFn()
			n, err := printEntries(cmd, r, flt, show, 0, func(e *inspect.Entry) bool {
				return !ns.set || bytes.Equal(e.Namespace, nsb)
			})
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("key %s has no entry in %s (states: %s)", showBytes(flt.Key, show), r.What(), orAll(flt.State))
			}
			return nil
		},
	}
	addStateFlags(cmd, &f)
	key.add(cmd, "key", "the key")
	ns.add(cmd, "namespace", "only this namespace")
	cmd.Flags().StringVar(&show, "show", "auto", "how to show bytes: auto (JSON, text or hex, as fits), text, hex or json")
	return cmd
}

func orAll(s string) string {
	if s == "" {
		return "all"
	}
	return s
}

func newStateScanCmd() *cobra.Command {
	var f stateFlags
	var prefix keyFlags
	var show string
	var limit int
	cmd := &cobra.Command{
		Use:   "scan <target>",
		Short: "Show the entries of a state, a key prefix or a key-group range",
		Long: `scan shows the selected entries one a line, task by task, in stored order
(key group, state, key, namespace). Select with --state, --prefix (or
--prefix-hex), --key-groups, --operator and --subtask; --limit stops after
that many entries.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validShow(show); err != nil {
				return err
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d is negative", limit)
			}
			flt, err := f.filter()
			if err != nil {
				return err
			}
			if flt.KeyPrefix, err = prefix.bytes(cmd, "prefix"); err != nil {
				return err
			}
			r, closeFn, err := openState(cmd, args[0], &f, nil)
			if err != nil {
				return err
			}
			defer closeFn()
			n, err := printEntries(cmd, r, flt, show, limit, nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d entries\n", n)
			return nil
		},
	}
	addStateFlags(cmd, &f)
	prefix.add(cmd, "prefix", "only keys that start with this prefix")
	cmd.Flags().StringVar(&show, "show", "auto", "how to show bytes: auto (JSON, text or hex, as fits), text, hex or json")
	cmd.Flags().IntVar(&limit, "limit", 0, "stop after this many entries (0: no limit)")
	return cmd
}

// errLimit stops a scan at --limit.
var errLimit = errors.New("limit reached")

// printEntries prints the entries flt selects (and keep, when set,
// accepts) as a table, up to limit (0: all), and returns how many.
func printEntries(cmd *cobra.Command, r *inspect.Reader, flt inspect.Filter, show string, limit int, keep func(*inspect.Entry) bool) (int, error) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tKIND\tKEY GROUP\tKEY\tNAMESPACE\tENTRY")
	n := 0
	err := r.Scan(cmd.Context(), flt, func(e *inspect.Entry) error {
		if keep != nil && !keep(e) {
			return nil
		}
		if limit > 0 && n == limit {
			return errLimit
		}
		n++
		fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Operator, e.Subtask, e.State, e.Kind, e.KeyGroup,
			showBytes(e.Key, show), showBytes(e.Namespace, show), entryText(e, show))
		return nil
	})
	if ferr := tw.Flush(); err == nil {
		err = ferr
	}
	if errors.Is(err, errLimit) {
		err = nil
	}
	return n, err
}

// entryText is what an entry holds, by its kind.
func entryText(e *inspect.Entry, show string) string {
	var s string
	switch e.Kind {
	case backend.KindValue:
		s = showBytes(e.Value, show)
	case backend.KindList:
		s = fmt.Sprintf("[%d] %s", e.Index, showBytes(e.Value, show))
	case backend.KindMap:
		s = showBytes(e.UserKey, show) + " => " + showBytes(e.Value, show)
	case backend.KindAggregate:
		s = e.Number.String()
	case backend.KindTimers:
		s = fmt.Sprintf("at %d", e.Timestamp)
	}
	if e.Expiry != 0 {
		s += fmt.Sprintf(" (expires %d)", e.Expiry)
	}
	return s
}
