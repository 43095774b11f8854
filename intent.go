package idem

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"time"

	"github.com/google/uuid"

	"github.com/idem-go/idem/internal/methods"
	"github.com/idem-go/idem/redact"
)

// MaxBodyBytes is the largest body an Intent holds. An intent keeps its body in
// memory (and a queue keeps it on disk) so that every attempt is byte-identical;
// larger uploads belong in a dedicated upload protocol, not in a retried request.
// Read a body that arrives as a stream up to one byte more
// (io.LimitReader(r, MaxBodyBytes+1)): NewIntent then refuses a longer stream
// with ErrBodyTooLarge rather than holding it cut.
const MaxBodyBytes = 8 << 20

// MaxKeyLen is the longest idempotency key accepted, in bytes.
const MaxKeyLen = 255

// maxLaneLen bounds a lane name; lanes are ordering keys, not payloads.
const maxLaneLen = 255

// Intent is one logical operation: what the application meant to do once, such
// as "charge this card for this order". It carries the method, URL, body bytes,
// non-secret headers and, for methods that are not safe, the idempotency key
// that every attempt presents. The key is fixed when the Intent is created, so
// a retry, a restart or a resend from a queue is recognised by the server as
// the same operation.
//
// Create an Intent where the intent is born (the user pressed "Pay"), never in
// a retry loop or a transport. An Intent is immutable data, safe for
// concurrent use: what happened to it is kept by whoever runs it (a Do's
// Result or *Error, a queue's Record).
type Intent struct {
	method    string
	url       string
	u         *url.URL // url parsed; copied for each request
	header    []field  // canonical names, each once, in the order first added
	body      string   // a string, as nothing may change it; "" for none
	key       string
	supplied  bool // the key came from WithKey rather than newKey
	lane      string
	createdAt time.Time
	policy    *Policy // WithPolicy's, for Do and Resume; nil: the Client's
}

// IntentOption configures NewIntent.
type IntentOption func(*intentConfig) error

// intentConfig is an intent being made by its options, and what they need
// besides. An option takes it by pointer, so it is allocated: NewIntent
// returns the intent it holds, which keeps the config's room for the first
// headers, so that one allocation serves the intent, its options and its
// first headers.
type intentConfig struct {
	in          Intent // key, supplied, header, lane and policy as set
	noKey       bool
	values      uint8          // of valueRoom used
	index       map[string]int // position in header by name, once there are many
	headerBytes int

	fieldRoom [2]field
	valueRoom [2]string
}

// oneValue returns a full slice of v alone, from valueRoom while it lasts.
func (c *intentConfig) oneValue(v string) []string {
	if int(c.values) == len(c.valueRoom) {
		return []string{v}
	}
	i := c.values
	c.values++
	c.valueRoom[i] = v
	return c.valueRoom[i : i+1 : i+1]
}

// WithKey supplies the idempotency key instead of generating one; use it when
// the key was born earlier (an upstream request's key, a key stored with an
// order). The key must be 1 to 255 visible ASCII characters without '"', '\'
// or ','. Safe methods (GET, HEAD, OPTIONS, TRACE, QUERY) carry no key, so
// NewIntent refuses WithKey for them.
func WithKey(key string) IntentOption {
	return func(c *intentConfig) error {
		if err := validateKey(key); err != nil {
			return err
		}
		c.in.key, c.in.supplied, c.noKey = key, true, false
		return nil
	}
}

// WithoutKey makes an intent of a method that is not safe carry no key, for
// a server that does not support idempotency keys. Such an intent is sent
// like any other, but after an ambiguous attempt a POST or PATCH is never
// retried (ErrNoKey): nothing would stop the server applying it twice.
func WithoutKey() IntentOption {
	return func(c *intentConfig) error {
		c.in.key, c.in.supplied, c.noKey = "", false, true
		return nil
	}
}

