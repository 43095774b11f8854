package queue

import (
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// group shares commits among concurrent writers of one file, with no
// timer: a writer that finds no commit under way commits at once; writers
// that come while a commit runs queue up, and when it ends the first of
// them commits for all of them together. Under load every commit carries
// what gathered during the one before it, and a lone writer never waits for
// company. (bolt.DB.Batch waits MaxBatchDelay for company instead, which
// splits the commits of producers that arrive a little apart.)
type group struct {
	// committed, if not nil, is told the transaction ID of each commit
	// that succeeded, before its writers are (see writeMark).
	committed func(txid uint64)

	mu     sync.Mutex
	busy   bool             // a commit is under way
	queued []*pendingCommit // the writers waiting for the next one
}

// pendingCommit is one writer's part of a shared commit.
type pendingCommit struct {
	fn  func(*bolt.Tx) error
	err error
	// wake says what the writer waits for: true when it is to commit for
	// the queued writers, false when its part is committed (or failed).
	wake chan bool
}

// do runs fn in a write transaction of db, shared with the writers that
// gathered meanwhile, and returns once that transaction is committed. fn
// may run more than once, as with bolt.DB.Batch: when one writer's fn
// fails, the transaction is rolled back, that fn is run alone for its own
// answer, and the others again together.
func (g *group) do(db *bolt.DB, fn func(*bolt.Tx) error) error {
	me := &pendingCommit{fn: fn, wake: make(chan bool, 1)}
	g.mu.Lock()
	g.queued = append(g.queued, me)
	if g.busy {
		g.mu.Unlock()
		if lead := <-me.wake; !lead {
			return me.err
		}
		g.mu.Lock()
	}
	g.busy = true
	calls := g.queued // me among them
	g.queued = nil
	g.mu.Unlock()

	g.commitAll(db, calls)

	g.mu.Lock()
	if len(g.queued) > 0 {
		g.queued[0].wake <- true // the next commit is theirs
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	for _, c := range calls {
		if c != me {
			c.wake <- false
		}
	}
	return me.err
}

// commitAll runs calls in one transaction and sets their errors; a call
// whose fn fails is run alone, and the rest together again.
func (g *group) commitAll(db *bolt.DB, calls []*pendingCommit) {
	for len(calls) > 0 {
		failed := -1
		err := g.update(db, func(tx *bolt.Tx) error {
			for i, c := range calls {
				if err := safely(c.fn, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed < 0 {
			for _, c := range calls {
				c.err = err // nil, or the commit's own failure: every part shares it
			}
			return
		}
		c := calls[failed]
		if len(calls) == 1 {
			c.err = err
			return
		}
		c.err = g.update(db, func(tx *bolt.Tx) error { return safely(c.fn, tx) })
		calls = append(calls[:failed:failed], calls[failed+1:]...)
	}
}

// update is update, telling committed of a commit that succeeded.
func (g *group) update(db *bolt.DB, fn func(*bolt.Tx) error) error {
	var txid int
	err := update(db, func(tx *bolt.Tx) error {
		txid = tx.ID()
		return fn(tx)
	})
	if err == nil && g.committed != nil {
		g.committed(uint64(txid))
	}
	return err
}

// safely calls fn, turning a panic into an error so that one writer's
// panic fails its own part only, not the commit it shares.
func safely(fn func(*bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("queue: write %w: %v", errPanicked, p)
		}
	}()
	return fn(tx)
}
