// Command idemq lets an operator look into and act on an idem queue, a file
// or a fleet's queue in PostgreSQL: list, show and count records, discard or
// resubmit them, reset the queue's clock mark, drain it now, salvage a
// damaged file, migrate the PostgreSQL tables. Run idemq -h for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
