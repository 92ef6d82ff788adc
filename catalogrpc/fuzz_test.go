package catalogrpc

import (
	"encoding/json"
	"testing"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered/memstore"
)

// FuzzServerHandle: any call a peer sends gets an answer or an error,
// never a panic, and an answer always names the server's epoch.
func FuzzServerHandle(f *testing.F) {
	for _, m := range []string{mBegin, mReport, mComplete, mAbort, mRelease, mCheckpoint, mLatest, mSavepoint,
		mRetained, mList, mRestore, mNoteNoChans, mReleaseLog, mEpoch, mSavepointOf, mJobs, mProblems, mSavepoints, "nonsense"} {
		f.Add(m, []byte(`{"job":"j","id":1}`))
		f.Add(m, []byte(`{"job":"j","id":1,"handle":"U1RIMQ==","tasks":[{"job":"j","operator":"op","subtask":0}]}`))
		f.Add(m, []byte(`{"restore":{"job":"j","mode":"claim","savepointId":"../x"}}`))
		f.Add(m, []byte(`{"job":"j","id":1,"handle":"U1RIMQ==","token":7}`))
	}
	cat, err := catalog.Open(ctx, catalog.Options{Store: memstore.New()})
	if err != nil {
		f.Fatal(err)
	}
	defer cat.Close()
	srv, err := NewServer(cat, ServerOptions{Epoch: 3, Journal: &memJournal{m: map[string][]byte{}}})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	f.Fuzz(func(t *testing.T, method string, payload []byte) {
		out, err := srv.Handle(ctx, method, payload)
		if err != nil {
			return
		}
		var a answer
		if err := json.Unmarshal(out, &a); err != nil {
			t.Fatalf("unreadable answer: %v", err)
		}
		if a.Epoch != 3 {
			t.Fatalf("answer of epoch %d", a.Epoch)
		}
	})
}
