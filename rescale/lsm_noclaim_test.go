package rescale_test

import "testing"

// TestLSMNoClaimRescaleUploadsNoClippedData is checkNoClippedUploads in
// no-claim mode, where the first checkpoint after the restore uploads
// every file it needs under new names. Excise leaves the SSTs that
// straddle a range boundary as virtual SSTs over backing files that still
// hold the clipped keys; lsm rewrites those tables when a restore does not
// keep the history, so the upload holds none.
func TestLSMNoClaimRescaleUploadsNoClippedData(t *testing.T) { checkNoClippedUploads(t, true) }
