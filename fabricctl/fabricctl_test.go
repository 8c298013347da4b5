package fabricctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/demo/democtl"
	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/fabricdproc"
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

// adminEnv points fabricctl at p with its admin token in a file.
func adminEnv(t *testing.T, p *fabricdproc.Proc) (env map[string]string, tokenFile string) {
	tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(p.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"FABRICCTL_SERVER": p.URL(), "FABRICCTL_TOKEN_FILE": tokenFile}, tokenFile
}

// succeeds runs fabricctl and fails the test unless it exits 0.
func succeeds(t *testing.T, ctx context.Context, env map[string]string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		r := run(ctx, env, args...)
		if r.code != ExitOK {
			t.Fatalf("fabricctl %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
}

func TestAgainstFabricd(t *testing.T) {
	p := fabricdtest.Start(t, "--topology", fabricdtest.ExampleTopology(t))
	ctx := testenv.Context(t)
	env, tokenFile := adminEnv(t, p)
	ok := succeeds(t, ctx, env)
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
	if a := ok("audit", "--limit", "5"); !regexp.MustCompile(`drain\.create\s+plane=p1`).MatchString(a) || !strings.Contains(a, "drain.dry_run") {
		t.Fatalf("audit lacks the drain:\n%s", a)
	}
	if tk := rows(ok("tokens"), "ID"); len(tk) == 0 || tk[0][2] != "admin" {
		t.Fatalf("tokens %v", tk)
	}
	if out := ok("undrain", id); out != "Drain "+id+" ended.\n" {
		t.Fatalf("undrain: %q", out)
	}
	ended := false
	for _, d := range rows(ok("drains", "--all"), "ID") {
		ended = ended || (d[0] == id && d[1] == "plane p1" && d[len(d)-1] != "-")
	}
	if !ended {
		t.Fatalf("drains --all does not show drain %s ended:\n%s", id, ok("drains", "--all"))
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
		{env, []string{"demo"}, ExitAPI, "not_demo"},
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

// TestDemoControl runs `fabricctl demo` against a real fabricd forwarding
// to a demo control over a real userspace fabric: show, fail and restore a
// plane and a port; refusals change nothing; a viewer may only look.
func TestDemoControl(t *testing.T) {
	ctx := testenv.Context(t)
	fab, err := userspace.Start(ctx, userspace.Config{Hosts: 8, Port: testutil.FabricPort(t, 8, 4), Planes: make([]userspace.PlaneConfig, 4)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fab.Close() })
	hosts := make([]string, 8)
	for h := range hosts {
		hosts[h] = fmt.Sprintf("host-%c", 'a'+h)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go democtl.Serve(ctx, ln, democtl.NewHandler(fab, []string{"p0", "p1", "p2", "p3"}, hosts, "demo-secret", nil))
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte("demo-secret\n"), 0o600)
	p := fabricdtest.Start(t, "--topology", fabricdtest.ExampleTopology(t), "--demo-control", "http://"+ln.Addr().String(),
		"--demo-control-secret-file", secretFile)
	env, _ := adminEnv(t, p)
	ok := succeeds(t, ctx, env)
	allUp := func() bool {
		for pl := range 4 {
			for h := range 8 {
				if !fab.PlaneUp(pl) || !fab.LinkUp(h, pl) {
					return false
				}
			}
		}
		return true
	}
	row := func(out, plane string) string {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, plane+" ") {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		t.Fatalf("no row of %s in:\n%s", plane, out)
		return ""
	}

	if out := ok("demo"); !strings.HasPrefix(out, "PLANE") || row(out, "p1") != "p1 up -" {
		t.Fatalf("demo:\n%s", out)
	}
	out := ok("demo", "fail", "plane", "p1")
	t.Logf("fabricctl demo fail plane p1:\n%s", out)
	if row(out, "p1") != "p1 down -" || row(out, "p0") != "p0 up -" || fab.PlaneUp(1) || !fab.PlaneUp(0) {
		t.Fatalf("after failing p1 (fabric p1 up: %v):\n%s", fab.PlaneUp(1), out)
	}
	out = ok("demo", "fail", "port", "host-c", "p2")
	if row(out, "p2") != "p2 up host-c" || fab.LinkUp(2, 2) || !fab.LinkUp(3, 2) {
		t.Fatalf("after failing host-c's p2 port:\n%s", out)
	}
	var st democtl.State
	if err := json.Unmarshal([]byte(ok("-o", "json", "demo")), &st); err != nil || len(st.Planes) != 4 || st.Planes[1].Up || st.Planes[2].PortsDown[0] != "host-c" {
		t.Fatalf("demo -o json: %+v %v", st, err)
	}
	ok("demo", "restore", "plane", "p1")
	ok("demo", "restore", "port", "host-c", "p2")
	if !allUp() {
		t.Fatal("restore left something down")
	}
	if a := ok("audit", "--limit", "10"); !regexp.MustCompile(`demo\.fail\s+plane=p1`).MatchString(a) || !regexp.MustCompile(`demo\.restore\s+port=host-c/p2`).MatchString(a) {
		t.Fatalf("audit lacks the demo changes:\n%s", a)
	}

	// Refusals: unknown names, usage, and a viewer; none changes the fabric.
	var viewer struct{ Token string }
	resp, err := p.Do(ctx, "POST", "/api/v1/tokens", strings.NewReader(`{"name":"wall","role":"viewer"}`))
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&viewer)
	resp.Body.Close()
	viewerEnv := map[string]string{"FABRICCTL_SERVER": p.URL(), "FABRICCTL_TOKEN": viewer.Token}
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		{env, []string{"demo", "fail", "plane", "p9"}, ExitAPI, `no plane "p9"`},
		{env, []string{"demo", "fail", "port", "host-z", "p1"}, ExitAPI, `no endpoint "host-z"`},
		{env, []string{"demo", "fail", "rack", "r1"}, ExitUsage, "plane P, or port ENDPOINT P"},
		{env, []string{"demo", "flap", "plane", "p1"}, ExitUsage, "fail|restore"},
		{viewerEnv, []string{"demo", "fail", "plane", "p1"}, ExitAPI, "403"},
	} {
		r := run(ctx, tc.env, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("fabricctl %v: exit %d %q, want %d with %q", tc.args, r.code, r.stderr, tc.code, tc.stderr)
		}
		if !allUp() {
			t.Fatalf("fabricctl %v changed the fabric", tc.args)
		}
	}
	if r := run(ctx, viewerEnv, "demo"); r.code != ExitOK || row(r.stdout, "p3") != "p3 up -" {
		t.Errorf("a viewer's demo: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
}
