package promsample

import (
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// sealShape is one stream's seal as the receiver writes it: series spread
// over rows of rowSeries series each (one request's share of the stream),
// rounds rows per series per epoch, per samples per series per row, epochs
// closed epochs (a seal takes one normally; two after a seal fell behind).
type sealShape struct {
	series, per, rounds, epochs, rowSeries int
}

// sealMetrics are the metric names of sealRows: a cAdvisor-, node- and
// app-shaped mix of counters and gauges.
var sealMetrics = []string{
	"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
	"container_network_receive_bytes_total", "container_fs_reads_total",
	"http_requests_total", "http_request_duration_seconds_sum",
	"node_cpu_seconds_total", "node_filesystem_avail_bytes",
	"process_resident_memory_bytes", "go_goroutines", "up", "kube_pod_status_ready",
	"grpc_server_handled_total", "queue_depth", "temperature_celsius", "build_info",
}

// sealLabels returns series i's labels: eight of them, as a Kubernetes
// target's series carry (the id and pod unique-ish, the others shared).
func sealLabels(i int) labels.Labels {
	inst := i / 100 // 100 series per target
	ns := inst % 20
	return labels.FromStrings(
		"__name__", sealMetrics[i%len(sealMetrics)],
		"cluster", "prod-eu-west-1",
		"container", []string{"app", "sidecar", "istio-proxy", "init"}[i%4],
		"id", fmt.Sprintf("/kubepods/burstable/pod%08x/%012x", inst, mix(7, uint64(i), 0)&0xffffffffffff),
		"instance", fmt.Sprintf("10.%d.%d.%d:9100", inst>>16&0xff, inst>>8&0xff, inst&0xff),
		"job", []string{"kubernetes-cadvisor", "node-exporter", "api", "kube-state-metrics", "grpc"}[inst%5],
		"namespace", "ns-"+strconv.Itoa(ns),
		"pod", fmt.Sprintf("deploy-%d-%05x", ns, inst),
	)
}

// sealValue is series i's j-th sample value: counters as integers that
// grow, byte gauges as page multiples, the rest floats or constants.
func sealValue(i, j int) float64 {
	r := mix(11, uint64(i), uint64(j))
	switch i % 4 {
	case 0: // counter
		return float64(uint64(i)*1000 + uint64(j)*uint64(1+i%50) + r%7)
	case 1: // bytes
		return float64((1<<20 + r%(1<<16)) * 4096)
	case 2: // float gauge
		return 20 + float64(r%100000)/1000
	default:
		return 1
	}
}

// sealRows builds the rows of sh with RowEncoder, as receiver.Ingester
// does: in each epoch, the first row that holds a series anchors it (local
// ids in the order series first appear), later rows refer to it; each
// epoch ends with a close marker. Series appear in a fixed shuffled order
// (a sender's shards are not sorted by labels); timestamps are a 15 s
// scrape with per-series jitter of up to 20 ms.
func sealRows(tb testing.TB, sh sealShape) []archive.Row {
	tb.Helper()
	order := make([]int, sh.series)
	for i := range order {
		order[i] = i
	}
	rng := splitmix64(3)
	for i := len(order) - 1; i > 0; i-- {
		j := rng.intn(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	var (
		enc  RowEncoder
		rows []archive.Row
		row  AnchoredRow
		smp  []Sample
	)
	ts := int64(1_700_000_000_000_000_000)
	const startMs, stepMs = 1_700_000_000_000, 15_000
	scrape := 0 // samples per series so far
	for e := range sh.epochs {
		epoch := uint64(e+1) * 0x9E3779B97F4A7C15
		local := make([]int32, sh.series) // series -> local id + 1
		next := uint32(0)
		for range sh.rounds {
			for start := 0; start < sh.series; start += sh.rowSeries {
				row = AnchoredRow{Epoch: epoch, FirstLocal: next, Anchors: row.Anchors[:0], Series: row.Series[:0]}
				smp = smp[:0]
				for _, i := range order[start:min(start+sh.rowSeries, sh.series)] {
					if local[i] == 0 {
						row.Anchors = append(row.Anchors, sealLabels(i))
						next++
						local[i] = int32(next)
					}
					at := len(smp)
					for j := scrape; j < scrape+sh.per; j++ {
						t := startMs + int64(j)*stepMs + int64(mix(5, uint64(i), uint64(j))%21)
						smp = append(smp, Sample{T: t, V: sealValue(i, j)})
					}
					row.Series = append(row.Series, RowSeries{Local: uint32(local[i] - 1), Samples: smp[at:len(smp):len(smp)]})
				}
				data, err := enc.Append(nil, &row)
				if err != nil {
					tb.Fatal(err)
				}
				ts++
				rows = append(rows, archive.Row{Stream: "samples/00", TS: ts, Data: data})
			}
			scrape += sh.per
		}
		ts++
		rows = append(rows, archive.Row{Stream: "samples/00", TS: ts, Data: AppendEpochClose(nil, epoch)})
	}
	return rows
}

// liveHeap collects garbage and returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkSealMemory measures what a seal of one stream costs per series:
// the rows of 10 k, 125 k (1 M active series over 8 streams) and 1 M
// series, 2 epochs of 2 rows per series, 1 or 4 samples per series per row
// (4 or 16 per series in all), encoded as the archive's seal encodes them
// (EncodeConsuming).
//
//   - ns/series and alloc-B/series: the timed loop, over b.N encodes.
//   - peak-live-B/series: one more encode, with the encoder's probe forcing
//     a collection at each of its fullest points (rows collected, series
//     canonical, row groups written, segment written, index built) and
//     reading the live heap
//     (runtime/metrics /gc/heap/live:bytes, exact right after a GC); the
//     largest, minus the live heap before the encode (which holds the
//     benchmark's rows), is what the encode itself holds live. The rows are
//     kept by the benchmark, so the seal's consuming of them does not show:
//     this is the encoder's own memory, not the receiver's.
func BenchmarkSealMemory(b *testing.B) {
	for _, n := range []int{10_000, 125_000, 1_000_000} {
		for _, per := range []int{1, 4} {
			sh := sealShape{series: n, per: per, rounds: 2, epochs: 2, rowSeries: 2000}
			b.Run(fmt.Sprintf("series=%d/per=%d", n, per), func(b *testing.B) {
				rows := sealRows(b, sh)
				var enc Encoder
				in := make([]archive.Row, len(rows))
				encode := func() *archive.Segment {
					copy(in, rows) // EncodeConsuming drops in[i].Data
					seg, err := enc.EncodeConsuming("samples/00", in)
					if err != nil {
						b.Fatal(err)
					}
					if seg == nil || seg.Rows != int64(len(rows)) {
						b.Fatalf("segment %v, want %d rows", seg, len(rows))
					}
					return seg
				}
				encode() // warm: the encoder's spare buffers
				loopPerSeries(b, n, func() { encode() })

				phases := map[string]uint64{}
				var order []string
				enc.probe = func(phase string) { phases[phase] = liveHeap(); order = append(order, phase) }
				base := liveHeap()
				seg := encode()
				enc.probe = nil
				peak := uint64(0)
				for _, p := range order {
					peak = max(peak, phases[p])
				}
				var detail []string
				for _, p := range order {
					detail = append(detail, fmt.Sprintf("%s %.0f", p, (float64(phases[p])-float64(base))/float64(n)))
				}
				b.Logf("live B/series by phase: %v; segment %.1f B/series", detail, float64(len(seg.Bytes))/float64(n))

				b.ReportMetric(math.Max(0, float64(peak)-float64(base))/float64(n), "peak-live-B/series")
			})
		}
	}
}

// loopPerSeries runs fn in b's timed loop and reports, per series of the
// n each call handles, its time, the bytes it allocated and its
// allocations.
func loopPerSeries(b *testing.B, n int, fn func()) {
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for b.Loop() {
		fn()
	}
	runtime.ReadMemStats(&ms1)
	iters := float64(b.N) * float64(n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/iters, "ns/series")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/iters, "alloc-B/series")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/iters, "allocs/series")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkSealCollect measures a seal's first half alone: its rows
// decoded into canonical series, sorted (collectRows and finish), at 125 k
// series a stream (a million over 8 streams), 2 rows of 1 sample per
// series an epoch. With one epoch, as a seal takes normally, every anchor
// is a new series; with two (a seal that fell behind) the second epoch's
// anchors are series of the first.
func BenchmarkSealCollect(b *testing.B) {
	const n = 125_000
	for _, epochs := range []int{1, 2} {
		b.Run(fmt.Sprintf("series=%d/epochs=%d", n, epochs), func(b *testing.B) {
			rows := sealRows(b, sealShape{series: n, per: 1, rounds: 2, epochs: epochs, rowSeries: 2000})
			var enc Encoder
			loopPerSeries(b, n, func() {
				c := newPackingCollector()
				if _, err := enc.collectRows(newRowCollector(c), rows, false); err != nil {
					b.Fatal(err)
				}
				if series, _ := c.finish(); len(series) != n {
					b.Fatalf("%d series, want %d", len(series), n)
				}
			})
		})
	}
}
