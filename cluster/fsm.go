package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// The replicated state machine. Commands (protobuf from version 5, JSON
// before) and snapshots (JSON) carry a version number, so that a node of
// a later version can read what an earlier one wrote, and refuses, naming
// the version, what it cannot.
// The machine is deterministic: it decides from the commands alone (no
// clock, no randomness, no I/O), which is what lets every node reach the
// same state from the same log.
const (
	// commandVersion 2 adds the journal's put and delete-range; a node
	// of version 1 refuses them. Version 3 adds put-many's Checks,
	// version 4 the service's commands. Version 5 is the same command in
	// protobuf (clusterpb.Command behind the byte binaryCommand) instead
	// of JSON: a completion's entry is the catalog's command, which JSON
	// carried in base64 (a third larger, and decoded on every node, the
	// leader's decode on the completion's path). Versions 1-4 stay
	// readable: a node's log and snapshots may hold them. Snapshot
	// version 2 adds the service's image.
	commandVersion  = 5
	jsonVersion     = 4 // the newest JSON command version
	snapshotVersion = 2
	// binaryCommand is the first byte of a command of version 5 on; a
	// JSON command's is '{'.
	binaryCommand = 0x01
)

// Operations of the machine.
const (
	opAcquire = "acquire" // take a new fencing token for a task
	opCheck   = "check"   // is a token still the task's newest?
	opRelease = "release" // a holder gives a task up
	// The journal: small records the leader's services keep through
	// leader changes (the catalog's reported handles).
	opPut         = "put"          // set Key to Value
	opDeleteRange = "delete-range" // delete the keys in [Key, To)
	opPutMany     = "put-many"     // set every key of Records
	// opService hands Value to the Service, if Checks hold.
	opService = "service"
)

// Bounds of the journal: its users delete what they settled, and these
// keep a user that does not from growing the state (and snapshots)
// without limit.
const (
	maxJournalKeys  = 1 << 16
	maxJournalValue = 2 << 20 // in a command, well under gRPC's 4 MiB message limit
)

// command is one entry of the raft log (encodeCommand; its JSON names
// are those of versions 1-4).
type command struct {
	V  int    `json:"v"`
	Op string `json:"op"`
	// Task names the fenced unit: "<job>/<operator>/<subtask>".
	Task string `json:"task"`
	// Holder is the node id that acquires or releases.
	Holder string `json:"holder,omitempty"`
	// Token is the token checked or released.
	Token uint64 `json:"token,omitempty"`
	// Req identifies the caller's operation: a retry of an acquire or a
	// release whose first attempt was applied (its answer lost with a
	// leader) gets that first answer again instead of applying twice.
	Req string `json:"req,omitempty"`
	// Key, Value and To are the journal's (put, delete-range).
	Key   string `json:"key,omitempty"`
	Value []byte `json:"value,omitempty"`
	To    string `json:"to,omitempty"`
	// Records are put-many's keys and values.
	Records map[string][]byte `json:"records,omitempty"`
	// Checks are put-many's conditions: a record whose key has a check
	// is set only while that check's token is its task's newest, in the
	// same step, so no write can land between a check and the record.
	// A service command is applied only if every check holds.
	Checks map[string]Check `json:"checks,omitempty"`
}

// Check is a condition of a journal record: Token must be Task's newest.
type Check struct {
	Task  string `json:"task"`
	Token uint64 `json:"token"`
}

// maxDone bounds the remembered answers of acquires and releases. A retry
// comes within the caller's deadline (seconds), so the newest few
// thousand answers are plenty; the bound keeps the state, and snapshots,
// from growing with every open.
const maxDone = 4096

// result is what a command returns.
type result struct {
	Token  uint64 `json:"token,omitempty"`
	Holder string `json:"holder,omitempty"`
	// Fenced: the token checked or released is not the task's newest.
	Fenced bool   `json:"fenced,omitempty"`
	Err    string `json:"err,omitempty"`
	// Refused are put-many's records not set because their check failed,
	// with the task's newest token and holder.
	Refused map[string]fence `json:"refused,omitempty"`
}

// fence is the newest token of a task and who holds it.
type fence struct {
	Token  uint64 `json:"token"`
	Holder string `json:"holder"`
}

