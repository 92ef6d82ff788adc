package dstl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// recordOverhead is what one change costs in the in-flight accounting on
// top of its bytes: an upper bound of its framing in a raw block.
const recordOverhead = 16

// Handle is what a checkpoint records of one writer's log: the window of
// sequence numbers From..To (empty when To < From) and the byte ranges of
// the segments that hold them, in sequence order. Every seq of the window
// is in exactly one range; a range may also hold records outside the
// window (before From or after To), which Read skips.
type Handle struct {
	WriterID string
	From, To uint64
	Ranges   []Range
}

// Range is one segment's part of a Handle: the writer's blocks that
// overlap the window, as one contiguous byte range.
type Range struct {
	// Segment is the segment's object name in the log store; SegmentSize
	// its size.
	Segment     string
	SegmentSize int64
	// Offset and Length locate the blocks in the segment.
	Offset, Length int64
	// FirstSeq and LastSeq are the first and last seq of the records in
	// those blocks.
	FirstSeq, LastSeq uint64
}

// Empty reports whether the handle's window holds no change.
func (h Handle) Empty() bool { return h.To < h.From }

// Segments lists the distinct segments the handle references, in order:
// the references a checkpoint registers with the refcount registry.
func (h Handle) Segments() []string {
	var out []string
	for _, r := range h.Ranges {
		if len(out) == 0 || out[len(out)-1] != r.Segment {
			out = append(out, r.Segment)
		}
	}
	return out
}

// Bytes is the number of log bytes the handle's ranges cover.
func (h Handle) Bytes() int64 {
	var n int64
	for _, r := range h.Ranges {
		n += r.Length
	}
	return n
}

const (
	segUploading = iota
	segDurable
	segFailed
)

// segment is one cut of the buffer, from its cut to its end.
type segment struct {
	counter uint64
	cut     time.Time
	cost    int64 // in-flight accounting of its records
	logs    map[string]*writerLog
	spans   []*span
	data    []byte
	index   *Index

	state int
	name  string
	size  int64
	err   error
	refs  int // spans still live (not truncated)
}

// span is one writer's records in one segment.
type span struct {
	ws          *wstate
	seg         *segment
	first, last uint64
	blocks      []BlockInfo // known once the segment is encoded
	live        bool        // counted in seg.refs
}

// wstate is the Writer's state of one writer id.
type wstate struct {
	id        string
	next      uint64     // seq of the next Append
	log       *writerLog // buffered records (nil: none)
	cost      int64      // in-flight accounting of log
	spans     []*span    // cut, not yet truncated, in seq order
	truncated uint64     // Truncate's mark: records <= it are dropped
	// skipCompress is how many more of this writer's cuts store their
	// blocks without trying zstd: set when none of its blocks in a
	// segment shrank (random or already compressed values, where zstd
	// costs as much CPU as the rest of the log for nothing), so that the
	// writer probes again every compressProbe segments.
	skipCompress int
}

// compressProbe is how many segments a writer whose blocks did not shrink
// skips compression for before it tries again.
const compressProbe = 8

// Writer is the daemon's one changelog writer: it batches the changes of
// all writers (backend instances) into shared segments and uploads them.
// All methods are safe for concurrent use. It owns two kinds of goroutine:
// the flusher, and one per segment being uploaded (each of which owns its
// attempts); Close stops and waits for all of them.
type Writer struct {
	opts Options
	ls   LogStore

	ctx    context.Context // cancelled by Close: stops the flusher and uploads
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // cap 1: the flusher has something to look at
	slots  chan struct{} // upload concurrency
	once   sync.Once

	mu         sync.Mutex
	closed     bool
	writers    map[string]*wstate
	batch      map[string]*wstate // writers with buffered records
	batchCost  int64
	batchStart time.Time
	flushNow   bool
	inFlight   int64
	counter    uint64
	changed    chan struct{} // closed and replaced on every change waiters care about
	released   []string
	// held are the durable segments some writer's log still references
	// (Holds): the refcount registry must not delete them.
	held map[string]bool
	// uploading are the counters of the segments cut and not finished.
	uploading map[uint64]struct{}
	metrics   Metrics
}

