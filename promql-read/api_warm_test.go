package promread

import (
	"context"
	"testing"
)

// WarmEngine runs a real question through the engine: on an archive with
// data it reads a segment and succeeds; on an empty one it does nothing.
func TestWarmEngineAsksOneSeries(t *testing.T) {
	ctx := context.Background()
	empty := newFixture(t)
	api, err := NewAPI(empty.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.WarmEngine(ctx); err != nil {
		t.Fatalf("empty archive: %v", err)
	}

	f := newFixture(t)
	standardData(f)
	api, err = NewAPI(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Queryable().Warm(ctx); err != nil {
		t.Fatal(err)
	}
	before := api.s.segmentsRead.Load()
	if err := api.WarmEngine(ctx); err != nil {
		t.Fatalf("WarmEngine: %v", err)
	}
	if api.s.segmentsRead.Load() == before {
		t.Fatal("WarmEngine read no segment: the question it asks selected nothing")
	}
}
