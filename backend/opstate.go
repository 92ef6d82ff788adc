package backend

import "fmt"

// OperatorStateMode says how a named operator (non-keyed) list is
// redistributed when the parallelism changes. Frozen strings.
type OperatorStateMode string

const (
	// OperatorSplit: the union of all subtasks' elements is dealt out
	// round-robin to the new subtasks.
	OperatorSplit OperatorStateMode = "split"
	// OperatorUnion: every new subtask gets every element.
	OperatorUnion OperatorStateMode = "union"
)

// MaxOperatorStateBytes bounds the operator state of one task: it travels
// inline in the task's handle, so it must stay small (as in Flink, operator
// state is for offsets and small bookkeeping, not for data).
const MaxOperatorStateBytes = 4 << 20

// OperatorList is one named operator-state list of a subtask.
type OperatorList struct {
	Name     string            `json:"name"`
	Mode     OperatorStateMode `json:"mode"`
	Elements [][]byte          `json:"elements,omitempty"`
}

// ValidateOperatorState checks names, modes, duplicates and the size bound.
func ValidateOperatorState(lists []OperatorList) error {
	seen := map[string]bool{}
	total := 0
	for _, l := range lists {
		if len(l.Name) == 0 || len(l.Name) > MaxStateNameLen {
			return fmt.Errorf("%w: operator state name %q must have 1..%d bytes", ErrInvalidArgument, l.Name, MaxStateNameLen)
		}
		if l.Mode != OperatorSplit && l.Mode != OperatorUnion {
			return fmt.Errorf("%w: operator state %q has mode %q, want split or union", ErrInvalidArgument, l.Name, l.Mode)
		}
		if seen[l.Name] {
			return fmt.Errorf("%w: operator state %q appears twice", ErrInvalidArgument, l.Name)
		}
		seen[l.Name] = true
		for _, e := range l.Elements {
			total += len(e)
		}
	}
	if total > MaxOperatorStateBytes {
		return fmt.Errorf("%w: operator state of %d bytes exceeds the %d-byte bound", ErrInvalidArgument, total, MaxOperatorStateBytes)
	}
	return nil
}