// NewWriter starts a Writer over ls. Close it.
func NewWriter(ls LogStore, opts Options) (*Writer, error) {
	if ls == nil {
		return nil, fmt.Errorf("%w: nil log store", ErrInvalidArgument)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{
		opts: opts, ls: ls, ctx: ctx, cancel: cancel,
		wake:      make(chan struct{}, 1),
		slots:     make(chan struct{}, opts.UploadConcurrency),
		writers:   map[string]*wstate{},
		batch:     map[string]*wstate{},
		held:      map[string]bool{},
		uploading: map[uint64]struct{}{},
		changed:   make(chan struct{}),
		metrics:   Metrics{FlushLatency: newHistogram(FlushLatencyBounds)},
	}
	w.wg.Add(1)
	go w.flushLoop()
	return w, nil
}

// Options returns the Writer's options, defaults filled in.
func (w *Writer) Options() Options { return w.opts }

// broadcast wakes every waiter; w.mu held.
func (w *Writer) broadcast() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *Writer) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Append adds a change of writer id in key group kg (or NoKeyGroup) and
// returns its sequence number: 1 for a writer's first change, +1 for each
// next one. The change is copied. When the changes held in memory would
// pass Options.MaxBytesInFlight, Append blocks until uploads free room
// (back-pressure) or ctx ends; it never grows memory past the cap. The
// change is not durable until a Persist that covers it returns.
func (w *Writer) Append(ctx context.Context, id string, kg int, change []byte) (uint64, error) {
	e := [1]Entry{{KeyGroup: kg, Change: change}}
	seq, _, err := w.AppendBatch(ctx, id, e[:])
	return seq, err
}

// Entry is one change of AppendBatch.
type Entry struct {
	// KeyGroup is the change's key group, or NoKeyGroup.
	KeyGroup int
	// Change is the encoded change; AppendBatch copies it.
	Change []byte
}

