// Package soak is a long steady run of the built dendro-receiver, for a
// person to run (it is skipped unless asked for, so not in CI's default
// run):
//
//	go test -run TestSoak -timeout 3h -v ./e2e/soak/ -soak.duration=30m
//
// A steady remote-write load, written here (shaped like rwload's, not
// imported): -soak.series series (100,000), each with one sample per
// -soak.step of sample time (15 s), sent -soak.accel times faster than
// real time (4: a sample per series every 3.75 s), by four senders that
// shard the series as Prometheus's queue does and retry like it. The
// server runs with a short --retention.time (-soak.retention, 10m), so
// that within the run seals, compactions (every 5 minutes), retention
// passes (every minute) and checkpoints (every 10 s) all happen many times.
// A second process, this test binary re-executed, queries meanwhile: one
// series at a time through remote-read, a whole metric now and then, every
// sample it gets checked bit-exact, and it opens the archive file itself
// once a minute.
//
// Every minute the run records the archive's file size, free pages,
// segments, live wal rows and sidecar, the server's RSS and Go heap, what
// was sealed, compacted, evicted and checkpointed, the write and read
// p99s, and the acknowledged rate; the table is logged and written to
// -soak.out. At the end it asserts that the file size, the RSS and the
// segment count reached a plateau (the last third of the run no higher
// than the middle third, within a margin), that every sample received
// within the retention window reads back exact through remote-read (older
// ones may be gone, oldest first, never a hole), and that the archive
// passes integrity_check after a clean stop.
package soak
