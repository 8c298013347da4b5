package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: endpoint"},
		{[]string{"run"}, 2, "--bind is required"},
		{[]string{"run", "--bind", "127.0.0.1,nope"}, 2, `"nope" is not an IP`},
		{[]string{"run", "--help"}, 0, "ENDPOINT_ETCD_ENDPOINTS"},
		{[]string{"bench", "--help"}, 0, "ENDPOINT_BENCH_REPORT_GBITS"},
		{[]string{"bench", "--help"}, 0, "ENDPOINT_BENCH_LAT"},
		{[]string{"bench", "--help"}, 0, "ENDPOINT_BENCH_CLIENTS"},
		{[]string{"bench", "--help"}, 0, "99.9%"},
		{[]string{"bench", "client", "--mode", "tcp", "--bind", "127.0.0.1", "--peer", "127.0.0.1", "-q", "8193"}, 2, "want 1..8192"},
		{[]string{"bench", "sideways"}, 2, "want server or client"},
		{[]string{"bench", "client", "--mode", "tcp", "--bind", "127.0.0.1"}, 2, "--peer"},
		{[]string{"bench", "client", "--mode", "bogus"}, 2, "unknown mode"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"--version"}, 0, "endpoint (devel), commit "},
		{[]string{"--help"}, 0, "--version"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("%v: code %d, want %d with %q; got\n%s%s", tc.args, code, tc.code, tc.want, out.String(), errb.String())
		}
	}
}

func TestEnvTwin(t *testing.T) {
	// Mode and duration from the environment; nothing listens on port 1.
	t.Setenv("ENDPOINT_BENCH_MODE", "tcp")
	t.Setenv("ENDPOINT_BENCH_D", "1")
	var out, errb bytes.Buffer
	code := run([]string{"bench", "client", "--bind", "127.0.0.1", "--peer", "127.0.0.1", "--port", "1", "--connect-timeout", "0s"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "connect") {
		t.Fatalf("code %d: %s", code, errb.String())
	}
}