// AppendBatch adds entries as consecutive changes of writer id, in order:
// the same as an Append of each in turn, under one hold of the Writer's
// lock instead of one per change (a backend logs the writes of a batch
// together). It returns the seq of the last change it added and how many
// it added. Every entry is checked first: if one is invalid, the call
// fails with ErrInvalidArgument and adds nothing. Back-pressure applies
// per entry, as for Append; if ctx ends or the Writer closes while it
// waits, the entries before stay added (n says how many) and the rest are
// not.
func (w *Writer) AppendBatch(ctx context.Context, id string, entries []Entry) (last uint64, n int, err error) {
	idErr := checkWriterID(id)
	if idErr != nil && len(entries) != 1 {
		return 0, 0, idErr
	}
	for i, e := range entries {
		if err := errors.Join(idErr, checkKeyGroup(e.KeyGroup), checkChange(e.Change)); err != nil {
			return 0, 0, batchErr(len(entries), i, err)
		}
		if cost := int64(len(e.Change)) + recordOverhead; cost > w.opts.MaxBytesInFlight {
			return 0, 0, batchErr(len(entries), i, fmt.Errorf("%w: change of %d bytes can never fit MaxBytesInFlight (%d)",
				ErrInvalidArgument, len(e.Change), w.opts.MaxBytesInFlight))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var ws *wstate
	for i, e := range entries {
		cost := int64(len(e.Change)) + recordOverhead
		if !w.closed && w.inFlight+cost > w.opts.MaxBytesInFlight {
			if err := w.waitRoomLocked(ctx, id, cost); err != nil {
				return last, i, err
			}
			// The lock was released: a cut or a Forget may have changed
			// the writer's state.
			ws = nil
		}
		if w.closed {
			return last, i, ErrClosed
		}
		if ws == nil {
			if ws = w.writers[id]; ws == nil {
				ws = &wstate{id: id, next: 1}
				w.writers[id] = ws
			}
		}
		last = w.addLocked(ws, e.KeyGroup, e.Change, cost)
	}
	return last, len(entries), nil
}

// batchErr names the entry an error is about, unless the batch is one
// change (Append).
func batchErr(n, i int, err error) error {
	if n == 1 {
		return err
	}
	return fmt.Errorf("entry %d of %d: %w", i, n, err)
}

// waitRoomLocked waits until cost fits in flight, the Writer closes, or
// ctx ends (its error). w.mu held; it is released while waiting.
func (w *Writer) waitRoomLocked(ctx context.Context, id string, cost int64) error {
	start := w.opts.Now()
	w.metrics.BackPressureWaits++
	for !w.closed && w.inFlight+cost > w.opts.MaxBytesInFlight {
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			w.mu.Lock()
			w.metrics.BackPressureTime += w.opts.Now().Sub(start)
			return fmt.Errorf("dstl: append of writer %q waited for room in flight: %w", id, ctx.Err())
		}
		w.mu.Lock()
	}
	w.metrics.BackPressureTime += w.opts.Now().Sub(start)
	return nil
}

// addLocked buffers one checked change of ws and returns its seq; w.mu
// held, the Writer open, room in flight.
func (w *Writer) addLocked(ws *wstate, kg int, change []byte, cost int64) uint64 {
	if ws.log == nil {
		ws.log = &writerLog{}
		w.batch[ws.id] = ws
	}
	seq := ws.next
	ws.next++
	ws.log.add(seq, kg, change, w.opts.BlockSize)
	ws.cost += cost
	if w.batchCost == 0 {
		w.batchStart = w.opts.Now()
		w.kick()
	}
	w.batchCost += cost
	w.inFlight += cost
	w.metrics.BytesAppended += uint64(len(change))
	w.metrics.RecordsAppended++
	w.metrics.BytesInFlight = w.inFlight
	w.metrics.MaxBytesInFlightSeen = max(w.metrics.MaxBytesInFlightSeen, w.inFlight)
	if !w.flushNow && (w.batchCost >= int64(w.opts.FlushSize) || ws.cost >= int64(w.opts.PreemptiveFlushSize)) {
		w.flushNow = true
		w.kick()
	}
	return seq
}

// LastSeq is the seq of writer id's last Append (0: none).
func (w *Writer) LastSeq(id string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.writers[id]; ws != nil {
		return ws.next - 1
	}
	return 0
}

// Persist makes writer id's changes up to seq upto durable (upto is capped
// at its last Append; math.MaxUint64 means everything so far) and returns
// the Handle of its log from its truncation mark to upto. It cuts the
// buffer at once if it holds any of those changes, then waits for their
// segments. It fails with ErrUploadFailed if one of them failed for good
// (until Truncate moves past it), with ErrClosed after Close, or with
// ctx's error; the changes stay buffered or uploading, and a later Persist
// may succeed. A writer that never appended has an empty Handle.
func (w *Writer) Persist(ctx context.Context, id string, upto uint64) (Handle, error) {
	if err := checkWriterID(id); err != nil {
		return Handle{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if w.closed {
			return Handle{}, ErrClosed
		}
		ws := w.writers[id]
		if ws == nil {
			return Handle{WriterID: id, From: 1, To: 0}, nil
		}
		upto := min(upto, ws.next-1)
		from := ws.truncated + 1
		h := Handle{WriterID: id, From: from, To: upto}
		if upto < from {
			h.To = from - 1
			return h, nil
		}
		ready := true
		if ws.log != nil && ws.log.blocks[0].first <= upto {
			ready = false
			w.flushLocked()
		}
		for _, sp := range ws.spans {
			if sp.first > upto || !ready {
				break
			}
			if sp.last < from {
				continue
			}
			switch sp.seg.state {
			case segFailed:
				return Handle{}, fmt.Errorf("dstl: persist writer %q up to %d: seq %d..%d: %w", id, upto, sp.first, sp.last, sp.seg.err)
			case segUploading:
				ready = false
			case segDurable:
				h.Ranges = append(h.Ranges, sp.rangeFor(from, upto))
			}
		}
		if ready {
			return h, nil
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
			w.mu.Lock()
		case <-ctx.Done():
			w.mu.Lock()
			return Handle{}, fmt.Errorf("dstl: persist writer %q up to %d: %w", id, upto, ctx.Err())
		}
	}
}

// rangeFor is the part of a durable span that overlaps from..upto.
func (sp *span) rangeFor(from, upto uint64) Range {
	i, j := 0, len(sp.blocks)-1
	for i < j && sp.blocks[i].LastSeq < from {
		i++
	}
	for j > i && sp.blocks[j].FirstSeq > upto {
		j--
	}
	b, e := sp.blocks[i], sp.blocks[j]
	return Range{Segment: sp.seg.name, SegmentSize: sp.seg.size, Offset: b.Offset, Length: e.Offset + e.Length - b.Offset,
		FirstSeq: b.FirstSeq, LastSeq: e.LastSeq}
}

// Truncate drops writer id's log up to seq upto (capped at its last
// Append), typically once a checkpoint that includes a materialization up
// to upto completed: later Handles start after it. Segments in which no
// writer references any record any more are queued for TakeReleased. A
// failure of a segment whose records are all <= upto is forgotten.
func (w *Writer) Truncate(id string, upto uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.writers[id]
	if ws == nil {
		return
	}
	upto = min(upto, ws.next-1)
	if upto <= ws.truncated {
		return
	}
	ws.truncated = upto
	keep := ws.spans[:0]
	for _, sp := range ws.spans {
		if sp.last <= upto {
			w.unref(sp)
			continue
		}
		keep = append(keep, sp)
	}
	clear(ws.spans[len(keep):])
	ws.spans = keep
}

// unref drops a span's reference to its segment; w.mu held.
func (w *Writer) unref(sp *span) {
	if !sp.live {
		return
	}
	sp.live = false
	sp.seg.refs--
	if sp.seg.refs == 0 && sp.seg.state == segDurable {
		delete(w.held, sp.seg.name)
		w.released = append(w.released, sp.seg.name)
		w.metrics.TruncatedSegments++
		w.metrics.TruncatedBytes += uint64(sp.seg.size)
	}
}

// Forget drops writer id entirely (its instance is gone): its buffered
// changes are discarded and its log is truncated to the end.
func (w *Writer) Forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.writers[id]
	if ws == nil {
		return
	}
	if ws.log != nil {
		w.batchCost -= ws.cost
		w.inFlight -= ws.cost
		w.metrics.BytesInFlight = w.inFlight
		ws.log, ws.cost = nil, 0
		delete(w.batch, id)
	}
	for _, sp := range ws.spans {
		w.unref(sp)
	}
	ws.spans = nil
	delete(w.writers, id)
	w.broadcast()
}

// TakeReleased returns (and forgets) the segments that became durable
// and are referenced by no writer's log any more. They may still be
// referenced by retained checkpoints: the caller hands them to the
// refcount registry, which deletes them when no checkpoint uses them.
func (w *Writer) TakeReleased() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.released
	w.released = nil
	return out
}

