package receiver

import "testing"

func TestFreeListIsBoundedLastInFirstOut(t *testing.T) {
	f := newFreeList[int](2)
	if _, ok := f.get(); ok {
		t.Fatal("get on an empty list returned an object")
	}
	f.put(1)
	f.put(2)
	f.put(3) // over capacity: dropped
	for _, want := range []int{2, 1} {
		if got, ok := f.get(); !ok || got != want {
			t.Fatalf("get = %d, %v; want %d (most recently put first)", got, ok, want)
		}
	}
	if _, ok := f.get(); ok {
		t.Fatal("list kept an object put over its capacity")
	}
}
