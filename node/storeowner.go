package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// Until the catalog is replicated, each node of a cluster keeps its own
// catalog and runs its own sweep, and two sweeps over one checkpoint root
// would delete each other's files. A node in cluster mode therefore marks
// the stores it uses as its own, and refuses a store another node marked:
// the misconfiguration a cluster invites (every node pointed at one
// bucket) fails at start, not as lost files. The marker lies outside the
// catalog's layout, which never touches it.
const (
	ownerObject  = "_cluster/owner"
	ownerMagic   = "STCO"
	ownerVersion = 1
)

type ownerRecord struct {
	NodeID string `json:"node_id"`
}

// claimStores marks the checkpoint store and a separate changelog store as
// this node's (cluster mode only).
func (n *Node) claimStores(ctx context.Context) error {
	if !n.opts.clustered() {
		return nil
	}
	if err := claimStore(ctx, n.store, n.opts.NodeID, "--checkpoint-store"); err != nil {
		return err
	}
	if n.logStore != nil && n.logStore != n.store {
		return claimStore(ctx, n.logStore, n.opts.NodeID, "--changelog-store")
	}
	return nil
}

func claimStore(ctx context.Context, st tiered.Store, nodeID, flag string) error {
	payload, err := json.Marshal(ownerRecord{NodeID: nodeID})
	if err != nil {
		return err
	}
	enc := frame.Encode(ownerMagic, ownerVersion, payload)
	err = st.PutIfAbsent(ctx, ownerObject, bytes.NewReader(enc), int64(len(enc)))
	if err == nil {
		return nil
	}
	if !errors.Is(err, tiered.ErrExists) {
		return fmt.Errorf("%s: marking it as node %s's: %w", flag, nodeID, err)
	}
	rc, err := st.Get(ctx, ownerObject)
	if err != nil {
		return fmt.Errorf("%s: reading its owner %s: %w", flag, ownerObject, err)
	}
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	_ = rc.Close()
	if err != nil {
		return fmt.Errorf("%s: reading its owner %s: %w", flag, ownerObject, err)
	}
	var rec ownerRecord
	if _, p, err := frame.Decode(ownerMagic, b); err != nil {
		return fmt.Errorf("%s: its owner marker %s is damaged (%v): remove it if no other node uses this store", flag, ownerObject, err)
	} else if err := json.Unmarshal(p, &rec); err != nil {
		return fmt.Errorf("%s: its owner marker %s is damaged (%v): remove it if no other node uses this store", flag, ownerObject, err)
	}
	if rec.NodeID != nodeID {
		return fmt.Errorf("%s is used by cluster node %q (%s): until the catalog is replicated, each node of a cluster needs its own %s; give node %q another one, or delete %s if node %q is gone for good",
			flag, rec.NodeID, ownerObject, flag, nodeID, ownerObject, rec.NodeID)
	}
	return nil
}
