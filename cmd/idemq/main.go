// Command idemq lets an operator look into and act on an idem queue file:
// list, show and count records, discard or resubmit them, reset the queue's
// clock mark, and drain it now. Run idemq -h for the commands.
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
