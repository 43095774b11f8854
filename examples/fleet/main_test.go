package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary be a replica too: run starts replicas by
// starting its own executable again.
func TestMain(m *testing.M) {
	if conn := os.Getenv(envReplica); conn != "" {
		os.Exit(replica(conn, os.Getenv(envName), os.Stderr))
	}
	os.Exit(m.Run())
}

// TestRun plays the scene: every order's payment takes effect once at the
// server although a replica was killed while the server held its request.
func TestRun(t *testing.T) {
	if !havePostgres() && os.Getenv("IDEM_PG") == "" && os.Getenv("CI") != "true" {
		t.Skip("no PostgreSQL binaries (initdb); CI installs them")
	}
	var out, errOut bytes.Buffer
	code := run(&out, &errOut)
	t.Log("\n" + out.String() + errOut.String())
	require.Equal(t, 0, code, "exit code")
	assert.Regexp(t, regexp.MustCompile(`(?m)^\s+total\s+40\s+40\s+40\s+0\s+0$`), out.String())
	assert.Regexp(t, `killed with SIGKILL while the server held its request`, out.String())
	assert.Regexp(t, `(?m)^exactly-once: 40 orders`, out.String())
}

func havePostgres() bool {
	if _, err := exec.LookPath("initdb"); err == nil {
		return true
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	return len(found) > 0
}
