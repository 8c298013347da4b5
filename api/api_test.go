package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/api"
	"github.com/multiplane/multiplane/audit"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/events"
	"github.com/multiplane/multiplane/intents"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy"
	"github.com/multiplane/multiplane/policy/fleet"
	"github.com/multiplane/multiplane/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

type fixture struct {
	t      *testing.T
	srv    *api.Server
	pool   *pgxpool.Pool
	tokens *auth.Tokens
	admin  string
	engine *planes.Engine
	kv     *clientv3.Client
}

func newFixture(t *testing.T, options ...func(*api.Deps)) *fixture {
	t.Helper()
	db := storetest.New(t)
	f := &fixture{t: t, pool: db.Pool(), tokens: auth.NewTokens(db.Pool())}
	bus := planes.NewBus()
	f.engine = planes.NewEngine(planes.DefaultHealthConfig(), nil, bus, nil)
	evStore := events.New(db.Pool())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	sub := bus.Subscribe(1000)
	go func() { events.NewWriter(evStore, testenv.Logger(t)).Run(ctx, sub); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	inv := inventory.New(db.Pool())
	intentStore := intents.New(db.Pool())
	f.kv = kvtest.New(t).Client
	deps := api.Deps{
		Inventory: inv, Tokens: f.tokens, Audit: audit.New(db.Pool()),
		Health: f.engine, Events: evStore, Bus: bus, Intents: intentStore, Fleet: fleet.New(f.kv),
		PolicyConfig: policy.DefaultConfig(),
		PolicyInput: func(ctx context.Context) (policy.Input, error) {
			snap, err := inv.Current(ctx)
			if err != nil {
				return policy.Input{}, err
			}
			in, err := intentStore.Load(ctx)
			return policy.Input{Topology: snap.Topology, Health: f.engine, Intents: in}, err
		},
		Logger: testenv.Logger(t), MaxBodyBytes: 1 << 20,
		Ready:      func(ctx context.Context) error { return db.Ready(ctx) },
		OnTopology: func(s *inventory.Snapshot) { f.engine.SetTopology(s.Topology, s.Links) },
	}
	for _, o := range options {
		o(&deps)
	}
	f.srv = api.New(deps)
	f.admin = f.mint("root", auth.RoleAdmin)
	return f
}

func (f *fixture) mint(name string, role auth.Role) string {
	f.t.Helper()
	secret, _, err := f.tokens.Mint(context.Background(), name, role, "test", 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return secret
}

type response struct {
	Code   int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response %d is not JSON: %v: %s", r.Code, err, r.Body)
	}
}

// apiError decodes the error envelope.
func (r response) apiError(t *testing.T) (code, message, field string) {
	t.Helper()
	var env struct {
		Error struct{ Code, Message, Field string } `json:"error"`
	}
	r.json(t, &env)
	if env.Error.Code == "" || env.Error.Message == "" {
		t.Fatalf("error envelope lacks code or message: %s", r.Body)
	}
	return env.Error.Code, env.Error.Message, env.Error.Field
}

func (f *fixture) do(method, path, token string, body []byte, headers ...string) response {
	f.t.Helper()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, req)
	return response{Code: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
}

func exampleTopology(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("../examples/topology.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (f *fixture) loadExample() {
	f.t.Helper()
	r := f.do("PUT", "/api/v1/topology", f.admin, exampleTopology(f.t), "Content-Type", "application/yaml")
	if r.Code != http.StatusOK {
		f.t.Fatalf("PUT topology = %d: %s", r.Code, r.Body)
	}
}

func TestWhoAmI(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		role auth.Role
		can  string
	}{{auth.RoleViewer, "view"}, {auth.RoleOperator, "view,operate"}, {auth.RoleAdmin, "view,operate,administer"}} {
		var w struct {
			Name, Role string
			Can        []string
		}
		r := f.do("GET", "/api/v1/whoami", f.mint("who-"+string(tc.role), tc.role), nil)
		r.json(t, &w)
		if r.Code != 200 || w.Name != "who-"+string(tc.role) || w.Role != string(tc.role) || strings.Join(w.Can, ",") != tc.can {
			t.Errorf("whoami of a %s: %d %+v", tc.role, r.Code, w)
		}
	}
	if r := f.do("GET", "/api/v1/whoami", "", nil); r.Code != 401 {
		t.Errorf("whoami without a token: %d", r.Code)
	}
}

func TestOpenRoutesAndAuth(t *testing.T) {
	f := newFixture(t)
	viewer := f.mint("viewer", auth.RoleViewer)
	tests := []struct {
		name, method, path, token string
		want                      int
		code                      string
	}{
		{"healthz is open", "GET", "/healthz", "", 200, ""},
		{"readyz is open", "GET", "/readyz", "", 200, ""},
		{"metrics are open", "GET", "/metrics", "", 200, ""},
		{"openapi is open", "GET", "/api/v1/openapi.yaml", "", 200, ""},
		{"dashboard is open", "GET", "/", "", 200, ""},
		{"unknown dashboard file", "GET", "/nope.js", "", 404, ""},
		{"no token", "GET", "/api/v1/planes", "", 401, "unauthenticated"},
		{"unknown token", "GET", "/api/v1/planes", "mpt_nope", 401, "unauthenticated"},
		{"viewer reads", "GET", "/api/v1/planes", viewer, 200, ""},
		{"viewer cannot put topology", "PUT", "/api/v1/topology", viewer, 403, "forbidden"},
		{"viewer cannot list tokens", "GET", "/api/v1/tokens", viewer, 403, "forbidden"},
		{"unknown route", "GET", "/api/v1/nope", f.admin, 404, "not_found"},
		{"wrong method", "DELETE", "/api/v1/planes", f.admin, 405, "method_not_allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(tc.method, tc.path, tc.token, []byte("planes: [{name: p0}]"))
			if r.Code != tc.want {
				t.Fatalf("%s %s = %d, want %d: %s", tc.method, tc.path, r.Code, tc.want, r.Body)
			}
			if tc.code != "" {
				if code, _, _ := r.apiError(t); code != tc.code {
					t.Fatalf("error code %q, want %q", code, tc.code)
				}
			}
		})
	}
	if r := f.do("GET", "/api/v1/planes", "", nil); r.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
}

