// The replicated journal: small records the catalog keeps beside its log.

package cluster

import (
	"context"
	"fmt"
)

// checkRecord refuses a record the machine would refuse, before it costs
// a log entry: a caller learns of an oversized record at once, even while
// the cluster has no leader. The machine checks again when it applies
// (state.apply): an entry from a node of another build is not trusted.
func checkRecord(key string, value []byte) error {
	switch {
	case key == "":
		return fmt.Errorf("cluster: a journal put without a key")
	case len(value) > maxJournalValue:
		return fmt.Errorf("cluster: journal record %q of %d bytes (at most %d)", key, len(value), maxJournalValue)
	}
	return nil
}

// JournalPut sets key to value in the replicated journal: once it
// returns, every later leader's JournalRead (after Barrier) sees it. A
// repeated put of the same value is harmless, so a retry after a lost
// answer is safe.
func (n *Member) JournalPut(ctx context.Context, key string, value []byte) error {
	if err := checkRecord(key, value); err != nil {
		return err
	}
	b, err := n.apply(ctx, encodeCommand(command{Op: opPut, Key: key, Value: value}))
	if err != nil {
		return err
	}
	_, err = decodeResult(b)
	return err
}

// JournalPutMany is JournalPut of several records in one log entry: all
// of them or none.
func (n *Member) JournalPutMany(ctx context.Context, records map[string][]byte) error {
	_, err := n.JournalPutChecked(ctx, records, nil)
	return err
}

// JournalPutChecked is JournalPutMany where a record with a check is set
// only while the check's token is its task's newest, decided in the same
// log entry. refused maps the keys not set to errors wrapping ErrFenced
// that name the newer holder; err is for the write as a whole (then no
// record is set).
func (n *Member) JournalPutChecked(ctx context.Context, records map[string][]byte, checks map[string]Check) (refused map[string]error, err error) {
	for k, v := range records {
		if err := checkRecord(k, v); err != nil {
			return nil, err
		}
	}
	b, err := n.apply(ctx, encodeCommand(command{Op: opPutMany, Records: records, Checks: checks}))
	if err != nil {
		return nil, err
	}
	r, err := decodeResult(b)
	if err != nil {
		return nil, err
	}
	for k, cur := range r.Refused {
		if refused == nil {
			refused = map[string]error{}
		}
		refused[k] = fenced(checks[k].Task, checks[k].Token, result{Token: cur.Token, Holder: cur.Holder})
	}
	return refused, nil
}

// JournalDeleteRange deletes the journal's keys in [from, to).
func (n *Member) JournalDeleteRange(ctx context.Context, from, to string) error {
	b, err := n.apply(ctx, encodeCommand(command{Op: opDeleteRange, Key: from, To: to}))
	if err != nil {
		return err
	}
	_, err = decodeResult(b)
	return err
}

// JournalRead returns the journal's records under prefix from this node's
// copy: complete on a leader after Barrier, possibly behind elsewhere.
func (n *Member) JournalRead(prefix string) map[string][]byte { return n.fsm.journal(prefix) }
