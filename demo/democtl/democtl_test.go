package democtl

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testutil"
)

// serve starts a control over a real userspace fabric of 2 hosts and 2
// planes.
func serve(t *testing.T) (*userspace.Fabric, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fab, err := userspace.Start(ctx, userspace.Config{Hosts: 2, Port: testutil.FabricPort(t, 2, 2), Planes: make([]userspace.PlaneConfig, 2)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fab.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go Serve(ctx, ln, NewHandler(fab, []string{"p0", "p1"}, []string{"host-a", "host-b"}, "s3cret", nil))
	return fab, "http://" + ln.Addr().String()
}

func TestFailAndRestorePlanesAndPorts(t *testing.T) {
	fab, url := serve(t)
	c := &Client{URL: url, Secret: "s3cret"}
	ctx := context.Background()
	st, err := c.Apply(ctx, Change{Action: Fail, Plane: "p1"})
	if err != nil || fab.PlaneUp(1) || !fab.PlaneUp(0) || st.Planes[1].Up || !st.Planes[0].Up {
		t.Fatalf("fail p1: %+v %v; fabric p0 %v p1 %v", st, err, fab.PlaneUp(0), fab.PlaneUp(1))
	}
	st, err = c.Apply(ctx, Change{Action: Fail, Plane: "p0", Endpoint: "host-b"})
	want := State{Planes: []PlaneState{{Name: "p0", Up: true, PortsDown: []string{"host-b"}}, {Name: "p1", Up: false, PortsDown: []string{}}}}
	if err != nil || !reflect.DeepEqual(st, want) || fab.LinkUp(1, 0) || !fab.LinkUp(0, 0) {
		t.Fatalf("fail host-b's p0 port: %+v %v, want %+v", st, err, want)
	}
	if got, err := c.State(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("state %+v %v, want %+v", got, err, want)
	}
	c.Apply(ctx, Change{Action: Restore, Plane: "p1"})
	st, err = c.Apply(ctx, Change{Action: Restore, Plane: "p0", Endpoint: "host-b"})
	if err != nil || !fab.PlaneUp(1) || !fab.LinkUp(1, 0) || !st.Planes[0].Up || len(st.Planes[0].PortsDown) != 0 {
		t.Fatalf("restore: %+v %v", st, err)
	}
}

// TestRefusalsChangeNothing: no secret, a wrong one, malformed or unknown
// changes are refused with their status and leave the fabric as it was.
func TestRefusalsChangeNothing(t *testing.T) {
	fab, url := serve(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, secret, body string
		status             int
	}{
		{"no secret", "", `{"action":"fail","plane":"p0"}`, http.StatusUnauthorized},
		{"wrong secret", "guess", `{"action":"fail","plane":"p0"}`, http.StatusUnauthorized},
		{"a longer secret", "s3cret-and-more", `{"action":"fail","plane":"p0"}`, http.StatusUnauthorized},
		{"malformed", "s3cret", `{"action":"fail",`, http.StatusBadRequest},
		{"unknown field", "s3cret", `{"action":"fail","plane":"p0","rack":"r1"}`, http.StatusBadRequest},
		{"two objects", "s3cret", `{"action":"fail","plane":"p0"}{}`, http.StatusBadRequest},
		{"unknown action", "s3cret", `{"action":"flap","plane":"p0"}`, http.StatusBadRequest},
		{"no plane", "s3cret", `{"action":"fail"}`, http.StatusBadRequest},
		{"oversized", "s3cret", `{"action":"fail","plane":"` + strings.Repeat("p", 8<<10) + `"}`, http.StatusBadRequest},
		{"unknown plane", "s3cret", `{"action":"fail","plane":"p7"}`, http.StatusNotFound},
		{"unknown endpoint", "s3cret", `{"action":"fail","plane":"p0","endpoint":"host-z"}`, http.StatusNotFound},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/change", strings.NewReader(tc.body))
		if tc.secret != "" {
			req.Header.Set("Authorization", "Bearer "+tc.secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		for p := range 2 {
			if !fab.PlaneUp(p) || !fab.LinkUp(0, p) || !fab.LinkUp(1, p) {
				t.Fatalf("%s changed the fabric (plane %d)", tc.name, p)
			}
		}
	}
	var ce *Error
	if _, err := (&Client{URL: url, Secret: "s3cret"}).Apply(ctx, Change{Action: Fail, Plane: "p9"}); !errors.As(err, &ce) || ce.Status != http.StatusNotFound || !strings.Contains(ce.Message, `"p9"`) {
		t.Fatalf("client error %v, want a 404 naming p9", err)
	}
}
