package powercut

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMain(m *testing.M) {
	ServeIfChild()
	os.Exit(m.Run())
}

// mountT mounts a power-cut file system in a directory of the test's,
// served by a child process, unmounted when the test ends. A machine that
// cannot mount skips the test, except under CI=true, where it fails: CI
// must run the power cuts.
func mountT(t testing.TB) *Remote {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p, err := Start(dir)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot mount the power-cut file system under CI: %v", err)
		}
		t.Skipf("cannot mount the power-cut file system (needs /dev/fuse and root or fusermount3; CI=true makes this a failure): %v", err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return p
}
