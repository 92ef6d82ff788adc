package localfs_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/tiered"
)

// tmpName matches the store's temporary file names.
var tmpName = regexp.MustCompile(`\.tmp/[0-9]+-[0-9]+-[0-9a-f]+`)

// TestDurabilityTranscript pins the order of the store's creates, syncs,
// renames, links and removes (reads, opens and closes left out): what
// makes a Put durable before it returns (file synced, then renamed, then
// its directory synced; a directory it creates synced into its parent
// first) and a Delete too (the directories it changed synced, deepest
// first). A change to this order is a change to what survives a power
// loss; TestPowerLossKeepsAcknowledgedWrites and fuzz's TestPowerLoss
// check that it still holds.
func TestDurabilityTranscript(t *testing.T) {
	ctx := context.Background()
	var log []string
	fs := vfs.WithLogging(vfs.NewMem(), func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		for _, skip := range []string{"open", "close", "read", "lock", "stat", "list"} {
			if strings.HasPrefix(line, skip) {
				return
			}
		}
		log = append(log, tmpName.ReplaceAllString(line, ".tmp/<tmp>"))
	})
	s := openFS(t, fs, "/r")
	log = append(log, "-- put j/chk-1/_metadata")
	if err := tiered.PutBytes(ctx, s, "j/chk-1/_metadata", []byte("m")); err != nil {
		t.Fatal(err)
	}
	log = append(log, "-- put-if-absent j/shared/a")
	if err := s.PutIfAbsent(ctx, "j/shared/a", strings.NewReader("a"), 1); err != nil {
		t.Fatal(err)
	}
	log = append(log, "-- delete j/chk-1/_metadata, j/shared/a")
	if err := s.DeleteBatch(ctx, []string{"j/chk-1/_metadata", "j/shared/a"}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(log, "\n")
	// Writes are not in the log (vfs.WithLogging logs only WriteAt).
	// The delete removes the emptied directories up to the root, so one
	// sync of the root makes all of it durable.
	want := strings.TrimSpace(`
mkdir-all: /r 0755
sync: /
mkdir-all: /r/.tmp 0755
sync: /r
-- put j/chk-1/_metadata
mkdir-all: /r/j 0755
sync: /r
mkdir-all: /r/j/chk-1 0755
sync: /r/j
create: /r/.tmp/<tmp>
sync: /r/.tmp/<tmp>
rename: /r/.tmp/<tmp> -> /r/j/chk-1/_metadata
sync: /r/j/chk-1
-- put-if-absent j/shared/a
mkdir-all: /r/j/shared 0755
sync: /r/j
create: /r/.tmp/<tmp>
sync: /r/.tmp/<tmp>
link: /r/.tmp/<tmp> -> /r/j/shared/a
remove: /r/.tmp/<tmp>
sync: /r/j/shared
-- delete j/chk-1/_metadata, j/shared/a
remove: /r/j/chk-1/_metadata
remove: /r/j/chk-1
remove: /r/j
remove: /r/j/shared/a
remove: /r/j/shared
remove: /r/j
sync: /r
`)
	if got != want {
		t.Errorf("transcript:\n%s\n\nwant:\n%s", got, want)
	}
}
