package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy"
	"github.com/multiplane/multiplane/policy/fleet"
)

func TestDrainsWhatIfAndForce(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	op := f.mint("ops", auth.RoleOperator)
	viewer := f.mint("viewer", auth.RoleViewer)
	// host-c already lost its p0 and p1 links; draining p2 and p3 would strand it.
	f.engine.ObserveInterfaces([]planes.InterfaceSample{
		{Switch: "p0-sw1", Interface: "Ethernet16", At: time.Now(), Oper: planes.OperDown},
		{Switch: "p1-sw1", Interface: "Ethernet16", At: time.Now(), Oper: planes.OperDown},
	})

	r := f.do("POST", "/api/v1/drains?dry_run=true", op, []byte(`{"subject_kind":"plane","subject":"p2","reason":"optics swap"}`))
	var dry struct {
		DryRun bool `json:"dry_run"`
		Impact policy.Impact
	}
	r.json(t, &dry)
	if r.Code != 200 || !dry.DryRun || len(dry.Impact.Affected) != 8 || len(dry.Impact.Stranded) != 0 {
		t.Fatalf("dry run = %d %s", r.Code, r.Body)
	}
	var hostA policy.EndpointImpact
	for _, a := range dry.Impact.Affected {
		if a.Endpoint == "host-a" {
			hostA = a
		}
	}
	if hostA.CapacityBefore != 1 || hostA.CapacityAfter != 0.75 {
		t.Fatalf("host-a impact = %+v", hostA)
	}
	var drains struct{ Items []json.RawMessage }
	if f.do("GET", "/api/v1/drains", viewer, nil).json(t, &drains); len(drains.Items) != 0 {
		t.Fatal("dry run created a drain")
	}

	r = f.do("POST", "/api/v1/drains", op, []byte(`{"subject_kind":"plane","subject":"p2","reason":"optics swap"}`))
	var created struct{ Drain struct{ ID int64 } }
	r.json(t, &created)
	if r.Code != 201 || created.Drain.ID == 0 {
		t.Fatalf("drain = %d %s", r.Code, r.Body)
	}
	var pol policy.EndpointPolicy
	f.do("GET", "/api/v1/endpoints/host-a/policy", viewer, nil).json(t, &pol)
	for _, p := range pol.PathSet.Planes {
		if p.Plane == "p2" {
			t.Fatalf("host-a still uses drained p2: %+v", pol.PathSet)
		}
	}

	// p3 too would strand host-c: refused, then forced.
	r = f.do("POST", "/api/v1/drains", op, []byte(`{"subject_kind":"plane","subject":"p3","reason":"second"}`))
	if code, msg, _ := r.apiError(t); r.Code != 409 || code != "would_strand" || !strings.Contains(msg, "host-c") {
		t.Fatalf("stranding drain = %d %s", r.Code, r.Body)
	}
	if f.do("GET", "/api/v1/drains", viewer, nil).json(t, &drains); len(drains.Items) != 1 {
		t.Fatalf("refused drain was stored: %d drains", len(drains.Items))
	}
	if r = f.do("POST", "/api/v1/drains?force=true", op, []byte(`{"subject_kind":"plane","subject":"p3","reason":"second"}`)); r.Code != 201 {
		t.Fatalf("forced drain = %d %s", r.Code, r.Body)
	}
	f.do("GET", "/api/v1/endpoints/host-c/policy", viewer, nil).json(t, &pol)
	if pol.PathSet.Fallback == "" || len(pol.PathSet.Planes) == 0 {
		t.Fatalf("stranded host-c path set = %+v", pol.PathSet)
	}

	if r = f.do("DELETE", "/api/v1/drains/"+jsonNum(created.Drain.ID), op, nil); r.Code != 204 {
		t.Fatalf("undrain = %d %s", r.Code, r.Body)
	}
	if r = f.do("DELETE", "/api/v1/drains/"+jsonNum(created.Drain.ID), op, nil); r.Code != 404 {
		t.Fatalf("undrain twice = %d", r.Code)
	}
	if f.do("GET", "/api/v1/drains?all=true", viewer, nil).json(t, &drains); len(drains.Items) != 2 {
		t.Fatalf("all drains = %d", len(drains.Items))
	}

	bad := []struct{ body, field string }{
		{`{"subject_kind":"plane","subject":"p9","reason":"x"}`, "subject"},
		{`{"subject_kind":"rack","subject":"p1","reason":"x"}`, "subject_kind"},
		{`{"subject_kind":"link","subject":"p0-sw1:Ethernet99","reason":"x"}`, "subject"},
		{`{"subject_kind":"plane","subject":"p1"}`, "reason"},
		{`{"subject_kind":"plane","subject":"p1","reason":"x","ttl":5}`, "ttl"},
		{`{"target_kind":"plane","target":"p1","reason":"x"}`, "target_kind"}, // the names before 2026-12
	}
	for _, b := range bad {
		r := f.do("POST", "/api/v1/drains", op, []byte(b.body))
		if _, _, field := r.apiError(t); r.Code != 400 || field != b.field {
			t.Errorf("POST %s = %d field %q, want 400 on %s", b.body, r.Code, field, b.field)
		}
	}
	if r := f.do("POST", "/api/v1/drains", viewer, []byte(`{"subject_kind":"plane","subject":"p1","reason":"x"}`)); r.Code != 403 {
		t.Fatalf("viewer drain = %d", r.Code)
	}
}

