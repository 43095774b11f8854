package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-go/idem/queue"
)

// errReported is returned by a command that printed its errors already.
var errReported = errors.New("not every record could be handled")

func (a *app) discardCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "discard ID...",
		Short: "Remove records: pending ones will not be sent",
		Long: `discard removes records: a pending record will then never be sent, a settled
one is no longer kept. A record in flight cannot be discarded. A pending record
that an attempt may have reached the server with keeps an unknown outcome: idemq
warns, and reconciling it with the server is the operator's.`,
		Example: "  idemq -f intents.db discard 42 43",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s takes one or more record IDs", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := make([]queue.ID, len(args))
			for i, s := range args {
				var err error
				if ids[i], err = parseID(s); err != nil {
					return err
				}
			}
			return a.withSource(queue.Options{}, func(src source) error {
				failed := false
				for _, id := range ids {
					if err := a.discard(cmd.Context(), src, id); err != nil {
						fmt.Fprintf(a.stderr, "idemq: discard %d: %v\n", id, err)
						failed = true
					}
				}
				if failed {
					return errReported
				}
				return nil
			})
		},
	}
}

func (a *app) discard(ctx context.Context, src source, id queue.ID) error {
	d, err := src.discard(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "discarded %d (%s)\n", id, d.State)
	if d.Warning != "" {
		fmt.Fprintf(a.stderr, "idemq: warning: %s\n", d.Warning)
	}
	return nil
}

func (a *app) resubmitCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "resubmit ID",
		Short: "Queue a failed or expired record again, under a new key",
		Long: `resubmit queues a failed or expired record again as a new record with a new
idempotency key, and prints the new record's ID. The server cannot tell the two
apart: if an attempt of the old record was applied, the new one applies the
operation a second time. A record whose outcome is unknown (an attempt may have
been applied) is therefore refused unless --force says the operator checked
with the server that it was not.`,
		Example: "  idemq -f intents.db resubmit 42",
		Args:    oneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			return a.withSource(queue.Options{}, func(src source) error {
				nid, err := src.resubmit(cmd.Context(), id, force)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "resubmitted %d as %d (new key)\n", id, nid)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "resubmit a record whose outcome is unknown")
	return cmd
}

func (a *app) resetClockCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "reset-clock",
		Short: "Set the queue's clock mark to this clock, once it is known right",
		Long: `reset-clock sets the queue's clock mark, the latest time it has seen, to this
machine's clock. While the clock reads earlier than the mark by more than the
tolerance the queue sends nothing; a clock that once read ahead by mistake
leaves such a mark. Run it only once the clock is known to be right: the mark is
what stops a clock set back from hiding a horizon. Records first sent while the
clock read ahead expire at their next attempt.

A PostgreSQL queue (--dsn) keeps no mark: its clock is the database server's,
which every replica reads. reset-clock says so and changes nothing.`,
		Example: "  idemq -f intents.db reset-clock",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.dsn != "" {
				// Checks that the queue is there, and changes nothing.
				return a.withQueue(queue.Options{ReadOnly: true}, func(*queue.Queue) error {
					fmt.Fprintln(a.stdout, "no clock mark to reset: a PostgreSQL queue keeps none, its clock is the database server's")
					return nil
				})
			}
			if a.url != "" {
				s, err := a.urlSource()
				if err != nil {
					return err
				}
				if err := s.resetClock(cmd.Context()); err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, "clock mark reset")
				return nil
			}
			var reset *queue.Event
			opts := queue.Options{Notify: func(e queue.Event) {
				if e.Kind == queue.EventClockReset {
					reset = &e // read after Close, which delivers every event
				}
			}}
			return a.withQueue(opts, func(q *queue.Queue) error {
				if err := q.ResetClock(cmd.Context()); err != nil {
					return err
				}
				if err := q.Close(); err != nil {
					return err
				}
				if reset == nil {
					return errors.New("reset-clock: the queue reported no reset")
				}
				fmt.Fprintf(a.stdout, "clock mark reset: %s -> %s\n", fmtMark(reset.OldMark), fmtMark(reset.NewMark))
				return nil
			})
		},
	}
}

func fmtMark(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}
