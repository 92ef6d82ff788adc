package tiered

// Op names one of Store's methods, for the wrappers that count or fail
// calls by kind (tiered/metered, tiered/fault).
type Op uint8

// The Store methods, in the order the interface lists them.
const (
	OpPut Op = iota
	OpPutIfAbsent
	OpGet
	OpGetRange
	OpStat
	OpList
	OpDelete
	OpDeleteBatch
	// NumOps is the number of Ops.
	NumOps
)

var opNames = [NumOps]string{"put", "put_if_absent", "get", "get_range", "stat", "list", "delete", "delete_batch"}

// String is the op's name, as metrics label it.
func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "op?"
}

// Ops is a set of Ops.
type Ops uint16

// OpSet returns the set of ops.
func OpSet(ops ...Op) Ops {
	var s Ops
	for _, o := range ops {
		s |= 1 << o
	}
	return s
}

// Has reports whether o is in s.
func (s Ops) Has(o Op) bool { return s&(1<<o) != 0 }

// Sets of Ops.
var (
	// AllOps is every method.
	AllOps = OpSet(OpPut, OpPutIfAbsent, OpGet, OpGetRange, OpStat, OpList, OpDelete, OpDeleteBatch)
	// WriteOps are the methods that change the store.
	WriteOps = OpSet(OpPut, OpPutIfAbsent, OpDelete, OpDeleteBatch)
	// ReadOps are the methods that only read.
	ReadOps = OpSet(OpGet, OpGetRange, OpStat, OpList)
)
