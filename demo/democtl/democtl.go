// Package democtl is the demo's fault control: the demo process serves it
// on loopback (NewHandler, Serve) and fabricd forwards operators' requests
// to it (Client), so `fabricctl demo` and the dashboard, in demo mode only,
// fail and restore a plane, or one endpoint's port on a plane, of the
// emulated fabric. Requests carry a shared secret (a file only the demo's
// user can read); fabricd is the only client.
//
//	h := democtl.NewHandler(fab, []string{"p0", "p1"}, []string{"host-a", "host-b"}, secret, nil)
//	c := &democtl.Client{URL: "http://127.0.0.1:40123", Secret: secret}
//	st, err := c.Apply(ctx, democtl.Change{Action: democtl.Fail, Plane: "p1"})
package democtl

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Actions of a Change.
const (
	Fail    = "fail"
	Restore = "restore"
)

// Change fails or restores a whole plane, or one endpoint's port on it.
type Change struct {
	Action   string `json:"action"`             // Fail or Restore
	Plane    string `json:"plane"`              // such as "p1"
	Endpoint string `json:"endpoint,omitempty"` // a port: this endpoint's on Plane; empty: the plane
}

// Validate checks the action and that names are present.
func (c Change) Validate() error {
	if c.Action != Fail && c.Action != Restore {
		return fmt.Errorf("action %q: want %q or %q", c.Action, Fail, Restore)
	}
	if c.Plane == "" {
		return errors.New("plane is required")
	}
	return nil
}

// State is what the control has failed: every plane's state and the
// endpoints whose port on it is down.
type State struct {
	Planes []PlaneState `json:"planes"`
}

// PlaneState is one plane of a State.
type PlaneState struct {
	Name      string   `json:"name"`
	Up        bool     `json:"up"`
	PortsDown []string `json:"ports_down"` // endpoints whose port on the plane is down
}

// Fabric is the emulated fabric the control acts on (a
// fabricsim/userspace.Fabric), planes and hosts by index.
type Fabric interface {
	SetUp(plane int, up bool)
	SetLinkUp(host, plane int, up bool)
	PlaneUp(plane int) bool
	LinkUp(host, plane int) bool
}

// maxBody bounds a request body: a Change is a few dozen bytes.
const maxBody = 4 << 10

type handler struct {
	fab      Fabric
	planes   []string
	hosts    []string
	secret   []byte
	onChange func(Change)
}

// NewHandler serves GET /v1/state and POST /v1/change (a Change; it
// answers the new State) on fab, whose planes and hosts are named by
// planes and hosts, to requests with "Authorization: Bearer secret".
// onChange, if set, is called after each change.
func NewHandler(fab Fabric, planes, hosts []string, secret string, onChange func(Change)) http.Handler {
	h := &handler{fab: fab, planes: planes, hosts: hosts, secret: []byte(secret), onChange: onChange}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/state", h.state)
	mux.HandleFunc("POST /v1/change", h.change)
	return h.authorize(mux)
}

func (h *handler) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || len(h.secret) == 0 || subtle.ConstantTimeCompare([]byte(got), h.secret) != 1 {
			writeError(w, http.StatusUnauthorized, "a bearer secret is required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *handler) state(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.current())
}

func (h *handler) current() State {
	st := State{Planes: make([]PlaneState, len(h.planes))}
	for p, name := range h.planes {
		ps := PlaneState{Name: name, Up: h.fab.PlaneUp(p), PortsDown: []string{}}
		for host, hn := range h.hosts {
			if !h.fab.LinkUp(host, p) {
				ps.PortsDown = append(ps.PortsDown, hn)
			}
		}
		st.Planes[p] = ps
	}
	return st
}

func (h *handler) change(w http.ResponseWriter, r *http.Request) {
	var c Change
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		writeError(w, http.StatusBadRequest, "malformed change: "+err.Error())
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "malformed change: data after the object")
		return
	}
	if err := c.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	p := slices.Index(h.planes, c.Plane)
	if p < 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no plane %q in the demo fabric", c.Plane))
		return
	}
	up := c.Action == Restore
	if c.Endpoint == "" {
		h.fab.SetUp(p, up)
	} else {
		host := slices.Index(h.hosts, c.Endpoint)
		if host < 0 {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %q in the demo fabric", c.Endpoint))
			return
		}
		h.fab.SetLinkUp(host, p, up)
	}
	if h.onChange != nil {
		h.onChange(c)
	}
	writeJSON(w, http.StatusOK, h.current())
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// Serve serves h on ln, with timeouts and limits for a hostile network,
// until ctx ends.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Error is a refusal by the control: Status 400 for a malformed change,
// 404 for an unknown plane or endpoint.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("demo control: %s (%d)", e.Message, e.Status) }

// Client calls a control.
type Client struct {
	URL    string       // such as http://127.0.0.1:40123
	Secret string       // the bearer secret
	HTTP   *http.Client // nil: one with a 5 s timeout
}

// State returns what is failed now.
func (c *Client) State(ctx context.Context) (State, error) {
	return c.do(ctx, http.MethodGet, "/v1/state", nil)
}

// Apply makes the change and returns the state after it.
func (c *Client) Apply(ctx context.Context, ch Change) (State, error) {
	body, err := json.Marshal(ch)
	if err != nil {
		return State{}, err
	}
	return c.do(ctx, http.MethodPost, "/v1/change", body)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte) (State, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return State{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return State{}, fmt.Errorf("demo control: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return State{}, fmt.Errorf("demo control: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
		return State{}, &Error{Status: resp.StatusCode, Message: e.Error}
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, fmt.Errorf("demo control: malformed state: %w", err)
	}
	return st, nil
}
