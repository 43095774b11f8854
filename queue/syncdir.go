package queue

import (
	"os"
	"path/filepath"
)

// syncDir makes a rename in path's directory durable.
func syncDir(path string) {
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