// WithHeader adds a header sent on every attempt. Credentials (the header
// fields redact.CredentialHeaders lists: Authorization, Cookie, X-Api-Key
// ...) are refused with ErrSecretHeader: they are added per attempt by
// Client.Authorize, so a queued intent never stores a secret and is sent
// with fresh credentials. A Client refuses, when it runs the intent, the
// names its own CredentialHeaders adds. Headers net/http manages itself
// (Host, Content-Length, Transfer-Encoding, Connection) and the idempotency
// key header (use WithKey) are refused too.
func WithHeader(name, value string) IntentOption {
	return func(c *intentConfig) error {
		if err := checkHeader(name, value); err != nil {
			return err
		}
		if err := c.addHeaderBytes(len(name) + len(value) + 4); err != nil {
			return err
		}
		c.addHeader(http.CanonicalHeaderKey(name), c.oneValue(value))
		return nil
	}
}

// field is one header of an intent: a slice of them costs less to build and
// to copy into each request than an http.Header map, for the few headers an
// intent has.
type field struct {
	name   string
	values []string
}

// maxScan is how many headers addHeader searches one by one before it keeps
// an index. Not a speed trick for the usual intent, which has a few headers:
// a bound on the worst case, since UnmarshalBinary reads whatever a queue
// file holds. An intent of 6,000 headers decodes in 3 ms with the index and
// 79 ms without (BenchmarkDecodeManyHeaders, 2-core AMD EPYC).
const maxScan = 8

// addHeader adds values, which it keeps, to the header canon.
func (c *intentConfig) addHeader(canon string, values []string) {
	i := -1
	if c.index != nil {
		if j, ok := c.index[canon]; ok {
			i = j
		}
	} else {
		for j := range c.in.header {
			if c.in.header[j].name == canon {
				i = j
				break
			}
		}
	}
	if i >= 0 {
		c.in.header[i].values = append(c.in.header[i].values, values...)
		return
	}
	if c.in.header == nil {
		c.in.header = c.fieldRoom[:0]
	}
	c.in.header = append(c.in.header, field{name: canon, values: values})
	switch {
	case c.index != nil:
		c.index[canon] = len(c.in.header) - 1
	case len(c.in.header) > maxScan:
		c.index = make(map[string]int, 2*len(c.in.header))
		for j, f := range c.in.header {
			c.index[f.name] = j
		}
	}
}

// MaxHeaderBytes bounds the headers an Intent holds, names and values
// together.
const MaxHeaderBytes = 64 << 10

// addHeaderBytes counts n more header bytes against MaxHeaderBytes.
func (c *intentConfig) addHeaderBytes(n int) error {
	c.headerBytes += n
	if c.headerBytes > MaxHeaderBytes {
		return fmt.Errorf("%w: headers take over %d bytes, limit %d", ErrInvalidIntent, c.headerBytes, MaxHeaderBytes)
	}
	return nil
}

// withHeaderValues adds every value of one header, checking the name once:
// decoding a stored intent must cost time linear in its size.
func withHeaderValues(name string, values []string) IntentOption {
	return func(c *intentConfig) error {
		if err := checkHeader(name, ""); err != nil {
			return err
		}
		for _, v := range values {
			if err := c.addHeaderBytes(len(name) + len(v) + 4); err != nil {
				return err
			}
			if err := checkValue(name, v); err != nil {
				return err
			}
		}
		c.addHeader(http.CanonicalHeaderKey(name), slices.Clone(values))
		return nil
	}
}

// WithLane names the ordering lane of the intent: a queue delivers intents of
// one lane in order and drains lanes in parallel. The empty lane is the
// default, single, global lane. A Client ignores lanes.
func WithLane(lane string) IntentOption {
	return func(c *intentConfig) error {
		if len(lane) > maxLaneLen {
			return fmt.Errorf("%w: lane is %d bytes, limit %d", ErrInvalidIntent, len(lane), maxLaneLen)
		}
		c.in.lane = lane
		return nil
	}
}

