package catalog

import "sync"

// A replicated catalog's command is applied on the leader only after the
// log took it (the leader's log write, then a follower's), and decoding it
// (the JSON of a completion's handles and its manifest: about 0.3 ms for
// a job of 6 tasks) was the first thing the leader's apply did, on the
// path of the caller's answer. The leader decodes it while the log writes
// instead: Catalog.execFenced has the node's replica prepare the encoded
// command before proposing it, and the replica's Apply takes the prepared
// command when the same bytes come back. Prepared from the very bytes the
// log carries, it is what every other node decodes, so the replicas stay
// alike.

// preparedCommand is a command being decoded ahead of its apply.
type preparedCommand struct {
	done chan struct{}
	cmd  command
	err  error
}

// preparedCommands are a replica's commands decoded ahead, by their
// encoding.
type preparedCommands struct {
	mu sync.Mutex
	m  map[string]*preparedCommand
	// taken counts the prepared commands Apply took.
	taken uint64
}

// prepare starts decoding enc for the replica's Apply of it; release
// forgets it if Apply did not take it (the log refused the command, or a
// command with the same bytes took it). A command whose bytes are being
// prepared already is not prepared twice.
func (r *Replica) prepare(enc []byte) (release func()) {
	key := string(enc)
	p := &preparedCommand{done: make(chan struct{})}
	r.pre.mu.Lock()
	if _, ok := r.pre.m[key]; ok {
		r.pre.mu.Unlock()
		return func() {}
	}
	if r.pre.m == nil {
		r.pre.m = map[string]*preparedCommand{}
	}
	r.pre.m[key] = p
	r.pre.mu.Unlock()
	go func() {
		// Bounded by the decode: it ends whether or not Apply comes.
		defer close(p.done)
		p.cmd, p.err = decodeCommand(enc)
		if p.err == nil {
			decodeManifests(&p.cmd)
		}
	}()
	return func() {
		r.pre.mu.Lock()
		if r.pre.m[key] == p {
			delete(r.pre.m, key)
		}
		r.pre.mu.Unlock()
	}
}

// decoded is cmd decoded: the prepared command of those bytes (waiting
// for its decode to end), or decoded here.
func (r *Replica) decoded(cmd []byte) (command, error) {
	r.pre.mu.Lock()
	p, ok := r.pre.m[string(cmd)]
	if ok {
		delete(r.pre.m, string(cmd)) // taken once: Apply keeps what it holds
		r.pre.taken++
	}
	r.pre.mu.Unlock()
	if !ok {
		return decodeCommand(cmd)
	}
	<-p.done
	return p.cmd, p.err
}

// decodeManifests sets the decoded manifest of the completions in cmd
// (a batch's too), as the machine's apply would decode it. One that does
// not decode is left for the apply, which refuses it.
func decodeManifests(cmd *command) {
	for i := range cmd.Batch {
		decodeManifests(&cmd.Batch[i])
	}
	if cmd.Op == opCompleted && cmd.decoded == nil && len(cmd.Manifest) > 0 {
		if m, err := DecodeManifest(cmd.Manifest); err == nil {
			cmd.decoded = m
		}
	}
}