// Holds reports whether segment name is durable and some writer's log still
// references it, or is being uploaded: a checkpoint may yet reference it,
// so it must not be deleted even if no retained checkpoint references it
// now. A segment the Writer
// let go of is reported by TakeReleased.
func (w *Writer) Holds(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[name] {
		return true
	}
	run, counter, ok := ParseSegmentName(w.opts.Prefix, name)
	if !ok || run != w.opts.RunID {
		return false
	}
	// A segment being uploaded (any attempt's name): its object may be
	// listed before the upload returns.
	_, up := w.uploading[counter]
	return up
}

// HeldFrom is the smallest segment counter this Writer may still hold:
// every segment of its run with a smaller counter is released (or
// failed), and no writer's log will reference it again. Segments cut
// later get larger counters, so HeldFrom never decreases. A catalog that
// cannot ask Holds (another node's, in cluster mode) treats the run's
// segments from HeldFrom on as held.
func (w *Writer) HeldFrom() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	low := w.counter + 1
	for _, ws := range w.writers {
		for _, sp := range ws.spans {
			if sp.live && sp.seg.state != segFailed {
				low = min(low, sp.seg.counter)
			}
		}
	}
	return low
}

// RunID is the run id in the names of this Writer's segments.
func (w *Writer) RunID() string { return w.opts.RunID }

// LiveSegments returns, per durable segment, how many writers' logs still
// reference it (segments still uploading are not listed).
func (w *Writer) LiveSegments() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, ws := range w.writers {
		for _, sp := range ws.spans {
			if sp.live && sp.seg.state == segDurable {
				out[sp.seg.name]++
			}
		}
	}
	return out
}

// Metrics returns a copy of the counters.
func (w *Writer) Metrics() Metrics {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.metrics
	m.FlushLatency = m.FlushLatency.clone()
	m.BytesInFlight = w.inFlight
	return m
}

// Close stops the flusher and every upload (cancelled) and waits for them.
// Buffered changes not covered by a completed Persist are discarded;
// waiting Appends and Persists fail with ErrClosed. It is idempotent and
// returns nil.
func (w *Writer) Close() error {
	w.once.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.broadcast()
		w.mu.Unlock()
		w.cancel()
	})
	w.wg.Wait()
	return nil
}

