package api_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/planes"
)

func TestHealthInAPIAndHistory(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	f.engine.ObserveInterfaces([]planes.InterfaceSample{{Switch: "p0-sw1", Interface: "Ethernet8", At: time.Now(), Oper: planes.OperDown}})

	var pl struct {
		State         string
		LinksDown     int     `json:"links_down"`
		CapacityRatio float64 `json:"capacity_ratio"`
	}
	f.do("GET", "/api/v1/planes/p0", f.admin, nil).json(t, &pl)
	if pl.State != "degraded" || pl.LinksDown != 1 || pl.CapacityRatio != 7.0/8 {
		t.Fatalf("p0 = %+v", pl)
	}
	var links struct {
		Items []struct{ Name, State, Endpoint string }
	}
	f.do("GET", "/api/v1/links?state=down", f.admin, nil).json(t, &links)
	if len(links.Items) != 1 || links.Items[0].Name != "p0-sw1:Ethernet8" || links.Items[0].Endpoint != "host-b" {
		t.Fatalf("down links = %+v", links.Items)
	}
	var sws struct {
		Items []struct {
			Name, State string
			Reachable   bool
		}
	}
	f.do("GET", "/api/v1/switches?state=degraded", f.admin, nil).json(t, &sws)
	if len(sws.Items) != 1 || sws.Items[0].Name != "p0-sw1" || !sws.Items[0].Reachable {
		t.Fatalf("degraded switches = %+v", sws.Items)
	}

	// The history lands in Postgres through the writer.
	deadline := time.Now().Add(10 * time.Second)
	var evs struct {
		Items []struct {
			ID                        int64
			SubjectKind               string `json:"subject_kind"`
			Subject, From, To, Reason string
		}
		NextCursor string `json:"next_cursor"`
	}
	for {
		f.do("GET", "/api/v1/events?subject=p0", f.admin, nil).json(t, &evs)
		if len(evs.Items) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(evs.Items) != 1 || evs.Items[0].To != "degraded" || evs.Items[0].SubjectKind != "plane" {
		t.Fatalf("events for p0 = %+v", evs.Items)
	}
	for path, want := range map[string]int{
		"/api/v1/events?since=yesterday": 400, "/api/v1/events?subject_kind=rack": 400,
		"/api/v1/events?cursor=x": 400, "/api/v1/events?since=2026-01-02T15:04:05Z&limit=2": 200,
	} {
		if r := f.do("GET", path, f.admin, nil); r.Code != want {
			t.Errorf("%s = %d, want %d", path, r.Code, want)
		}
	}
}

func TestStreamSendsSnapshotThenChanges(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	srv := httptest.NewServer(f.srv)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL+"/api/v1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+f.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	type sse struct{ event, data string }
	msgs := make(chan sse, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var cur sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				cur.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			case line == "" && cur.event != "":
				msgs <- cur
				cur = sse{}
			}
		}
		close(msgs)
	}()
	next := func() sse {
		select {
		case m := <-msgs:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no server-sent event within 10s")
		}
		return sse{}
	}
	first := next()
	var snapshot []struct{ Name, State string }
	if first.event != "planes" || json.Unmarshal([]byte(first.data), &snapshot) != nil || len(snapshot) != 4 {
		t.Fatalf("first event = %+v", first)
	}
	f.engine.ObserveInterfaces([]planes.InterfaceSample{{Switch: "p2-sw1", Interface: "Ethernet0", At: time.Now(), Oper: planes.OperDown}})
	var got []string
	for len(got) < 3 {
		m := next()
		var e planes.Event
		if m.event != "state_change" || json.Unmarshal([]byte(m.data), &e) != nil {
			t.Fatalf("event = %+v", m)
		}
		got = append(got, e.SubjectKind+" "+e.Subject+" "+e.To)
	}
	want := "link p2-sw1:Ethernet0 down,switch p2-sw1 degraded,plane p2 degraded"
	if strings.Join(got, ",") != want {
		t.Fatalf("stream = %v, want %s", got, want)
	}
	f.srv.Shutdown() // ends the stream, as fabricd does when it stops
	for range msgs {
	}
}
