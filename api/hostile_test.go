package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/multiplane/multiplane/api"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/inventory"
)

// hostileText are values no string field or parameter may carry.
var hostileText = map[string]string{
	"nul":          "a\x00b",
	"invalid utf8": "a\xff\xfeb",
	"control":      "a\x1bb",
	"over-long":    strings.Repeat("a", 5000),
}

// readState is what every GET shows; hostile requests must not change it.
func (f *fixture) readState(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, path := range []string{"/api/v1/topology", "/api/v1/planes", "/api/v1/switches", "/api/v1/endpoints", "/api/v1/links",
		"/api/v1/drains?all=true", "/api/v1/rate-classes", "/api/v1/events", "/api/v1/tokens", "/api/v1/endpoints/host-a/policy"} {
		r := f.do("GET", path, f.admin, nil)
		if r.Code != 200 {
			t.Fatalf("GET %s = %d %s", path, r.Code, r.Body)
		}
		// last_used_at moves with use, not with hostile input.
		out[path] = regexp.MustCompile(`"last_used_at":"[^"]*"`).ReplaceAllString(string(r.Body), "")
	}
	return out
}

type auditRow struct {
	id     int64
	action string
	status int
}

func (f *fixture) lastAudit(t *testing.T) auditRow {
	t.Helper()
	var a auditRow
	err := f.pool.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM audit_log`).Scan(&a.id)
	if err == nil && a.id > 0 {
		err = f.pool.QueryRow(context.Background(), `SELECT action, status FROM audit_log WHERE id = $1`, a.id).Scan(&a.action, &a.status)
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type hostileCase struct {
	name, method, path, route string
	body                      []byte
	field                     string // the field the error must name; "*" any non-empty
	anonymous                 bool   // a route without API token (enrollment): refused requests cost no audit row
}

// hostileCases walks every route (but HEAD twins) with hostile values in
// each path parameter and in each query parameter any route takes, and
// every body field with hostile text or out-of-range numbers.
func hostileCases(f *fixture) []hostileCase {
	var out []hostileCase
	param := regexp.MustCompile(`:([a-z_]+)`)
	queryNames := []string{"limit", "cursor", "state", "plane", "switch", "endpoint", "subject", "subject_kind", "since", "all", "dry_run", "force", "bogus"}
	bodies := map[string]string{
		"PUT /api/v1/endpoints/:name/rate-class": `{"class":"gold"}`,
		"POST /api/v1/drains":                    `{"subject_kind":"plane","subject":"p1","reason":"r"}`,
		"PUT /api/v1/rate-classes/:name":         `{"egress_bps":1}`,
		"POST /api/v1/tokens":                    `{"name":"n","role":"viewer"}`,
		"POST /api/v1/enrollment-tokens":         `{"endpoint":"host-a"}`,
		"PUT /api/v1/topology":                   string(exampleTopology(f.t)),
	}
	for _, r := range f.srv.Routes() {
		if r.Method == "HEAD" || !strings.HasPrefix(r.Path, "/api/v1/") || r.Path == "/api/v1/openapi.yaml" {
			continue
		}
		key := r.Method + " " + r.Path
		body := []byte(bodies[key])
		valid := param.ReplaceAllString(r.Path, "x")
		for _, m := range param.FindAllStringSubmatch(r.Path, -1) {
			for vname, v := range hostileText {
				path := strings.Replace(r.Path, m[0], url.PathEscape(v), 1)
				out = append(out, hostileCase{name: key + " " + m[1] + " " + vname, method: r.Method, path: param.ReplaceAllString(path, "x"),
					route: r.Path, body: body, field: m[1]})
			}
		}
		for _, q := range queryNames {
			for vname, v := range hostileText {
				out = append(out, hostileCase{name: key + " ?" + q + " " + vname, method: r.Method,
					path: valid + "?" + q + "=" + url.QueryEscape(v), route: r.Path, body: body, field: q,
					anonymous: r.Path == contract.PathEnroll || r.Path == contract.PathRenew})
			}
		}
	}
	jsonText := func(s string) string { // raw bytes kept: invalid UTF-8 stays invalid
		return `"` + strings.NewReplacer("\x00", `\u0000`, "\x1b", `\u001b`).Replace(s) + `"`
	}
	for vname, v := range hostileText {
		s := jsonText(v)
		for _, b := range []struct{ method, path, route, body, field string }{
			{"POST", "/api/v1/tokens", "/api/v1/tokens", `{"name":` + s + `,"role":"viewer"}`, "name"},
			{"POST", "/api/v1/tokens", "/api/v1/tokens", `{"name":"n","role":` + s + `}`, "role"},
			{"POST", "/api/v1/drains", "/api/v1/drains", `{"subject_kind":` + s + `,"subject":"p1","reason":"r"}`, "subject_kind"},
			{"POST", "/api/v1/drains", "/api/v1/drains", `{"subject_kind":"plane","subject":` + s + `,"reason":"r"}`, "subject"},
			{"POST", "/api/v1/drains", "/api/v1/drains", `{"subject_kind":"plane","subject":"p1","reason":` + s + `}`, "reason"},
			{"PUT", "/api/v1/endpoints/host-a/rate-class", "/api/v1/endpoints/:name/rate-class", `{"class":` + s + `}`, "class"},
			{"POST", "/api/v1/enrollment-tokens", "/api/v1/enrollment-tokens", `{"endpoint":` + s + `}`, "endpoint"},
		} {
			if vname == "over-long" && b.field == "reason" {
				b.body = strings.Replace(b.body, v, strings.Repeat("a", 2000), 1)
			}
			out = append(out, hostileCase{name: b.method + " " + b.path + " body " + b.field + " " + vname, method: b.method,
				path: b.path, route: b.route, body: []byte(b.body), field: b.field})
		}
		topo := string(exampleTopology(f.t))
		for _, tf := range []struct{ old, new, field string }{
			{"description: plane 1", "description: " + s, "planes[1].description"},
			{"interface: Ethernet0", "interface: " + s, "*"},
			{"name: p0-sw1", "name: " + s, "*"},
		} {
			if vname == "invalid utf8" {
				tf.field = "*" // the YAML reader refuses the document as a whole
			}
			out = append(out, hostileCase{name: "PUT topology " + tf.field + " " + vname, method: "PUT", path: "/api/v1/topology",
				route: "/api/v1/topology", body: []byte(strings.Replace(topo, tf.old, tf.new, 1)), field: tf.field})
		}
	}
	for _, n := range []struct{ body, field string }{
		{`{"egress_bps":-1}`, "egress_bps"},
		{`{"ingress_bps":1e30}`, "ingress_bps"},
		{`{"egress_bps":1000000000000000000}`, "egress_bps"},
		{`{"priority":2147483648}`, "priority"},
		{`{"priority":-1}`, "priority"},
		{`{"priority":99999999999999999999}`, "priority"},
	} {
		out = append(out, hostileCase{name: "PUT rate class " + n.body, method: "PUT", path: "/api/v1/rate-classes/gold",
			route: "/api/v1/rate-classes/:name", body: []byte(n.body), field: n.field})
	}
	for _, ttl := range []string{"-1", "604801", "9223372036854775808", "1e12"} {
		out = append(out, hostileCase{name: "POST enrollment token ttl " + ttl, method: "POST", path: "/api/v1/enrollment-tokens", route: "/api/v1/enrollment-tokens",
			body: []byte(`{"endpoint":"host-a","ttl_seconds":` + ttl + `}`), field: "ttl_seconds"})
	}
	for _, ttl := range []string{"-1", "9223372036854775807", "9223372036854775808", "315360001", "1e12"} {
		out = append(out, hostileCase{name: "POST token ttl " + ttl, method: "POST", path: "/api/v1/tokens", route: "/api/v1/tokens",
			body: []byte(`{"name":"t","role":"viewer","ttl_seconds":` + ttl + `}`), field: "ttl_seconds"})
	}
	return out
}

func TestHostileInputIsRefusedAuditedAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	for _, setup := range []struct{ method, path, body string }{
		{"PUT", "/api/v1/rate-classes/gold", `{"egress_bps":1000}`},
		{"POST", "/api/v1/drains", `{"subject_kind":"plane","subject":"p3","reason":"setup"}`},
	} {
		if r := f.do(setup.method, setup.path, f.admin, []byte(setup.body)); r.Code >= 300 {
			t.Fatalf("%s %s = %d %s", setup.method, setup.path, r.Code, r.Body)
		}
	}
	before := f.readState(t)
	cases := hostileCases(f)
	if len(cases) < 500 {
		t.Fatalf("only %d hostile cases: the walk over routes broke", len(cases))
	}
	for _, tc := range cases {
		prev := f.lastAudit(t)
		r := f.do(tc.method, tc.path, f.admin, tc.body, "Content-Type", "application/json")
		if r.Code != 400 {
			t.Errorf("%s: status %d, want 400: %.200s", tc.name, r.Code, r.Body)
			continue
		}
		_, msg, field := r.apiError(t)
		if field == "" || (tc.field != "*" && field != tc.field) {
			t.Errorf("%s: error names field %q, want %q (%s)", tc.name, field, tc.field, msg)
		}
		if tc.method == "GET" {
			continue
		}
		last := f.lastAudit(t)
		if tc.anonymous {
			if last.id != prev.id {
				t.Errorf("%s: an anonymous refusal wrote audit row %+v (they are summarised)", tc.name, last)
			}
			continue
		}
		if want := api.AuditAction(tc.method, tc.route); last.id == prev.id || last.action != want || last.status != 400 {
			t.Errorf("%s: last audit row %+v, want a new one for %s with status 400", tc.name, last, want)
		}
	}
	after := f.readState(t)
	for path, b := range before {
		if after[path] != b {
			t.Errorf("GET %s changed after hostile input:\nbefore %.300s\nafter  %.300s", path, b, after[path])
		}
	}
	var rows int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE octet_length(path) > 300 OR octet_length(target) > 300`).Scan(&rows); err != nil || rows > 0 {
		t.Errorf("%d audit rows keep more than 300 bytes of a path or target (%v)", rows, err)
	}
	t.Logf("%d hostile requests refused", len(cases))
}

