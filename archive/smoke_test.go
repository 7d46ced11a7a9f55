package archive_test

import (
	"reflect"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func TestSealSeamReadsEveryRowOnce(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "smoke"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Append(ctx, at.Rows("s", 10, 20)...); err != nil {
		t.Fatal(err)
	}
	if err := src.Seal(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := src.Append(ctx, at.Rows("s", 30)...); err != nil {
		t.Fatal(err)
	}
	if err := src.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := at.ReadStrings(t, w.Path(), at.Tags{})
	want := [][]string{{"10,20", "30"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read %v, want %v", got, want)
	}
}
