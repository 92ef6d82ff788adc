package dstl

import (
	"context"
	"testing"
)

// blockingLog is a LogStore whose Puts wait for release.
type blockingLog struct {
	TieredLogStore
	entered chan string
	release chan struct{}
}

func (b *blockingLog) Put(ctx context.Context, name string, data []byte) error {
	b.entered <- name
	<-b.release
	return b.TieredLogStore.Put(ctx, name, data)
}

// A segment is held while it uploads, not only once durable: a sweep may
// list its object (one just renamed into place, or a packed one)
// before the upload returns, and must not delete it.
func TestWriterHoldsUploadingSegments(t *testing.T) {
	ctx := context.Background()
	bl := &blockingLog{TieredLogStore: TieredLogStore{Store: openLocal(t)}, entered: make(chan string, 4), release: make(chan struct{})}
	w, err := NewWriter(bl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	released := false
	defer func() { // before Close, which waits for the upload
		if !released {
			close(bl.release)
		}
	}()
	seq, err := w.Append(ctx, "w", 1, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.Persist(ctx, "w", seq)
		done <- err
	}()
	name := <-bl.entered
	if !w.Holds(name) {
		t.Fatalf("segment %s is uploading and not held", name)
	}
	close(bl.release)
	released = true
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !w.Holds(name) {
		t.Fatalf("durable segment %s is not held", name)
	}
}
