package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/multiplane/multiplane/agent/credentials"
	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/fabricsim/netns"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/pki"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy/fleet"
	"github.com/multiplane/multiplane/store/pgcluster"
)

var (
	endpointOnce sync.Once
	endpointPath string
	endpointErr  error
)

// endpointBin builds the endpoint binary once per test binary.
func endpointBin(t *testing.T) string {
	t.Helper()
	endpointOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mp-integration-endpoint-")
		if err != nil {
			endpointErr = err
			return
		}
		endpointPath = filepath.Join(dir, "endpoint")
		if out, err := exec.Command("go", "build", "-o", endpointPath, "../cmd/endpoint").CombinedOutput(); err != nil {
			endpointErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if endpointErr != nil {
		t.Fatalf("build endpoint: %v", endpointErr)
	}
	return endpointPath
}

// dialIn dials from inside host h's namespace.
func dialIn(fab *netns.Fabric, h int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := fab.Do(h, func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// enrolledFabric is fabricd in the namespace of the last host, on its
// plane-0 veth address, with the other hosts as endpoints host-a, host-b...
type enrolledFabric struct {
	t     *testing.T
	fab   *netns.Fabric
	fd    *fabricdproc.Proc
	addr  string // fabricd's address
	names []string
	dirs  []string // state directories
	topo  *planes.Topology
}

func startEnrolledFabric(t *testing.T, ctx context.Context, hosts int) *enrolledFabric {
	t.Helper()
	testenv.RequireNetns(t)
	for _, c := range []string{"tc", "nft", "ethtool", "sysctl"} {
		testenv.RequireCommand(t, c)
	}
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	const nplanes = 4
	pcs := make([]netns.PlaneConfig, nplanes)
	for p := range pcs {
		pcs[p].RateBps = 100e6
	}
	fab, err := netns.Start(ctx, netns.Config{Name: fmt.Sprintf("mpen-%d", os.Getpid()), Hosts: hosts + 1, Planes: pcs, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fab.Close() })
	mgmt := hosts
	e := &enrolledFabric{t: t, fab: fab, addr: fab.Addr(mgmt, 0).String()}

	// One emulated switch per plane serves the bridge's real counters,
	// listening inside fabricd's namespace.
	topo := &planes.Topology{}
	var devs []string
	for h := 0; h < hosts; h++ {
		devs = append(devs, fab.SwitchPort(h, 0))
		e.names = append(e.names, "host-"+string(rune('a'+h)))
		e.dirs = append(e.dirs, filepath.Join(t.TempDir(), "state"))
	}
	for p := 0; p < nplanes; p++ {
		var sw *gnmisim.Switch
		if err := fab.Do(mgmt, func() error {
			var err error
			sw, err = gnmisim.Start(gnmisim.Config{Name: fmt.Sprintf("p%d-sw", p), Source: gnmisim.NetnsBridge(fab.SwitchNS(p), devs),
				Tick: 200 * time.Millisecond, Logger: testenv.Logger(t)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sw.Close() })
		topo.Planes = append(topo.Planes, planes.Plane{Name: fmt.Sprintf("p%d", p)})
		topo.Switches = append(topo.Switches, planes.Switch{Name: sw.Name(), Plane: fmt.Sprintf("p%d", p),
			GNMI: planes.GNMITarget{Address: sw.Addr(), Insecure: true}})
	}
	for h, name := range e.names {
		ep := planes.Endpoint{Name: name}
		for p := 0; p < nplanes; p++ {
			ep.Ports = append(ep.Ports, planes.Port{Plane: fmt.Sprintf("p%d", p), Switch: fmt.Sprintf("p%d-sw", p),
				Interface: fab.SwitchPort(h, p), Address: fab.Addr(h, p), SpeedBps: 100e6})
		}
		topo.Endpoints = append(topo.Endpoints, ep)
	}
	e.topo = topo
	dir := dataDir(t)
	topoFile := filepath.Join(dir, "topology.json")
	data, _ := json.Marshal(topo)
	if err := os.WriteFile(topoFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.fd, err = fabricdproc.Start(ctx, fabricdproc.Options{Bin: fabricdBin(t), DataDir: dir, Listen: e.addr + ":8443",
		Netns: fab.HostNS(mgmt), Dial: dialIn(fab, mgmt),
		Args: []string{"--tls", "--etcd-listen", e.addr + ":2379", "--topology", topoFile, "--endpoint-cert-ttl", "45s",
			"--publish-debounce", "20ms", "--log-level", "info"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.fd.Stop)
	return e
}

// api calls fabricd with the admin token and decodes a JSON answer.
func (e *enrolledFabric) api(ctx context.Context, method, path, body string, out any) int {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	resp, err := e.fd.Do(ctx, method, path, r)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	if resp.StatusCode >= 300 && out != nil {
		e.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	return resp.StatusCode
}

type mintedToken struct {
	Token         string `json:"token"`
	CAFingerprint string `json:"ca_fingerprint"`
}

func (e *enrolledFabric) mint(ctx context.Context, endpoint string, ttl int) mintedToken {
	e.t.Helper()
	var m mintedToken
	if code := e.api(ctx, "POST", "/api/v1/enrollment-tokens", fmt.Sprintf(`{"endpoint":%q,"ttl_seconds":%d}`, endpoint, ttl), &m); code != 201 {
		e.t.Fatalf("mint token for %s: %d", endpoint, code)
	}
	return m
}

func (e *enrolledFabric) enroll(ctx context.Context, h int, name, dir string, m mintedToken) ([]byte, error) {
	return e.fab.Exec(ctx, h, endpointBin(e.t), "enroll", "--server", "https://"+e.addr+":8443", "--token", m.Token,
		"--name", name, "--state-dir", dir, "--ca-fingerprint", m.CAFingerprint)
}

func (e *enrolledFabric) bind(h int) string {
	var a []string
	for p := 0; p < e.fab.Planes(); p++ {
		a = append(a, e.fab.Addr(h, p).String())
	}
	return strings.Join(a, ",")
}

// start runs the endpoint binary in host h's namespace; its output is
// logged and kept.
func (e *enrolledFabric) start(ctx context.Context, h int, args ...string) (*exec.Cmd, *testutil.SyncBuffer) {
	e.t.Helper()
	out := &testutil.SyncBuffer{}
	cmd := e.fab.Command(ctx, h, endpointBin(e.t), args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		}
		e.t.Logf("%s on host %d:\n%s", args[0], h, out.String())
	})
	return cmd, out
}

// convergence is GET /api/v1/convergence.
func (e *enrolledFabric) convergence(ctx context.Context) fleet.View {
	var v fleet.View
	e.api(ctx, "GET", "/api/v1/convergence", "", &v)
	return v
}

// appliedBy reports whether each of names applied the fleet's target
// generation, at least gen.
func appliedBy(v fleet.View, gen uint64, names ...string) bool {
	if v.TargetGeneration < gen {
		return false
	}
	for _, l := range v.Laggards {
		for _, n := range names {
			if l.Endpoint == n {
				return false
			}
		}
	}
	return true
}

// etcdAs is an etcd client inside host h's namespace with the
// credentials stored in dir.
func (e *enrolledFabric) etcdAs(h int, dir string) *clientv3.Client {
	e.t.Helper()
	id, err := credentials.Load(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.etcdClient(h, id.EtcdEndpoints(), id.TLSConfig())
}

func (e *enrolledFabric) etcdClient(h int, endpoints []string, tlsCfg *tls.Config) *clientv3.Client {
	e.t.Helper()
	dial := dialIn(e.fab, h)
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})}}
	cfg.TLS = tlsCfg
	cli, err := clientv3.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cli.Close() })
	return cli
}

// certSerial is the serial of the certificate stored in dir.
func certSerial(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, credentials.FileCert))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCert(data)
	if err != nil {
		t.Fatal(err)
	}
	return pki.Serial(c)
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestEnrolledEndpointsOnANamespaceFabric is the deployment story on
// real network namespaces: fabricd on a veth address with TLS, three
// hosts enrolled with bootstrap tokens, a drain reaching them over etcd
// with TLS while traffic runs, each confined to its own keys, tokens
// refused on reuse and expiry, one host revoked while the others carry
// on, and an agent restarting on its last known good with fabricd gone.
func TestEnrolledEndpointsOnANamespaceFabric(t *testing.T) {
	ctx, cancel := context.WithTimeout(testenv.Context(t), 6*time.Minute)
	defer cancel()
	e := startEnrolledFabric(t, ctx, 3)
	a, b, c := 0, 1, 2

	// Enrollment.
	first := e.mint(ctx, e.names[a], 600)
	for h, name := range e.names {
		m := first
		if h != a {
			m = e.mint(ctx, name, 600)
		}
		out, err := e.enroll(ctx, h, name, e.dirs[h], m)
		if err != nil {
			t.Fatalf("enroll %s: %v\n%s", name, err, out)
		}
		t.Logf("%s", bytes.TrimSpace(out))
		st, err := os.Stat(e.dirs[h])
		if err != nil || st.Mode().Perm() != 0o700 {
			t.Fatalf("state dir %v mode %v, want 0700", err, st.Mode())
		}
		entries, _ := os.ReadDir(e.dirs[h])
		for _, f := range entries {
			if fi, _ := f.Info(); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s/%s mode %v, want 0600", e.dirs[h], f.Name(), fi.Mode().Perm())
			}
		}
	}
	serialB := certSerial(t, e.dirs[b])
	// A used token, an expired one and one for another endpoint are refused.
	expired := e.mint(ctx, e.names[b], 1)
	time.Sleep(1500 * time.Millisecond) // let the token expire
	other := e.mint(ctx, e.names[c], 600)
	for name, m := range map[string]mintedToken{"reused": first, "expired": expired, "other endpoint's": other} {
		endpoint := e.names[a]
		if name == "expired" {
			endpoint = e.names[b]
		}
		out, err := e.enroll(ctx, a, endpoint, filepath.Join(t.TempDir(), "x"), m)
		if err == nil || !strings.Contains(string(out), "401 invalid_bootstrap_token") {
			t.Errorf("%s token: %v %s, want refused with 401", name, err, out)
		}
	}

	// Agents with traffic: host-a serves, host-b sends to it, host-c runs
	// the agent alone; none is given an etcd flag.
	port := fmt.Sprint(testutil.FabricPort(t, 3, 4))
	_, serverOut := e.start(ctx, a, "bench", "server", "--mode", "multipath", "--bind", e.bind(a), "--port", port, "--agent-state-dir", e.dirs[a])
	client, clientOut := e.start(ctx, b, "bench", "client", "--mode", "multipath", "--bind", e.bind(b), "--peer", e.bind(a), "--port", port,
		"-D", "30", "-s", "65536", "--json", "--agent-state-dir", e.dirs[b])
	runC, _ := e.start(ctx, c, "run", "--bind", e.bind(c), "--port", port, "--state-dir", e.dirs[c])
	var v fleet.View
	testutil.WaitFor(t, 60*time.Second, "all three agents applied the fabric's generation", func() bool {
		v = e.convergence(ctx)
		return v.TargetGeneration > 0 && v.Applied == 3
	})

	// A drain reaches all three over etcd with TLS.
	var created struct {
		Drain struct {
			ID int64 `json:"id"`
		} `json:"drain"`
	}
	if code := e.api(ctx, "POST", "/api/v1/drains", `{"subject_kind":"plane","subject":"p1","reason":"enrollment test"}`, &created); code != 201 {
		t.Fatalf("drain: %d", code)
	}
	testutil.WaitFor(t, 15*time.Second, "the drain applied by all three", func() bool {
		w := e.convergence(ctx)
		return w.TargetGeneration > v.TargetGeneration && w.Applied == 3
	})
	var pol struct {
		PathSet contract.PathSet `json:"path_set"`
	}
	e.api(ctx, "GET", "/api/v1/endpoints/host-b/policy", "", &pol)
	for _, p := range pol.PathSet.Planes {
		if p.Plane == "p1" {
			t.Fatalf("host-b's path set %+v still has the drained p1", pol.PathSet)
		}
	}

	// host-a's credentials reach its own keys only.
	etcdA := e.etcdAs(a, e.dirs[a])
	if _, err := etcdA.Get(shortCtx(t), contract.KeyEndpoint(e.names[a])); err != nil {
		t.Fatalf("host-a reads its own document: %v", err)
	}
	for what, f := range map[string]func() error{
		"read host-b's document": func() error { _, err := etcdA.Get(shortCtx(t), contract.KeyEndpoint(e.names[b])); return err },
		"write host-b's status":  func() error { _, err := etcdA.Put(shortCtx(t), contract.KeyStatus(e.names[b]), "{}"); return err },
		"write the generation": func() error {
			_, err := etcdA.Put(shortCtx(t), contract.KeyGeneration, `{"generation":1000000000000000}`)
			return err
		},
		"list /multiplane/": func() error { _, err := etcdA.Get(shortCtx(t), "/multiplane/", clientv3.WithPrefix()); return err },
	} {
		if err := f(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("host-a may %s: %v, want permission denied", what, err)
		}
	}
	id, _ := credentials.Load(e.dirs[a])
	noCert := id.TLSConfig()
	noCert.GetClientCertificate = nil
	anon := e.etcdClient(a, id.EtcdEndpoints(), noCert)
	if _, err := anon.Get(shortCtx(t), contract.KeyGeneration); err == nil {
		t.Error("an etcd client without a certificate was served")
	}
	plain := e.etcdClient(a, []string{"http://" + e.addr + ":2379"}, nil)
	if _, err := plain.Get(shortCtx(t), contract.KeyGeneration); err == nil {
		t.Error("an etcd client without TLS was served")
	}

	// Revoking host-a cuts it off; host-b and host-c carry on.
	var rev struct {
		Revoked int `json:"revoked_certificates"`
	}
	if code := e.api(ctx, "DELETE", "/api/v1/endpoints/host-a/credentials", "", &rev); code != 200 || rev.Revoked < 1 {
		t.Fatalf("revoke host-a: %d %+v", code, rev)
	}
	revokedAt := time.Now()
	testutil.WaitFor(t, 5*time.Second, "host-a refused by etcd", func() bool {
		_, err := etcdA.Get(shortCtx(t), contract.KeyEndpoint(e.names[a]))
		return err != nil
	})
	t.Logf("host-a cut off %v after the revocation", time.Since(revokedAt).Round(time.Millisecond))
	before := e.convergence(ctx).TargetGeneration
	if code := e.api(ctx, "DELETE", fmt.Sprintf("/api/v1/drains/%d", created.Drain.ID), "", nil); code >= 300 {
		t.Fatalf("end drain: %d", code)
	}
	testutil.WaitFor(t, 15*time.Second, "host-b and host-c applied the undrain", func() bool {
		return appliedBy(e.convergence(ctx), before+1, e.names[b], e.names[c])
	})
	if w := e.convergence(ctx); appliedBy(w, before+1, e.names[a]) {
		t.Errorf("revoked host-a applied generation %d: %+v", w.TargetGeneration, w)
	}

	// host-a enrolls again with a new token into its state directory: its
	// running agent takes the new certificate and catches up; the old
	// certificate stays revoked although its etcd user is back.
	old := e.etcdAs(a, e.dirs[a]) // the revoked credentials, on a new connection
	if out, err := e.enroll(ctx, a, e.names[a], e.dirs[a], e.mint(ctx, e.names[a], 600)); err != nil {
		t.Fatalf("enroll host-a again: %v\n%s", err, out)
	}
	reenrolled := time.Now()
	if _, err := old.Get(shortCtx(t), contract.KeyEndpoint(e.names[a])); err == nil {
		t.Error("host-a's revoked certificate reads etcd after host-a enrolled again")
	}
	testutil.WaitFor(t, 30*time.Second, "host-a's running agent back on its new certificate", func() bool {
		return appliedBy(e.convergence(ctx), before+1, e.names[a])
	})
	t.Logf("host-a's running agent applied the current generation %v after enrolling again", time.Since(reenrolled).Round(time.Millisecond))

	// Traffic ran between the hosts throughout.
	if err := client.Wait(); err != nil {
		t.Fatalf("bench client: %v\n%s", err, clientOut.String())
	}
	var res struct {
		Goodput float64 `json:"goodput_bps"`
	}
	lines := strings.Split(strings.TrimSpace(clientOut.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res.Goodput < 100e6 {
		t.Fatalf("bench client goodput %v (%v), want over 100 Mbit/s\n%s", res.Goodput, err, serverOut.String())
	}
	t.Logf("host-b to host-a: %.0f Mbit/s over 4 x 100 Mbit/s", res.Goodput/1e6)

	// host-c leaves the topology: its credentials go with it.
	etcdC := e.etcdAs(c, e.dirs[c])
	if _, err := etcdC.Get(shortCtx(t), contract.KeyEndpoint(e.names[c])); err != nil {
		t.Fatalf("host-c reads its own document: %v", err)
	}
	var statusC contract.StatusDoc
	if code := e.api(ctx, "GET", "/api/v1/endpoints/host-c/status", "", &statusC); code != 200 || statusC.AppliedGeneration == 0 {
		t.Fatalf("host-c's status: %d %+v", code, statusC)
	}
	smaller := *e.topo
	smaller.Endpoints = smaller.Endpoints[:c]
	body, _ := json.Marshal(&smaller)
	if code := e.api(ctx, "PUT", "/api/v1/topology", string(body), new(map[string]any)); code != 200 {
		t.Fatalf("PUT topology without host-c: %d", code)
	}
	removedAt := time.Now()
	testutil.WaitFor(t, 10*time.Second, "host-c refused by etcd once out of the topology", func() bool {
		_, err := etcdC.Get(shortCtx(t), contract.KeyEndpoint(e.names[c]))
		return err != nil
	})
	t.Logf("host-c cut off %v after leaving the topology", time.Since(removedAt).Round(time.Millisecond))

	// The refusals are in the audit log (summarised: they were anonymous),
	// the enrollments and host-b's renewal (at two thirds of 45 s) too.
	testutil.WaitFor(t, 30*time.Second, "host-b renewed its certificate", func() bool { return certSerial(t, e.dirs[b]) != serialB })
	var audit struct {
		Items []struct {
			Actor, Action string
			Status        int
		} `json:"items"`
	}
	var counts [3]int
	defer func() {
		t.Logf("audit: %d refused (summaries), %d enrollments, %d renewals by host-b", counts[0], counts[1], counts[2])
	}()
	testutil.WaitFor(t, 15*time.Second, "the refused enrollments in the audit log", func() bool {
		e.api(ctx, "GET", "/api/v1/audit?limit=1000", "", &audit)
		var refused, enrolled, renewed int
		for _, it := range audit.Items {
			switch {
			case it.Action == "endpoint.enroll" && it.Status == 401 && it.Actor == "anonymous":
				refused++
			case it.Action == "endpoint.enroll" && it.Status == 200:
				enrolled++
			case it.Action == "endpoint.renew" && it.Status == 200 && it.Actor == "endpoint:"+e.names[b]:
				renewed++
			}
		}
		counts = [3]int{refused, enrolled, renewed}
		return refused > 0 && enrolled == 4 && renewed > 0 // host-a enrolled twice
	})

	// host-c restarts with fabricd (and its etcd) gone: it applies its last
	// known good, with its credentials intact (revoked, as it left the
	// topology: the last known good does not need them).
	runC.Process.Signal(os.Interrupt)
	runC.Wait()
	last := statusC.AppliedGeneration
	e.fd.Stop()
	_, again := e.start(ctx, c, "run", "--bind", e.bind(c), "--port", port, "--state-dir", e.dirs[c], "--log-format", "json")
	want := fmt.Sprintf(`"generation":%d,"source":"last-known-good"`, last)
	testutil.WaitFor(t, 10*time.Second, "host-c applied its last known good", func() bool {
		return strings.Contains(again.String(), want)
	})
	if _, err := credentials.Load(e.dirs[c]); err != nil {
		t.Fatalf("host-c's credentials after the restart: %v", err)
	}
}