func TestTopologyRoundTrip(t *testing.T) {
	f := newFixture(t)
	if r := f.do("GET", "/api/v1/topology", f.admin, nil); r.Code != 404 {
		t.Fatalf("GET topology before any = %d, want 404", r.Code)
	}
	r := f.do("PUT", "/api/v1/topology", f.admin, exampleTopology(t), "Content-Type", "application/yaml")
	var put struct {
		Revision                           int64
		Changed                            bool
		Planes, Switches, Endpoints, Links int
	}
	r.json(t, &put)
	if r.Code != 200 || !put.Changed || put.Revision < 1 || put.Planes != 4 || put.Endpoints != 8 || put.Links != 32 {
		t.Fatalf("PUT = %d %+v", r.Code, put)
	}

	var planesResp struct {
		Items []struct {
			Name, State                string
			Switches, Links, Endpoints int
		}
	}
	r = f.do("GET", "/api/v1/planes", f.admin, nil)
	r.json(t, &planesResp)
	if len(planesResp.Items) != 4 {
		t.Fatalf("planes = %s", r.Body)
	}
	for i, p := range planesResp.Items {
		if p.Name != []string{"p0", "p1", "p2", "p3"}[i] || p.State != "healthy" || p.Switches != 1 || p.Links != 8 || p.Endpoints != 8 {
			t.Errorf("plane %d = %+v", i, p)
		}
	}

	// The same document again is not a new revision.
	r = f.do("PUT", "/api/v1/topology", f.admin, exampleTopology(t))
	var again struct {
		Revision int64
		Changed  bool
	}
	r.json(t, &again)
	if again.Changed || again.Revision != put.Revision {
		t.Fatalf("identical PUT = %+v, want unchanged revision %d", again, put.Revision)
	}

	// GET returns a document that PUT accepts as identical, in JSON and YAML.
	for _, accept := range []string{"application/json", "application/yaml"} {
		r = f.do("GET", "/api/v1/topology", f.admin, nil, "Accept", accept)
		if r.Code != 200 || r.Header.Get("X-Topology-Revision") == "" {
			t.Fatalf("GET topology (%s) = %d", accept, r.Code)
		}
		r = f.do("PUT", "/api/v1/topology", f.admin, r.Body, "Content-Type", accept)
		r.json(t, &again)
		if r.Code != 200 || again.Changed {
			t.Fatalf("PUT of GET (%s) = %d %s", accept, r.Code, r.Body)
		}
	}

	// A smaller topology replaces the old one.
	small := `{"planes":[{"name":"p0"}],"switches":[{"name":"s","plane":"p0","gnmi":{"address":"h:1","insecure":true}}],
	  "endpoints":[{"name":"host-a","ports":[{"plane":"p0","address":"10.9.0.1","switch":"s","interface":"E0"}]}]}`
	r = f.do("PUT", "/api/v1/topology", f.admin, []byte(small), "Content-Type", "application/json")
	if r.Code != 200 {
		t.Fatalf("PUT small = %d %s", r.Code, r.Body)
	}
	r = f.do("GET", "/api/v1/links", f.admin, nil)
	var links struct {
		Items []struct{ Name, State string }
	}
	r.json(t, &links)
	if len(links.Items) != 1 || links.Items[0].Name != "s:E0" || links.Items[0].State != "up" {
		t.Fatalf("links after replace = %s", r.Body)
	}
}

