package catalog

import (
	"strings"
	"testing"
)

// TestLSMDirUnderShared: the lsm remote directory (refcount/markers) lies
// in the job's shared directory, where the catalog's layout and sweep
// expect shared objects (isRemoteLSM classifies by both).
func TestLSMDirUnderShared(t *testing.T) {
	if !strings.HasPrefix(lsmDir, sharedDir+"/") || !strings.HasSuffix(lsmDir, "/") {
		t.Fatalf("lsm dir %q is not a directory under %q", lsmDir, sharedDir)
	}
	if !isRemoteLSM("job/" + lsmDir + "01ab-7-000005.sst") {
		t.Fatalf("an SST under job/%s is not taken for a remote lsm object", lsmDir)
	}
}
