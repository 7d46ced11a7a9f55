package promsample

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"

	"github.com/prometheus/prometheus/model/labels"
)

// The seal's row collector must build exactly the segment that decoding
// each row (DecodeBatch) into the collector builds: same bytes, same index.
func TestRowCollectorWritesWhatDecodeBatchWrites(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		batches := randBatches(r, 1+r.IntN(30))
		var rows []archive.Row
		for i := range batches {
			data, err := EncodeBatch(&batches[i])
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, archive.Row{Stream: "s", TS: int64(i + 1), Data: data})
		}
		e := &Encoder{}
		got, err := e.Encode("s", rows)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		c := newCollector()
		for _, row := range rows {
			b, err := DecodeBatch(row.Data)
			if err != nil {
				t.Fatal(err)
			}
			c.add(&b)
		}
		series, meta := c.finish()
		data, idx, err := e.write(series, meta, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes, data) || !bytes.Equal(got.Index, idx) {
			t.Fatalf("seed %d: the row collector's segment differs from DecodeBatch's (%d vs %d bytes)", seed, len(got.Bytes), len(data))
		}
	}
}

// A corrupt row fails the encode with the error DecodeBatch gives.
func TestRowCollectorRefusesWhatDecodeBatchRefuses(t *testing.T) {
	b := Batch{Series: []Series{{Labels: randLabels(rand.New(rand.NewPCG(1, 1))), Samples: []Sample{{T: 1, V: 2}}}}}
	good, err := EncodeBatch(&b)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, {9}, good[:len(good)-1], append([]byte{rowFormatV1}, 0xff, 0xff, 0xff, 0xff, 0xff)} {
		_, want := DecodeBatch(bad)
		err := newRowCollector(newCollector()).add(bad)
		if (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
			t.Errorf("row %x: row collector says %v, DecodeBatch %v", bad, err, want)
		}
	}
}

// An encoder reused across batches (its cross-call label cache warm) must
// write the same bytes as a fresh one, batch after batch.
func TestBatchEncoderReuseWritesWhatAFreshOneWrites(t *testing.T) {
	var reused BatchEncoder
	r := rand.New(rand.NewPCG(3, 9))
	batches := randBatches(r, 200)
	for round := 0; round < 2; round++ { // the second round hits the cache
		for i := range batches {
			want, err := EncodeBatch(&batches[i])
			if err != nil {
				t.Fatal(err)
			}
			got, err := reused.Append(nil, &batches[i])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d batch %d: the reused encoder wrote other bytes", round, i)
			}
		}
	}
	if len(reused.sets) == 0 {
		t.Fatal("the label set cache stayed empty")
	}
}

// SeriesHints are only hints: encoders sharing them, hints that point at
// another label set (stale, or shared by mistake between two sets) and
// hints of a reset cache must all write exactly what an unhinted fresh
// encoder writes.
func TestSeriesHintsNeverChangeARow(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 1))
	batches := randBatches(r, 100)
	// One hint per distinct label set, as a receiver's cache keeps them,
	// and one hint shared by every set (always wrong but for one).
	perSet := map[string]*SeriesHint{}
	var shared SeriesHint
	withHints := func(i int, wrong bool) Batch {
		b := batches[i]
		b.Series = append([]Series(nil), b.Series...)
		for j := range b.Series {
			h := &shared
			if !wrong {
				k := b.Series[j].Labels.String()
				if perSet[k] == nil {
					perSet[k] = new(SeriesHint)
				}
				h = perSet[k]
			}
			b.Series[j].Hint = h
		}
		return b
	}
	// A right hint is used: after one encode, each set is found through it.
	var one BatchEncoder
	b0 := withHints(0, false)
	if _, err := one.Append(nil, &b0); err != nil {
		t.Fatal(err)
	}
	for _, s := range b0.Series {
		if _, ok := one.hinted(s.Labels, s.Hint); !ok {
			t.Fatalf("series %v: its hint does not find it", s.Labels)
		}
	}
	var hintMu sync.Mutex // perSet is shared by the encoders below
	encs := make([]BatchEncoder, 3)
	var wg sync.WaitGroup
	errs := make(chan error, len(encs))
	for w := range encs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for i := range batches {
					hintMu.Lock()
					b := withHints(i, (i+w+round)%4 == 0)
					hintMu.Unlock()
					want, err := EncodeBatch(&batches[i])
					if err != nil {
						errs <- err
						return
					}
					got, err := encs[w].Append(nil, &b)
					if err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(got, want) {
						errs <- fmt.Errorf("encoder %d round %d batch %d: a hinted encode wrote other bytes", w, round, i)
						return
					}
				}
				if round == 1 {
					encs[w].gid = nil // force a cache reset: every hint goes stale
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	hits := 0
	for _, h := range perSet {
		if h.v[0].Load() != 0 || h.v[1].Load() != 0 {
			hits++
		}
	}
	if hits == 0 {
		t.Fatal("no hint was ever set")
	}
}

// Two encoders whose tags share the low bit (one pair in two) both keep
// their hint in one SeriesHint, rather than overwriting each other's.
func TestTwoEncodersKeepTheirHints(t *testing.T) {
	ls := labels.FromStrings("__name__", "up", "job", "a")
	hint := new(SeriesHint)
	b := Batch{Series: []Series{{Labels: ls, Samples: []Sample{{T: 1, V: 1}}, Hint: hint}}}
	for _, tags := range [][2]uint32{{2, 4}, {3, 5}, {2, 3}} {
		*hint = SeriesHint{}
		e1, e2 := &BatchEncoder{tag: tags[0]}, &BatchEncoder{tag: tags[1]}
		for range 3 {
			for _, e := range []*BatchEncoder{e1, e2} {
				if _, err := e.Append(nil, &b); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, e := range []*BatchEncoder{e1, e2} {
			if _, ok := e.hinted(ls, hint); !ok {
				t.Errorf("tags %v: encoder %d lost its hint", tags, e.tag)
			}
		}
	}
}
