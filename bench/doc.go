// Package bench measures idem beside the clients people use instead, and its
// queue beside raw bbolt, each comparison side by side in one run.
//
// It is its own module so that the peers (go-retryablehttp, resty) never
// enter idem's go.mod. Everything is in the tests:
//
//	BenchmarkOverhead  success path, POST and GET, on a loopback server: raw
//	                   http.Client, go-retryablehttp, resty, idem Client.Do
//	                   (a NewIntent per operation) and idem.Transport; for
//	                   POST also go-retryablehttp given a key per operation,
//	                   the same request on the wire as idem's.
//	BenchmarkClientCost the same over an in-memory RoundTripper: what each
//	                   client adds per operation, without the network's noise.
//	BenchmarkFault     a server that commits the effect of a POST, then drops
//	                   20% of the responses: duplicated effects per 10,000
//	                   POSTs (dups/10k), attempts the server saw per
//	                   operation (attempts/op), errors the caller saw
//	                   (errors/10k); for idem, the attempts it counted
//	                   itself (client-attempts/op).
//	BenchmarkOutage    a total outage for a time window, every dial refused
//	                   or every attempt answered 503, from several
//	                   goroutines: attempts sent per operation
//	                   (attempts/op, and retries/op with more digits).
//	BenchmarkQueueOutage  a device's bbolt queue, default options, 64
//	                   records in 16 lanes, every dial refused for the
//	                   window, then the API back: time from the API up to
//	                   the first record it sees (back-ms, no Wake), dials
//	                   per minute offline (probes/min), time from the API
//	                   up to the backlog drained (drain-ms).
//	BenchmarkEnqueue   queue.Enqueue with 1 and 64 producers beside raw bbolt
//	                   Update (1) and Batch (64); with supplied keys; and with
//	                   producers that spend 50µs of CPU on each item.
//	BenchmarkDrain     enqueue-all to all-settled against a loopback server.
//	BenchmarkDrainLatency  a backlog of 64 lanes x 100 records drained to a
//	                   server behind a latency proxy 50 ms away, with 4
//	                   workers and with the default options.
//	BenchmarkEnqueueDepth  single-producer Enqueue with 1k, 100k and 1M
//	                   records queued, and the process's memory then.
//	BenchmarkFleetLatency  drain rates through latency proxies
//	                   (internal/latproxy) between the queues and
//	                   PostgreSQL and between the queues and the server, at
//	                   no latency, 1 ms/5 ms and 2 ms/20 ms round trips: the
//	                   bbolt queue, 1 and 3 pgqueue replicas (in this one
//	                   process, a pool each) on 200 lanes and with a lane
//	                   per intent, and River (1 and 3 clients) working the
//	                   same POSTs as jobs; 8 workers a replica.
//	BenchmarkFleetTx   a one-row business transaction alone, with
//	                   pgqueue.EnqueueTx and with River's InsertTx; a batch
//	                   of 1,000 by EnqueueManyTx beside InsertManyTx.
//
// run.sh runs them all, writes the raw output under results/, compares with
// benchstat and prints the ratios the project is judged on (cmd/ratios).
//
// # Configuration
//
// Each peer gets its own http.Transport from one constructor (newTransport),
// so that connection reuse is equal, and the same retry count: 3 retries, 4
// attempts in all. Decisions (what is retried) are each library's defaults;
// waits are shortened equally in the fault and outage benchmarks so that a
// run has many operations. go-retryablehttp's and resty's default loggers,
// which write to stderr on every request or retry, are silenced: idem is
// silent by default, and a log line per request would measure the terminal.
//
// # Smoke mode
//
// The outage window (10 s) and the depths of BenchmarkEnqueueDepth (up to 1M
// records, a long prefill) scale down in smoke mode, for CI:
//
//	go test -run '^$' -bench . -benchtime=100x ./...
//
// Smoke mode is on when IDEM_BENCH_SMOKE=1, off when IDEM_BENCH_SMOKE=0, and
// otherwise on when -benchtime is a count of at most 1000 iterations ("100x").
// IDEM_BENCH_OUTAGE (a duration) sets the outage window and IDEM_BENCH_DEPTHS
// (such as "1k,100k,1M") the depths, in any mode. IDEM_BENCH_CACHE names a
// folder where the prefilled queue files are kept and reused by later
// processes; run.sh sets it to a temporary folder so that its rounds fill
// each depth once.
package bench