func TestSmallerRefusals(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	viewer := f.mint("viewer", auth.RoleViewer)
	tests := []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"null rate class", "PUT", "/api/v1/rate-classes/gold", f.admin, `null`, 400, "invalid_json"},
		{"array body", "POST", "/api/v1/drains", f.admin, `[]`, 400, "invalid_json"},
		{"first drain", "POST", "/api/v1/drains", f.admin, `{"subject_kind":"plane","subject":"p1","reason":"r"}`, 201, ""},
		{"second drain of the same plane", "POST", "/api/v1/drains", f.admin, `{"subject_kind":"plane","subject":"p1","reason":"again"}`, 409, "already_drained"},
		{"unassign unknown endpoint", "DELETE", "/api/v1/endpoints/nope/rate-class", f.admin, ``, 404, "not_found"},
		{"unassign known endpoint", "DELETE", "/api/v1/endpoints/host-a/rate-class", f.admin, ``, 204, ""},
		{"unknown query parameter", "GET", "/api/v1/planes?stat=down", f.admin, ``, 400, "invalid_parameter"},
		{"repeated query parameter", "GET", "/api/v1/planes?state=down&state=up", f.admin, ``, 400, "invalid_parameter"},
		{"head of a list", "HEAD", "/api/v1/planes", viewer, ``, 200, ""},
		{"head of health", "HEAD", "/healthz", "", ``, 200, ""},
		{"head of the dashboard", "HEAD", "/", "", ``, 200, ""},
		{"semicolon in the query", "POST", "/api/v1/drains?dry_run=true;", f.admin, `{"subject_kind":"plane","subject":"p2","reason":"r"}`, 400, "invalid_parameter"},
		{"empty query parameter name", "GET", "/api/v1/planes?=1", f.admin, ``, 400, "invalid_parameter"},
		{"tab in a path parameter", "GET", "/api/v1/planes/p0%09", f.admin, ``, 400, "invalid_parameter"},
		{"duplicate JSON key", "PUT", "/api/v1/rate-classes/silver", f.admin, `{"priority":1,"priority":9}`, 400, "invalid_json"},
		{"JSON key in another case", "PUT", "/api/v1/rate-classes/silver", f.admin, `{"EGRESS_BPS":5}`, 400, "invalid_json"},
		{"empty rate class", "PUT", "/api/v1/rate-classes/silver", f.admin, `{}`, 400, "invalid_json"},
		{"invalid byte after a backslash", "POST", "/api/v1/drains", f.admin, "{\"subject_kind\":\"plane\",\"subject\":\"p2\",\"reason\":\"a\\\xff\"}", 400, "invalid_json"},
		{"lone surrogate", "POST", "/api/v1/drains", f.admin, `{"subject_kind":"plane","subject":"p2","reason":"a\ud800"}`, 400, "invalid_field"},
		{"unknown API route with a valid token", "DELETE", "/api/v1/nope", f.admin, ``, 404, "not_found"},
		{"unknown API route without a token", "DELETE", "/api/v1/nope", "", ``, 401, "unauthenticated"},
	}
	for _, tc := range tests {
		r := f.do(tc.method, tc.path, tc.token, []byte(tc.body))
		if r.Code != tc.status {
			t.Errorf("%s: %s %s = %d, want %d: %s", tc.name, tc.method, tc.path, r.Code, tc.status, r.Body)
			continue
		}
		if tc.code != "" {
			if code, _, _ := r.apiError(t); code != tc.code {
				t.Errorf("%s: code %q, want %q", tc.name, code, tc.code)
			}
		}
	}
	if r := f.do("GET", "/api/v1/rate-classes", f.admin, nil); strings.Contains(string(r.Body), `"gold"`) || strings.Contains(string(r.Body), `"silver"`) {
		t.Errorf("a refused body created a rate class: %s", r.Body)
	}
	var drains struct{ Items []struct{ Target string } }
	f.do("GET", "/api/v1/drains", f.admin, nil).json(t, &drains)
	if len(drains.Items) != 1 {
		t.Errorf("drains = %+v, want only the first (p1)", drains.Items)
	}
	if last := f.lastAudit(t); last.action != "DELETE (unmatched)" {
		t.Errorf("last audit row %+v: the admin's request to an unknown route is not attributed", last)
	}
}

