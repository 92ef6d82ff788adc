package fuzz

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/statedhq/stated/internal/frame"
)

// Mutation kinds (the low 3 bits of a mutation's first byte).
const (
	mutFlip     = iota // flip bit (hi & 7) of the byte at offset
	mutTruncate        // cut the object at offset
	mutZero            // zero hi+1 bytes from offset
	mutDelete          // remove the object
	mutSwap            // swap the contents of two objects
	mutReplace         // put another object's content under this name
	mutEdit            // edit field other+256*(hi>>2) of a framed JSON object (manifest, job file), re-framed validly
	mutAppend          // append hi+1 bytes
	numMutations
)

var mutationNames = [numMutations]string{"flip", "truncate", "zero", "delete", "swap", "replace", "edit", "append"}

// mutation is one damage done to the objects of a fixture.
type mutation struct {
	kind   int
	hi     int // the first byte's high bits: a bit, a length or a field value
	obj    int // index into the sorted names
	other  int // the second object (swap, replace), or the field (edit)
	offset int
}

// mutationSize is the encoded size of a mutation in a fuzz input.
const mutationSize = 5

// maxMutations bounds the mutations of one input.
const maxMutations = 6

// parseMutations decodes input: 5 bytes per mutation (kind|hi<<3, object,
// other, offset as u16 big-endian), at most maxMutations.
func parseMutations(in []byte) []mutation {
	var out []mutation
	for len(in) >= mutationSize && len(out) < maxMutations {
		out = append(out, mutation{kind: int(in[0] & 7), hi: int(in[0] >> 3), obj: int(in[1]), other: int(in[2]),
			offset: int(binary.BigEndian.Uint16(in[3:5]))})
		in = in[mutationSize:]
	}
	return out
}

// encodeMutations is the inverse of parseMutations (for seeds).
func encodeMutations(ms ...mutation) []byte {
	var out []byte
	for _, m := range ms {
		out = append(out, byte(m.kind&7|m.hi<<3), byte(m.obj), byte(m.other))
		out = binary.BigEndian.AppendUint16(out, uint16(m.offset))
	}
	return out
}

// applyLeaf does m to objects (names are the fixture's sorted names) and
// returns the names it changed and the JSON path of the leaf an edit
// changed ("" for other mutations).
func (m mutation) applyLeaf(objects map[string][]byte, names []string) ([]string, string) {
	if len(names) == 0 {
		return nil, ""
	}
	name := names[m.obj%len(names)]
	b, ok := objects[name]
	if !ok {
		return nil, "" // deleted by an earlier mutation
	}
	switch m.kind {
	case mutFlip:
		if len(b) == 0 {
			return nil, ""
		}
		b[m.offset%len(b)] ^= 1 << (m.hi & 7)
	case mutTruncate:
		if len(b) == 0 {
			return nil, ""
		}
		objects[name] = b[:m.offset%len(b)]
	case mutZero:
		if len(b) == 0 {
			return nil, ""
		}
		off := m.offset % len(b)
		end := min(len(b), off+m.hi+1)
		if bytes.Count(b[off:end], []byte{0}) == end-off {
			return nil, ""
		}
		clear(b[off:end])
	case mutDelete:
		delete(objects, name)
	case mutSwap, mutReplace:
		other := names[m.other%len(names)]
		ob, ok := objects[other]
		if !ok || other == name || bytes.Equal(ob, b) {
			return nil, ""
		}
		objects[name] = append([]byte(nil), ob...)
		if m.kind == mutReplace {
			return []string{name}, ""
		}
		objects[other] = b
		return []string{name, other}, ""
	case mutEdit:
		// A manifest of two tasks with channel state has more than 256
		// leaves: the high bits of hi reach the rest.
		nb, leaf, ok := editField(b, m.other+256*(m.hi>>2), m.hi, m.offset)
		if !ok {
			return nil, ""
		}
		objects[name] = nb
		return []string{name}, leaf
	case mutAppend:
		objects[name] = append(b, bytes.Repeat([]byte{byte(m.offset)}, m.hi+1)...)
	}
	return []string{name}, ""
}

