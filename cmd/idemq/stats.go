package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
	"github.com/idem-go/idem/redact"
)

// horizonFlags are the application's Options.Retention and Margin, which
// idemq cannot read from the file: stats judges the horizon by them and
// drain sends by them.
type horizonFlags struct {
	retention, margin time.Duration
}

func (h *horizonFlags) add(fl *pflag.FlagSet) {
	fl.DurationVar(&h.retention, "retention", queue.DefaultRetention, "how long the server keeps a key: the application's Options.Retention")
	fl.DurationVar(&h.margin, "margin", queue.DefaultMargin, "kept off retention: the application's Options.Margin")
}

func (h horizonFlags) check() error {
	if h.retention <= 0 || h.margin < 0 || h.margin >= h.retention {
		return usagef("--retention %v, --margin %v: want 0 <= margin < retention", h.retention, h.margin)
	}
	return nil
}

// statsView is what stats reports: queueweb's Stats, and the queue's file
// or URL.
type statsView struct {
	File string `json:"file,omitempty"`
	URL  string `json:"url,omitempty"`
	queueweb.Stats
}

func (a *app) statsCommand() *cobra.Command {
	var (
		h      horizonFlags
		within time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count records per state; the oldest pending; the horizon at risk",
		Long: `stats counts the records in each state, says how long the oldest unsettled
record has waited, and lists the pending records at risk of the horizon: those
an attempt reached the server with, whose key the server may forget
(FirstSentAt + retention - margin) within --within or already. Such a record
expires at its next attempt once past it. Give --retention and --margin as
the application sets them in queue.Options; the defaults are the queue's.
Over --url the application's handler judges the horizon by its own
queueweb.Options, and --retention and --margin are not used.`,
		Example: "  idemq -f intents.db stats\n  idemq -f intents.db stats --retention 48h --within 6h --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := h.check(); err != nil {
				return err
			}
			if within < 0 {
				return usagef("--within %v: want a duration of 0 or more", within)
			}
			return a.withSource(queue.Options{ReadOnly: true}, func(src source) error {
				v, err := a.stats(cmd.Context(), src, h, within)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a, v)
				}
				return a.statsText(v)
			})
		},
	}
	fl := cmd.Flags()
	h.add(fl)
	fl.DurationVar(&within, "within", time.Hour, "report records whose horizon comes within this long")
	fl.BoolVar(&asJSON, "json", false, "write JSON instead of text")
	return cmd
}

func (a *app) stats(ctx context.Context, src source, h horizonFlags, within time.Duration) (statsView, error) {
	opts := queueweb.Options{Retention: h.retention, Margin: h.margin, Within: within}
	if within == 0 {
		opts.Within = -1 // none; 0 would mean queueweb's default
	}
	st, err := src.stats(ctx, opts, a.now())
	v := statsView{Stats: st}
	if a.url != "" {
		v.URL = redact.RawURL(a.url)
	} else {
		v.File = a.queueName()
	}
	return v, err
}

func (a *app) statsText(v statsView) error {
	w := tabwriter.NewWriter(a.stdout, 0, 0, 1, ' ', 0)
	if v.URL != "" {
		fmt.Fprintf(w, "url:\t%s\n", printable(v.URL))
	} else {
		fmt.Fprintf(w, "file:\t%s\n", printable(v.File))
	}
	for _, s := range allStates() {
		fmt.Fprintf(w, "%s:\t%d\n", s, v.Counts[s.String()])
	}
	fmt.Fprintf(w, "total:\t%d\n", v.Total)
	oldest := "-"
	if v.OldestPending > 0 {
		oldest = fmtAge(time.Duration(v.OldestPending * float64(time.Second)))
	}
	fmt.Fprintf(w, "oldest pending:\t%s\n", oldest)
	hz := v.Horizon
	fmt.Fprintf(w, "horizon at risk:\t%d within %s (retention %s, margin %s)\n", len(hz.AtRisk), hz.Within, hz.Retention, hz.Margin)
	if len(hz.AtRisk) > 0 {
		ids := hz.AtRisk
		more := ""
		if len(ids) > 10 {
			ids, more = ids[:10], fmt.Sprintf(" and %d more", len(hz.AtRisk)-10)
		}
		fmt.Fprintf(w, "  records:\t%v%s\n", ids, more)
		fmt.Fprintf(w, "  soonest:\t%s\n", fmtTime(hz.Soonest, a.now()))
	}
	return w.Flush()
}