// WithPolicy gives the intent a policy of its own, which narrows the
// Client's: Client.Do and Client.Resume run it by the Client's Policy
// tightened by p, never loosened, so that the Client's safety rules hold
// for every call. A zero field of p keeps the Client's value (or its
// default). Each limit is the smaller of the two (MaxAttempts, MaxElapsed,
// AttemptTimeout, MaxRetryAfter, InFlightWindow), each delay the larger
// (BaseDelay, MaxDelay, and HedgeAfter, which p cannot turn on), and both
// vetoes apply, the Client's first. Use it for the one call that needs
// fewer attempts, a shorter deadline, or a Veto of its own. Client.Try
// reads no policy, and a Transport never sees an Intent. An intent with a policy
// cannot be queued (queue.Enqueue refuses it, and MarshalBinary: a queue's
// Options.Policy shapes its records) and is the same operation as one
// without (SameOperation). A negative field is refused with an error
// wrapping ErrInvalidPolicy.
func WithPolicy(p Policy) IntentOption {
	return func(c *intentConfig) error {
		if _, err := p.withDefaults(); err != nil {
			return err
		}
		c.in.policy = &p
		return nil
	}
}

// NewIntent returns an Intent for method and url with the given body, which
// it copies. The method must be one of GET, HEAD, OPTIONS, TRACE, QUERY, PUT,
// DELETE, POST or PATCH; the URL must be absolute http or https, with a host
// and without user info. For a method that is not safe NewIntent generates a
// random key (UUIDv4) unless WithKey supplies one. Errors wrap
// ErrInvalidIntent, ErrInvalidKey, ErrSecretHeader or ErrBodyTooLarge and name
// what was wrong.
func NewIntent(method, url string, body []byte, opts ...IntentOption) (*Intent, error) {
	return newIntent(method, url, body, time.Now(), opts)
}

func newIntent(method, rawURL string, body []byte, now time.Time, opts []IntentOption) (*Intent, error) {
	if err := checkMethod(method); err != nil {
		return nil, err
	}
	u, err := checkURL(rawURL)
	if err != nil {
		return nil, err
	}
	if len(body) > MaxBodyBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBodyTooLarge, len(body), MaxBodyBytes)
	}
	var (
		in    *Intent
		noKey bool
	)
	if len(opts) == 0 {
		in = new(Intent)
	} else {
		c, err := configure(opts)
		if err != nil {
			return nil, err
		}
		in, noKey = &c.in, c.noKey
		c.index = nil // of no use once the options ran
	}
	safe := methods.Safe(method)
	if safe && in.supplied {
		return nil, fmt.Errorf("%w: %s is a safe method and carries no idempotency key", ErrInvalidIntent, method)
	}
	switch {
	case !safe && !in.supplied && !noKey:
		in.body, in.key = bodyAndKey(body)
	case len(body) > 0:
		in.body = string(body)
	}
	for i := range in.header {
		// Full slices: a value appended by Client.Authorize to a request's
		// header, which shares them, can never land in the intent's.
		in.header[i].values = slices.Clip(in.header[i].values)
	}
	in.method, in.url, in.u, in.createdAt = method, rawURL, u, now.Round(0)
	return in, nil
}

