package workload

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/statedhq/stated/backend"
)

// Kind is an operation kind; its String is the name figures carry.
type Kind uint8

// Operation kinds.
const (
	Get           Kind = iota // value get
	Put                       // value put of an existing key
	Insert                    // value put of a new key (YCSB D) or map put of a new record (YCSB E)
	Update                    // read-modify-write: value get, then put
	ListAppend                // append one element
	ListGet                   // read a whole list
	MapPut                    // put one map entry
	MapGet                    // get one map entry
	MapIterate                // read every entry of a map
	Scan                      // iterate 1..ScanLen map entries from a user key (YCSB E)
	AggregateAdd              // add to an aggregate
	AggregateGet              // read an aggregate
	TimerRegister             // register a timer
	TimerPoll                 // poll timers at or below a watermark
	numKinds
)

var kindNames = [numKinds]string{"get", "put", "insert", "update", "list-append", "list-get", "map-put", "map-get",
	"map-iterate", "scan", "aggregate-add", "aggregate-get", "timer-register", "timer-poll"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Kinds lists every operation kind in order.
func Kinds() []Kind {
	out := make([]Kind, numKinds)
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

// State names every workload uses; a workload registers only the ones its
// operations touch.
const (
	ValueState     = "v"
	ListState      = "l"
	MapState       = "m"
	AggregateState = "a"
	TimerState     = "t"
)

var descriptors = map[string]backend.StateDescriptor{
	ValueState:     {Name: ValueState, Kind: backend.KindValue},
	ListState:      {Name: ListState, Kind: backend.KindList},
	MapState:       {Name: MapState, Kind: backend.KindMap},
	AggregateState: {Name: AggregateState, Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	TimerState:     {Name: TimerState, Kind: backend.KindTimers},
}

// Op is one operation. Its slices belong to the Gen that filled it and are
// overwritten by the next Next: a caller that keeps them copies them.
type Op struct {
	Kind    Kind
	State   string
	Key     []byte
	UserKey []byte
	Value   []byte
	// Values are the elements of a list append.
	Values [][]byte
	// Limit bounds a Scan, MapIterate or TimerPoll.
	Limit int
	// Number is added by AggregateAdd.
	Number int64
	// Timestamp of TimerRegister; watermark of TimerPoll.
	Timestamp int64
}

// Params are a workload's knobs. Zero values take the workload's defaults
// (see EnsureDefaults).
type Params struct {
	// ValueSize is the size of each value (default 100; Flink shapes: 8).
	ValueSize int `json:"value_size"`
	// ReadRatio is the share of reads of value-mixed and aggregate (default
	// 0.5); negative: unset.
	ReadRatio float64 `json:"read_ratio"`
	// Distribution picks keys: uniform, zipfian or latest (default: the
	// workload's).
	Distribution string `json:"distribution"`
	// Skew is the zipfian constant of zipfian and latest, in (0, 1)
	// (default DefaultSkew).
	Skew float64 `json:"skew"`
	// ListLen is the elements per key that list-get loads (default 100).
	ListLen int `json:"list_len"`
	// MapKeys is the entries per key that the map workloads load (default 10).
	MapKeys int `json:"map_keys"`
	// ScanLen bounds a ycsb-e scan (default 100).
	ScanLen int `json:"scan_len"`
}

// Spec is a named workload.
type Spec struct {
	Name string
	// Doc says what the workload does, one line.
	Doc string
	// States the workload registers.
	States []string
	// mix is the run phase's operations with their weights.
	mix []weighted
	// load returns the j-th operation the load phase applies to key id,
	// nil past the last.
	load func(g *Gen, id uint64, j int) *Op
	// dist is the default distribution.
	dist string
	// fixed overrides Params (the Flink shapes pin their sizes).
	fixed func(p *Params)
	// readMix: the mix is reads at ReadRatio, else the second kind.
	readMix bool
}

type weighted struct {
	kind   Kind
	weight float64
}

// Flink's StateBenchmarkConstants: list and map sizes of its benchmarks.
const (
	flinkListLen  = 100
	flinkMapKeys  = 10
	flinkValueLen = 8
	ycsbEBuckets  = 64
)

func flinkSizes(p *Params) {
	p.ValueSize, p.ListLen, p.MapKeys = flinkValueLen, flinkListLen, flinkMapKeys
}

func loadValue(g *Gen, id uint64, j int) *Op {
	if j > 0 {
		return nil
	}
	g.op = Op{Kind: Put, State: ValueState, Key: g.key(id), Value: g.value(id)}
	return &g.op
}

func loadList(g *Gen, id uint64, j int) *Op {
	if j > 0 {
		return nil
	}
	n := g.p.ListLen
	if g.listOnly1 {
		n = 1
	}
	g.op = Op{Kind: ListAppend, State: ListState, Key: g.key(id), Values: g.elems(n)}
	return &g.op
}

func loadMap(g *Gen, id uint64, j int) *Op {
	if j >= g.p.MapKeys {
		return nil
	}
	g.op = Op{Kind: MapPut, State: MapState, Key: g.key(id), UserKey: g.userKey(uint64(j)), Value: g.value(id + uint64(j))}
	return &g.op
}

func loadAggregate(g *Gen, id uint64, j int) *Op {
	if j > 0 {
		return nil
	}
	g.op = Op{Kind: AggregateAdd, State: AggregateState, Key: g.key(id), Number: 1}
	return &g.op
}

func loadTimer(g *Gen, id uint64, j int) *Op {
	if j > 0 {
		return nil
	}
	g.op = Op{Kind: TimerRegister, State: TimerState, Key: g.key(id), Timestamp: int64(id)}
	return &g.op
}

// loadYCSBE writes the record as a map entry under its bucket key.
func loadYCSBE(g *Gen, id uint64, j int) *Op {
	if j > 0 {
		return nil
	}
	g.op = Op{Kind: MapPut, State: MapState, Key: g.bucketKey(id), UserKey: g.userKey(id), Value: g.value(id)}
	return &g.op
}

var specs = []*Spec{
	{Name: "value-get", Doc: "value state: gets of loaded keys", States: []string{ValueState}, mix: []weighted{{Get, 1}}, load: loadValue},
	{Name: "value-put", Doc: "value state: puts over loaded keys", States: []string{ValueState}, mix: []weighted{{Put, 1}}, load: loadValue},
	{Name: "value-update", Doc: "value state: read-modify-write (get, then put) of loaded keys", States: []string{ValueState}, mix: []weighted{{Update, 1}}, load: loadValue},
	{Name: "value-mixed", Doc: "value state: gets at --read-ratio, else puts", States: []string{ValueState}, mix: []weighted{{Get, 1}, {Put, 1}}, readMix: true, load: loadValue},
	{Name: "list-append", Doc: "list state: appends of one element", States: []string{ListState}, mix: []weighted{{ListAppend, 1}}, load: loadList},
	{Name: "list-get", Doc: "list state: reads of lists of --list-len elements", States: []string{ListState}, mix: []weighted{{ListGet, 1}}, load: loadList},
	{Name: "map-put", Doc: "map state: puts over --map-keys entries per key", States: []string{MapState}, mix: []weighted{{MapPut, 1}}, load: loadMap},
	{Name: "map-get", Doc: "map state: gets of one of --map-keys entries per key", States: []string{MapState}, mix: []weighted{{MapGet, 1}}, load: loadMap},
	{Name: "map-iterate", Doc: "map state: iterations over the --map-keys entries of a key", States: []string{MapState}, mix: []weighted{{MapIterate, 1}}, load: loadMap},
	{Name: "aggregate", Doc: "aggregate (int64 sum): gets at --read-ratio, else adds", States: []string{AggregateState}, mix: []weighted{{AggregateGet, 1}, {AggregateAdd, 1}}, readMix: true, load: loadAggregate},
	{Name: "timers", Doc: "timers: registrations, and every 100th operation a poll that fires the oldest", States: []string{TimerState}, mix: []weighted{{TimerRegister, 99}, {TimerPoll, 1}}, load: loadTimer},

	{Name: "flink-value-get", Doc: "Flink ValueStateBenchmark.valueGet: 8-byte values", States: []string{ValueState}, mix: []weighted{{Get, 1}}, load: loadValue, fixed: flinkSizes},
	{Name: "flink-value-update", Doc: "Flink ValueStateBenchmark.valueUpdate: 8-byte values", States: []string{ValueState}, mix: []weighted{{Put, 1}}, load: loadValue, fixed: flinkSizes},
	{Name: "flink-list-add", Doc: "Flink ListStateBenchmark.listAdd: append one 8-byte element", States: []string{ListState}, mix: []weighted{{ListAppend, 1}}, load: loadList, fixed: flinkSizes},
	{Name: "flink-list-get", Doc: "Flink ListStateBenchmark.listGet: lists of 100 8-byte elements", States: []string{ListState}, mix: []weighted{{ListGet, 1}}, load: loadList, fixed: flinkSizes},
	{Name: "flink-map-get", Doc: "Flink MapStateBenchmark.mapGet: maps of 10 entries", States: []string{MapState}, mix: []weighted{{MapGet, 1}}, load: loadMap, fixed: flinkSizes},
	{Name: "flink-map-update", Doc: "Flink MapStateBenchmark.mapUpdate: maps of 10 entries", States: []string{MapState}, mix: []weighted{{MapPut, 1}}, load: loadMap, fixed: flinkSizes},
	{Name: "flink-map-iterate", Doc: "Flink MapStateBenchmark.mapIterator: maps of 10 entries", States: []string{MapState}, mix: []weighted{{MapIterate, 1}}, load: loadMap, fixed: flinkSizes},

	{Name: "ycsb-a", Doc: "YCSB A: 50% read, 50% update; zipfian", States: []string{ValueState}, mix: []weighted{{Get, 50}, {Put, 50}}, load: loadValue, dist: Zipfian},
	{Name: "ycsb-b", Doc: "YCSB B: 95% read, 5% update; zipfian", States: []string{ValueState}, mix: []weighted{{Get, 95}, {Put, 5}}, load: loadValue, dist: Zipfian},
	{Name: "ycsb-c", Doc: "YCSB C: 100% read; zipfian", States: []string{ValueState}, mix: []weighted{{Get, 1}}, load: loadValue, dist: Zipfian},
	{Name: "ycsb-d", Doc: "YCSB D: 95% read, 5% insert; latest", States: []string{ValueState}, mix: []weighted{{Get, 95}, {Insert, 5}}, load: loadValue, dist: Latest},
	{Name: "ycsb-e", Doc: "YCSB E: 95% scan (1..--scan-len), 5% insert; zipfian; records are map entries", States: []string{MapState}, mix: []weighted{{Scan, 95}, {Insert, 5}}, load: loadYCSBE, dist: Zipfian},
	{Name: "ycsb-f", Doc: "YCSB F: 50% read, 50% read-modify-write; zipfian", States: []string{ValueState}, mix: []weighted{{Get, 50}, {Update, 50}}, load: loadValue, dist: Zipfian},
}

func init() {
	for _, s := range specs {
		if s.dist == "" {
			s.dist = Uniform
		}
	}
}

// All returns every workload, in a fixed order.
func All() []*Spec { return slices.Clone(specs) }

// Names returns every workload's name.
func Names() []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}

// Lookup finds a workload by name.
func Lookup(name string) (*Spec, error) {
	for _, s := range specs {
		if s.Name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("workload: unknown workload %q; known: %s", name, strings.Join(Names(), ", "))
}

// Descriptors are the states an instance running s registers.
func (s *Spec) Descriptors() []backend.StateDescriptor {
	out := make([]backend.StateDescriptor, len(s.States))
	for i, n := range s.States {
		out[i] = descriptors[n]
	}
	return out
}

// Kinds are the operation kinds of s's run phase.
func (s *Spec) Kinds() []Kind {
	out := make([]Kind, len(s.mix))
	for i, w := range s.mix {
		out[i] = w.kind
	}
	return out
}

// Effective returns p with s's defaults and fixed sizes applied.
func (s *Spec) Effective(p Params) Params {
	if p.ValueSize <= 0 {
		p.ValueSize = 100
	}
	if p.ReadRatio < 0 {
		p.ReadRatio = 0.5
	}
	if p.Distribution == "" {
		p.Distribution = s.dist
	}
	if p.Skew == 0 {
		p.Skew = DefaultSkew
	}
	if p.ListLen <= 0 {
		p.ListLen = 100
	}
	if p.MapKeys <= 0 {
		p.MapKeys = 10
	}
	if p.ScanLen <= 0 {
		p.ScanLen = 100
	}
	if s.fixed != nil {
		s.fixed(&p)
	}
	return p
}

// Validate reports every problem of p (after Effective) at once.
func (p Params) Validate() error {
	var errs []string
	if p.ValueSize > backend.DefaultMaxValueSize {
		errs = append(errs, fmt.Sprintf("value size %d is above the daemon's default limit %d", p.ValueSize, backend.DefaultMaxValueSize))
	}
	if !(p.ReadRatio >= 0 && p.ReadRatio <= 1) {
		errs = append(errs, fmt.Sprintf("read ratio %v is outside [0, 1]", p.ReadRatio))
	}
	if _, err := NewChooser(p.Distribution, p.Skew, 1); err != nil {
		errs = append(errs, strings.TrimPrefix(err.Error(), "workload: "))
	}
	if p.ListLen > 100_000 {
		errs = append(errs, fmt.Sprintf("list length %d is above 100000", p.ListLen))
	}
	if p.MapKeys > 100_000 {
		errs = append(errs, fmt.Sprintf("map keys %d is above 100000", p.MapKeys))
	}
	if p.ScanLen > 10_000 {
		errs = append(errs, fmt.Sprintf("scan length %d is above 10000", p.ScanLen))
	}
	if len(errs) > 0 {
		return fmt.Errorf("workload: %s", strings.Join(errs, "; "))
	}
	return nil
}

// maxInserted bounds the ids a Gen remembers for inserts, so memory stays
// bounded however long a run lasts: past it, an insert overwrites a
// random inserted key.
const maxInserted = 1 << 24

// Gen draws the operations of one task. It is not safe for concurrent use.
type Gen struct {
	s       *Spec
	p       Params
	r       *rand.Rand
	ids     []uint64 // the task's loaded (and inserted) key ids
	owns    func(id uint64) bool
	nextID  uint64 // next candidate id for an insert
	choose  Chooser
	cum     []float64
	op      Op
	keyBuf  [8]byte
	bktBuf  [8]byte
	ukBuf   [8]byte
	valBuf  []byte
	elemBuf [][]byte
	seq     int64 // timers: timestamp of the next registration
	polled  int64 // timers: watermark of the last poll
	// listOnly1: list-append loads one element per key, list-get ListLen.
	listOnly1 bool
	// loaded is the number of ids the load phase writes (inserts come
	// after); loadAt and loadSub are where NextLoad is.
	loaded, loadAt, loadSub int
}

// NewGen returns the generator of one task that owns ids (its share of the
// loaded keys); owns says whether a new id belongs to the task (inserts draw
// ids from firstNew on and keep those it owns). seed makes it reproducible.
func NewGen(s *Spec, p Params, ids []uint64, owns func(uint64) bool, firstNew uint64, seed uint64) (*Gen, error) {
	p = s.Effective(p)
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ch, err := NewChooser(p.Distribution, p.Skew, max(len(ids), 1))
	if err != nil {
		return nil, err
	}
	g := &Gen{s: s, p: p, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ids: slices.Clone(ids),
		owns: owns, nextID: firstNew, choose: ch, loaded: len(ids), valBuf: make([]byte, p.ValueSize), listOnly1: s.Name != "list-get" && s.Name != "flink-list-get"}
	var total float64
	for i, w := range s.mix {
		wt := w.weight
		if s.readMix {
			wt = p.ReadRatio
			if i > 0 {
				wt = 1 - p.ReadRatio
			}
		}
		total += wt
		g.cum = append(g.cum, total)
	}
	for i := range g.cum {
		g.cum[i] /= total
	}
	g.elemBuf = make([][]byte, p.ListLen)
	for i := range g.elemBuf {
		g.elemBuf[i] = make([]byte, p.ValueSize)
		fill(g.elemBuf[i], uint64(i))
	}
	return g, nil
}

// Params are the effective parameters.
func (g *Gen) Params() Params { return g.p }

// NextLoad returns the next operation of the load phase, key by key, or
// nil when the load is done; the result is valid until the next call.
func (g *Gen) NextLoad() *Op {
	for g.loadAt < g.loaded {
		if op := g.s.load(g, g.ids[g.loadAt], g.loadSub); op != nil {
			g.loadSub++
			return op
		}
		g.loadAt++
		g.loadSub = 0
	}
	return nil
}

// LoadOps is the number of operations Load emits.
func (g *Gen) LoadOps() int {
	if g.s.Name == "map-put" || g.s.Name == "map-get" || g.s.Name == "map-iterate" || strings.HasPrefix(g.s.Name, "flink-map") {
		return g.loaded * g.p.MapKeys
	}
	return g.loaded
}

// Next fills the next operation of the run phase and returns it; the
// result is valid until the following call.
func (g *Gen) Next() *Op {
	kind := g.s.mix[0].kind
	if len(g.cum) > 1 {
		u := g.r.Float64()
		for i, c := range g.cum {
			if u < c {
				kind = g.s.mix[i].kind
				break
			}
		}
	}
	id := g.pick()
	g.op = Op{Kind: kind}
	switch kind {
	case Get:
		g.op.State, g.op.Key = ValueState, g.key(id)
	case Put, Update:
		g.op.State, g.op.Key, g.op.Value = ValueState, g.key(id), g.value(uint64(g.r.Uint32()))
	case Insert:
		nid := g.insert()
		if g.s.Name == "ycsb-e" {
			g.op.Kind, g.op.State, g.op.Key, g.op.UserKey, g.op.Value = Insert, MapState, g.bucketKey(nid), g.userKey(nid), g.value(nid)
		} else {
			g.op.State, g.op.Key, g.op.Value = ValueState, g.key(nid), g.value(nid)
		}
	case ListAppend:
		g.op.State, g.op.Key, g.op.Values = ListState, g.key(id), g.elemBuf[:1]
	case ListGet:
		g.op.State, g.op.Key = ListState, g.key(id)
	case MapPut:
		g.op.State, g.op.Key, g.op.UserKey, g.op.Value = MapState, g.key(id), g.userKey(uint64(g.r.IntN(g.p.MapKeys))), g.value(uint64(g.r.Uint32()))
	case MapGet:
		g.op.State, g.op.Key, g.op.UserKey = MapState, g.key(id), g.userKey(uint64(g.r.IntN(g.p.MapKeys)))
	case MapIterate:
		g.op.State, g.op.Key, g.op.Limit = MapState, g.key(id), g.p.MapKeys
	case Scan:
		g.op.State, g.op.Key, g.op.UserKey, g.op.Limit = MapState, g.bucketKey(id), g.userKey(id), 1+g.r.IntN(g.p.ScanLen)
	case AggregateAdd:
		g.op.State, g.op.Key, g.op.Number = AggregateState, g.key(id), 1
	case AggregateGet:
		g.op.State, g.op.Key = AggregateState, g.key(id)
	case TimerRegister:
		g.seq++
		g.op.State, g.op.Key, g.op.Timestamp = TimerState, g.key(id), g.seq
	case TimerPoll:
		// Fire what is more than 1,000 registrations old, at most 1,000 timers.
		g.polled = max(g.polled, g.seq-1000)
		g.op.State, g.op.Timestamp, g.op.Limit = TimerState, g.polled, 1000
	}
	return &g.op
}

// pick draws a key id by the distribution.
func (g *Gen) pick() uint64 {
	if len(g.ids) == 0 {
		return 0
	}
	return g.ids[g.choose.Next(g.r, len(g.ids))]
}

// insert returns a new id the task owns and adds it to its keys.
func (g *Gen) insert() uint64 {
	for {
		id := g.nextID
		g.nextID++
		if g.owns == nil || g.owns(id) {
			if len(g.ids) < maxInserted {
				g.ids = append(g.ids, id)
			}
			return id
		}
	}
}

// Key encodes a key id: 8 bytes big-endian.
func Key(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// BucketKey is the key of ycsb-e's record id: one of 64 keys.
func BucketKey(id uint64) []byte { return Key(id % ycsbEBuckets) }

// KeyOf is the key a load writes for id: ycsb-e writes every record
// under BucketKey, the others under Key.
func (s *Spec) KeyOf(id uint64) []byte {
	if s.Name == "ycsb-e" {
		return BucketKey(id)
	}
	return Key(id)
}

func (g *Gen) key(id uint64) []byte {
	binary.BigEndian.PutUint64(g.keyBuf[:], id)
	return g.keyBuf[:]
}

func (g *Gen) bucketKey(id uint64) []byte {
	binary.BigEndian.PutUint64(g.bktBuf[:], id%ycsbEBuckets)
	return g.bktBuf[:]
}

func (g *Gen) userKey(j uint64) []byte {
	binary.BigEndian.PutUint64(g.ukBuf[:], j)
	return g.ukBuf[:]
}

func (g *Gen) value(seed uint64) []byte {
	fill(g.valBuf, seed)
	return g.valBuf
}

func (g *Gen) elems(n int) [][]byte { return g.elemBuf[:min(n, len(g.elemBuf))] }

// fill writes a cheap deterministic pattern: values that compress like
// real ones would need a corpus; the pattern varies with seed so that
// snapshots do not collapse to one repeated block.
func fill(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}