// flushLoop cuts segments: when the buffer is due (size, pre-emptive,
// Persist, or FlushDelay after its first change) and an upload slot is
// free. While all slots are busy the buffer keeps filling, so a slow store
// makes segments bigger rather than more numerous.
func (w *Writer) flushLoop() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		wait := time.Duration(-1)
		due := false
		if w.batchCost > 0 {
			left := w.batchStart.Add(w.opts.FlushDelay).Sub(w.opts.Now())
			due = w.flushNow || left <= 0
			wait = left
		}
		w.mu.Unlock()
		if due {
			select {
			case w.slots <- struct{}{}:
			case <-w.ctx.Done():
				return
			}
			w.launch(w.cut())
			continue
		}
		if wait >= 0 {
			timer.Reset(wait)
		}
		select {
		case <-w.wake:
		case <-timer.C:
		case <-w.ctx.Done():
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// launch uploads seg, just cut, in the upload slot the caller took, or
// gives the slot back when there was nothing to cut.
func (w *Writer) launch(seg *segment) {
	if seg == nil {
		<-w.slots
		return
	}
	w.wg.Add(1)
	go w.upload(seg)
}

// flushLocked cuts the buffer now for a Persist: in the caller when an
// upload slot is free (one goroutine hand-off less on the path a
// checkpoint waits for), else through the flusher as soon as one is.
// w.mu held; the Writer is not closed, so the wg.Add happens before
// Close's Wait.
func (w *Writer) flushLocked() {
	select {
	case w.slots <- struct{}{}:
		w.launch(w.cutLocked())
	default:
		if !w.flushNow {
			w.flushNow = true
			w.kick()
		}
	}
}

// cut takes the whole buffer as a new segment and registers its spans, so
// that a Persist sees them as uploading from now on.
func (w *Writer) cut() *segment {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cutLocked()
}

func (w *Writer) cutLocked() *segment {
	w.flushNow = false
	if w.batchCost == 0 || w.closed {
		return nil
	}
	w.counter++
	w.uploading[w.counter] = struct{}{}
	seg := &segment{counter: w.counter, cut: w.opts.Now(), cost: w.batchCost, logs: make(map[string]*writerLog, len(w.batch))}
	for id, ws := range w.batch {
		if ws.skipCompress > 0 {
			ws.log.noCompress = true
			ws.skipCompress--
		}
		sp := &span{ws: ws, seg: seg, first: ws.log.blocks[0].first, last: ws.log.last}
		if sp.last > ws.truncated {
			sp.live = true
			seg.refs++
		}
		ws.spans = append(ws.spans, sp)
		seg.spans = append(seg.spans, sp)
		seg.logs[id] = ws.log
		ws.log, ws.cost = nil, 0
	}
	clear(w.batch)
	w.batchCost = 0
	return seg
}

// segName is the object name of attempt a of segment counter.
func (w *Writer) segName(counter uint64, a int) string {
	return fmt.Sprintf("%s/%s/%016x-%d", w.opts.Prefix, w.opts.RunID, counter, a)
}

// upload encodes seg and makes it durable: attempts under distinct names,
// a retry after a failure (backoff with jitter) and a speculative twin
// after UploadTimeout, at most MaxAttempts in all. The first attempt to
// succeed wins: the segment is durable under its name at once, then the
// other attempts are cancelled, waited for, and their names deleted (a
// lost reply or a cancelled Put may have stored the object anyway); a
// delete that fails leaves the object to the orphan sweep, as nothing
// references it. Distinct names make that delete safe: it can never
// remove the winner's object.
func (w *Writer) upload(seg *segment) {
	defer w.wg.Done()
	defer func() { <-w.slots }()
	data, idx, err := encodeSegment(seg.logs, !w.opts.DisableCompression)
	// The records are in data now (or the segment failed and is retried
	// from scratch by no one: a failed encode fails its segment).
	defer recycle(seg.logs)
	w.mu.Lock()
	for id, l := range seg.logs {
		if ws := w.writers[id]; ws != nil && l.tried > 0 {
			if l.won == 0 {
				ws.skipCompress = compressProbe
			} else {
				ws.skipCompress = 0
			}
		}
	}
	w.mu.Unlock()
	seg.logs = nil
	if err != nil {
		w.finish(seg, "", nil, fmt.Errorf("encode: %w", err))
		return
	}
	seg.data = data

	type result struct {
		a   int
		err error
	}
	maxA := w.opts.MaxAttempts
	results := make(chan result, maxA)
	cancels := make([]context.CancelFunc, 0, maxA)
	running, failures := 0, 0
	start := func() {
		a := len(cancels)
		actx, cancel := context.WithCancel(w.ctx)
		cancels = append(cancels, cancel)
		running++
		name := w.segName(seg.counter, a)
		go func() { results <- result{a, w.ls.Put(actx, name, data)} }()
	}
	w.count(func(m *Metrics) { m.UploadAttempts++ })
	start()
	spec := time.NewTimer(w.opts.UploadTimeout)
	defer spec.Stop()
	var retry <-chan time.Time
	winner := -1
	var lastErr error
loop:
	for winner < 0 {
		if running == 0 && retry == nil {
			break
		}
		select {
		case r := <-results:
			running--
			if r.err == nil {
				winner = r.a
				break loop
			}
			lastErr, failures = r.err, failures+1
			if running == 0 && len(cancels) < maxA && w.ctx.Err() == nil {
				retry = time.After(w.backoff(failures))
			}
		case <-retry:
			retry = nil
			w.count(func(m *Metrics) { m.UploadAttempts++; m.UploadRetries++ })
			start()
			spec.Reset(w.opts.UploadTimeout)
		case <-spec.C:
			if running > 0 && len(cancels) < maxA {
				w.count(func(m *Metrics) { m.UploadAttempts++; m.SpeculativeUploads++ })
				start()
				spec.Reset(w.opts.UploadTimeout)
			}
		case <-w.ctx.Done():
			lastErr = w.ctx.Err()
			retry = nil
			break loop
		}
	}
	if winner >= 0 {
		w.finish(seg, w.segName(seg.counter, winner), idx, nil)
	}
	for _, c := range cancels {
		c()
	}
	for ; running > 0; running-- {
		<-results
	}
	// Every attempt returned: nothing reads data any more.
	recycleSegment(data)
	var losers []string
	for a := range cancels {
		if a != winner {
			losers = append(losers, w.segName(seg.counter, a))
		}
	}
	if len(losers) > 0 && w.ctx.Err() == nil {
		if w.ls.Delete(w.ctx, losers...) == nil {
			w.count(func(m *Metrics) { m.LoserDeletes += uint64(len(losers)) })
		}
	}
	if winner < 0 {
		w.finish(seg, "", nil, fmt.Errorf("after %d attempts: %w", len(cancels), lastErr))
	}
}

func (w *Writer) count(f func(*Metrics)) {
	w.mu.Lock()
	f(&w.metrics)
	w.mu.Unlock()
}

// backoff is the pause after the n-th failure: RetryDelay doubled per
// failure, capped at MaxRetryDelay, with jitter in [d/2, d).
func (w *Writer) backoff(n int) time.Duration {
	d := w.opts.RetryDelay
	for i := 1; i < n && d < w.opts.MaxRetryDelay; i++ {
		d *= 2
	}
	d = min(d, w.opts.MaxRetryDelay)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// finish records the outcome of seg's upload and frees its memory.
func (w *Writer) finish(seg *segment, name string, idx *Index, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	size := int64(len(seg.data))
	seg.data = nil
	delete(w.uploading, seg.counter)
	w.inFlight -= seg.cost
	w.metrics.BytesInFlight = w.inFlight
	if err != nil {
		seg.state = segFailed
		seg.err = fmt.Errorf("%w: segment %016x: %w", ErrUploadFailed, seg.counter, err)
		w.metrics.UploadFailures++
		w.broadcast()
		return
	}
	seg.state, seg.name, seg.size, seg.index = segDurable, name, size, idx
	for _, sp := range seg.spans {
		wi, _ := idx.Writer(sp.ws.id)
		sp.blocks = wi.Blocks
	}
	seg.index = nil // the spans hold what they need
	w.metrics.SegmentsWritten++
	w.metrics.SegmentBytesWritten += uint64(size)
	w.metrics.FlushLatency.observe(w.opts.Now().Sub(seg.cut))
	if seg.refs == 0 {
		w.released = append(w.released, name)
		w.metrics.TruncatedSegments++
		w.metrics.TruncatedBytes += uint64(size)
	} else {
		w.held[name] = true
	}
	w.broadcast()
}
