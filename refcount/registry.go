package refcount

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Sentinel errors. Returned errors wrap them and name the owner and object.
var (
	// ErrConflict: an object name is registered with two different sizes or
	// checksums, or an owner is registered twice with different objects.
	ErrConflict = errors.New("refcount: conflicting registration")
	// ErrInvalid: an empty owner or object name.
	ErrInvalid = errors.New("refcount: invalid registration")
)

// Object is one referenced stored object.
type Object struct {
	// Path is the full object name inside the checkpoint root.
	Path string
	// Size is the object's size in bytes.
	Size int64
	// CRC32C is the object's checksum; 0 means unknown (not compared).
	CRC32C uint32
}

type entry struct {
	obj   Object
	count int
}

// Registry counts, for every object, the owners that reference it.
// The zero value is not usable; call New.
type Registry struct {
	mu      sync.Mutex
	objects map[string]*entry
	owners  map[string][]Object // sorted by Path, no duplicates
	bytes   int64
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{objects: map[string]*entry{}, owners: map[string][]Object{}}
}

// Rebuild returns a registry holding the owners of owners, registered in
// turn in sorted order. It is how the catalog recovers after a restart:
// catalog.Open reads every retained manifest and passes what each
// references. An owner whose registration fails (ErrConflict: a name it
// lists was registered first with other bytes; ErrInvalid) is left out and
// its error returned in refused (nil when none was), so one damaged
// manifest does not hide the others; the caller decides what to keep.
func Rebuild(owners map[string][]Object) (r *Registry, refused map[string]error) {
	r = New()
	names := make([]string, 0, len(owners))
	for o := range owners {
		names = append(names, o)
	}
	sort.Strings(names)
	for _, o := range names {
		if err := r.Register(o, owners[o]); err != nil {
			if refused == nil {
				refused = map[string]error{}
			}
			refused[o] = err
		}
	}
	return r, refused
}

// normalize sorts objs by path and removes duplicates (one owner counts once
// per object, however many of its handles list it).
func normalize(owner string, objs []Object) ([]Object, error) {
	out := append([]Object(nil), objs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	w := 0
	for i, o := range out {
		if o.Path == "" {
			return nil, fmt.Errorf("%w: owner %q lists an object with an empty name", ErrInvalid, owner)
		}
		if w > 0 && out[w-1].Path == o.Path {
			if !same(out[w-1], o) {
				return nil, fmt.Errorf("%w: owner %q lists object %s twice with different size or checksum (%d/%08x, %d/%08x)",
					ErrConflict, owner, o.Path, out[w-1].Size, out[w-1].CRC32C, o.Size, o.CRC32C)
			}
			if out[w-1].CRC32C == 0 {
				out[w-1].CRC32C = o.CRC32C
			}
			continue
		}
		out[w] = out[i]
		w++
	}
	return out[:w], nil
}

func same(a, b Object) bool {
	return a.Size == b.Size && (a.CRC32C == 0 || b.CRC32C == 0 || a.CRC32C == b.CRC32C)
}

// Register records that owner references objs. Registering an owner again
// with the same objects is a no-op (so retried completions are harmless);
// with other objects it is ErrConflict. An object already referenced by
// another owner with a different size or checksum is ErrConflict and
// nothing is registered.
func (r *Registry) Register(owner string, objs []Object) error {
	if owner == "" {
		return fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	norm, err := normalize(owner, objs)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.owners[owner]; ok {
		if !equalObjects(old, norm) {
			return fmt.Errorf("%w: owner %q is already registered with other objects", ErrConflict, owner)
		}
		return nil
	}
	for _, o := range norm {
		if e, ok := r.objects[o.Path]; ok && !same(e.obj, o) {
			return fmt.Errorf("%w: object %s is referenced with size %d crc %08x, owner %q says size %d crc %08x (an object name was reused?)",
				ErrConflict, o.Path, e.obj.Size, e.obj.CRC32C, owner, o.Size, o.CRC32C)
		}
	}
	for _, o := range norm {
		e, ok := r.objects[o.Path]
		if !ok {
			e = &entry{obj: o}
			r.objects[o.Path] = e
			r.bytes += o.Size
		} else if e.obj.CRC32C == 0 {
			e.obj.CRC32C = o.CRC32C
		}
		e.count++
	}
	r.owners[owner] = norm
	return nil
}

func equalObjects(a, b []Object) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Path != b[i].Path || !same(a[i], b[i]) {
			return false
		}
	}
	return true
}

// Unregister removes owner and returns, sorted by path, the objects no
// remaining owner references. An unknown owner returns nil (unregistering
// twice is harmless).
func (r *Registry) Unregister(owner string) []Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	objs, ok := r.owners[owner]
	if !ok {
		return nil
	}
	delete(r.owners, owner)
	var dropped []Object
	for _, o := range objs {
		e := r.objects[o.Path]
		e.count--
		if e.count == 0 {
			delete(r.objects, o.Path)
			r.bytes -= e.obj.Size
			dropped = append(dropped, e.obj)
		}
	}
	return dropped
}

// Count is the number of owners referencing path.
func (r *Registry) Count(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.objects[path]; ok {
		return e.count
	}
	return 0
}

// Lookup returns the registered object under path.
func (r *Registry) Lookup(path string) (Object, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.objects[path]; ok {
		return e.obj, true
	}
	return Object{}, false
}

// Has reports whether owner is registered.
func (r *Registry) Has(owner string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.owners[owner]
	return ok
}

// Objects returns owner's objects sorted by path (nil for an unknown owner).
func (r *Registry) Objects(owner string) []Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Object(nil), r.owners[owner]...)
}

// Owners returns the registered owners, sorted.
func (r *Registry) Owners() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.owners))
	for o := range r.owners {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}

// Stats are the registry's totals, for metrics.
type Stats struct {
	Owners  int
	Objects int
	Bytes   int64
}

// Stats returns the number of owners, distinct referenced objects and their
// total size.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Owners: len(r.owners), Objects: len(r.objects), Bytes: r.bytes}
}