func TestViewersSeeNoCredentialNames(t *testing.T) {
	f := newFixture(t)
	topo := strings.Replace(string(exampleTopology(t)), `gnmi: {address: "127.0.0.1:9339", insecure: true}`,
		`gnmi: {address: "127.0.0.1:9339", tls: {ca: /etc/ca.pem, cert: /etc/c.pem, key: /etc/k.pem}, username: telemetry, password_env: FABRICD_GNMI_SECRET_NAME}`, 1)
	if r := f.do("PUT", "/api/v1/topology", f.admin, []byte(topo), "Content-Type", "application/yaml"); r.Code != 200 {
		t.Fatalf("PUT = %d %s", r.Code, r.Body)
	}
	secretish := []string{"telemetry", "FABRICD_GNMI_SECRET_NAME", "/etc/k.pem", "/etc/c.pem"}
	for _, role := range []auth.Role{auth.RoleViewer, auth.RoleOperator, auth.RoleAdmin} {
		tok := f.mint(fmt.Sprint("t-", role), role)
		for _, view := range []struct{ path, accept string }{{"/api/v1/topology", "application/json"}, {"/api/v1/topology", "application/yaml"},
			{"/api/v1/switches", ""}, {"/api/v1/switches/p0-sw1", ""}} {
			accept := view.path + " " + view.accept
			r := f.do("GET", view.path, tok, nil, "Accept", view.accept)
			for _, s := range secretish {
				if shown := strings.Contains(string(r.Body), s); shown != (role == auth.RoleAdmin) {
					t.Errorf("%s (%s): %q shown = %v", role, accept, s, shown)
				}
			}
		}
	}
}

