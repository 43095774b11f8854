package pgserver_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/pgqueue/pgserver"
)

// TestStartStop: a started server answers on its connection string, and
// after Stop it does not.
func TestStartStop(t *testing.T) {
	s, err := pgserver.Start()
	if errors.Is(err, pgserver.ErrNoBinaries) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	require.NoError(t, err)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.ConnString())
	require.NoError(t, err)
	var fsync string
	require.NoError(t, c.QueryRow(ctx, "SHOW fsync").Scan(&fsync))
	assert.Equal(t, "off", fsync)
	require.NoError(t, c.Close(ctx))

	s.Stop()
	s.Stop() // a second Stop does nothing
	_, err = pgx.Connect(ctx, s.ConnString())
	assert.Error(t, err)
}