// configure applies opts to a new config; an intent without options, such
// as most GETs, needs none.
func configure(opts []IntentOption) (*intentConfig, error) {
	c := new(intentConfig)
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// bodyAndKey returns a copy of body and a new key, in one allocation: the
// key's bytes follow the body's in one string, which nothing can change.
func bodyAndKey(body []byte) (string, string) {
	var k [36]byte
	newKey(&k)
	var b strings.Builder
	b.Grow(len(body) + len(k))
	b.Write(body)
	b.Write(k[:])
	s := b.String()
	return s[:len(body)], s[len(body):]
}

// newKey writes a random (version 4) UUID to k, as uuid.UUID.String
// formats it: 122 random bits.
func newKey(k *[36]byte) {
	var u uuid.UUID
	_, _ = rand.Read(u[:])  // never fails: since Go 1.24 a failure crashes the program
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	hex.Encode(k[0:8], u[0:4])
	hex.Encode(k[9:13], u[4:6])
	hex.Encode(k[14:18], u[6:8])
	hex.Encode(k[19:23], u[8:10])
	hex.Encode(k[24:], u[10:])
	k[8], k[13], k[18], k[23] = '-', '-', '-', '-'
}

// Method returns the request method.
func (in *Intent) Method() string { return in.method }

// URL returns the request URL as given to NewIntent.
func (in *Intent) URL() string { return in.url }

// Key returns the idempotency key, or "" for a safe method, which has none.
func (in *Intent) Key() string { return in.key }

// KeySupplied reports whether the key was given with WithKey rather than
// generated. A generated key is new by construction (122 random bits); only a
// supplied key, derived from something the application already had, can
// arrive twice for one operation, as when a producer restarts.
func (in *Intent) KeySupplied() bool { return in.supplied }

// Lane returns the ordering lane; "" is the default lane.
func (in *Intent) Lane() string { return in.lane }

// CreatedAt returns when the intent was created.
func (in *Intent) CreatedAt() time.Time { return in.createdAt }

// Body returns a copy of the body.
func (in *Intent) Body() []byte {
	if in.body == "" {
		return nil
	}
	return []byte(in.body)
}

// SameOperation reports whether o asks for the same operation as in: the
// same method, URL and body, whatever their policies (WithPolicy). A queue takes a supplied key that comes again
// with the same operation as the record it already holds, and refuses it
// with another (queue.ErrKeyInUse). It copies neither body.
func (in *Intent) SameOperation(o *Intent) bool {
	return o != nil && in.method == o.method && in.url == o.url && in.body == o.body
}

// Header returns a copy of the intent's headers; nil when it has none.
func (in *Intent) Header() http.Header {
	if len(in.header) == 0 {
		return nil
	}
	h := make(http.Header, len(in.header))
	for _, f := range in.header {
		h[f.name] = slices.Clone(f.values)
	}
	return h
}

// deriveNamespace is the UUIDv5 namespace of derived keys. Changing it
// changes every derived key, so it is fixed forever.
func deriveNamespace() uuid.UUID {
	return uuid.UUID{0x5b, 0x0a, 0x4e, 0x2c, 0x39, 0xc4, 0x4c, 0x1e, 0x9c, 0x55, 0x6f, 0x1f, 0x2a, 0x7d, 0x1d, 0x10}
}

// DeriveKey returns the child key of parent for phase: a UUIDv5 of both, so
// the same parent and phase always give the same key and different phases give
// unrelated keys. Use it where the parent key arrives as a string, such as an
// incoming request's Idempotency-Key header.
func DeriveKey(parent, phase string) string {
	// Length-prefix the parent so that ("a:b", "c") and ("a", "b:c") differ.
	name := make([]byte, 0, 8+len(parent)+len(phase))
	name = fmt.Appendf(name, "%d:", len(parent))
	name = append(name, parent...)
	name = append(name, phase...)
	return uuid.NewSHA1(deriveNamespace(), name).String()
}

// validateKey reports whether key is acceptable as an idempotency key: 1 to
// 255 visible ASCII characters, none of '"', '\' or ','. The error wraps
// ErrInvalidKey.
func validateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		switch b := key[i]; {
		case b <= ' ' || b >= 0x7f:
			return fmt.Errorf("%w: byte %#02x at offset %d is not visible ASCII", ErrInvalidKey, b, i)
		case b == '"' || b == '\\' || b == ',':
			return fmt.Errorf("%w: character %q at offset %d is not allowed", ErrInvalidKey, b, i)
		}
	}
	return nil
}

// supportedMethod reports whether an Intent accepts method. CONNECT is left
// out: it opens a tunnel, not an operation.
func supportedMethod(method string) bool {
	return methods.Idempotent(method) || method == http.MethodPost || method == http.MethodPatch
}

