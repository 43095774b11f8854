// Package certtest starts TLS test servers whose certificates are valid over
// a chosen window, signed by an authority of their own that a client can
// trust: what a test of certificate dates, or of a wrong clock, needs.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Cert describes the server's certificate.
type Cert struct {
	// NotBefore and NotAfter bound the certificate's validity. The
	// authority's own validity spans them by decades, so a clock outside
	// them finds only this certificate out of its dates.
	NotBefore, NotAfter time.Time
	// Host is the one name the certificate is for; "" means 127.0.0.1,
	// where the server listens. Another name makes a wrong-host
	// certificate.
	Host string
}

// Server starts a TLS server on 127.0.0.1 serving h with a certificate as
// c describes, closed when the test ends. It returns the server and a
// transport that trusts the certificate's authority, and only it, and
// judges dates by now (nil means time.Now).
func Server(t testing.TB, c Cert, h http.Handler, now func() time.Time) (*httptest.Server, *http.Transport) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "certtest CA"},
		NotBefore: c.NotBefore.AddDate(-50, 0, 0), NotAfter: c.NotAfter.AddDate(50, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	must(t, err)
	ca, err = x509.ParseCertificate(caDER)
	must(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "certtest server"},
		NotBefore: c.NotBefore, NotAfter: c.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if c.Host == "" {
		leaf.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	} else {
		leaf.DNSNames = []string{c.Host}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	must(t, err)

	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what tests make
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, Time: now}
	t.Cleanup(tr.CloseIdleConnections)
	return srv, tr
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
