package teachers

import (
	"strings"
	"testing"
)

// TestStatusMessage: a failure response's message is the provider's error message (a string or
// a list of strings), else its body cut at 500 bytes, else the status line.
func TestStatusMessage(t *testing.T) {
	long := strings.Repeat("x", 600)
	for _, tc := range []struct{ body, want string }{
		{`{"error":{"message":"Rate limit reached","type":"rate_limit_exceeded","param":null,"code":null}}`, "Rate limit reached"},
		{`{"error":{"message":"bad","code":1211}}`, "bad"},
		{`{"error":{"message":["field a","field b"],"type":"invalid_request_error"}}`, "field a, field b"},
		{`{"error":{"message":""}}`, ""},
		{`{"error":{"code":500}}`, `{"error":{"code":500}}`},
		{`{"error":"model not found"}`, `{"error":"model not found"}`},
		{`{"detail":"Not Found"}` + "\n", `{"detail":"Not Found"}`},
		{"<html><body><h1>502 Bad Gateway</h1></body></html>\n", "<html><body><h1>502 Bad Gateway</h1></body></html>"},
		{long, long[:500] + "…"},
		{"  \n", "503 Service Unavailable"},
	} {
		if got := statusMessage("503 Service Unavailable", []byte(tc.body)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.body, got, tc.want)
		}
	}
}
