package archive_test

// Reference-notes §8.3: src/seal.rs unit tests (SealPolicy, SegmentAccount,
// the first-seal stagger).
//
// Not translated: the_stagger_spreads_a_real_stream_set_better_than_random
// (its 26-stream list and its clumping measure are not in the notes).

import (
	"math"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

var t0 = time.Unix(1_700_000_000, 0)

// streams26 stands in for the reference's 26-stream list.
var streams26 = []string{
	"cpu_usage", "cpu_cycles", "cpu_instructions", "cpu_migrations", "cpu_tlb_flush", "cpu_frequency",
	"scheduler", "scheduler_runqueue", "scheduler_offcpu", "blockio", "blockio_latency", "blockio_size",
	"network", "network_traffic", "network_interfaces", "softirq", "syscall", "syscall_latency",
	"tcp", "tcp_retransmit", "tcp_packet_latency", "memory", "memory_numa", "gpu", "rezolus", "hardware_info",
}

func unlimited(align int64) archive.SealPolicy {
	return archive.SealPolicy{MaxBytes: math.MaxInt64, MaxRows: math.MaxInt64, MaxAge: time.Duration(math.MaxInt64), Align: align}
}

func TestRefSealPolicyDefaults(t *testing.T) {
	p := archive.SealPolicy{}.WithDefaults()
	eq(t, "max bytes", p.MaxBytes, int64(8*1024*1024))
	eq(t, "max rows", p.MaxRows, int64(900))
	eq(t, "max age", p.MaxAge, 300*time.Second)
	eq(t, "align", p.Align, int64(0))
}

func TestRefAlignmentCutsOnTheBucketARowBelongsTo(t *testing.T) {
	a := archive.OpenFirst("s", "", unlimited(100), t0)
	if a.StartsNewBucket(250) {
		t.Error("the first row started a new bucket")
	}
	a.AddRow(1, 250)
	if a.StartsNewBucket(299) {
		t.Error("299 is in 250's bucket")
	}
	if !a.StartsNewBucket(300) {
		t.Error("300 is not in 250's bucket")
	}
	if a.Due(t0) {
		t.Error("due after one row")
	}
	a.AddRow(1, 299)
	if a.Due(t0) {
		t.Error("due within one bucket")
	}
	a.AddRow(1, 300)
	if !a.Due(t0) {
		t.Error("not due after crossing a bucket without asking first")
	}
}

func TestRefAlignmentBucketsNegativeTimestampsCorrectly(t *testing.T) {
	a := archive.OpenFirst("s", "", unlimited(100), t0)
	a.AddRow(1, -1)
	if !a.StartsNewBucket(1) {
		t.Error("-1 and 1 share a bucket")
	}
	b := archive.OpenFirst("s", "", unlimited(100), t0)
	b.AddRow(1, -100)
	if b.StartsNewBucket(-1) {
		t.Error("-100 and -1 are in different buckets")
	}
	if !b.StartsNewBucket(-101) {
		t.Error("-101 and -100 share a bucket")
	}
}

func TestRefWithoutAlignmentTimestampsDoNotAffectSealing(t *testing.T) {
	p := unlimited(0)
	p.MaxRows = 4
	a := archive.OpenFirst("s", "", p, t0)
	for i, ts := range []int64{0, 1_000_000, -5, math.MaxInt64} {
		if a.StartsNewBucket(ts) {
			t.Errorf("row %d at %d starts a bucket without alignment", i, ts)
		}
		a.AddRow(1, ts)
		if due := a.Due(t0); due != (i == 3) {
			t.Errorf("after %d rows due = %v", i+1, due)
		}
	}
}

func TestRefStaggerIsDeterministic(t *testing.T) {
	eq(t, "cpu_usage", archive.StaggerBucket("cpu_usage", ""), uint64(32))
	eq(t, "scheduler", archive.StaggerBucket("scheduler", ""), uint64(19))
	for _, s := range streams26 {
		if b := archive.StaggerBucket(s, "host=a"); b >= archive.StaggerBuckets {
			t.Errorf("%s: bucket %d out of range", s, b)
		}
	}
}

func collisions(a, b string, streams []string) int {
	n := 0
	for _, s := range streams {
		if archive.StaggerBucket(s, a) == archive.StaggerBucket(s, b) {
			n++
		}
	}
	return n
}

func TestRefStaggersIdenticallyAgreesWithTheHash(t *testing.T) {
	// Keys that differ only by an even number of 0x20 case flips collide in
	// every bucket; everything else must not collide everywhere.
	colliding := [][2]string{{"arm=valkey", "arm=VALKEY"}, {"arm=Ab", "arm=aB"}, {"host=Web-01", "host=weB-01"}}
	for _, p := range colliding {
		eq(t, p[0]+" vs "+p[1]+" collisions", collisions(p[0], p[1], streams26), len(streams26))
	}
	distinct := [][2]string{{"redis", "REDIS"}, {"ab", "aB"}, {"web-01", "webm01"}, {"web-01", "web-02"}, {"a", "ab"}}
	for _, p := range distinct {
		if n := collisions(p[0], p[1], streams26); n == len(streams26) {
			t.Errorf("%s vs %s collide in every one of %d streams", p[0], p[1], n)
		}
	}
}

func TestRefHostsThatAliasInTheLowBitsStillDesync(t *testing.T) {
	for _, p := range [][2]string{{"host=web-01", "host=webm01"}, {"host=node1", "host=nodeq"}, {"host=web.01", "host=webn01"}} {
		eq(t, p[0]+" vs "+p[1]+" collisions", collisions(p[0], p[1], streams26[:6]), 0)
	}
}

func TestRefTwoSourcesDoNotShareAStreamsBucket(t *testing.T) {
	a, b := archive.StaggerBucket("cpu_usage", "host=alpha"), archive.StaggerBucket("cpu_usage", "host=beta")
	if a == b {
		t.Errorf("host=alpha and host=beta share cpu_usage's bucket %d", a)
	}
}

func TestRefSameHostDifferentArmsStillDesync(t *testing.T) {
	ka := archive.SourceStaggerKey(map[string]string{"host": "web-01", "arm": "a"})
	kb := archive.SourceStaggerKey(map[string]string{"host": "web-01", "arm": "b"})
	eq(t, "stagger key", ka, "arm=a\x01host=web-01")
	eq(t, "collisions", collisions(ka, kb, streams26), 0)
	// The two arms of an A/B test land in different buckets.
	kc := archive.SourceStaggerKey(map[string]string{"arm": "control"})
	kt := archive.SourceStaggerKey(map[string]string{"arm": "treatment"})
	if n := collisions(kc, kt, streams26); n == len(streams26) {
		t.Errorf("control and treatment collide everywhere")
	}
}

func TestRefTheByteCapIsStaggeredAcrossSources(t *testing.T) {
	p := archive.SealPolicy{}.WithDefaults()
	dueAt := func(key string) int64 {
		a := archive.OpenFirst("cpu_usage", key, archive.SealPolicy{}, t0)
		bytes, _, _ := a.Targets()
		if bytes <= p.MaxBytes/2-1 || bytes > p.MaxBytes {
			t.Errorf("%s: byte target %d outside (%d, %d]", key, bytes, p.MaxBytes/2-1, p.MaxBytes)
		}
		for i := int64(1); i <= p.MaxRows; i++ {
			a.AddRow(64<<10, i)
			if a.Due(t0) {
				return i
			}
		}
		return -1
	}
	alpha, beta := dueAt("host=alpha"), dueAt("host=beta")
	if alpha < 0 || beta < 0 {
		t.Fatalf("never due: alpha %d beta %d", alpha, beta)
	}
	if alpha == beta {
		t.Errorf("alpha and beta both due on row %d", alpha)
	}
	if alpha >= 450 || beta >= 450 {
		t.Errorf("due on rows %d/%d, not before the row cap", alpha, beta)
	}
}

func TestRefRotateRestoresTheFullPolicy(t *testing.T) {
	p := archive.SealPolicy{}.WithDefaults()
	a := archive.OpenFirst("cpu_usage", "", archive.SealPolicy{}, t0)
	bytes, rows, age := a.Targets()
	if bytes >= p.MaxBytes || rows >= p.MaxRows || age >= p.MaxAge {
		t.Errorf("cpu_usage (bucket 32) first segment not staggered: %d %d %v", bytes, rows, age)
	}
	a.AddRow(10, 1)
	a.Rotate(archive.SealPolicy{}, t0)
	bytes, rows, age = a.Targets()
	eq(t, "targets after rotate", []any{bytes, rows, age}, []any{p.MaxBytes, p.MaxRows, p.MaxAge})
	eq(t, "rows after rotate", a.Rows(), int64(0))
	if !(a.Due(t0.Add(p.MaxAge)) == false) {
		t.Error("an empty account is due")
	}
	a.AddRow(1, 2)
	if !a.Due(t0.Add(p.MaxAge)) {
		t.Error("not due at max age")
	}
}
