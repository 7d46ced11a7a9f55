package promread

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

func TestZZWarmProfile(t *testing.T) {
	p := os.Getenv("WARM_ARCHIVE")
	if p == "" {
		t.Skip()
	}
	a, err := archive.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	q, err := NewQueryable(a, Options{Series: seriesindex.New()})
	if err != nil {
		t.Fatal(err)
	}
	st := time.Now()
	if err := q.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("warm %v", time.Since(st))
}
