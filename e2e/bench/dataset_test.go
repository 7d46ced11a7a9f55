package main

import (
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

func testDataset() Dataset {
	return Dataset{Series: 240, Samples: 9, Sources: 10, StartMs: 1_700_000_000_000, StepMs: 15_000, Seed: 1}
}

// The generator is pinned: these bits must never change, whatever the Go
// version, or figures of different runs stop being comparable and a
// verifier built from another revision disagrees with the sender.
func TestValuesArePinned(t *testing.T) {
	d := testDataset()
	want := map[int][3]uint64{ // series -> bits of samples 0, 1, 8
		0:  {0x410df1e000000000, 0x410df20000000000, 0x410df89800000000}, // http_requests_total: 245308 245312 245523
		10: {0x40fc2f179e165831, 0x40fc2f18b63e00ec, 0x40fc30ab290f902d}, // node_cpu_seconds_total: 115441.476…
		20: {0x41989703f0000000, 0x4198a683f0000000, 0x41993cc3f0000000}, // process_resident_memory_bytes
		30: {0x402a000000000000, 0x4028000000000000, 0x4014000000000000}, // queue_depth: 13 12 5
		40: {0x403d70f16ec5871c, 0x403d6a01d7300007, 0x403d8da186471579}, // temperature_celsius: 29.44…
		50: {0x3ff0000000000000, 0x3ff0000000000000, 0x3ff0000000000000}, // build_info
	}
	for i, w := range want {
		vs := d.All(i, nil)
		got := [3]uint64{math.Float64bits(vs[0]), math.Float64bits(vs[1]), math.Float64bits(vs[8])}
		if got != w {
			t.Errorf("series %d (%s): bits %#x, want %#x", i, labelString(labelMap(d.Labels(i))), got, w)
		}
	}
}

func TestValuesDeterministicAndShaped(t *testing.T) {
	d := testDataset()
	for i := range d.Series {
		a, b := d.All(i, nil), d.All(i, nil)
		for j := range a {
			if math.Float64bits(a[j]) != math.Float64bits(b[j]) {
				t.Fatalf("series %d sample %d: %v then %v", i, j, a[j], b[j])
			}
		}
		other := d
		other.Seed = 2
		if c := other.All(i, nil); slices.Equal(a, c) && metrics[i/d.Sources%len(metrics)].kind != constantOne {
			t.Errorf("series %d: seed 2 gives the same values as seed 1", i)
		}
		m, _, _ := d.coords(i)
		for j := 1; j < len(a); j++ {
			switch metrics[m].kind {
			case counterInt, counterFloat:
				if a[j] < a[j-1] {
					t.Errorf("counter series %d decreases at %d: %v -> %v", i, j, a[j-1], a[j])
				}
			case constantOne:
				if a[j] != 1 {
					t.Errorf("constant series %d: %v", i, a[j])
				}
			case gaugeBytes, gaugeSmallInt:
				if a[j] != math.Trunc(a[j]) {
					t.Errorf("integer series %d: %v", i, a[j])
				}
			}
		}
	}
}

func TestLabelsRoundTrip(t *testing.T) {
	d := testDataset()
	seen := map[string]bool{}
	for i := range d.Series {
		ls := d.Labels(i)
		if !sort.SliceIsSorted(ls, func(a, b int) bool { return ls[a].Name < ls[b].Name }) {
			t.Fatalf("series %d: labels not sorted: %v", i, ls)
		}
		key := labelString(labelMap(ls))
		if seen[key] {
			t.Fatalf("series %d: labels %s repeated", i, key)
		}
		seen[key] = true
		m := labelMap(ls)
		if got, ok := d.Index(func(n string) string { return m[n] }, len(m)); !ok || got != i {
			t.Fatalf("Index(%s) = %d, %v; want %d", key, got, ok, i)
		}
	}
	m := labelMap(d.Labels(7))
	for name, change := range map[string]func(map[string]string){
		"env":         func(m map[string]string) { m["env"] = "prod" },
		"job":         func(m map[string]string) { m["job"] = "other" },
		"extra label": func(m map[string]string) { m["x"] = "y" },
		"id too high": func(m map[string]string) { m["id"] = "4" },
		"instance":    func(m map[string]string) { m["instance"] = "host-0010:9100" },
		"name":        func(m map[string]string) { m["__name__"] = "up" },
	} {
		c := map[string]string{}
		for k, v := range m {
			c[k] = v
		}
		change(c)
		if i, ok := d.Index(func(n string) string { return c[n] }, len(c)); ok {
			t.Errorf("%s: Index(%s) = %d, want refused", name, labelString(c), i)
		}
	}
}

func TestSeriesWith(t *testing.T) {
	d := testDataset() // 240 series: ids 0..3, 10 instances, 6 metrics
	if got := d.SeriesWith(4, func(_, id int) bool { return id == 2 }); got != 10 {
		t.Errorf("temperature_celsius{id=2}: %d series, want 10", got)
	}
	if got := d.SeriesWith(3, func(inst, _ int) bool { return inst%4 == 2 }); got != 4*2 {
		t.Errorf("queue_depth{zone=zone-2}: %d series, want 8", got)
	}
}

// plan must hand out every sample exactly once, each series' samples in
// time order within its one sender, in requests of Batch samples but a
// sender's last.
func TestPlanCoversEverySampleOnceInOrder(t *testing.T) {
	d := testDataset()
	for _, l := range []Layout{{Batch: 2000, PerSeries: 1, Senders: 4}, {Batch: 7, PerSeries: 4, Senders: 3}, {Batch: 1, PerSeries: 2, Senders: 1}} {
		count := make([][]int, d.Series)
		for i := range count {
			count[i] = make([]int, d.Samples)
		}
		for w := range l.Senders {
			next := map[int]int{} // series -> next sample expected
			var sizes []int
			l.plan(d, w, func(req []span) {
				n := 0
				for _, s := range req {
					if s.series%l.Senders != w {
						t.Fatalf("%+v: sender %d got series %d", l, w, s.series)
					}
					if s.j0 != next[s.series] {
						t.Fatalf("%+v: series %d: sample %d after %d", l, s.series, s.j0, next[s.series]-1)
					}
					if s.n > l.PerSeries {
						t.Fatalf("%+v: run of %d samples", l, s.n)
					}
					for j := s.j0; j < s.j0+s.n; j++ {
						count[s.series][j]++
					}
					next[s.series] = s.j0 + s.n
					n += s.n
				}
				sizes = append(sizes, n)
			})
			for k, n := range sizes {
				if n > l.Batch || (k < len(sizes)-1 && n != l.Batch) {
					t.Fatalf("%+v: sender %d request %d of %d has %d samples", l, w, k, len(sizes), n)
				}
			}
		}
		for i := range count {
			for j, c := range count[i] {
				if c != 1 {
					t.Fatalf("%+v: series %d sample %d sent %d times", l, i, j, c)
				}
			}
		}
	}
}

// The encoded bodies decode to exactly the generator's samples.
func TestEncodeDecodes(t *testing.T) {
	d := testDataset()
	ld, err := Encode(d, Layout{Batch: 50, PerSeries: 4, Senders: 3})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int][]prompb.Sample{}
	var total int64
	for _, reqs := range ld.senders {
		for _, r := range reqs {
			raw, err := snappy.Decode(nil, r.body)
			if err != nil {
				t.Fatal(err)
			}
			var wr prompb.WriteRequest
			if err := wr.Unmarshal(raw); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, ts := range wr.Timeseries {
				m := labelMap(ts.Labels)
				i, ok := d.Index(func(k string) string { return m[k] }, len(m))
				if !ok {
					t.Fatalf("unknown series %v", ts.Labels)
				}
				got[i] = append(got[i], ts.Samples...)
				n += len(ts.Samples)
			}
			if n != r.samples {
				t.Fatalf("request says %d samples, holds %d", r.samples, n)
			}
			total += int64(n)
		}
	}
	if total != d.TotalSamples() || ld.Requests() != int((d.TotalSamples()+49)/50)+2 && ld.Requests() < int(d.TotalSamples()/50) {
		t.Fatalf("%d samples in %d requests, want %d", total, ld.Requests(), d.TotalSamples())
	}
	for i := range d.Series {
		vs := d.All(i, nil)
		if len(got[i]) != len(vs) {
			t.Fatalf("series %d: %d samples, want %d", i, len(got[i]), len(vs))
		}
		for j, s := range got[i] {
			if s.Timestamp != d.Timestamp(j) || math.Float64bits(s.Value) != math.Float64bits(vs[j]) {
				t.Fatalf("series %d sample %d: (%d, %v), want (%d, %v)", i, j, s.Timestamp, s.Value, d.Timestamp(j), vs[j])
			}
		}
	}
}
