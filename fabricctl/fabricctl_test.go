package fabricctl

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/fabricdtest"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

// result is one fabricctl run.
type result struct {
	code           int
	stdout, stderr string
}

func run(ctx context.Context, env map[string]string, args ...string) result {
	var out, errOut bytes.Buffer
	for k, v := range env {
		os.Setenv(k, v)
	}
	defer func() {
		for k := range env {
			os.Unsetenv(k)
		}
	}()
	code := Main(ctx, args, &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

func TestAgainstFabricd(t *testing.T) {
	p := fabricdtest.Start(t, "--topology", fabricdtest.ExampleTopology(t))
	ctx := testenv.Context(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(p.Token()+"\n"), 0o600)
	env := map[string]string{"FABRICCTL_SERVER": p.URL(), "FABRICCTL_TOKEN_FILE": tokenFile}
	ok := func(args ...string) string {
		t.Helper()
		r := run(ctx, env, args...)
		if r.code != ExitOK {
			t.Fatalf("fabricctl %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	// A table: a header of the columns, then aligned rows.
	rows := func(out string, header string) [][]string {
		t.Helper()
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if !strings.HasPrefix(lines[0], header) {
			t.Fatalf("table header %q, want it to start with %q\n%s", lines[0], header, out)
		}
		var rs [][]string
		for _, l := range lines[1:] {
			rs = append(rs, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1))
		}
		return rs
	}

	planesOut := ok("planes")
	t.Logf("fabricctl planes:\n%s", planesOut)
	planes := rows(planesOut, "NAME")
	if len(planes) != 4 || planes[0][0] != "p0" || planes[3][0] != "p3" {
		t.Fatalf("planes rows %v, want p0..p3", planes)
	}
	var js []map[string]any
	if err := json.Unmarshal([]byte(ok("-o", "json", "planes")), &js); err != nil || len(js) != 4 || js[1]["name"] != "p1" {
		t.Fatalf("planes -o json: %v %v", js, err)
	}
	if sws := rows(ok("switches"), "NAME"); len(sws) != 4 || sws[0][1] != "p0" {
		t.Fatalf("switches rows %v", sws)
	}
	links := rows(ok("links", "--plane", "p2"), "NAME")
	if len(links) != 8 {
		t.Fatalf("links of p2: %v, want the 8 endpoints' ports", links)
	}
	for _, l := range links {
		if l[1] != "p2" {
			t.Fatalf("links --plane p2 listed %v", l)
		}
	}
	if eps := rows(ok("endpoints"), "NAME"); len(eps) != 8 || eps[0][0] != "host-a" || eps[0][1] != "p0,p1,p2,p3" || eps[0][3] != "not reporting" {
		t.Fatalf("endpoints rows %v", eps)
	}
	one := ok("endpoints", "host-c")
	t.Logf("fabricctl endpoints host-c:\n%s", one)
	for _, want := range []string{"Endpoint host-c", "PLANE", "Agent: no status", "Path set"} {
		if !strings.Contains(one, want) {
			t.Errorf("endpoints host-c lacks %q:\n%s", want, one)
		}
	}

	// Drain: a dry run changes nothing; the drain shows in drains, as a
	// transition in events, and in the audit log; undrain ends it.
	dry := ok("drain", "plane", "p1", "--reason", "fabricctl test", "--dry-run")
	if !strings.HasPrefix(dry, "Dry run: draining plane p1 would change 8 endpoints' path sets and strand 0.") {
		t.Fatalf("dry run:\n%s", dry)
	}
	if ds := rows(ok("drains"), "ID"); len(ds) != 0 {
		t.Fatalf("a dry run drained: %v", ds)
	}
	t.Logf("fabricctl drain plane p1 --dry-run:\n%s", dry)
	created := ok("drain", "plane", "p1", "--reason", "fabricctl test")
	m := regexp.MustCompile(`^Drain (\d+): plane p1 \(fabricctl test\); 8 endpoints' path sets change`).FindStringSubmatch(created)
	if m == nil {
		t.Fatalf("drain:\n%s", created)
	}
	id := m[1]
	if ds := rows(ok("drains"), "ID"); len(ds) != 1 || ds[0][0] != id || ds[0][1] != "plane p1" {
		t.Fatalf("drains %v, want drain %s of plane p1", ds, id)
	}
	if r := run(ctx, env, "drain", "plane", "p1", "--reason", "again"); r.code != ExitAPI || !strings.Contains(r.stderr, "409") {
		t.Fatalf("draining p1 twice: exit %d %s", r.code, r.stderr)
	}
	testutil.WaitFor(t, 10*time.Second, "the drain in the history", func() bool {
		return strings.Contains(ok("events", "--since", "10m", "--subject", "p1"), "-> draining")
	})
	var evs []map[string]any
	if err := json.Unmarshal([]byte(ok("-o", "json", "events", "--subject", "p1")), &evs); err != nil || len(evs) == 0 {
		t.Fatalf("events -o json: %v %v", evs, err)
	}
	if out := ok("events", "--plane", "p2"); strings.Contains(out, "p1") {
		t.Fatalf("events --plane p2 shows p1's:\n%s", out)
	}
	if a := ok("audit", "--limit", "5"); !regexp.MustCompile(`drain\.create\s+target_kind=plane|drain\.create\s+plane=p1`).MatchString(a) || !strings.Contains(a, "drain.dry_run") {
		t.Fatalf("audit lacks the drain:\n%s", a)
	}
	if tk := rows(ok("tokens"), "ID"); len(tk) == 0 || tk[0][2] != "admin" {
		t.Fatalf("tokens %v", tk)
	}
	if out := ok("undrain", id); out != "Drain "+id+" ended.\n" {
		t.Fatalf("undrain: %q", out)
	}
	if r := run(ctx, env, "undrain", id); r.code != ExitAPI {
		t.Fatalf("undrain twice: exit %d %s", r.code, r.stderr)
	}

	// events --follow prints what happens after it started, until stopped.
	fctx, stop := context.WithCancel(ctx)
	var fout, ferr testutil.SyncBuffer
	code := -1
	var wg sync.WaitGroup
	wg.Go(func() {
		code = Main(fctx, []string{"--server", p.URL(), "--token-file", tokenFile, "--follow-interval", "100ms",
			"events", "--since", "1s", "--follow", "--subject", "p3"}, &fout, &ferr)
	})
	testutil.WaitFor(t, 10*time.Second, "events --follow printing its header", func() bool { return strings.Contains(fout.String(), "SUBJECT") })
	ok("drain", "plane", "p3", "--reason", "followed")
	testutil.WaitFor(t, 10*time.Second, "events --follow printing the new drain", func() bool { return strings.Contains(fout.String(), "-> draining") })
	stop()
	wg.Wait()
	if code != ExitOK {
		t.Fatalf("events --follow: exit %d\n%s%s", code, fout.String(), ferr.String())
	}

	// Errors: the API's, usage and an unreachable server, each with its
	// exit code and a message.
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + lis.Addr().String()
	lis.Close()
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		{env, []string{"links", "--state", "sideways"}, ExitAPI, "400 invalid_parameter"},
		{env, []string{"endpoints", "host-z"}, ExitAPI, "404"},
		{map[string]string{"FABRICCTL_SERVER": p.URL(), "FABRICCTL_TOKEN": "mpt_wrong"}, []string{"planes"}, ExitAPI, "401"},
		{map[string]string{"FABRICCTL_SERVER": p.URL()}, []string{"planes"}, ExitAPI, "no token given"},
		{map[string]string{"FABRICCTL_SERVER": closed}, []string{"planes"}, ExitUnreachable, "unreachable"},
		{env, []string{"frobnicate"}, ExitUsage, "unknown command"},
		{env, []string{"-o", "yaml", "planes"}, ExitUsage, "table or json"},
		{env, []string{"drain", "plane", "p1"}, ExitUsage, "--reason"},
		{env, []string{"drain", "rack", "r1", "--reason", "x"}, ExitUsage, "plane, switch or link"},
		{env, []string{"undrain", "seven"}, ExitUsage, "positive number"},
		{env, []string{"events", "--since", "yesterday"}, ExitUsage, "duration"},
		{map[string]string{"FABRICCTL_SERVER": "ftp://x"}, []string{"planes"}, ExitUsage, "--server"},
	} {
		r := run(ctx, tc.env, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("fabricctl %v: exit %d %q, want %d with %q", tc.args, r.code, r.stderr, tc.code, tc.stderr)
		}
		if strings.Contains(r.stderr, p.Token()) {
			t.Errorf("fabricctl %v printed the token", tc.args)
		}
	}
	if r := run(ctx, nil, "--version"); r.code != ExitOK || !strings.HasPrefix(r.stdout, "fabricctl ") {
		t.Errorf("--version: %d %q", r.code, r.stdout)
	}
	if r := run(ctx, nil, "--help"); r.code != ExitOK || !strings.Contains(r.stderr, "Exit codes:") || !strings.Contains(r.stderr, "FABRICCTL_SERVER") {
		t.Errorf("--help: %d %s", r.code, r.stderr)
	}
}