// state is the machine's whole state, as snapshots hold it.
type state struct {
	V int `json:"v"`
	// Next is the last token handed out: tokens grow across all tasks,
	// so a token is never reused, even for a task released and taken
	// again.
	Next   uint64           `json:"next"`
	Fences map[string]fence `json:"fences"`
	// Done are the answers of the newest acquires and releases by
	// request id, DoneOrder their ids oldest first (at most maxDone).
	Done      map[string]result `json:"done,omitempty"`
	DoneOrder []string          `json:"done_order,omitempty"`
	// Journal holds the records put by the leader's services.
	Journal map[string][]byte `json:"journal,omitempty"`
	// Service is the image of the Service (version 2).
	Service []byte `json:"service,omitempty"`
}

// fsm is the raft.FSM of a node.
type fsm struct {
	mu sync.RWMutex
	st state
	// applied is the index of the last command applied, or of an entry
	// every earlier entry of which is known applied (raise).
	applied uint64
	// changed is closed, and replaced, whenever applied grows.
	changed chan struct{}
	// beforeApply (tests only) runs before each command is applied,
	// outside the lock.
	beforeApply atomic.Pointer[func()]
	// service is Options.Service (nil: none).
	service Service
}

func newFSM(service Service) *fsm {
	return &fsm{service: service, st: state{V: snapshotVersion, Fences: map[string]fence{}, Done: map[string]result{}, Journal: map[string][]byte{}},
		changed: make(chan struct{})}
}

// advanceLocked records that every entry up to index is applied.
func (f *fsm) advanceLocked(index uint64) {
	if index > f.applied {
		f.applied = index
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// raise records that every entry up to index is applied (a barrier at a
// later index returned).
func (f *fsm) raise(index uint64) {
	f.mu.Lock()
	f.advanceLocked(index)
	f.mu.Unlock()
}

// waitApplied waits until the machine applied every entry up to index.
func (f *fsm) waitApplied(ctx context.Context, index uint64) error {
	for {
		f.mu.RLock()
		applied, changed := f.applied, f.changed
		f.mu.RUnlock()
		if applied >= index {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for index %d to apply (applied %d): %w", index, applied, ctx.Err())
		}
	}
}

// encodeCommand encodes c at commandVersion: binaryCommand, then c as a
// clusterpb.Command. A command protobuf cannot carry (a string that is
// not UTF-8, which proto3 refuses) goes as JSON of version 4, which
// every node reads the same way.
func encodeCommand(c command) []byte {
	pc := &pb.Command{V: commandVersion, Op: c.Op, Task: c.Task, Holder: c.Holder, Token: c.Token, Req: c.Req, Key: c.Key,
		Value: c.Value, To: c.To, Records: c.Records}
	if len(c.Checks) > 0 {
		pc.Checks = make(map[string]*pb.CommandCheck, len(c.Checks))
		for k, ck := range c.Checks {
			pc.Checks[k] = &pb.CommandCheck{Task: ck.Task, Token: ck.Token}
		}
	}
	// Deterministic: map entries in key order, so that a command encodes
	// to the same bytes every time (pinned_test.go).
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend([]byte{binaryCommand}, pc)
	if err != nil {
		return encodeJSONCommand(c)
	}
	return b
}

// encodeJSONCommand encodes c as JSON at version 4 (jsonVersion).
func encodeJSONCommand(c command) []byte {
	c.V = jsonVersion
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // a struct of strings and integers always encodes
	}
	return b
}

// decodeCommand reads a command of any version: JSON (1-4) or protobuf
// (5 on).
func decodeCommand(b []byte) (command, error) {
	if len(b) > 0 && b[0] == binaryCommand {
		return decodeBinaryCommand(b[1:])
	}
	var c command
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("cluster: command: %w", err)
	}
	if c.V < 1 || c.V > jsonVersion {
		return c, fmt.Errorf("cluster: JSON command version %d: this node reads 1..%d in JSON (and %d..%d in protobuf)",
			c.V, jsonVersion, jsonVersion+1, commandVersion)
	}
	return c, nil
}

func decodeBinaryCommand(b []byte) (command, error) {
	var pc pb.Command
	if err := proto.Unmarshal(b, &pc); err != nil {
		return command{}, fmt.Errorf("cluster: command: %w", err)
	}
	if pc.V <= jsonVersion || pc.V > commandVersion {
		return command{}, fmt.Errorf("cluster: command version %d in protobuf: this node reads %d..%d in protobuf", pc.V, jsonVersion+1, commandVersion)
	}
	c := command{V: int(pc.V), Op: pc.Op, Task: pc.Task, Holder: pc.Holder, Token: pc.Token, Req: pc.Req, Key: pc.Key,
		Value: pc.Value, To: pc.To}
	if len(pc.Records) > 0 {
		c.Records = pc.Records
	}
	if len(pc.Checks) > 0 {
		c.Checks = make(map[string]Check, len(pc.Checks))
		for k, ck := range pc.Checks {
			c.Checks[k] = Check{Task: ck.GetTask(), Token: ck.GetToken()}
		}
	}
	return c, nil
}

