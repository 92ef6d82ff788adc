package backend

import (
	"fmt"
	"reflect"
	"testing"
)

// fillAll sets every field reachable from v to a value that is not its
// zero (slices of two elements, pointers to filled values), so a field a
// copy forgets, or shares, shows.
func fillAll(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n))
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillAll(v.Field(i), n)
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fillAll(v.Index(i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(k, n)
		fillAll(e, n)
		v.SetMapIndex(k, e)
	default:
		panic(fmt.Sprintf("fillAll: a field of kind %s", v.Kind()))
	}
}

// sharedMemory lists the paths at which a and b (equal values) share a
// pointer, a slice's array or a map.
func sharedMemory(a, b reflect.Value, path string) []string {
	var out []string
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		out = append(out, sharedMemory(a.Elem(), b.Elem(), path)...)
	case reflect.Slice:
		if a.Cap() > 0 && a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		for i := range a.Len() {
			out = append(out, sharedMemory(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case reflect.Map:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				out = append(out, sharedMemory(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)...)
			}
		}
	}
	return out
}

// Clone copies every field of a handle, and shares no memory with it:
// the handle is filled by reflection, so a field added to Handle (or to
// a type inside it) without a copy in Clone fails here.
func TestHandleCloneSharesNothing(t *testing.T) {
	var h Handle
	n := 0
	fillAll(reflect.ValueOf(&h).Elem(), &n)
	c := h.Clone()
	if !reflect.DeepEqual(&h, c) {
		t.Fatalf("the clone differs:\n%+v\n%+v", h, *c)
	}
	if shared := sharedMemory(reflect.ValueOf(&h), reflect.ValueOf(c), "handle"); len(shared) > 0 {
		t.Fatalf("the clone shares memory with the handle at %v", shared)
	}
	// Nil and empty stay what they were.
	empty := &Handle{Files: []FileRef{}, States: nil}
	if c := empty.Clone(); !reflect.DeepEqual(empty, c) {
		t.Fatalf("clone of %+v is %+v", *empty, *c)
	}
	if (*Handle)(nil).Clone() != nil {
		t.Fatal("the clone of nil is not nil")
	}
}