// counts reads the row counts of every inventory table.
func counts(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tbl := range []string{"planes", "switches", "switch_interfaces", "endpoints", "endpoint_ports", "topology_revisions", "api_tokens"} {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[tbl] = n
	}
	return out
}

func TestBadInputChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	good := string(exampleTopology(t))
	huge := append([]byte("planes:\n"), bytes.Repeat([]byte("  - name: p\n"), 1<<20)...) // ~12 MB
	tests := []struct {
		name, path, contentType string
		body                    []byte
		status                  int
		code, field, message    string
	}{
		{"malformed yaml", "/api/v1/topology", "application/yaml", []byte("planes: [\n  - name: p0\n"), 400, "invalid_topology", "(document)", "malformed"},
		{"malformed json", "/api/v1/topology", "application/json", []byte(`{"planes": [`), 400, "invalid_topology", "(document)", "malformed"},
		{"unknown field", "/api/v1/topology", "application/yaml", []byte(strings.Replace(good, "planes:", "planez: []\nplanes:", 1)), 400, "invalid_topology", "planez", "unknown field"},
		{"unknown plane", "/api/v1/topology", "application/yaml", []byte(strings.Replace(good, "{plane: p3, address: 10.77.3.8", "{plane: p7, address: 10.77.3.8", 1)), 400, "invalid_topology", "endpoints[7].ports[3].plane", `unknown plane "p7"`},
		{"duplicate address", "/api/v1/topology", "application/yaml", []byte(strings.Replace(good, "address: 10.77.0.2", "address: 10.77.0.1", 1)), 400, "invalid_topology", "endpoints[1].ports[0].address", "duplicate address"},
		{"oversized body", "/api/v1/topology", "application/yaml", huge, 413, "body_too_large", "", "larger than"},
		{"wrong content type", "/api/v1/topology", "image/png", []byte(good), 415, "unsupported_media_type", "", "application/yaml"},
		{"token unknown field", "/api/v1/tokens", "application/json", []byte(`{"name":"x","role":"viewer","admin":true}`), 400, "invalid_json", "admin", "unknown field"},
		{"token malformed", "/api/v1/tokens", "application/json", []byte(`{"name":`), 400, "invalid_json", "", "malformed"},
		{"token bad role", "/api/v1/tokens", "application/json", []byte(`{"name":"x","role":"root"}`), 400, "invalid_field", "role", "unknown role"},
		{"token wrong type", "/api/v1/tokens", "application/json", []byte(`{"name":7,"role":"viewer"}`), 400, "invalid_json", "name", "must be string"},
		{"token oversized", "/api/v1/tokens", "application/json", huge, 413, "body_too_large", "", "larger than"},
		// Errors quote the request only in part.
		{"token long unknown field", "/api/v1/tokens", "application/json", []byte(`{"name":"x","role":"viewer","` + strings.Repeat("k", 100<<10) + `":1}`), 400, "invalid_json", strings.Repeat("k", 253) + "…", "unknown field"},
		{"topology long anchor", "/api/v1/topology", "application/yaml", []byte("planes: *" + strings.Repeat("z", 100<<10) + "\n"), 400, "invalid_topology", "(document)", "unknown anchor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := counts(t, f.pool)
			method := "PUT"
			if tc.path == "/api/v1/tokens" {
				method = "POST"
			}
			r := f.do(method, tc.path, f.admin, tc.body, "Content-Type", tc.contentType)
			if r.Code != tc.status {
				t.Fatalf("status %d, want %d: %.300s", r.Code, tc.status, r.Body)
			}
			code, msg, field := r.apiError(t)
			if code != tc.code || field != tc.field || !strings.Contains(msg, tc.message) {
				t.Fatalf("error = (%.300q, %.300q, %.300q), want (%q, %.300q, ~%q)", code, field, msg, tc.code, tc.field, tc.message)
			}
			if len(r.Body) > 8<<10 {
				t.Errorf("a %d-byte request got a %d-byte error", len(tc.body), len(r.Body))
			}
			after := counts(t, f.pool)
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s rows changed from %d to %d", k, v, after[k])
				}
			}
		})
	}
}