// Apply implements raft.FSM. An undecodable command fails that command
// only: the log is the same on every node, so every node fails it alike.
func (f *fsm) Apply(l *raft.Log) any {
	if hook := f.beforeApply.Load(); hook != nil {
		(*hook)()
	}
	if l.Type != raft.LogCommand {
		f.raise(l.Index)
		return nil
	}
	c, err := decodeCommand(l.Data)
	if err != nil {
		f.raise(l.Index)
		return result{Err: err.Error()}
	}
	if c.Op == opService {
		defer f.raise(l.Index)
		return f.applyService(c)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceLocked(l.Index)
	return f.st.apply(c)
}

// applyService hands a service command to the Service if its checks
// hold; a refusal is a *ServiceRefusal, the same on every node.
//
// The Service runs outside f.mu: it takes its own lock, under which its
// owner reads this machine (the catalog asks the journal which log
// segments are held), so holding f.mu across it would take the two locks
// in the other order and deadlock. Nothing changes the tokens between the
// checks and the Service's apply: raft applies one entry at a time, and
// only applies change them.
func (f *fsm) applyService(c command) any {
	if f.service == nil {
		return &ServiceRefusal{Err: errors.New("cluster: this node runs no service")}
	}
	var errs []error
	f.mu.Lock()
	for _, k := range slices.Sorted(maps.Keys(c.Checks)) {
		ck := c.Checks[k]
		if r := f.st.applyOnce(command{Op: opCheck, Task: ck.Task, Token: ck.Token}); r.Fenced {
			errs = append(errs, fenced(ck.Task, ck.Token, r))
		}
	}
	f.mu.Unlock()
	if len(errs) > 0 {
		return &ServiceRefusal{Err: errors.Join(errs...)}
	}
	return f.service.Apply(c.Value)
}

// ServiceRefusal is what Propose's log entry answered when the service
// never saw the command: a check failed (wrapping ErrFenced).
type ServiceRefusal struct{ Err error }

func (r *ServiceRefusal) Error() string { return r.Err.Error() }
func (r *ServiceRefusal) Unwrap() error { return r.Err }

func (s *state) apply(c command) result {
	switch c.Op {
	case opPut:
		_, exists := s.Journal[c.Key]
		switch {
		case c.Key == "":
			return result{Err: "cluster: a journal put without a key"}
		case len(c.Value) > maxJournalValue:
			return result{Err: fmt.Sprintf("cluster: journal record %q of %d bytes (at most %d)", c.Key, len(c.Value), maxJournalValue)}
		case !exists && len(s.Journal) >= maxJournalKeys:
			return result{Err: fmt.Sprintf("cluster: the journal holds %d records already (at most %d)", len(s.Journal), maxJournalKeys)}
		}
		s.Journal[c.Key] = slices.Clone(c.Value)
		return result{}
	case opPutMany:
		// All or nothing: every record is checked before any is set.
		added := 0
		for k, v := range c.Records {
			if k == "" {
				return result{Err: "cluster: a journal put without a key"}
			}
			if len(v) > maxJournalValue {
				return result{Err: fmt.Sprintf("cluster: journal record %q of %d bytes (at most %d)", k, len(v), maxJournalValue)}
			}
			if _, ok := s.Journal[k]; !ok {
				added++
			}
		}
		if len(s.Journal)+added > maxJournalKeys {
			return result{Err: fmt.Sprintf("cluster: the journal holds %d records already (at most %d)", len(s.Journal), maxJournalKeys)}
		}
		var r result
		for k, v := range c.Records {
			if ck, ok := c.Checks[k]; ok {
				if cur, held := s.Fences[ck.Task]; !held || cur.Token != ck.Token {
					if r.Refused == nil {
						r.Refused = map[string]fence{}
					}
					r.Refused[k] = cur
					continue
				}
			}
			s.Journal[k] = slices.Clone(v)
		}
		return r
	case opDeleteRange:
		for k := range s.Journal {
			if k >= c.Key && k < c.To {
				delete(s.Journal, k)
			}
		}
		return result{}
	}
	if c.Task == "" {
		return result{Err: "cluster: a command without a task"}
	}
	if c.Req != "" && c.Op != opCheck {
		if r, ok := s.Done[c.Req]; ok {
			return r
		}
		r := s.applyOnce(c)
		s.Done[c.Req] = r
		s.DoneOrder = append(s.DoneOrder, c.Req)
		if len(s.DoneOrder) > maxDone {
			delete(s.Done, s.DoneOrder[0])
			s.DoneOrder = s.DoneOrder[1:]
		}
		return r
	}
	return s.applyOnce(c)
}

func (s *state) applyOnce(c command) result {
	cur, held := s.Fences[c.Task]
	switch c.Op {
	case opAcquire:
		if c.Holder == "" {
			return result{Err: "cluster: acquire without a holder"}
		}
		s.Next++
		s.Fences[c.Task] = fence{Token: s.Next, Holder: c.Holder}
		return result{Token: s.Next, Holder: c.Holder}
	case opCheck:
		if !held || cur.Token != c.Token {
			return result{Fenced: true, Token: cur.Token, Holder: cur.Holder}
		}
		return result{Token: cur.Token, Holder: cur.Holder}
	case opRelease:
		if !held || cur.Token != c.Token {
			return result{Fenced: true, Token: cur.Token, Holder: cur.Holder}
		}
		delete(s.Fences, c.Task)
		return result{}
	default:
		return result{Err: fmt.Sprintf("cluster: unknown operation %q", c.Op)}
	}
}

// Snapshot implements raft.FSM. Raft calls it between two applies, on
// the goroutine that applies, so the state and the Service's image match
// the index raft snapshots at; the image is taken outside f.mu, as
// applyService runs the Service (lock order).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	st := state{V: snapshotVersion, Next: f.st.Next, Fences: maps.Clone(f.st.Fences), Done: maps.Clone(f.st.Done),
		DoneOrder: slices.Clone(f.st.DoneOrder), Journal: maps.Clone(f.st.Journal)}
	f.mu.RUnlock()
	if f.service != nil {
		img, err := f.service.Image()
		if err != nil {
			return nil, fmt.Errorf("cluster: snapshot of the service: %w", err)
		}
		st.Service = img
	}
	return &snapshot{st: st}, nil
}

