package archive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// TestAReadHandleKeepsToItsMemoryAndConnections: each connection's cache is
// its share of ReadOptions.MemoryBytes, and no more than MaxConns
// connections (so snapshots) are open: the next View waits for one.
func TestAReadHandleKeepsToItsMemoryAndConnections(t *testing.T) {
	w := at.NewWriter(t, archive.WriterOptions{})
	must(t, w.Sync(context.Background()))
	a, err := archive.OpenWithOptions(w.Path(), archive.ReadOptions{MemoryBytes: 40 << 20, MaxConns: 2})
	must(t, err)
	defer a.Close()
	// 40 MiB over 2 connections is 20 MiB each; less 2 MiB of fixed cost,
	// halved for the allocator: 9 MiB of cache.
	got, err := archive.PragmaForTest(a, "cache_size")
	must(t, err)
	eq(t, "cache_size", got, "-9216")

	hold := make(chan struct{})
	held := make(chan struct{}, 2)
	done := make(chan error, 2)
	for range 2 {
		go func() {
			done <- a.View(context.Background(), func(*archive.ReadTx) error {
				held <- struct{}{}
				<-hold
				return nil
			})
		}()
	}
	<-held
	<-held
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = a.View(ctx, func(*archive.ReadTx) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third View with two held: %v, want it to wait until its context ends", err)
	}
	close(hold)
	must(t, <-done)
	must(t, <-done)
	must(t, a.View(context.Background(), func(*archive.ReadTx) error { return nil }))
}
