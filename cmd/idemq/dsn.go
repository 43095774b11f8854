package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// A queue given by --dsn lives in PostgreSQL (package pgqueue), shared by
// the application's replicas. idemq opens it as an operator's tool: ls,
// show and stats read-only (they take no lease and hold no LISTEN
// connection), discard, resubmit and reset-clock without listening, and
// only drain as a drainer, beside the replicas.

// pgQueue is a queue in PostgreSQL and the pool it uses: Close closes both.
type pgQueue struct {
	q    *queue.Queue
	pool *pgxpool.Pool
}

// openPG opens the queue in the database a.dsn names with opts. drains
// says whether the queue will Run: only then does it listen for enqueues.
func (a *app) openPG(opts queue.Options, drains bool) (*pgQueue, error) {
	cfg, err := pgxpool.ParseConfig(a.dsn)
	if err != nil {
		return nil, a.dsnError(err)
	}
	boundConnect(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(a.ctx, cfg)
	if err != nil {
		return nil, a.dsnError(err)
	}
	opts.KeepSettled = keepAll
	q, err := pgqueue.New(a.ctx, pool, pgqueue.Options{Options: opts, NoListen: !drains})
	if err != nil {
		err = a.dsnError(err)
		if have, known, verr := a.versions(pool); verr == nil && have < known {
			err = fmt.Errorf("%w (idemq migrate brings the tables from version %d to %d)", err, have, known)
		}
		pool.Close()
		return nil, err
	}
	return &pgQueue{q: q, pool: pool}, nil
}

// connectTimeout bounds connecting when the DSN sets no connect_timeout:
// pgx would otherwise wait as long as the network does for a server that
// does not answer.
const connectTimeout = 10 * time.Second

// boundConnect gives cfg connectTimeout unless the DSN set one.
func boundConnect(cfg *pgx.ConnConfig) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
}

// Close closes the queue, then its pool.
func (p *pgQueue) Close() error {
	err := p.q.Close()
	p.pool.Close()
	return err
}

// dsnError names the redacted DSN in err, with any password in err's text
// replaced.
func (a *app) dsnError(err error) error {
	msg := err.Error()
	if pw := dsnPassword(a.dsn); pw != "" {
		msg = strings.ReplaceAll(msg, pw, redacted)
	}
	return fmt.Errorf("%s: %s", redactDSN(a.dsn), msg)
}

// redacted stands for a password idemq does not print.
const redacted = "xxxxx"

// keywordPassword finds the password of a DSN in keyword/value form,
// quoted or not.
var keywordPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// redactDSN returns dsn with its password, in a URL's user info or query
// or as a keyword, replaced by xxxxx.
func redactDSN(dsn string) string {
	if !isURLDSN(dsn) {
		return keywordPassword.ReplaceAllString(dsn, "${1}"+redacted)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "(a DSN that does not parse as a URL)" // its text may hold the password anywhere
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", redacted)
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// dsnPassword returns the password written in dsn, or "".
func dsnPassword(dsn string) string {
	if isURLDSN(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return ""
		}
		if pw, ok := u.User.Password(); ok {
			return pw
		}
		return u.Query().Get("password")
	}
	m := keywordPassword.FindStringSubmatch(dsn)
	if m == nil {
		return ""
	}
	return strings.Trim(m[2], "'")
}

func isURLDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}
