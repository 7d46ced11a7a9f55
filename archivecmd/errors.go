package archivecmd

import "errors"

// Sentinel errors. Each is returned wrapped (test with errors.Is).
var (
	// ErrDestExists is returned by Backup when its destination exists: a
	// backup never overwrites anything.
	ErrDestExists = errors.New("archivecmd: the destination exists")
)