func (m mutation) String() string {
	return fmt.Sprintf("%s(obj %d, other %d, hi %d, offset %d)", mutationNames[m.kind], m.obj, m.other, m.hi, m.offset)
}

// frameMagics are the framed JSON objects a fixture holds: manifests and
// job files.
var frameMagics = []string{"STMF", "STJC"}

// editField changes one leaf of the JSON payload of a framed object and
// frames it again with a valid checksum, as a writer with a bug would:
// field picks the leaf (in sorted path order of editableLeaves), hi and
// val the new value. It returns the leaf's path, and reports false for
// objects that are not framed JSON.
func editField(b []byte, field, hi, val int) ([]byte, string, bool) {
	magic, version, doc, leaves, ok := editableLeaves(b)
	if !ok {
		return nil, "", false
	}
	target := leaves[field%len(leaves)]
	doc = setLeaf(doc, "", target, func(v any) any { return newValue(v, hi, val) })
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, "", false
	}
	return frame.Encode(magic, version, out), target, true
}

// editableLeaves decodes a framed JSON object and returns its leaves that
// an edit may change, sorted; false when b is no framed JSON object or has
// no such leaf.
func editableLeaves(b []byte) (magic string, version uint16, doc any, leaves []string, ok bool) {
	if len(b) < 4 {
		return "", 0, nil, nil, false
	}
	magic = string(b[:4])
	known := false
	for _, m := range frameMagics {
		known = known || m == magic
	}
	if !known {
		return "", 0, nil, nil, false
	}
	version, payload, err := frame.Decode(magic, b)
	if err != nil {
		return "", 0, nil, nil, false
	}
	if err := json.Unmarshal(payload, &doc); err != nil {
		return "", 0, nil, nil, false
	}
	walkLeaves(doc, "", func(p string, _ any) {
		// Operator state is inline data of the manifest, guarded by its
		// checksum alone, and a handle's operator says whose state it is
		// (a checkpoint may hold some subtasks of an operator only);
		// likewise a channel's id says which channel the segments are
		// (segments do not repeat it): edited and framed again, each is
		// other valid state, not damage a restore could see.
		if !strings.Contains(p, "/operatorState/") && !strings.HasSuffix(p, "/task/operator") && !strings.Contains(p, "/channel/") {
			leaves = append(leaves, p)
		}
	})
	if len(leaves) == 0 {
		return "", 0, nil, nil, false
	}
	sort.Strings(leaves)
	return magic, version, doc, leaves, true
}

func walkLeaves(v any, path string, fn func(string, any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			walkLeaves(c, path+"/"+k, fn)
		}
	case []any:
		for i, c := range x {
			walkLeaves(c, fmt.Sprintf("%s/%d", path, i), fn)
		}
	default:
		fn(path, v)
	}
}

func setLeaf(v any, path, target string, f func(any) any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if p := path + "/" + k; p == target || strings.HasPrefix(target, p+"/") {
				x[k] = setLeaf(c, p, target, f)
			}
		}
		return x
	case []any:
		for i, c := range x {
			if p := fmt.Sprintf("%s/%d", path, i); p == target || strings.HasPrefix(target, p+"/") {
				x[i] = setLeaf(c, p, target, f)
			}
		}
		return x
	}
	if path == target {
		return f(v)
	}
	return v
}

// newValue is a changed value of the same JSON type (hi picks how).
func newValue(v any, hi, val int) any {
	switch x := v.(type) {
	case float64:
		switch hi % 4 {
		case 0:
			return x + 1
		case 1:
			return x - 1
		case 2:
			return float64(val)
		}
		return -x - 1
	case string:
		switch hi % 4 {
		case 0:
			return x + "x"
		case 1:
			return ""
		case 2:
			if x == "" {
				return "../x"
			}
			return x[:len(x)-1]
		}
		return "../" + x
	case bool:
		return !x
	case nil:
		return float64(val)
	}
	return v
}