func TestRateClasses(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	op := f.mint("ops", auth.RoleOperator)
	if r := f.do("PUT", "/api/v1/rate-classes/gold", op, []byte(`{"egress_bps":100000000000,"ingress_bps":200000000000,"priority":1}`)); r.Code != 200 {
		t.Fatalf("put class = %d %s", r.Code, r.Body)
	}
	if r := f.do("PUT", "/api/v1/endpoints/host-a/rate-class", op, []byte(`{"class":"gold"}`)); r.Code != 200 {
		t.Fatalf("assign = %d %s", r.Code, r.Body)
	}
	var pol policy.EndpointPolicy
	f.do("GET", "/api/v1/endpoints/host-a/policy", op, nil).json(t, &pol)
	if pol.Rate.Class != "gold" || pol.Rate.EgressBps != 100e9 {
		t.Fatalf("host-a rate = %+v", pol.Rate)
	}
	for path, want := range map[string]int{
		"/api/v1/endpoints/host-a/rate-class": 404, // unknown class below
	} {
		if r := f.do("PUT", path, op, []byte(`{"class":"platinum"}`)); r.Code != want {
			t.Errorf("PUT %s unknown class = %d, want %d", path, r.Code, want)
		}
	}
	if r := f.do("PUT", "/api/v1/endpoints/nobody/rate-class", op, []byte(`{"class":"gold"}`)); r.Code != 404 {
		t.Errorf("assign to unknown endpoint = %d", r.Code)
	}
	if r := f.do("PUT", "/api/v1/rate-classes/bad", op, []byte(`{"egress_bps":-1}`)); r.Code != 400 {
		t.Errorf("negative rate = %d", r.Code)
	}
	if r := f.do("DELETE", "/api/v1/rate-classes/gold", op, nil); r.Code != 409 {
		t.Errorf("delete class in use = %d", r.Code)
	}
	f.do("DELETE", "/api/v1/endpoints/host-a/rate-class", op, nil)
	if r := f.do("DELETE", "/api/v1/rate-classes/gold", op, nil); r.Code != 204 {
		t.Errorf("delete unused class = %d %s", r.Code, r.Body)
	}

	// The default class is listed though nobody defined it, unlimited; once
	// defined it limits every unassigned endpoint. Lists page.
	var classes struct {
		Items      []policy.RateClass
		NextCursor string `json:"next_cursor"`
	}
	f.do("GET", "/api/v1/rate-classes", op, nil).json(t, &classes)
	if len(classes.Items) != 1 || classes.Items[0] != (policy.RateClass{Name: policy.DefaultClass}) {
		t.Fatalf("rate classes with none defined: %+v", classes.Items)
	}
	for _, name := range []string{"default", "silver", "bronze"} {
		if r := f.do("PUT", "/api/v1/rate-classes/"+name, op, []byte(`{"egress_bps":5000000000}`)); r.Code != 200 {
			t.Fatalf("put %s = %d %s", name, r.Code, r.Body)
		}
	}
	f.do("GET", "/api/v1/endpoints/host-b/policy", op, nil).json(t, &pol)
	if pol.Rate.Class != policy.DefaultClass || pol.Rate.EgressBps != 5e9 {
		t.Fatalf("unassigned host-b's rate with default defined = %+v", pol.Rate)
	}
	var names []string
	for cursor := ""; ; {
		classes.Items, classes.NextCursor = nil, ""
		f.do("GET", "/api/v1/rate-classes?limit=2&cursor="+cursor, op, nil).json(t, &classes)
		for _, c := range classes.Items {
			names = append(names, c.Name)
		}
		if cursor = classes.NextCursor; cursor == "" {
			break
		}
	}
	if strings.Join(names, ",") != "bronze,default,silver" {
		t.Fatalf("rate classes by pages of 2: %v", names)
	}
}

