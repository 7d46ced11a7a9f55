// Command forwardbench measures store and forward (issue 17) on this
// machine, against real processes on loopback:
//
//   - drain: a backlog of --series x --samples samples (10 k x 1,440 =
//     14.4 M by default) waits in dendro-receiver's archive while the
//     upstream VictoriaMetrics is down; VictoriaMetrics starts, and the
//     backlog drains to it. The same backlog then waits in vmagent's
//     on-disk queue (-remoteWrite.tmpDataPath) for another, fresh
//     VictoriaMetrics, and drains to it. Both are timed at the upstream:
//     from its first to its last row inserted (vm_rows_inserted_total),
//     and from its being ready to the last row.
//   - ingest: the same load written to a fresh dendro-receiver alone, then
//     to one that forwards everything to a running VictoriaMetrics as it
//     arrives.
//
// The load is remote-write 1.0, 2,000 samples a request (4 per series,
// 500 series), from --senders concurrent senders, encoded before any clock
// starts. Rounds alternate; the shared machine's other load moves every
// figure, so compare within a round.
//
//	go run ./e2e/forwardbench                      # 3 rounds, about 10 minutes
//	go run ./e2e/forwardbench --rounds 1 --series 2000
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

type options struct {
	series, samples, perSeries, batch, senders, rounds int
	step                                               time.Duration
	keep                                               bool
	vm, vmagent                                        string
	shards, maxPerSend, capacity                       int
	only                                               string
	yield                                              time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.series, "series", 10000, "series in the load")
	flag.IntVar(&o.samples, "samples", 1440, "samples per series")
	flag.IntVar(&o.perSeries, "per-series", 4, "samples per series per request")
	flag.IntVar(&o.batch, "batch", 2000, "samples per request")
	flag.IntVar(&o.senders, "senders", 4, "concurrent senders")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of every measurement")
	flag.IntVar(&o.shards, "shards", 4, "dendro-receiver's --forward.shards")
	flag.IntVar(&o.maxPerSend, "max-samples-per-send", 2000, "dendro-receiver's queue_config.max_samples_per_send")
	flag.IntVar(&o.capacity, "capacity", 10000, "dendro-receiver's queue_config.capacity")
	flag.DurationVar(&o.step, "step", 10*time.Second, "sample interval")
	flag.BoolVar(&o.keep, "keep", false, "keep the data directories")
	flag.StringVar(&o.only, "only", "", "run only this measurement: dendro, vmagent (drains) or ingest")
	flag.DurationVar(&o.yield, "forward-yield", -1, "dendro-receiver's --forward.yield while it ingests and forwards (negative: its default)")
	flag.StringVar(&o.vm, "victoria-metrics", "victoria-metrics", "VictoriaMetrics binary")
	flag.StringVar(&o.vmagent, "vmagent", "vmagent", "vmagent binary")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "forwardbench:", err)
		os.Exit(1)
	}
}

type result struct {
	round                 int
	what                  string
	samples               int64
	firstToLast, fromUp   time.Duration
	cpuSource, cpuUpstrem float64 // CPU seconds of the sender side and of VictoriaMetrics over the drain
}

func run(o options) error {
	for _, b := range []string{o.vm, o.vmagent} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("%s not found: apt-get install -y victoria-metrics", b)
		}
	}
	root, err := os.MkdirTemp("", "forwardbench-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(root)
	}
	bin := filepath.Join(root, "dendro-receiver")
	build := exec.Command("go", "build", "-o", bin, "./cmd/dendro-receiver")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	reqs := encodeLoad(o)
	total := int64(o.series) * int64(o.samples)
	fmt.Printf("load: %d series x %d samples = %d samples in requests of %d; %d senders; machine: %d CPUs, load average %s\n",
		o.series, o.samples, total, o.batch, o.senders, runtime.NumCPU(), loadavg())

	var results []result
	var ingest []ingestResult
	for round := 1; round <= o.rounds; round++ {
		dir := filepath.Join(root, fmt.Sprintf("round%d", round))
		os.MkdirAll(dir, 0o755)
		order := []string{"dendro", "vmagent"}
		if round%2 == 0 {
			order = []string{"vmagent", "dendro"}
		}
		for _, which := range order {
			if o.only != "" && o.only != which {
				continue
			}
			var r result
			var err error
			if which == "dendro" {
				r, err = drainDendro(o, bin, filepath.Join(dir, "dendro"), reqs, total)
			} else {
				r, err = drainVMAgent(o, filepath.Join(dir, "vmagent"), reqs, total)
			}
			if err != nil {
				return fmt.Errorf("round %d %s: %w", round, which, err)
			}
			r.round = round
			results = append(results, r)
			fmt.Printf("round %d drain %-15s %d samples: first-to-last %v (%.0f k samples/s), from upstream ready %v; CPU s: sender %.1f, VictoriaMetrics %.1f\n",
				round, r.what, r.samples, r.firstToLast.Round(time.Millisecond), float64(r.samples)/r.firstToLast.Seconds()/1e3,
				r.fromUp.Round(time.Millisecond), r.cpuSource, r.cpuUpstrem)
		}
		if o.only != "" && o.only != "ingest" {
			continue
		}
		ir, err := ingestRates(o, bin, filepath.Join(dir, "ingest"), reqs, total, round%2 == 0)
		if err != nil {
			return fmt.Errorf("round %d ingest: %w", round, err)
		}
		ingest = append(ingest, ir)
		for _, r := range ir.runs {
			fmt.Printf("round %d ingest %-5s %.0f k samples/s; CPU s: dendro-receiver %.1f, VictoriaMetrics %.1f; forwarding done %v after the last write\n",
				round, r.kind, r.rate/1e3, r.cpu, r.upCPU, r.behind.Round(time.Millisecond))
		}
		if !o.keep {
			os.RemoveAll(dir)
		}
	}
	report(o, results, ingest, total)
	return nil
}

