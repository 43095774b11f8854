package queueweb

import "testing"

func TestScrub(t *testing.T) {
	const raw = "https://h/p?token=s3cret"
	tests := []struct{ in, want string }{
		{`Post "https://h/p?token=s3cret": EOF`, `Post "https://h/p": EOF`},
		{"status 400", "status 400"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := scrub(tt.in, raw); got != tt.want {
			t.Errorf("scrub(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestKeyPrefix(t *testing.T) {
	tests := []struct{ key, want string }{
		{"3f2a9c1e-0b7d-4e55-9a61-2c3d4e5f6a7b", "3f2a9c1e…"},
		{"order-0000000042", "order-00…"}, // 16: half shown
		{"order-000000042", ""},           // 15: hidden
		{"k", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := keyPrefix(tt.key); got != tt.want {
			t.Errorf("keyPrefix(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestMarshalJSONEscapes(t *testing.T) {
	out, err := MarshalJSON(map[string]string{"lane": "a\x1b\x7f\u0085\u202e\U000e0001é😀<"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "lane": "a\u001b\u007f\u0085\u202e\udb40\udc01é😀\u003c"
}
`
	if string(out) != want {
		t.Errorf("marshalJSON = %s, want %s", out, want)
	}
}