func TestListsPaginateAndFilter(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	var names []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		r := f.do("GET", "/api/v1/endpoints?limit=3&cursor="+cursor, f.admin, nil)
		var page struct {
			Items []struct {
				Name  string
				Ports []any
			}
			NextCursor string `json:"next_cursor"`
		}
		r.json(t, &page)
		for _, e := range page.Items {
			names = append(names, e.Name)
			if len(e.Ports) != 4 {
				t.Errorf("endpoint %s has %d ports", e.Name, len(e.Ports))
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if strings.Join(names, ",") != "host-a,host-b,host-c,host-d,host-e,host-f,host-g,host-h" {
		t.Fatalf("paged endpoints = %v", names)
	}
	tests := []struct {
		path  string
		count int
	}{
		{"/api/v1/links?plane=p1", 8},
		{"/api/v1/links?switch=p2-sw1&endpoint=host-c", 1},
		{"/api/v1/links?state=up&limit=1000", 32},
		{"/api/v1/links?state=down", 0},
		{"/api/v1/planes?state=healthy", 4},
		{"/api/v1/planes?state=draining", 0},
		{"/api/v1/switches?plane=p3", 1},
	}
	for _, tc := range tests {
		var resp struct{ Items []json.RawMessage }
		r := f.do("GET", tc.path, f.admin, nil)
		r.json(t, &resp)
		if r.Code != 200 || len(resp.Items) != tc.count {
			t.Errorf("%s = %d with %d items, want %d", tc.path, r.Code, len(resp.Items), tc.count)
		}
	}
	for _, path := range []string{"/api/v1/links?state=sideways", "/api/v1/planes?limit=0", "/api/v1/planes?cursor=!!"} {
		if r := f.do("GET", path, f.admin, nil); r.Code != 400 {
			t.Errorf("%s = %d, want 400", path, r.Code)
		}
	}
	for path, want := range map[string]int{"/api/v1/planes/p2": 200, "/api/v1/planes/p9": 404,
		"/api/v1/switches/p0-sw1": 200, "/api/v1/switches/x": 404, "/api/v1/endpoints/host-h": 200, "/api/v1/endpoints/x": 404} {
		if r := f.do("GET", path, f.admin, nil); r.Code != want {
			t.Errorf("%s = %d, want %d", path, r.Code, want)
		}
	}
}

func TestTokensAndAudit(t *testing.T) {
	f := newFixture(t)
	r := f.do("POST", "/api/v1/tokens", f.admin, []byte(`{"name":"ops","role":"operator"}`))
	var minted struct {
		ID     int64
		Token  string
		Role   string
		Prefix string
	}
	r.json(t, &minted)
	if r.Code != 201 || !strings.HasPrefix(minted.Token, "mpt_") || minted.Role != "operator" {
		t.Fatalf("mint = %d %s", r.Code, r.Body)
	}
	if r := f.do("GET", "/api/v1/planes", minted.Token, nil); r.Code != 200 {
		t.Fatalf("new token cannot read: %d", r.Code)
	}
	if r := f.do("POST", "/api/v1/tokens", f.admin, []byte(`{"name":"ops","role":"viewer"}`)); r.Code != 409 {
		t.Fatalf("duplicate name = %d, want 409", r.Code)
	}
	r = f.do("GET", "/api/v1/tokens", f.admin, nil)
	if r.Code != 200 || bytes.Contains(r.Body, []byte(minted.Token)) || !bytes.Contains(r.Body, []byte(minted.Prefix)) {
		t.Fatalf("token list leaks secrets or lacks prefix: %s", r.Body)
	}
	if r := f.do("DELETE", "/api/v1/tokens/"+jsonNum(minted.ID), f.admin, nil); r.Code != 204 {
		t.Fatalf("revoke = %d %s", r.Code, r.Body)
	}
	if r := f.do("GET", "/api/v1/planes", minted.Token, nil); r.Code != 401 {
		t.Fatalf("revoked token = %d, want 401", r.Code)
	}
	for range 3 {
		f.do("PUT", "/api/v1/topology", "", []byte("planes: []"))
	}
	f.srv.FlushAudit()

	r = f.do("GET", "/api/v1/audit?limit=10", f.admin, nil)
	var entries struct {
		Items []struct {
			Actor, Role, Action, Result, Target string
			Status                              int
			Detail                              struct{ Requests int }
		}
	}
	r.json(t, &entries)
	if n := entries.Items[0].Detail.Requests; n != 3 {
		t.Errorf("summary of refused anonymous requests counts %d, want 3: %s", n, r.Body)
	}
	want := []string{
		"anonymous  topology.replace 401 unauthenticated",
		"root admin token.revoke 204 ok",
		"root admin token.create 409 conflict",
		"root admin token.create 201 ok",
	}
	if len(entries.Items) != len(want) {
		t.Fatalf("audit = %s", r.Body)
	}
	for i, e := range entries.Items {
		if got := strings.Join([]string{e.Actor, e.Role, e.Action, jsonNum(int64(e.Status)), e.Result}, " "); got != want[i] {
			t.Errorf("audit[%d] = %q, want %q", i, got, want[i])
		}
	}
}

func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }
