package changelog

import (
	"encoding/binary"

	"fmt"
	"math"
	"time"

	"github.com/statedhq/stated/backend"
)

// ChangeVersion is the version byte this build writes at the start of every
// change; the decoder accepts 1..ChangeVersion.
const ChangeVersion = 1

// Op is what a change does. Frozen values: they are stored in the log.
type Op uint8

const (
	OpPut         Op = 1
	OpDelete      Op = 2
	OpListAppend  Op = 3
	OpMapPut      Op = 4
	OpMapRemove   Op = 5
	OpAggregate   Op = 6
	OpTimerAdd    Op = 7
	OpTimerDelete Op = 8
	OpRegister    Op = 9
	// The read ops are logged only for states whose TTL a read refreshes:
	// replaying the read at the logged time refreshes exactly the entries
	// the original read refreshed, since the entry's state is identical.
	OpGet        Op = 10
	OpListGet    Op = 11
	OpMapGet     Op = 12
	OpMapIterate Op = 13
	OpAggGet     Op = 14
	opMax        Op = OpAggGet
)

// Change is one decoded change record. Which fields are meaningful depends
// on Op (see the encoding in doc.go).
type Change struct {
	Op Op
	// Time is the instance's clock at the change (unix nanoseconds): the
	// replay runs the inner backend at this time, so TTL expiries come out
	// as they did originally.
	Time     int64
	State    string
	Key      backend.Key
	Values   [][]byte // OpPut (one), OpListAppend
	UserKey  []byte   // map ops
	Value    []byte   // OpMapPut
	Number   backend.Number
	Timer    backend.Timer
	Desc     backend.StateDescriptor
	After    []byte // OpMapIterate; nil: from the first
	Limit    int64  // OpMapIterate
	HasAfter bool
}

// KeyGroup is the key group the change is logged under (dstl.NoKeyGroup
// for a state registration).
func (c *Change) KeyGroup() int {
	switch c.Op {
	case OpRegister:
		return -1
	case OpTimerAdd, OpTimerDelete:
		return c.Timer.KeyGroup
	}
	return c.Key.KeyGroup
}

// ErrBadChange wraps every decoding error: a change that does not decode
// is damage of the log.
var ErrBadChange = fmt.Errorf("changelog: bad change record: %w", backend.ErrCorrupt)

type enc struct{ b []byte }

func (e *enc) u8(v uint8)        { e.b = append(e.b, v) }
func (e *enc) uv(v uint64)       { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) sv(v int64)        { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) bytes(p []byte)    { e.uv(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) str(s string)      { e.uv(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) key(k backend.Key) { e.uv(uint64(k.KeyGroup)); e.bytes(k.Key); e.bytes(k.Namespace) }

// Encode appends the encoding of c to dst.
func (c *Change) Encode(dst []byte) []byte {
	e := enc{b: dst}
	e.u8(ChangeVersion)
	e.u8(uint8(c.Op))
	e.sv(c.Time)
	switch c.Op {
	case OpRegister:
		d := c.Desc
		e.str(d.Name)
		e.u8(uint8(d.Kind))
		e.sv(int64(d.TTL))
		e.u8(uint8(d.TTLUpdate))
		e.u8(uint8(d.Aggregate))
		e.u8(uint8(d.Number))
		return e.b
	case OpTimerAdd, OpTimerDelete:
		e.str(c.State)
		t := c.Timer
		e.uv(uint64(t.KeyGroup))
		e.bytes(t.Key)
		e.bytes(t.Namespace)
		e.sv(t.Timestamp)
		return e.b
	}
	e.str(c.State)
	e.key(c.Key)
	switch c.Op {
	case OpPut, OpListAppend:
		e.uv(uint64(len(c.Values)))
		for _, v := range c.Values {
			e.bytes(v)
		}
	case OpMapPut:
		e.bytes(c.UserKey)
		e.bytes(c.Value)
	case OpMapRemove, OpMapGet:
		e.bytes(c.UserKey)
	case OpAggregate:
		e.u8(uint8(c.Number.Type))
		if c.Number.Type == backend.NumFloat64 {
			e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(c.Number.Float))
		} else {
			e.sv(c.Number.Int)
		}
	case OpMapIterate:
		if c.HasAfter {
			e.u8(1)
			e.bytes(c.After)
		} else {
			e.u8(0)
		}
		e.sv(c.Limit)
	}
	return e.b
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadChange, what)
	}
}

func (d *dec) u8(what string) uint8 {
	if d.err != nil || len(d.b) < 1 {
		d.fail("truncated " + what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) uv(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) sv(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns a copy: a Change outlives the reader's buffer.
func (d *dec) bytes(what string) []byte {
	n := d.uv(what + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(what + " longer than the record")
		return nil
	}
	p := make([]byte, n)
	copy(p, d.b[:n])
	d.b = d.b[n:]
	return p
}

func (d *dec) kg(what string) int {
	v := d.uv(what)
	if v > backend.MaxKeyGroupBound {
		d.fail(what + " out of range")
		return 0
	}
	return int(v)
}

// DecodeChange parses one change record. Any malformed input is an error
// wrapping ErrBadChange (and backend.ErrCorrupt); it never panics and never
// allocates more than the input's size per field.
func DecodeChange(data []byte) (*Change, error) {
	d := dec{b: data}
	if v := d.u8("version"); d.err == nil && (v < 1 || v > ChangeVersion) {
		return nil, fmt.Errorf("%w: change version %d (this build reads 1..%d)", backend.ErrIncompatible, v, ChangeVersion)
	}
	c := &Change{Op: Op(d.u8("op"))}
	c.Time = d.sv("time")
	if d.err == nil && (c.Op < OpPut || c.Op > opMax) {
		d.fail(fmt.Sprintf("unknown op %d", c.Op))
	}
	switch c.Op {
	case OpRegister:
		c.Desc.Name = string(d.bytes("state name"))
		c.Desc.Kind = backend.StateKind(d.u8("kind"))
		c.Desc.TTL = time.Duration(d.sv("ttl"))
		c.Desc.TTLUpdate = backend.TTLUpdate(d.u8("ttl update"))
		c.Desc.Aggregate = backend.AggregateFunc(d.u8("aggregate"))
		c.Desc.Number = backend.NumberType(d.u8("number type"))
	case OpTimerAdd, OpTimerDelete:
		c.State = string(d.bytes("state"))
		c.Timer.KeyGroup = d.kg("key group")
		c.Timer.Key = d.bytes("key")
		c.Timer.Namespace = d.bytes("namespace")
		c.Timer.Timestamp = d.sv("timestamp")
	default:
		c.State = string(d.bytes("state"))
		c.Key.KeyGroup = d.kg("key group")
		c.Key.Key = d.bytes("key")
		c.Key.Namespace = d.bytes("namespace")
		switch c.Op {
		case OpPut, OpListAppend:
			n := d.uv("value count")
			// Each value takes at least its length byte: a count above the
			// bytes left is damage, and the bound keeps the allocation
			// proportional to the input.
			if d.err == nil && n > uint64(len(d.b)) {
				d.fail("value count larger than the record")
			}
			if d.err == nil && c.Op == OpPut && n != 1 {
				d.fail(fmt.Sprintf("put with %d values", n))
			}
			for i := uint64(0); i < n && d.err == nil; i++ {
				c.Values = append(c.Values, d.bytes("value"))
			}
		case OpMapPut:
			c.UserKey = d.bytes("user key")
			c.Value = d.bytes("value")
		case OpMapRemove, OpMapGet:
			c.UserKey = d.bytes("user key")
		case OpAggregate:
			c.Number.Type = backend.NumberType(d.u8("number type"))
			switch c.Number.Type {
			case backend.NumFloat64:
				if d.err == nil && len(d.b) < 8 {
					d.fail("truncated float")
				} else if d.err == nil {
					c.Number.Float = math.Float64frombits(binary.LittleEndian.Uint64(d.b))
					d.b = d.b[8:]
				}
			case backend.NumInt64:
				c.Number.Int = d.sv("int")
			default:
				d.fail(fmt.Sprintf("unknown number type %d", c.Number.Type))
			}
		case OpMapIterate:
			switch d.u8("after flag") {
			case 0:
			case 1:
				c.HasAfter = true
				c.After = d.bytes("after")
			default:
				d.fail("bad after flag")
			}
			c.Limit = d.sv("limit")
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, d.err
	}
	return c, nil
}
