package redact

import "strings"

// CredentialHeaders returns the names of the header fields that carry a
// credential: Authorization, Proxy-Authorization, Cookie, Set-Cookie,
// X-Api-Key, Api-Key and X-Auth-Token. It is the one list idem holds to:
// an intent refuses them (credentials are added per attempt by
// Client.Authorize), a redirect that leaves the request's origin takes them
// off, and no log, event, error or page of idem shows a header's value. A
// service whose credential travels in a header of its own adds its name
// with the CredentialHeaders field of idem.Client or idem.Transport. Each
// call returns a fresh slice.
func CredentialHeaders() []string {
	l := credentialHeaders()
	return l[:]
}

// IsCredentialHeader reports whether name, in any letter case, is one of
// CredentialHeaders or one of extra, a service's own credential headers.
func IsCredentialHeader(name string, extra ...string) bool {
	for _, c := range credentialHeaders() {
		if strings.EqualFold(name, c) {
			return true
		}
	}
	for _, c := range extra {
		if strings.EqualFold(name, c) {
			return true
		}
	}
	return false
}

// credentialHeaders is the list, an array so that no caller can change it.
func credentialHeaders() [7]string {
	return [...]string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key", "Api-Key", "X-Auth-Token"}
}
