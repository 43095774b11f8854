package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/idem-go/idem/queue"
)

func (a *app) showCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one record and its attempts, redacted",
		Long: `show prints one record: its state and outcome, the request (method and URL
without query, fragment or user info), its attempts and the stored answer.

The body, request and response, is never shown. Of the idempotency key only the
first 8 characters are shown, and only for a key of 16 or more (a generated
UUID is): enough to find it in a server's logs, never more than half of it.
A shorter key is not shown at all; key_source says whether there is one.`,
		Example: "  idemq -f intents.db show 42\n  idemq -f intents.db show 42 --json",
		Args:    oneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			return a.withSource(queue.Options{ReadOnly: true}, func(src source) error {
				v, err := src.get(cmd.Context(), id)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a, v)
				}
				return a.showText(textOf(v))
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON instead of text")
	return cmd
}

// showText writes v, a text view (see textOf).
func (a *app) showText(v recordView) error {
	now := a.now()
	w := tabwriter.NewWriter(a.stdout, 0, 0, 1, ' ', 0)
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%s:\t"+format+"\n", append([]any{name}, args...)...)
	}
	line("id", "%d", v.ID)
	line("state", "%s", v.State)
	line("outcome", "%s", outcomeCell(v.Outcome))
	line("lane", "%s", laneName(v.Lane))
	if v.Method != "" {
		line("request", "%s %s", v.Method, v.URL)
		line("key", "%s", keyText(v))
		if len(v.Headers) > 0 {
			line("headers", "%s", strings.Join(v.Headers, ", "))
		}
		line("body", "%d bytes (not shown)", v.BodyBytes)
	} else {
		line("request", "lost: the record was damaged and its intent could not be recovered")
	}
	line("attempts", "%d", v.Attempts)
	line("in doubt", "%s", yesNo(v.InDoubt))
	if v.Attempts > 0 {
		line("last attempt", "%s", fmtTime(v.LastAttemptAt, now))
		line("last class", "%s", orDash(v.LastClass))
		if v.LastStatus != 0 {
			line("last status", "%d", v.LastStatus)
		}
		if v.LastError != "" {
			line("last error", "%s", v.LastError)
		}
	}
	line("enqueued", "%s", fmtTime(v.EnqueuedAt, now))
	line("first sent", "%s", fmtTime(v.FirstSentAt, now))
	if v.NextAttempt != nil {
		line("next attempt", "%s", fmtTime(v.NextAttempt, now))
	}
	if v.SettledAt != nil {
		line("settled", "%s", fmtTime(v.SettledAt, now))
	}
	if v.Reason != "" {
		line("reason", "%s", v.Reason)
	}
	if res := v.Result; res != nil {
		body := fmt.Sprintf("%d bytes", res.BodyBytes)
		if res.Truncated {
			body += ", truncated"
		}
		if res.ContentType != "" {
			body = res.ContentType + ", " + body
		}
		line("result", "%d (%s)", res.Status, body)
	}
	if v.ResubmittedAs != 0 {
		line("resubmitted as", "%d", v.ResubmittedAs)
	}
	if v.Damaged {
		line("damaged", "yes: never sent again nor resubmitted; discard removes it")
	}
	return w.Flush()
}

func keyText(v recordView) string {
	switch {
	case v.KeySource == "none":
		return "none"
	case v.Key == "":
		return "hidden (" + v.KeySource + ")"
	}
	return v.Key + " (" + v.KeySource + ")"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneID accepts exactly one argument, as a usage error otherwise.
func oneID(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("%s takes one record ID, got %d arguments", cmd.CommandPath(), len(args))
	}
	return nil
}