func checkMethod(method string) error {
	if supportedMethod(method) {
		return nil
	}
	if up := strings.ToUpper(method); up != method && supportedMethod(up) {
		return fmt.Errorf("%w: method %q: methods are case-sensitive, use %q", ErrInvalidIntent, method, up)
	}
	return fmt.Errorf("%w: unsupported method %q", ErrInvalidIntent, method)
}

func checkURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: empty URL", ErrInvalidIntent)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the raw URL, which may hold a password
		}
		return nil, fmt.Errorf("%w: URL: %v", ErrInvalidIntent, err)
	}
	if !u.IsAbs() {
		return nil, fmt.Errorf("%w: URL %q is not absolute: it needs an http or https scheme and a host", ErrInvalidIntent, redact.URL(u))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: URL %q: scheme must be http or https", ErrInvalidIntent, redact.URL(u))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: URL %q has no host", ErrInvalidIntent, redact.URL(u))
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: URL %q carries user info; credentials belong in Client.Authorize", ErrInvalidIntent, redact.URL(u))
	}
	if err := checkPort(u); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidIntent, err)
	}
	return u, nil
}

// secretHeader is the error for the credential header name found in an
// intent.
func secretHeader(name string) error {
	return fmt.Errorf("%w: %s: credentials are added per attempt by Client.Authorize, never stored in an intent", ErrSecretHeader, name)
}

func checkHeader(name, value string) error {
	if !isToken(name) {
		return fmt.Errorf("%w: header name %q is not a valid token", ErrInvalidIntent, name)
	}
	canon := http.CanonicalHeaderKey(name)
	switch {
	case redact.IsCredentialHeader(canon):
		return secretHeader(canon)
	case canon == "Host", canon == "Content-Length":
		return fmt.Errorf("%w: header %s is managed by net/http", ErrInvalidIntent, canon)
	case canon == DefaultKeyHeader, canon == "X-Idempotency-Key":
		return fmt.Errorf("%w: header %s: use WithKey", ErrInvalidIntent, canon)
	case hopByHop(canon):
		return fmt.Errorf("%w: header %s is hop-by-hop: net/http manages or refuses it", ErrInvalidIntent, canon)
	}
	return checkValue(name, value)
}

// checkPort refuses a port out of range, which no dial can reach.
func checkPort(u *url.URL) error {
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("URL %q: port %q is not a number from 1 to 65535", redact.URL(u), p)
		}
	}
	return nil
}

// hopByHop reports whether canon names a hop-by-hop header (RFC 9110 7.6.1),
// which concerns one connection, not the request: net/http manages these
// itself, and refuses them on HTTP/2.
func hopByHop(canon string) bool {
	switch canon {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// checkRequestHeader checks the header of a request about to be sent for
// what net/http would refuse: a name that is not a token, a control byte in
// a value (a CR or LF would split the header), and, when hop is set, a
// hop-by-hop header. The errors wrap ErrInvalidRequest.
func checkRequestHeader(h http.Header, hop bool) error {
	for name, values := range h {
		if !isToken(name) {
			return fmt.Errorf("%w: header name %q is not a valid token", ErrInvalidRequest, name)
		}
		if hop && hopByHop(http.CanonicalHeaderKey(name)) {
			return fmt.Errorf("%w: header %s is hop-by-hop: net/http manages or refuses it", ErrInvalidRequest, http.CanonicalHeaderKey(name))
		}
		for _, v := range values {
			if b, ok := controlByte(v); ok {
				return fmt.Errorf("%w: header %s: control byte %#02x in value", ErrInvalidRequest, http.CanonicalHeaderKey(name), b)
			}
		}
	}
	return nil
}

// controlByte returns the first control byte of a header value other than
// HTAB, if any.
func controlByte(v string) (byte, bool) {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return b, true
		}
	}
	return 0, false
}

func checkValue(name, value string) error {
	if b, ok := controlByte(value); ok {
		return fmt.Errorf("%w: header %s: control byte %#02x in value", ErrInvalidIntent, http.CanonicalHeaderKey(name), b)
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
		default:
			return false
		}
	}
	return true
}