func report(o options, results []result, ingest []ingestResult, total int64) {
	fmt.Printf("\n| drain of %.1f M samples (%d series) to VictoriaMetrics | round | first to last row, s | k samples/s | from upstream ready, s | CPU s, sender | CPU s, VictoriaMetrics |\n",
		float64(total)/1e6, o.series)
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- |")
	sort.SliceStable(results, func(i, j int) bool { return results[i].what < results[j].what })
	for _, r := range results {
		fmt.Printf("| %s | %d | %.2f | %.0f | %.2f | %.1f | %.1f |\n", r.what, r.round, r.firstToLast.Seconds(),
			float64(r.samples)/r.firstToLast.Seconds()/1e3, r.fromUp.Seconds(), r.cpuSource, r.cpuUpstrem)
	}
	fmt.Printf("\n| ingest of %.1f M samples | round | alone, k/s (CPU s) | forwarding to VictoriaMetrics on the same cores, k/s (CPU s dendro + VM) | ratio | forwarding to a sink, k/s (CPU s) | ratio |\n", float64(total)/1e6)
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- |")
	for i, r := range ingest {
		a, v, k := r.get("alone"), r.get("vm"), r.get("sink")
		fmt.Printf("| dendro-receiver | %d | %.0f (%.1f) | %.0f (%.1f + %.1f) | %.2f | %.0f (%.1f) | %.2f |\n", i+1,
			a.rate/1e3, a.cpu, v.rate/1e3, v.cpu, v.upCPU, v.rate/a.rate, k.rate/1e3, k.cpu, k.rate/a.rate)
	}
}

// ---- the load ----

// encodeLoad returns the requests, each sender's in the order it sends
// them: series are sharded over the senders (a block of series always goes
// through the same one), as Prometheus shards them, so each series'
// samples arrive in order.
func encodeLoad(o options) [][][]byte {
	perReq := o.batch / o.perSeries
	base := time.Now().Add(-time.Duration(o.samples) * o.step).UnixMilli()
	out := make([][][]byte, o.senders)
	for r := 0; r < o.samples/o.perSeries; r++ {
		for block, lo := 0, 0; lo < o.series; block, lo = block+1, lo+perReq {
			wr := &prompb.WriteRequest{}
			for i := lo; i < min(lo+perReq, o.series); i++ {
				ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "bench_metric_" + strconv.Itoa(i%20)},
					{Name: "instance", Value: fmt.Sprintf("host-%04d:9100", i/20)}, {Name: "job", Value: "node"}}}
				for s := range o.perSeries {
					j := r*o.perSeries + s
					v := float64(i*j%100000) * 0.25
					if i%2 == 0 {
						v = float64(i*10000 + j) // a counter
					}
					ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: base + int64(j)*o.step.Milliseconds(), Value: v})
				}
				wr.Timeseries = append(wr.Timeseries, ts)
			}
			b, err := wr.Marshal()
			if err != nil {
				panic(err)
			}
			out[block%o.senders] = append(out[block%o.senders], snappy.Encode(nil, b))
		}
	}
	return out
}

