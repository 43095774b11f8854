package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/pgqueue/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// connect returns a connection to conn, closed when t ends.
func connect(t *testing.T, conn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), conn)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func currentDatabase(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	var name string
	require.NoError(t, c.QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
	return name
}

func tables(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	require.NoError(t, c.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&n))
	return n
}

func TestDBWorks(t *testing.T) {
	ctx := context.Background()
	c := connect(t, pgtest.DB(t))
	assert.Equal(t, 0, tables(t, c), "tables in a new database")

	_, err := c.Exec(ctx, "CREATE TABLE t (v text)")
	require.NoError(t, err)
	_, err = c.Exec(ctx, "INSERT INTO t VALUES ('x')")
	require.NoError(t, err)
	var got string
	require.NoError(t, c.QueryRow(ctx, "SELECT v FROM t").Scan(&got))
	assert.Equal(t, "x", got)
}

func TestDBFresh(t *testing.T) {
	ctx := context.Background()
	a, b := connect(t, pgtest.DB(t)), connect(t, pgtest.DB(t))
	_, err := a.Exec(ctx, "CREATE TABLE t (v text)")
	require.NoError(t, err)

	assert.NotEqual(t, currentDatabase(t, a), currentDatabase(t, b), "two DB calls")
	assert.Equal(t, 0, tables(t, b), "tables in the second database after creating one in the first")
}

func TestDBDropped(t *testing.T) {
	var name string
	t.Run("uses", func(t *testing.T) {
		// Left open, as a test that forgets to close would.
		c, err := pgx.Connect(context.Background(), pgtest.DB(t))
		require.NoError(t, err)
		name = currentDatabase(t, c)
	})

	var n int
	require.NoError(t, connect(t, pgtest.DB(t)).QueryRow(context.Background(),
		"SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
	assert.Equal(t, 0, n, "databases named %q after the test that made it ended", name)
}
