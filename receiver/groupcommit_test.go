package receiver

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Writes waiting for their commit share it, however few requests may be
// encoded at once: a Write lends its row scratch back once its rows are
// queued, not after the commit (an fsync). With one scratch and a writer
// that holds a group open for more appends, four concurrent Writes must
// land in one group commit; holding the scratch across the wait made them
// four commits, one after the other.
func TestWritesShareACommitBeyondTheEncoders(t *testing.T) {
	const writes = 4
	opts := archive.WriterOptions{Coming: func() int { return 1 }, GroupWait: 300 * time.Millisecond}
	s := openStackIngest(t, filepath.Join(t.TempDir(), "a.dendro"), opts, IngestOptions{Parallelism: 1})
	defer s.close(t)
	ctx := context.Background()
	before := s.w.Stats()
	var wg sync.WaitGroup
	errs := make(chan error, writes)
	for i := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			series := []promsample.Series{{
				Labels:  labels.FromStrings("__name__", "up", "instance", fmt.Sprint("i", i)),
				Samples: []promsample.Sample{{T: 1000, V: 1}},
			}}
			if _, err := s.ing.Write(ctx, DefaultSource, unlabelled(s.ing.Series(), series), nil); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := s.w.Stats()
	commits, grouped := after.Commits-before.Commits, after.GroupedCommits-before.GroupedCommits
	if commits != writes || grouped != 1 {
		t.Errorf("%d writes committed in %d group commit(s) of %d ticks; want one group of all", writes, grouped, commits)
	}
}
