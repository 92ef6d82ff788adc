package catalog

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/statedhq/stated/backend"
)

// commandVersion is the version of the command encoding: a JSON object
// with "v", refused (naming the version) by a reader that does not know
// it, so that a node of a later version never half-reads an entry.
// Version 2 adds add-handle's "token" (the fencing token of the report);
// a command is written at version 1 unless it (or a command of its batch)
// carries a token, so that nodes of version 1 still read the rest.
// Version 3 adds savepoint-adopted, written at version 3 (a node of an
// older build refuses it as newer, never as damage); every other command
// keeps its version.
const (
	commandVersion1 = 1
	commandVersion2 = 2
	commandVersion  = 3
)

// wireCommand is a command as encoded.
type wireCommand struct {
	V             int               `json:"v"`
	Op            string            `json:"op"`
	Job           string            `json:"job,omitempty"`
	ID            uint64            `json:"id,omitempty"`
	Now           time.Time         `json:"now,omitzero"`
	Handles       []*backend.Handle `json:"handles,omitempty"`
	Token         uint64            `json:"token,omitempty"`
	Manifest      []byte            `json:"manifest,omitempty"`
	Status        Status            `json:"status,omitempty"`
	Reason        string            `json:"reason,omitempty"`
	Savepoint     string            `json:"savepoint,omitempty"`
	FromJob       string            `json:"fromJob,omitempty"`
	Mode          Mode              `json:"mode,omitempty"`
	AllowFallback bool              `json:"allowFallback,omitempty"`
	Owner         string            `json:"owner,omitempty"`
	Pinned        bool              `json:"pinned,omitempty"`
	At            time.Time         `json:"at,omitzero"`
	Image         []byte            `json:"image,omitempty"`
	// Batch are commands whole, not their encodings: one pass of the
	// decoder reads them with their batch (a replica decodes every
	// completion's batch, its handles and manifest the bulk of it).
	Batch []wireCommand `json:"batch,omitempty"`
}

// maxBatch bounds the commands of one batch.
const maxBatch = 64

// encodeCommand serializes cmd: everything the machine's decision on it
// depends on (the decoded manifest it may carry is not: the machine
// decodes Manifest again when it is missing).
func encodeCommand(cmd command) ([]byte, error) {
	w, err := cmd.wire()
	if err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// wire is cmd as encoded.
func (cmd command) wire() (wireCommand, error) {
	if int(cmd.Op) >= len(opNames) || opNames[cmd.Op] == "" {
		return wireCommand{}, fmt.Errorf("%w: unknown catalog command %s", ErrInvalidArgument, cmd.Op)
	}
	var batch []wireCommand
	v := commandVersion1
	v = max(v, cmd.version())
	for _, sub := range cmd.Batch {
		v = max(v, sub.version())
		if sub.Op == opBatch {
			return wireCommand{}, fmt.Errorf("%w: a batch inside a batch", ErrInvalidArgument)
		}
		w, err := sub.wire()
		if err != nil {
			return wireCommand{}, err
		}
		batch = append(batch, w)
	}
	return wireCommand{V: v, Op: opNames[cmd.Op], Job: cmd.Job, ID: cmd.ID, Now: cmd.Now, Batch: batch,
		Handles: cmd.Handles, Token: cmd.Token, Manifest: cmd.Manifest, Status: cmd.Status, Reason: cmd.Reason, Savepoint: cmd.Savepoint,
		FromJob: cmd.FromJob, Mode: cmd.Mode, AllowFallback: cmd.AllowFallback, Owner: cmd.Owner, Pinned: cmd.Pinned, At: cmd.At,
		Image: cmd.Image}, nil
}

// version is the oldest command version that carries cmd (not its
// batch's commands).
func (cmd command) version() int {
	switch {
	case cmd.Op == opSavepointAdopted:
		return commandVersion
	case cmd.Token != 0:
		return commandVersion2
	}
	return commandVersion1
}

// decodeCommand parses and checks an encoded command: a known version and
// operation, valid names, and handles that pass backend.Handle.Validate.
// Damage is an error wrapping ErrCorrupt, a newer version one wrapping
// backend.ErrIncompatible.
func decodeCommand(data []byte) (command, error) {
	var w wireCommand
	if err := strictUnmarshal(data, &w); err != nil {
		return command{}, fmt.Errorf("%w: catalog command: %v", ErrCorrupt, err)
	}
	return commandOf(w)
}

// commandOf checks a decoded command (decodeCommand).
func commandOf(w wireCommand) (command, error) {
	if w.V < commandVersion1 || w.V > commandVersion {
		return command{}, fmt.Errorf("%w: catalog command version %d (this build reads %d)", backend.ErrIncompatible, w.V, commandVersion)
	}
	var kind op
	for i, name := range opNames {
		if name != "" && name == w.Op {
			kind = op(i)
		}
	}
	if kind == 0 {
		return command{}, fmt.Errorf("%w: unknown catalog command %q", ErrCorrupt, w.Op)
	}
	for _, job := range []string{w.Job, w.FromJob, w.Owner} {
		if job != "" {
			if err := ValidateJob(job); err != nil {
				return command{}, fmt.Errorf("%w: catalog command %s: %v", ErrCorrupt, w.Op, err)
			}
		}
	}
	if w.Savepoint != "" {
		if err := ValidateSavepointID(w.Savepoint); err != nil {
			return command{}, fmt.Errorf("%w: catalog command %s: %v", ErrCorrupt, w.Op, err)
		}
	}
	for i, h := range w.Handles {
		if h == nil {
			return command{}, fmt.Errorf("%w: catalog command %s: handle %d is null", ErrCorrupt, w.Op, i)
		}
		if err := h.Validate(); err != nil {
			return command{}, fmt.Errorf("%w: catalog command %s: %v", ErrCorrupt, w.Op, err)
		}
	}
	if w.Mode != "" {
		if _, err := ParseMode(string(w.Mode)); err != nil {
			return command{}, fmt.Errorf("%w: catalog command %s: %v", ErrCorrupt, w.Op, err)
		}
	}
	var batch []command
	if len(w.Batch) > maxBatch {
		return command{}, fmt.Errorf("%w: catalog command batch of %d commands (at most %d)", ErrCorrupt, len(w.Batch), maxBatch)
	}
	for i, ws := range w.Batch {
		sub, err := commandOf(ws)
		if err != nil {
			return command{}, fmt.Errorf("command %d of a batch: %w", i, err)
		}
		if sub.Op == opBatch {
			return command{}, fmt.Errorf("%w: a batch inside a batch", ErrCorrupt)
		}
		batch = append(batch, sub)
	}
	if kind == opSavepointAdopted && w.V < commandVersion {
		return command{}, fmt.Errorf("%w: catalog command %s at version %d (it needs %d)", ErrCorrupt, w.Op, w.V, commandVersion)
	}
	if w.Token != 0 && (w.V == commandVersion1 || kind != opAddHandle) {
		return command{}, fmt.Errorf("%w: catalog command %s (version %d) with a fencing token", ErrCorrupt, w.Op, w.V)
	}
	return command{Batch: batch, Op: kind, Job: w.Job, ID: w.ID, Now: w.Now, Handles: w.Handles, Token: w.Token, Manifest: w.Manifest,
		Status: w.Status, Reason: w.Reason, Savepoint: w.Savepoint, FromJob: w.FromJob, Mode: w.Mode,
		AllowFallback: w.AllowFallback, Owner: w.Owner, Pinned: w.Pinned, At: w.At, Image: w.Image}, nil
}
