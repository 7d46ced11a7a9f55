package receiver

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// A request counts as on its way to the writer from the moment its body is
// read until its rows are handed over, and no longer once it is answered,
// whatever the answer.
func TestPendingCountsRequestsUntilTheyReachTheWriter(t *testing.T) {
	p := &Pending{}
	var inside int
	sink := &fakeSink{write: func(ctx context.Context, _ string, series []promsample.Series, _ []promsample.Metadata) (Counts, error) {
		inside = p.Count() // the fake sink never hands rows over
		return countsOf(series), nil
	}}
	srv, _ := newServer(t, sink, Options{Pending: p})
	one := []prompb.Sample{{Timestamp: 1, Value: 1}}
	for _, c := range []struct {
		name   string
		body   []byte
		code   int
		inside int
	}{
		{"written", v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m"), Samples: one}), http.StatusNoContent, 1},
		{"malformed", []byte("not snappy"), http.StatusBadRequest, -1},
		{"invalid series", v1Body(t, prompb.TimeSeries{Labels: lbl("b", "1", "a", "2"), Samples: one}), http.StatusBadRequest, -1},
	} {
		inside = -1
		if a := post(t, srv.URL, bytes.NewReader(c.body), v1Headers()); a.code != c.code {
			t.Fatalf("%s: %d %s, want %d", c.name, a.code, a.body, c.code)
		}
		if inside != c.inside {
			t.Errorf("%s: %d pending inside the sink, want %d", c.name, inside, c.inside)
		}
		if n := p.Count(); n != 0 {
			t.Errorf("%s: %d pending after the answer", c.name, n)
		}
	}
}

// Through the real Ingester the count drops when the rows are queued: a
// commit that waits for pending requests must not wait for the one it is
// committing.
func TestTheIngesterHandsTheRequestOver(t *testing.T) {
	s := openStack(t, filepath.Join(t.TempDir(), "a.db"), archive.SealPolicy{})
	p := &Pending{}
	ctx, tok := p.begin(context.Background())
	defer tok.end()
	series := []promsample.Series{{Labels: labels.FromStrings("__name__", "m"), Samples: []promsample.Sample{{T: 1, V: 1}}}}
	if _, err := s.ing.Write(ctx, DefaultSource, unlabelled(s.ing.Series(), series), nil); err != nil {
		t.Fatal(err)
	}
	if n := p.Count(); n != 0 {
		t.Errorf("%d pending after Write; the Ingester did not hand the request over", n)
	}
}