// Restore implements raft.FSM, on the goroutine that applies; the Service
// is restored outside f.mu (lock order, as applyService).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := decodeState(rc)
	if err != nil {
		return err
	}
	if len(st.Service) > 0 {
		if f.service == nil {
			return errors.New("cluster: the snapshot holds a service's state and this node runs none")
		}
		if err := f.service.Restore(st.Service); err != nil {
			return fmt.Errorf("cluster: restore the service from the snapshot: %w", err)
		}
	}
	st.Service = nil // held by the service, not twice
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	return nil
}

func decodeState(r io.Reader) (state, error) {
	var st state
	dec := json.NewDecoder(io.LimitReader(r, 1<<30))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("cluster: snapshot: %w", err)
	}
	if st.V < 1 || st.V > snapshotVersion {
		return st, fmt.Errorf("cluster: snapshot version %d: this node reads 1..%d", st.V, snapshotVersion)
	}
	if st.Fences == nil {
		st.Fences = map[string]fence{}
	}
	if st.Done == nil {
		st.Done = map[string]result{}
	}
	if st.Journal == nil {
		st.Journal = map[string][]byte{}
	}
	if len(st.Journal) > maxJournalKeys {
		return st, fmt.Errorf("cluster: snapshot: %d journal records (at most %d)", len(st.Journal), maxJournalKeys)
	}
	if len(st.Done) != len(st.DoneOrder) || len(st.DoneOrder) > maxDone {
		return st, fmt.Errorf("cluster: snapshot: %d remembered answers with %d ids in order (at most %d)", len(st.Done), len(st.DoneOrder), maxDone)
	}
	for _, id := range st.DoneOrder {
		if _, ok := st.Done[id]; !ok {
			return st, fmt.Errorf("cluster: snapshot: answer %q in order but not remembered", id)
		}
	}
	for t, fe := range st.Fences {
		if fe.Token == 0 || fe.Token > st.Next {
			return st, fmt.Errorf("cluster: snapshot: task %q has token %d beyond the last issued %d", t, fe.Token, st.Next)
		}
	}
	return st, nil
}

// lookup reads a task's fence from this node's copy (not linearizable).
func (f *fsm) lookup(task string) (fence, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fe, ok := f.st.Fences[task]
	return fe, ok
}

// journal returns the records under prefix from this node's copy.
func (f *fsm) journal(prefix string) map[string][]byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := map[string][]byte{}
	for k, v := range f.st.Journal {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

func (f *fsm) appliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

type snapshot struct{ st state }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.st); err != nil {
		return errors.Join(err, sink.Cancel())
	}
	return sink.Close()
}

func (s *snapshot) Release() {}
