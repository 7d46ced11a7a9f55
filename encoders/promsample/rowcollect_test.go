package promsample

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
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
		data, idx, err := e.write(c, series, meta, 0)
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

// An encoder reused across batches must write the same bytes as a fresh
// one, batch after batch.
func TestBatchEncoderReuseWritesWhatAFreshOneWrites(t *testing.T) {
	var reused BatchEncoder
	r := rand.New(rand.NewPCG(3, 9))
	batches := randBatches(r, 200)
	for round := 0; round < 2; round++ {
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
}
