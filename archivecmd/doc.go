// Package archivecmd is what dendro-receiver's operator commands do to an
// archive, beyond parsing their flags: look into it (Inspect), check it
// down to every sample (Verify), copy it while a server writes it
// (Backup), and the offline maintenance a running server must not see done
// behind its back (Compact, Evict).
//
// The handles decide what is safe where. Inspect, Verify and Backup take a
// read handle (archive.Open): they never write the archive, so they work
// on a live archive, on read-only media, and on a crashed archive without
// folding its sidecar in. Compact and Evict take the exclusive write
// handle (archive.OpenWrite), which is refused with archive.ErrInUse while
// a server (or anything else) holds the file: the writer caches each
// stream's next seq and sealed watermark, and a second writer changing
// segments under it would make its next seal collide or its next append be
// dropped as out of order.
//
// Long operations report progress through a func(done, total int64) the
// caller gives (nil: none); what is counted is said on each Options field.
// Results are data (Report, VerifyReport, Evicted): problems an archive has
// are returned as values, and an error means the operation could not run.
package archivecmd
