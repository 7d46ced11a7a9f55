package promsample

import (
	"fmt"
	"math"
	"strconv"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// Deterministic data sets for tests and benchmarks. rwloadSet mirrors
// ../shared/tools/rwload/gen.go (same PRNG, labels and value evolution; it
// is re-implemented here, not imported) and its default request layout:
// 4 senders sharding series by i%4, runs of 4 consecutive samples per
// series, 2,000 samples per request.

type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9E3779B97F4A7C15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (s *splitmix64) float64() float64 { return float64(s.next()>>11) / (1 << 53) }
func (s *splitmix64) intn(n int) int   { return int(s.next() % uint64(n)) }
func (s *splitmix64) norm() float64 {
	return (s.float64() + s.float64() + s.float64() + s.float64() - 2) * 1.7320508075688772
}

func mix(a, b, c uint64) uint64 {
	s := splitmix64(a ^ (b * 0xD6E8FEB86659FD93) ^ (c * 0xA0761D6478BD642F))
	return s.next()
}

var rwMetrics = []string{"http_requests_total", "node_cpu_seconds_total", "process_resident_memory_bytes",
	"queue_depth", "temperature_celsius", "build_info"}

var rwSpecials = []uint64{0x7ff0000000000002, 0x7ff0000000000000, 0xfff0000000000000,
	0x7ff8000000000001, 0x0000000000000001, 0x7fefffffffffffff}

type rwConfig struct {
	Series, Samples, Sources int
	StartMs, StepMs          int64
	JitterMs                 int64
	Seed                     uint64
	SpecialEvery             int
}

func defaultRW() rwConfig {
	return rwConfig{Series: 10000, Samples: 120, Sources: 100, StartMs: 1_700_000_000_000, StepMs: 15000, Seed: 1}
}

func (c rwConfig) labels(i int) labels.Labels {
	inst := i % c.Sources
	rest := i / c.Sources
	m, id := rest%len(rwMetrics), rest/len(rwMetrics)
	return labels.FromStrings("__name__", rwMetrics[m], "env", "bench", "id", strconv.Itoa(id),
		"instance", fmt.Sprintf("host-%04d:9100", inst), "job", []string{"api", "node", "db"}[inst%3],
		"zone", "zone-"+strconv.Itoa(inst%4))
}

// series generates series i completely.
func (c rwConfig) series(i int) []Sample {
	m := (i / c.Sources) % len(rwMetrics)
	r := splitmix64(mix(c.Seed, uint64(i), 1))
	stepS := float64(c.StepMs) / 1000
	out := make([]Sample, c.Samples)
	var v float64
	for j := range out {
		ts := c.StartMs + int64(j)*c.StepMs
		if c.JitterMs > 0 {
			ts += int64(mix(c.Seed, uint64(i), uint64(j)+2)%uint64(2*c.JitterMs+1)) - c.JitterMs
		}
		if j == 0 {
			switch m {
			case 0:
				v = float64(r.intn(1_000_000))
			case 1:
				v = r.float64() * 1e6
			case 2:
				v = float64(100_000_000 + r.intn(100_000_000))
			case 3:
				v = float64(r.intn(100))
			case 4:
				v = 20 + r.float64()*40
			default:
				v = 1
			}
		} else {
			switch m {
			case 0:
				v += float64(r.intn(50))
			case 1:
				v += r.float64() * stepS
			case 2:
				v = math.Max(4096, v+float64((r.intn(2001)-1000)*4096))
			case 3:
				v = math.Max(0, v+float64(r.intn(7)-3))
			case 4:
				v += r.norm() * 0.25
			}
		}
		out[j] = Sample{T: ts, V: v}
		if c.SpecialEvery > 0 && m == 4 && (j+1)%c.SpecialEvery == 0 {
			out[j].V = math.Float64frombits(rwSpecials[(j/c.SpecialEvery)%len(rwSpecials)])
		}
	}
	return out
}

// dataSet is a generated data set: series and the requests it is sent in.
type dataSet struct {
	series   []Series // complete series, labels and all samples
	requests []Batch  // in send order
	samples  int64
}

func (c rwConfig) build() dataSet { return c.buildPer(4) }

// buildPer is build with perSeries consecutive samples of a series per
// request (1: the steady state of a scraping Prometheus; 4: catching up).
func (c rwConfig) buildPer(perSeries int) dataSet {
	var ds dataSet
	ds.series = make([]Series, c.Series)
	for i := range ds.series {
		ds.series[i] = Series{Labels: c.labels(i), Samples: c.series(i)}
		ds.samples += int64(c.Samples)
	}
	const senders, batch = 4, 2000
	for w := 0; w < senders; w++ {
		var req Batch
		pending := 0
		for r := 0; r < c.Samples; r += perSeries {
			end := min(r+perSeries, c.Samples)
			for i := w; i < c.Series; i += senders {
				for j := r; j < end; {
					n := min(end-j, batch-pending)
					req.Series = append(req.Series, Series{Labels: ds.series[i].Labels, Samples: ds.series[i].Samples[j : j+n]})
					pending += n
					j += n
					if pending >= batch {
						ds.requests = append(ds.requests, req)
						req, pending = Batch{}, 0
					}
				}
			}
		}
		if pending > 0 {
			ds.requests = append(ds.requests, req)
		}
	}
	return ds
}

// nodeSet is a node_exporter-shaped set: hosts x ~230 series, mostly
// integral counters and slow gauges, some 2-decimal floats, scraped every
// 15 s and sent one sample per series per request, 2,000 per request.
func nodeSet(hosts, samples int) dataSet {
	type def struct {
		name  string
		extra []string // label pairs
		kind  int      // 0 int counter, 1 slow int gauge (4 KiB steps), 2 2-decimal float counter, 3 2-decimal float gauge, 4 constant
		scale int
	}
	var defs []def
	modes := []string{"idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"}
	for cpu := 0; cpu < 8; cpu++ {
		for _, m := range modes {
			defs = append(defs, def{"node_cpu_seconds_total", []string{"cpu", strconv.Itoa(cpu), "mode", m}, 2, 1500})
		}
	}
	for k := 0; k < 30; k++ {
		defs = append(defs, def{fmt.Sprintf("node_memory_m%02d_bytes", k), nil, 1, 0})
	}
	for _, dev := range []string{"eth0", "lo", "docker0"} {
		for _, d := range []string{"receive", "transmit"} {
			defs = append(defs,
				def{"node_network_" + d + "_bytes_total", []string{"device", dev}, 0, 1_000_000},
				def{"node_network_" + d + "_packets_total", []string{"device", dev}, 0, 1000},
				def{"node_network_" + d + "_errs_total", []string{"device", dev}, 0, 1},
				def{"node_network_" + d + "_drop_total", []string{"device", dev}, 0, 1})
		}
	}
	for _, dev := range []string{"sda", "sdb"} {
		defs = append(defs,
			def{"node_disk_reads_completed_total", []string{"device", dev}, 0, 200},
			def{"node_disk_writes_completed_total", []string{"device", dev}, 0, 500},
			def{"node_disk_read_bytes_total", []string{"device", dev}, 0, 4_000_000},
			def{"node_disk_written_bytes_total", []string{"device", dev}, 0, 8_000_000},
			def{"node_disk_io_time_seconds_total", []string{"device", dev}, 2, 300})
	}
	for _, mp := range []string{"/", "/boot", "/var", "/home"} {
		for _, n := range []string{"avail", "free", "size"} {
			defs = append(defs, def{"node_filesystem_" + n + "_bytes", []string{"device", "/dev/sd" + mp, "fstype", "ext4", "mountpoint", mp}, 1, 0})
		}
	}
	for _, n := range []string{"node_load1", "node_load5", "node_load15"} {
		defs = append(defs, def{n, nil, 3, 0})
	}
	defs = append(defs, def{"node_uname_info", []string{"release", "6.8.0", "sysname", "Linux"}, 4, 1},
		def{"node_boot_time_seconds", nil, 4, 1_699_000_000}, def{"node_exporter_build_info", []string{"version", "1.8.2"}, 4, 1})
	for k := 0; k < 40; k++ {
		defs = append(defs, def{fmt.Sprintf("node_netstat_c%02d_total", k), nil, 0, 20})
		defs = append(defs, def{fmt.Sprintf("node_vmstat_c%02d_total", k), nil, 0, 100})
	}
	var ds dataSet
	start := int64(1_700_000_000_000)
	for h := 0; h < hosts; h++ {
		for di, d := range defs {
			lb := []string{"__name__", d.name, "instance", fmt.Sprintf("node-%03d.example.net:9100", h), "job", "node"}
			ls := labels.FromStrings(append(lb, d.extra...)...)
			r := splitmix64(mix(7, uint64(h), uint64(di)))
			ss := make([]Sample, samples)
			var v int64
			switch d.kind {
			case 0, 2:
				v = int64(r.intn(1_000_000_000))
			case 1:
				v = int64(1<<20+r.intn(1<<22)) * 4096
			case 3:
				v = int64(r.intn(400))
			case 4:
				v = int64(d.scale)
			}
			for j := range ss {
				if j > 0 {
					switch d.kind {
					case 0, 2:
						v += int64(r.intn(d.scale + 1))
					case 1:
						if r.intn(10) < 3 {
							v += int64(r.intn(201)-100) * 4096
						}
					case 3:
						v = max(0, v+int64(r.intn(21)-10))
					}
				}
				f := float64(v)
				if d.kind == 2 || d.kind == 3 {
					f = float64(v) / 100
				}
				// Scrapes of one host share a timestamp with a few ms of jitter.
				ts := start + int64(j)*15000 + int64(mix(7, uint64(h), uint64(j))%20)
				ss[j] = Sample{T: ts, V: f}
			}
			ds.series = append(ds.series, Series{Labels: ls, Samples: ss})
			ds.samples += int64(samples)
		}
	}
	for j := 0; j < samples; j++ {
		var req Batch
		for i := range ds.series {
			req.Series = append(req.Series, Series{Labels: ds.series[i].Labels, Samples: ds.series[i].Samples[j : j+1]})
			if len(req.Series) == 2000 {
				ds.requests = append(ds.requests, req)
				req = Batch{}
			}
		}
		if len(req.Series) > 0 {
			ds.requests = append(ds.requests, req)
		}
	}
	return ds
}

// toRows routes every request into per-stream rows with strictly
// increasing receipt timestamps, as the receiver and archive writer do.
func toRows(reqs []Batch, buckets int) (map[string][]archive.Row, int64, error) {
	rows := map[string][]archive.Row{}
	var bytes int64
	var enc BatchEncoder
	ts := int64(1_700_000_000_000_000_000)
	for _, req := range reqs {
		for _, sb := range SplitBatch(&req, buckets) {
			data, err := enc.Append(nil, &sb.Batch)
			if err != nil {
				return nil, 0, err
			}
			ts++
			rows[sb.Stream] = append(rows[sb.Stream], archive.Row{Stream: sb.Stream, TS: ts, Data: data})
			bytes += int64(len(data))
		}
	}
	return rows, bytes, nil
}

// toAnchoredRows is toRows with format-2 rows, as the receiver writes them:
// each stream's epoch anchors a series once; an epoch closes (a marker)
// every epochRows data rows, as a seal of that many rows would.
func toAnchoredRows(reqs []Batch, buckets, epochRows int) (map[string][]archive.Row, int64, error) {
	rows := map[string][]archive.Row{}
	var bytes int64
	var enc RowEncoder
	type epoch struct {
		id     uint64
		locals map[string]uint32
		rows   int
	}
	epochs := map[string]*epoch{}
	ts := int64(1_700_000_000_000_000_000)
	for _, req := range reqs {
		for _, sb := range SplitBatch(&req, buckets) {
			ep := epochs[sb.Stream]
			if ep == nil {
				ep = &epoch{id: 1, locals: map[string]uint32{}}
				epochs[sb.Stream] = ep
			}
			r := AnchoredRow{Epoch: ep.id, FirstLocal: uint32(len(ep.locals)), Metadata: sb.Batch.Metadata}
			for _, s := range sb.Batch.Series {
				k := string(s.Labels.Bytes(nil))
				id, ok := ep.locals[k]
				if !ok {
					id = uint32(len(ep.locals))
					ep.locals[k] = id
					r.Anchors = append(r.Anchors, s.Labels)
				}
				r.Series = append(r.Series, RowSeries{Local: id, Samples: s.Samples, Histograms: s.Histograms, Exemplars: s.Exemplars})
			}
			data, err := enc.Append(nil, &r)
			if err != nil {
				return nil, 0, err
			}
			ts++
			rows[sb.Stream] = append(rows[sb.Stream], archive.Row{Stream: sb.Stream, TS: ts, Data: data})
			bytes += int64(len(data))
			if ep.rows++; ep.rows == epochRows {
				ts++
				m := AppendEpochClose(nil, ep.id)
				rows[sb.Stream] = append(rows[sb.Stream], archive.Row{Stream: sb.Stream, TS: ts, Data: m})
				bytes += int64(len(m))
				ep.id++
				clear(ep.locals)
				ep.rows = 0
			}
		}
	}
	return rows, bytes, nil
}
