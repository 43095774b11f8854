package idem

import (
	"context"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/certtest"
)

// TestCertificateDates: a certificate refused only for its validity dates,
// as every certificate is on a device whose clock is wrong, ends Do at once
// with NotApplied and ErrCertificateDates, not ErrInvalidRequest: the clock
// may be what is wrong. A wrong host name is refused whatever the clock
// reads and stays ErrInvalidRequest.
func TestCertificateDates(t *testing.T) {
	now := time.Now()
	year := 365 * 24 * time.Hour
	tests := []struct {
		name string
		cert certtest.Cert
		want error // nil: the request is applied
		not  error
	}{
		{"expired", certtest.Cert{NotBefore: now.Add(-2 * year), NotAfter: now.Add(-year)}, ErrCertificateDates, ErrInvalidRequest},
		{"not yet valid", certtest.Cert{NotBefore: now.Add(year), NotAfter: now.Add(2 * year)}, ErrCertificateDates, ErrInvalidRequest},
		{"wrong host", certtest.Cert{NotBefore: now.Add(-year), NotAfter: now.Add(year), Host: "other.invalid"}, ErrInvalidRequest, ErrCertificateDates},
		{"valid", certtest.Cert{NotBefore: now.Add(-year), NotAfter: now.Add(year)}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, tr := certtest.Server(t, tt.cert, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}), nil)
			c, clk := testClient(t, &http.Client{Transport: tr})
			res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL+"/payments", "x"))
			if tt.want == nil {
				require.NoError(t, err)
				assert.Equal(t, Applied, res.Outcome)
				require.NoError(t, res.Response.Body.Close())
				return
			}
			require.ErrorIs(t, err, tt.want)
			assert.NotErrorIs(t, err, tt.not)
			assert.ErrorIs(t, err, ErrNotApplied)
			e := asError(t, err)
			assert.Len(t, e.Attempts, 1, "one attempt: retrying at once would meet the same clock")
			assert.Equal(t, ClassInvalid, e.Attempts[0].Class)
			assert.Empty(t, clk.Sleeps())
			if tt.want == ErrCertificateDates {
				var invalid x509.CertificateInvalidError
				require.ErrorAs(t, err, &invalid, "the certificate and its dates reach the caller")
				assert.Equal(t, x509.Expired, invalid.Reason)
				assert.Contains(t, e.Error(), "validity dates")
			}
		})
	}
}
