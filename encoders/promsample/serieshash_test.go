package promsample

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// streamedHash is SeriesHash's definition: xxhash64 of every label's name,
// 0xff, value and 0xff, in order.
func streamedHash(ls labels.Labels) uint64 {
	var b []byte
	ls.Range(func(l labels.Label) {
		b = append(b, l.Name...)
		b = append(b, 0xff)
		b = append(b, l.Value...)
		b = append(b, 0xff)
	})
	return xxhash.Sum64(b)
}

// TestSeriesHashIsTheFormatsHash checks the buffered hasher against the
// definition on label sets that fit its buffer, fill it exactly, spill
// once or many times, and hold single labels longer than it.
func TestSeriesHashIsTheFormatsHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		var sb strings.Builder
		for range n {
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
		return sb.String()
	}
	cases := []struct {
		name   string
		labels labels.Labels
	}{
		{"empty", labels.EmptyLabels()},
		{"one", labels.FromStrings("__name__", "up")},
		{"usual", labels.FromStrings("__name__", "node_cpu_seconds_total", "cpu", "3", "instance", "host-42:9100", "job", "node", "mode", "idle")},
		// 2+2 bytes of separators: name 100 + value 152 = 256 bytes exactly.
		{"fills the buffer", labels.FromStrings(word(100), word(152))},
		{"one byte over", labels.FromStrings(word(100), word(153))},
		{"a label longer than the buffer", labels.FromStrings("a", "b", "c", word(700), "d", "e")},
		{"long first", labels.FromStrings("a", word(300), "b", "c")},
	}
	for range 200 {
		var kv []string
		for k := range 1 + rng.IntN(40) {
			kv = append(kv, string(rune('a'+k%26))+word(k/26+rng.IntN(8)), word(1+rng.IntN(60)))
		}
		cases = append(cases, struct {
			name   string
			labels labels.Labels
		}{"random", labels.FromStrings(kv...)})
	}
	for _, c := range cases {
		want := streamedHash(c.labels)
		if got := SeriesHash(c.labels); got != want {
			t.Fatalf("%s (%d bytes): SeriesHash %x, want %x", c.name, len(c.labels.String()), got, want)
		}
		// One hasher reused, Sum asked twice and labels added after it.
		var h SeriesHasher
		h.Add("zz", "stale")
		h.Reset()
		var first labels.Label
		n := 0
		c.labels.Range(func(l labels.Label) {
			if n == 0 {
				first = l
			}
			n++
			h.Add(l.Name, l.Value)
		})
		if got := h.Sum(); got != want {
			t.Fatalf("%s: reused hasher %x, want %x", c.name, got, want)
		}
		if got := h.Sum(); got != want {
			t.Fatalf("%s: second Sum %x, want %x", c.name, got, want)
		}
		if n > 0 {
			h.Add(first.Name, first.Value)
			b := labels.NewScratchBuilder(n + 1)
			c.labels.Range(func(l labels.Label) { b.Add(l.Name, l.Value) })
			b.Add(first.Name, first.Value) // unsorted on purpose: the bytes in order
			if got, want := h.Sum(), streamedHash(b.Labels()); got != want {
				t.Fatalf("%s: Add after Sum %x, want %x", c.name, got, want)
			}
		}
	}
}

func BenchmarkSeriesHash(b *testing.B) {
	ls := labels.FromStrings("__name__", "node_cpu_seconds_total", "cpu", "3", "instance", "host-42:9100", "job", "node", "mode", "idle", "id", "12345")
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		sink += SeriesHash(ls)
	}
	_ = sink
}
