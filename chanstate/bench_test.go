package chanstate

import (
	"context"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// BenchmarkWriterAppend measures Append throughput (encode and spool) into
// 64 MiB parts uploaded to a memstore: 32 KiB buffers of 256 records of
// 128 bytes, a typical network buffer of small records.
func BenchmarkWriterAppend(b *testing.B) {
	buf := make([]Record, 256)
	for i := range buf {
		buf[i] = Record{KeyGroup: int32(i % 128), Data: make([]byte, 128)}
	}
	buffers := [][]Record{buf}
	_, _, n := Counts(buffers)
	w := newWriter(b, memstore.New(), 0)
	b.SetBytes(n)
	b.ResetTimer()
	for i := range b.N {
		if _, err := w.Append(context.Background(), task(i%16), in(0, int32(i%4)), backend.ChannelKeyed, buffers); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Seal(context.Background()); err != nil {
		b.Fatal(err)
	}
}
