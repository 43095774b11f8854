package redact_test

import (
	"fmt"

	"github.com/idem-go/idem/redact"
)

// A URL is shown without its query, its fragment or its user info, and one
// that does not parse is not shown at all.
func ExampleRawURL() {
	fmt.Println(redact.RawURL("https://ops:pw@pay.example/charges?token=s3cret#top"))
	fmt.Println(redact.RawURL("http://pay.example/%zz"))
	// Output:
	// https://redacted@pay.example/charges
	// (unparsable URL)
}

// A service whose key travels in a header of its own adds its name to the
// list, as idem.Client.CredentialHeaders does.
func ExampleIsCredentialHeader() {
	fmt.Println(redact.IsCredentialHeader("x-api-key"))
	fmt.Println(redact.IsCredentialHeader("X-Shop-Token"))
	fmt.Println(redact.IsCredentialHeader("X-Shop-Token", "X-Shop-Token"))
	// Output:
	// true
	// false
	// true
}
