package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// lsFilter selects the records ls lists.
type lsFilter struct {
	states    []queue.State // nil for every state
	lane      *string       // nil for every lane
	olderThan time.Duration // enqueued at least this long ago
	limit     int           // 0 for no limit
}

func (f lsFilter) match(v recordView, now time.Time) bool {
	if f.states != nil && !slices.ContainsFunc(f.states, func(s queue.State) bool { return s.String() == v.State }) {
		return false
	}
	if f.lane != nil && (v.Method == "" || v.Lane != *f.lane) { // no method: damaged, its intent lost
		return false
	}
	var enqueued time.Time // a damaged record's is unknown: the oldest
	if v.EnqueuedAt != nil {
		enqueued = *v.EnqueuedAt
	}
	return now.Sub(enqueued) >= f.olderThan
}

func (a *app) lsCommand() *cobra.Command {
	var (
		states  []string
		lane    string
		f       lsFilter
		asJSON  bool
		example = `  idemq -f intents.db ls
  idemq -f intents.db ls --state failed,expired --json
  idemq -f intents.db ls --lane payments --older-than 1h --limit 20`
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Short:   "List records, filtered by state, lane and age",
		Long:    "ls lists records in ID order, which is enqueue order: a table, or a JSON array with --json.\nThe default lane is shown as \"-\" and selected with --lane \"\".",
		Example: example,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if f.states, err = parseStates(states); err != nil {
				return err
			}
			if cmd.Flags().Changed("lane") {
				f.lane = &lane
			}
			if f.limit < 0 {
				return usagef("--limit %d: want 0 or more", f.limit)
			}
			if f.olderThan < 0 {
				return usagef("--older-than %v: want 0 or more", f.olderThan)
			}
			return a.withSource(queue.Options{ReadOnly: true}, func(src source) error {
				recs, err := src.list(cmd.Context(), f, a.now())
				if err != nil {
					return err
				}
				if asJSON {
					if recs == nil {
						recs = []recordView{}
					}
					return writeJSON(a, recs)
				}
				return a.lsTable(recs)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&states, "state", nil, "only records in these states: pending, in_flight, done, failed, expired")
	fl.StringVar(&lane, "lane", "", "only records of this lane (\"\" for the default lane)")
	fl.DurationVar(&f.olderThan, "older-than", 0, "only records enqueued at least this long ago, e.g. 1h")
	fl.IntVar(&f.limit, "limit", 0, "list at most this many records (0: all)")
	fl.BoolVar(&asJSON, "json", false, "write a JSON array instead of a table")
	return cmd
}

func (a *app) lsTable(recs []recordView) error {
	now := a.now()
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tOUTCOME\tLANE\tAGE\tATTEMPTS\tREQUEST\tLAST")
	for _, r := range recs {
		v := textOf(r)
		request := "(intent lost: damaged)"
		if v.Method != "" {
			request = v.Method + " " + v.URL
		}
		age := "-" // a damaged record keeps only its ID
		if r.EnqueuedAt != nil {
			age = fmtAge(now.Sub(*r.EnqueuedAt))
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n",
			v.ID, v.State, outcomeCell(v.Outcome), laneName(v.Lane), age, v.Attempts, request, last(v))
	}
	return w.Flush()
}

// last sums up the latest attempt in a table cell: its class and status.
func last(v recordView) string {
	var parts []string
	if v.LastClass != "" {
		parts = append(parts, v.LastClass)
	}
	if v.LastStatus != 0 {
		parts = append(parts, fmt.Sprint(v.LastStatus))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// writeJSON writes v as indented JSON, escaped by queueweb.MarshalJSON.
func writeJSON(a *app, v any) error {
	out, err := queueweb.MarshalJSON(v)
	if err != nil {
		return err
	}
	_, err = a.rawStdout.Write(out)
	return err
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// outcomeCell is the outcome in a table cell: "-" until the record settles.
func outcomeCell(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