// send posts every request, each until it is answered 2xx, one goroutine
// per sender; it returns the wall time.
func send(url string, reqs [][][]byte, _ int) (time.Duration, error) {
	client := &http.Client{Timeout: time.Minute}
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for _, mine := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range mine {
				for attempt := 0; ; attempt++ {
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(mine[i]))
					req.Header.Set("Content-Type", "application/x-protobuf")
					req.Header.Set("Content-Encoding", "snappy")
					req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
					resp, err := client.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							break
						}
						err = fmt.Errorf("%s", resp.Status)
					}
					if attempt > 100 {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return time.Since(start), nil
}

// ---- processes ----

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func start(dir, name string, bin string, args ...string) (*proc, error) {
	os.MkdirAll(dir, 0o755)
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) cpu() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitOK(url string, p *proc) error {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			return fmt.Errorf("exited: %s", tailOf(string(b)))
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
	}
	return errors.New(url + " not ready")
}

func tailOf(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// scrape sums a metric's lines containing match on base's /metrics.
func scrape(base, name, match string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return math.NaN()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name) || !strings.Contains(line, match) {
			continue
		}
		if rest := line[len(name):]; rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

func startVM(o options, dir, addr string) (*proc, error) {
	p, err := start(dir, "victoria-metrics", o.vm, "-storageDataPath="+filepath.Join(dir, "data"), "-httpListenAddr="+addr,
		"-retentionPeriod=100y", "-loggerLevel=WARN")
	if err != nil {
		return nil, err
	}
	return p, waitOK("http://"+addr+"/health", p)
}

// timeDrain watches VictoriaMetrics's rows inserted by remote write until
// total, returning first-to-last and ready-to-last.
func timeDrain(vmAddr string, ready time.Time, total int64, src, vm *proc) (result, error) {
	var first time.Time
	cpu0s, cpu0v := src.cpu(), vm.cpu()
	deadline := time.Now().Add(15 * time.Minute)
	for {
		n := scrape("http://"+vmAddr, "vm_rows_inserted_total", `type="promremotewrite"`)
		now := time.Now()
		if n > 0 && first.IsZero() {
			first = now
		}
		if n >= float64(total) {
			return result{samples: int64(n), firstToLast: now.Sub(first), fromUp: now.Sub(ready),
				cpuSource: src.cpu() - cpu0s, cpuUpstrem: vm.cpu() - cpu0v}, nil
		}
		if now.After(deadline) {
			return result{}, fmt.Errorf("only %.0f of %d rows after 15 minutes", n, total)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drainDendro: the backlog in dendro-receiver's archive, the upstream down.
func drainDendro(o options, bin, dir string, reqs [][][]byte, total int64) (result, error) {
	vmAddr, addr := freeAddr(), freeAddr()
	cfg := filepath.Join(dir, "forward.yml")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(cfg, []byte(fmt.Sprintf("upstreams:\n  - url: http://%s/api/v1/write\n    name: vm\n    queue_config: {shards: %d, max_samples_per_send: %d, capacity: %d}\n",
		vmAddr, o.shards, o.maxPerSend, o.capacity)), 0o644)
	d, err := start(dir, "dendro-receiver", bin, "--web.listen-address="+addr, "--archive.path="+filepath.Join(dir, "a.db"),
		"--forward.config.file="+cfg, "--log.level=warn")
	if err != nil {
		return result{}, err
	}
	defer d.stop()
	if err := waitOK("http://"+addr+"/-/ready", d); err != nil {
		return result{}, err
	}
	if _, err := send("http://"+addr+"/api/v1/write", reqs, o.senders); err != nil {
		return result{}, err
	}
	time.Sleep(3 * time.Second) // let seals settle, as a backlog would have
	vm, err := startVM(o, filepath.Join(dir, "vm"), vmAddr)
	if err != nil {
		return result{}, err
	}
	defer vm.stop()
	r, err := timeDrain(vmAddr, time.Now(), total, d, vm)
	r.what = "dendro-receiver"
	fmt.Printf("  dendro-receiver after the drain: requests %.0f, retried %.0f, resent %.0f, dropped %.0f\n",
		scrape("http://"+addr, "dendro_forward_requests_total", ""), scrape("http://"+addr, "dendro_forward_requests_retried_total", ""),
		scrape("http://"+addr, "dendro_forward_samples_resent_total", ""), scrape("http://"+addr, "dendro_forward_samples_dropped_total", ""))
	return r, err
}

// drainVMAgent: the backlog in vmagent's on-disk queue, the upstream down.
func drainVMAgent(o options, dir string, reqs [][][]byte, total int64) (result, error) {
	vmAddr, addr := freeAddr(), freeAddr()
	a, err := start(dir, "vmagent", o.vmagent, "-httpListenAddr="+addr, "-remoteWrite.url=http://"+vmAddr+"/api/v1/write",
		"-remoteWrite.tmpDataPath="+filepath.Join(dir, "queue"), "-loggerLevel=WARN")
	if err != nil {
		return result{}, err
	}
	defer a.stop()
	if err := waitOK("http://"+addr+"/health", a); err != nil {
		return result{}, err
	}
	if _, err := send("http://"+addr+"/api/v1/write", reqs, o.senders); err != nil {
		return result{}, err
	}
	// Wait until vmagent holds it all in its queue (its in-memory blocks
	// flushed to disk): pending bytes stop growing.
	last := -1.0
	for stable := 0; stable < 10; time.Sleep(200 * time.Millisecond) {
		v := scrape("http://"+addr, "vmagent_remotewrite_pending_data_bytes", "")
		if v == last && v > 0 {
			stable++
		} else {
			stable = 0
		}
		last = v
	}
	vm, err := startVM(o, filepath.Join(dir, "vm"), vmAddr)
	if err != nil {
		return result{}, err
	}
	defer vm.stop()
	r, err := timeDrain(vmAddr, time.Now(), total, a, vm)
	r.what = "vmagent"
	return r, err
}

// ingestRates writes the load to a fresh dendro-receiver alone, to one
// forwarding everything to a running VictoriaMetrics as it arrives, and to
// one forwarding to a sink that only reads the requests (the forwarder's
// own cost, without an upstream's on the same two cores); forwardFirst
// reverses the order.
func ingestRates(o options, bin, dir string, reqs [][][]byte, total int64, forwardFirst bool) (ingestResult, error) {
	var res ingestResult
	measure := func(kind string) error {
		sub := filepath.Join(dir, kind)
		addr := freeAddr()
		args := []string{"--web.listen-address=" + addr, "--archive.path=" + filepath.Join(sub, "a.db"), "--log.level=warn"}
		var vm *proc
		var upURL string
		switch kind {
		case "vm":
			vmAddr := freeAddr()
			var err error
			if vm, err = startVM(o, filepath.Join(sub, "vm"), vmAddr); err != nil {
				return err
			}
			defer vm.stop()
			upURL = "http://" + vmAddr + "/api/v1/write"
		case "sink":
			sink := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusNoContent)
			})}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			go sink.Serve(l)
			defer sink.Close()
			upURL = "http://" + l.Addr().String() + "/api/v1/write"
		}
		if upURL != "" {
			args = append(args, "--forward.url="+upURL, fmt.Sprintf("--forward.shards=%d", o.shards))
			if o.yield >= 0 {
				args = append(args, "--forward.yield="+o.yield.String())
			}
		}
		d, err := start(sub, "dendro-receiver", bin, args...)
		if err != nil {
			return err
		}
		defer d.stop()
		if err := waitOK("http://"+addr+"/-/ready", d); err != nil {
			return err
		}
		cpu0 := d.cpu()
		var vcpu0 float64
		if vm != nil {
			vcpu0 = vm.cpu()
		}
		el, err := send("http://"+addr+"/api/v1/write", reqs, o.senders)
		if err != nil {
			return err
		}
		r := ingestRun{kind: kind, rate: float64(total) / el.Seconds(), cpu: d.cpu() - cpu0}
		if vm != nil {
			r.upCPU = vm.cpu() - vcpu0
		}
		if upURL != "" {
			// It must also have kept up: wait for the rest, and say how long.
			t0 := time.Now()
			for scrape("http://"+addr, "dendro_forward_samples_sent_total", "") < float64(total) {
				if time.Since(t0) > 5*time.Minute {
					return errors.New("forwarding did not finish")
				}
				time.Sleep(20 * time.Millisecond)
			}
			r.behind = time.Since(t0)
		}
		res.runs = append(res.runs, r)
		return nil
	}
	kinds := []string{"alone", "vm", "sink"}
	if forwardFirst {
		kinds = []string{"sink", "vm", "alone"}
	}
	for _, k := range kinds {
		if err := measure(k); err != nil {
			return res, fmt.Errorf("%s: %w", k, err)
		}
	}
	return res, nil
}

type ingestRun struct {
	kind       string
	rate       float64 // samples/s acknowledged
	cpu, upCPU float64 // CPU seconds of dendro-receiver and of VictoriaMetrics over the load
	behind     time.Duration
}

type ingestResult struct{ runs []ingestRun }

func (r ingestResult) get(kind string) ingestRun {
	for _, x := range r.runs {
		if x.kind == kind {
			return x
		}
	}
	return ingestRun{}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