func TestDrainsAndTokensPage(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	for _, p := range []string{"p0", "p1", "p2"} {
		if r := f.do("POST", "/api/v1/drains", f.admin, []byte(`{"subject_kind":"plane","subject":"`+p+`","reason":"page"}`)); r.Code != 201 {
			t.Fatalf("drain %s = %d %s", p, r.Code, r.Body)
		}
	}
	f.mint("second", auth.RoleViewer)
	f.mint("third", auth.RoleViewer)
	for _, tc := range []struct{ path, field string }{{"/api/v1/drains", "subject"}, {"/api/v1/tokens", "name"}} {
		var seen []string
		pages := 0
		for cursor := ""; ; pages++ {
			var page struct {
				Items      []map[string]any
				NextCursor string `json:"next_cursor"`
			}
			f.do("GET", tc.path+"?limit=2&cursor="+cursor, f.admin, nil).json(t, &page)
			for _, it := range page.Items {
				seen = append(seen, fmt.Sprint(it[tc.field]))
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if len(seen) != 3 || pages != 1 {
			t.Errorf("%s by pages of 2: %v in %d pages", tc.path, seen, pages+1)
		}
	}
}

func TestStatusAndConvergence(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	ctx := context.Background()
	if r := f.do("GET", "/api/v1/endpoints/host-a/status", f.admin, nil); r.Code != 404 {
		t.Fatalf("status before any agent = %d", r.Code)
	}
	gen, _ := json.Marshal(contract.GenerationDoc{Generation: 7})
	f.kv.Put(ctx, contract.KeyGeneration, string(gen))
	for _, name := range []string{"host-a", "host-b"} {
		doc, _ := json.Marshal(contract.EndpointSpec{Generation: 7, Endpoint: name})
		f.kv.Put(ctx, contract.KeyEndpoint(name), string(doc))
	}
	st, _ := json.Marshal(contract.StatusDoc{Endpoint: "host-a", AppliedGeneration: 7, Source: "etcd"})
	f.kv.Put(ctx, contract.KeyStatus("host-a"), string(st))
	st, _ = json.Marshal(contract.StatusDoc{Endpoint: "host-b", AppliedGeneration: 6, Errors: []string{"bad doc"}})
	f.kv.Put(ctx, contract.KeyStatus("host-b"), string(st))

	var got contract.StatusDoc
	if r := f.do("GET", "/api/v1/endpoints/host-a/status", f.admin, nil); r.Code != 200 {
		t.Fatalf("status = %d", r.Code)
	} else if r.json(t, &got); got.AppliedGeneration != 7 {
		t.Fatalf("status = %+v", got)
	}
	var conv struct {
		TargetGeneration              uint64 `json:"target_generation"`
		Endpoints, Applied, Reporting int
		Laggards                      []struct {
			Endpoint  string
			Reporting bool
		}
	}
	f.do("GET", "/api/v1/convergence", f.admin, nil).json(t, &conv)
	if conv.TargetGeneration != 7 || conv.Endpoints != 8 || conv.Applied != 1 || conv.Reporting != 2 || len(conv.Laggards) != 7 {
		t.Fatalf("convergence = %+v", conv)
	}
	if conv.Laggards[0].Endpoint != "host-b" || !conv.Laggards[0].Reporting {
		t.Fatalf("first laggard = %+v", conv.Laggards[0])
	}
	// The endpoint list shows each agent in short.
	var eps struct {
		Items []struct {
			Name  string
			Agent *fleet.Agent
		}
	}
	f.do("GET", "/api/v1/endpoints?limit=3", f.admin, nil).json(t, &eps)
	if len(eps.Items) != 3 || eps.Items[0].Agent == nil || eps.Items[2].Agent == nil {
		t.Fatalf("endpoints = %+v", eps.Items)
	}
	a, b, c := eps.Items[0].Agent, eps.Items[1].Agent, eps.Items[2].Agent
	if !a.Reporting || a.AppliedGeneration != 7 || a.Source != "etcd" || !b.Reporting || len(b.Errors) != 1 || c.Reporting {
		t.Fatalf("agents of host-a, -b, -c: %+v %+v %+v", a, b, c)
	}
}