func TestReadyzNamesComponentsNotErrors(t *testing.T) {
	f := newFixture(t, func(d *api.Deps) {
		d.Ready = func(context.Context) error {
			return errors.Join(&api.NotReady{Component: "postgres", Err: errors.New("dial unix /secret/run/.s.PGSQL.5432: connection refused")})
		}
	})
	r := f.do("GET", "/readyz", "", nil)
	var body struct {
		Status     string
		Components map[string]string
	}
	r.json(t, &body)
	if r.Code != 503 || body.Components["postgres"] != "unavailable" || strings.Contains(string(r.Body), "/secret") {
		t.Errorf("readyz = %d %s; want 503 naming postgres without the error text", r.Code, r.Body)
	}
}

func TestLastAdminTokenCannotBeRevoked(t *testing.T) {
	f := newFixture(t)
	var list struct{ Items []auth.Token }
	f.do("GET", "/api/v1/tokens", f.admin, nil).json(t, &list)
	if len(list.Items) != 1 {
		t.Fatalf("tokens = %+v", list.Items)
	}
	r := f.do("DELETE", fmt.Sprint("/api/v1/tokens/", list.Items[0].ID), f.admin, nil)
	if code, _, _ := r.apiError(t); r.Code != 409 || code != "last_admin" {
		t.Fatalf("revoking the last admin token = %d %s, want 409 last_admin", r.Code, r.Body)
	}
	if r := f.do("GET", "/api/v1/planes", f.admin, nil); r.Code != 200 {
		t.Errorf("the last admin token stopped working: %d", r.Code)
	}
}

func TestPanickingHandlerIsAudited(t *testing.T) {
	f := newFixture(t, func(d *api.Deps) { d.OnIntents = func(context.Context) { panic("boom") } })
	if r := f.do("PUT", "/api/v1/rate-classes/gold", f.admin, []byte(`{"priority":1}`)); r.Code != 500 {
		t.Fatalf("panicking handler = %d", r.Code)
	}
	if last := f.lastAudit(t); last.action != "rate_class.put" || last.status != 500 {
		t.Errorf("last audit row %+v, want the PUT with status 500", last)
	}
}

func TestUnreachableStoreIs503(t *testing.T) {
	dead, err := pgxpool.New(context.Background(), "host=/nonexistent/socket-dir user=nobody dbname=none connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dead.Close)
	f := newFixture(t, func(d *api.Deps) { d.Inventory = inventory.New(dead) })
	r := f.do("GET", "/api/v1/planes", f.admin, nil)
	if code, _, _ := r.apiError(t); r.Code != 503 || code != "unavailable" || r.Header.Get("Retry-After") == "" {
		t.Errorf("GET with the database unreachable = %d %s (Retry-After %q), want 503 unavailable", r.Code, r.Body, r.Header.Get("Retry-After"))
	}
}
