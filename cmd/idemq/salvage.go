package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idem-go/idem/queue"
)

func (a *app) salvageCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "salvage",
		Short: "Recover the readable records of a damaged queue file into a fresh one",
		Long: `salvage recovers a queue file whose structure is damaged, which the
application refuses to open ("file damaged"): every record that reads intact is
copied, byte for byte, into a fresh file that takes the file's place, and the
damaged file is kept beside it (its name followed by .damaged- and the time).
It prints how many records were recovered and how many could not be read, and
the problems it found. A file whose structure is sound is left as it is: a
damaged record in it is quarantined by the next open.

A file that lacks commits the queue acknowledged (its newest meta page is
damaged, or it is an older copy) is refused the same way; salvage copies what it
holds and so accepts the loss, which it prints as lost commits. Older copies of
records, and records discarded or removed, never come back.

The damaged file is never written to. The application must not hold the file.
A PostgreSQL queue (--dsn) has no file to salvage: salvage refuses it.`,
		Example: "  idemq -f intents.db salvage",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			// A damaged file may fail checkFile's look at its meta pages
			// and buckets: Salvage judges it.
			if err := a.checkFlags(); err != nil {
				return err
			}
			if a.dsn != "" {
				return usagef("salvage repairs a damaged bbolt queue file; a PostgreSQL queue (--dsn) has no file to salvage: PostgreSQL keeps its own tables sound (restore a backup if they are lost)")
			}
			if err := a.checkPath(); err != nil {
				return err
			}
			rep, err := queue.Salvage(a.file, queue.Options{LockTimeout: a.lockTimeout})
			if errors.Is(err, queue.ErrLocked) {
				return a.heldError()
			}
			if err != nil {
				return err
			}
			a.printSalvage(rep)
			return nil
		},
	}
}

func (a *app) printSalvage(rep queue.SalvageReport) {
	if rep.Sound() {
		fmt.Fprintf(a.stdout, "%s: structure sound, left as it is (%d records unreadable: the next open quarantines them)\n", a.file, rep.Unreadable)
		return
	}
	fmt.Fprintf(a.stdout, "recovered   %d\n", rep.Recovered)
	fmt.Fprintf(a.stdout, "unreadable  %d\n", rep.Unreadable)
	if rep.LostCommits > 0 {
		fmt.Fprintf(a.stdout, "lost commits %d (acknowledged, not in the file: the loss is accepted)\n", rep.LostCommits)
	}
	if rep.Orphans > 0 {
		fmt.Fprintf(a.stdout, "orphans     %d (found in pages the tree lost)\n", rep.Orphans)
	}
	if rep.Stale > 0 {
		fmt.Fprintf(a.stdout, "stale       %d (older copies, or records removed: not copied)\n", rep.Stale)
	}
	if rep.Duplicates > 0 {
		fmt.Fprintf(a.stdout, "duplicates  %d (copied once)\n", rep.Duplicates)
	}
	fmt.Fprintf(a.stdout, "problems    %d\n", rep.NumProblems)
	for _, p := range rep.Problems {
		fmt.Fprintf(a.stdout, "  %s\n", p)
	}
	fmt.Fprintf(a.stdout, "damaged file kept as %s\n", rep.Kept)
}
