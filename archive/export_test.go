package archive

import "context"

// PragmaForTest reads a pragma on the connection a's questions run on.
func PragmaForTest(a *Archive, name string) (string, error) {
	conn, release, err := a.acquire(context.Background())
	if err != nil {
		return "", err
	}
	defer release()
	var v string
	err = conn.QueryRowContext(context.Background(), "PRAGMA "+name).Scan(&v)
	return v, err
}

// CreateWithPageSizeForTest creates an archive at another page size.
func CreateWithPageSizeForTest(path string, pageSize int) (*WriteHandle, error) {
	return create(path, pageSize, writerCacheKiB)
}
