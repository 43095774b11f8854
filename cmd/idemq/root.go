package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-go/idem/queue"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed
	exitUsage = 2 // the command line was wrong
)

// keepAll is the Options.KeepSettled idemq opens a queue with: longer than
// any application keeps settled records, so that opening a file to look at
// it, or draining it, never removes records the application would keep.
// Their removal stays the application's.
const keepAll = 100 * 365 * 24 * time.Hour

// app is one invocation: the global flags and where output goes.
type app struct {
	file        string
	dsn         string // a PostgreSQL queue's, instead of file
	url         string // a running application's queueweb handler, instead of file
	urlAuthEnv  string // names the variable holding url's Authorization header
	lockTimeout time.Duration
	// stdout and stderr take text, escaped (see textWriter); rawStdout
	// takes JSON, escaped by queueweb.MarshalJSON, and rawStderr the progress bar.
	stdout, stderr       io.Writer
	rawStdout, rawStderr io.Writer
	now                  func() time.Time
	// ctx is the command's, set when it starts to run.
	ctx context.Context
	// drains is set by drain, the one command that runs the queue: only
	// then does a PostgreSQL queue listen for enqueues.
	drains bool
	// started is set once the command line parsed and a command began to
	// run: an error before that is a usage error.
	started bool
}

// usageError is a command line that is wrong; it exits with exitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// run runs idemq with args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{
		stdout: textWriter{stdout}, stderr: textWriter{stderr},
		rawStdout: stdout, rawStderr: stderr, now: time.Now,
	}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(a.stderr, "idemq: %v\n", err)
	var ue usageError
	if a.started && !errors.As(err, &ue) {
		return exitError
	}
	fmt.Fprintf(a.stderr, "Run '%s -h' for usage.\n", cmd.CommandPath())
	return exitUsage
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "idemq",
		Short: "Operate an idem queue: a file, or a fleet's queue in PostgreSQL",
		Long: `idemq looks into and acts on the durable queue of an idem application: a bbolt
file written by github.com/idem-go/idem/queue, or a fleet's queue in
PostgreSQL (github.com/idem-go/idem/pgqueue).

The queue file is given with --file or $IDEMQ_FILE; a PostgreSQL queue with
--dsn or $IDEMQ_DSN, a connection string as pgx takes it (postgres://... or
host=... dbname=...), its password never printed. Give one of the two. Every
command prints the same for both; salvage is for files only, migrate for
PostgreSQL only (it applies the tables' migrations). On PostgreSQL ls, show
and stats read without taking a lane, and drain drains beside the
application's replicas, sharing the lanes with them.

A running application's queue is read through the handler it mounts (package
queue/queueweb) with --url or $IDEMQ_URL: ls, show, stats, discard, resubmit
and reset-clock print the same as for a file; discard, resubmit and
reset-clock need the application to turn writes on.

A file a running application holds is refused after --lock-timeout with a
message naming it, never waited on for long: bbolt lets no one read a file
another process writes. ls, show and stats open the file read-only: they
change nothing in it (a record a crash left in flight is shown in flight), and
several may run at once. discard, resubmit, reset-clock and drain open it as
the application does, which returns records a crash left in flight to
pending. idemq never removes settled records the application keeps, and never
prints a URL's query, fragment or user info, a request body or more than a
short prefix of an idempotency key.

A path that is missing, empty or not a queue file is refused, and left as it
is: idemq creates no file and writes to none but a queue. Text output shows
control and bidi characters escaped (\x1b, \u202e): a record cannot repaint
the terminal.

Exit codes: 0 ok, 1 error, 2 usage.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.started = true
			a.ctx = cmd.Context()
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVarP(&a.file, "file", "f", os.Getenv("IDEMQ_FILE"), "queue file (bbolt); default $IDEMQ_FILE")
	pf.StringVar(&a.dsn, "dsn", os.Getenv("IDEMQ_DSN"), "PostgreSQL queue's connection string, instead of a file; default $IDEMQ_DSN")
	pf.StringVar(&a.url, "url", os.Getenv("IDEMQ_URL"), "a running application's queue, where it mounts queueweb.Handler, instead of a file; default $IDEMQ_URL")
	pf.StringVar(&a.urlAuthEnv, "url-auth-env", "", "send the `NAME`d variable's value as the Authorization header to --url")
	pf.DurationVar(&a.lockTimeout, "lock-timeout", 2*time.Second, "how long to wait for a file another process holds")
	root.AddCommand(
		a.lsCommand(), a.showCommand(), a.statsCommand(),
		a.discardCommand(), a.resubmitCommand(), a.resetClockCommand(),
		a.drainCommand(),
		a.salvageCommand(),
		a.migrateCommand(),
	)
	return root
}

// open opens the queue with opts: the PostgreSQL queue --dsn names, or the
// queue file, after checking that it is one (see checkFile): an
// operator's typo must not become an empty queue, nor another file a
// queue. Closing the returned value closes the queue.
func (a *app) open(opts queue.Options) (*queue.Queue, io.Closer, error) {
	if err := a.checkFlags(); err != nil {
		return nil, nil, err
	}
	if a.dsn != "" {
		p, err := a.openPG(opts, a.drains)
		if err != nil {
			return nil, nil, err
		}
		return p.q, p, nil
	}
	if err := a.checkFile(); err != nil {
		return nil, nil, err
	}
	opts.LockTimeout = a.lockTimeout
	opts.KeepSettled = keepAll
	q, err := queue.Open(a.file, opts)
	if errors.Is(err, queue.ErrLocked) {
		return nil, nil, a.heldError()
	}
	if err != nil {
		return nil, nil, err
	}
	return q, q, nil
}

// checkFlags checks the flags that name the queue and how long to wait
// for a file.
func (a *app) checkFlags() error {
	switch {
	case a.url != "" && (a.file != "" || a.dsn != ""):
		return usagef("both a queue file or DSN and --url (or $IDEMQ_URL) given: pass one")
	case a.url != "":
		return usagef("--url: this command %v", errNotOverURL)
	case a.file != "" && a.dsn != "":
		return usagef("both a queue file (--file or IDEMQ_FILE) and a DSN (--dsn or IDEMQ_DSN): give one")
	case a.dsn != "":
		return nil
	case a.file == "":
		return usagef("no queue file: pass --file or set IDEMQ_FILE, or --dsn or IDEMQ_DSN for a PostgreSQL queue")
	case strings.Contains(a.file, "://") || strings.HasPrefix(a.file, "postgres"):
		return usagef("%s: --file takes a bbolt queue file; pass a PostgreSQL DSN with --dsn", redactDSN(a.file))
	case a.lockTimeout <= 0:
		return usagef("--lock-timeout %v: want a positive duration", a.lockTimeout)
	}
	return nil
}

// queueName names the queue in output: the file's path, or the DSN without
// its password.
func (a *app) queueName() string {
	if a.dsn != "" {
		return redactDSN(a.dsn)
	}
	return a.file
}

// sourceFlag is the flag naming the queue, for a command line to run next.
func (a *app) sourceFlag() string {
	if a.dsn != "" {
		return "--dsn '" + redactDSN(a.dsn) + "'"
	}
	return "-f " + a.file
}

// withQueue opens the queue with opts, runs fn and closes the queue.
func (a *app) withQueue(opts queue.Options, fn func(*queue.Queue) error) error {
	q, c, err := a.open(opts)
	if err != nil {
		return err
	}
	err = fn(q)
	if cerr := c.Close(); err == nil && cerr != nil && !errors.Is(cerr, queue.ErrClosed) {
		err = cerr
	}
	return err
}
