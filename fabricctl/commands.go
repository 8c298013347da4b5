package fabricctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// env is what a command runs with.
type env struct {
	ctx    context.Context
	cli    *Client
	out    io.Writer
	json   bool // -o json
	follow time.Duration
}

// command is one fabricctl command.
type command struct {
	name, args, help string
	flags            func(fs *flag.FlagSet) // its own flags, if any
	run              func(e *env, fs *flag.FlagSet) error
}

// errUsage is a command used wrongly: exit code 2.
var errUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

var commands = []command{
	{name: "planes", help: "planes with their state, capacity, utilisation, loss and ECN", run: listPlanes},
	{name: "switches", help: "switches with their state and telemetry reachability", run: listSwitches},
	{name: "links", args: "[--state up|degraded|down] [--plane P] [--switch S] [--endpoint E]", help: "links (switch port to endpoint port) with their state and reason",
		flags: func(fs *flag.FlagSet) {
			for _, f := range []string{"state", "plane", "switch", "endpoint"} {
				fs.String(f, "", "only links of this "+f)
			}
		}, run: listLinks},
	{name: "endpoints", args: "[NAME]", help: "endpoints; with NAME, its ports, agent status and path set", run: endpoints},
	{name: "events", args: "[--since 1h|RFC3339] [--plane P] [--subject S] [--kind link|switch|plane|history] [--follow]", help: "the history of state changes, oldest first; --follow waits for new ones",
		flags: func(fs *flag.FlagSet) {
			fs.String("since", "1h", "how far back: a duration (1h, 30m) or an RFC 3339 time")
			fs.String("plane", "", "only events of this plane, its switches and its links")
			fs.String("subject", "", "only events of this subject (a plane, switch or link name)")
			fs.String("kind", "", "only events of subjects of this kind: link, switch, plane or history")
			fs.Bool("follow", false, "after the history, print new events as they come (Ctrl-C stops)")
		}, run: listEvents},
	{name: "drains", args: "[--all]", help: "active drains (--all: ended ones too)",
		flags: func(fs *flag.FlagSet) { fs.Bool("all", false, "ended drains too") }, run: listDrains},
	{name: "drain", args: "plane|switch|link TARGET --reason R [--dry-run] [--force]", help: "drain a target (operator); --dry-run shows what it would change",
		flags: func(fs *flag.FlagSet) {
			fs.String("reason", "", "why (required; it lands in the history)")
			fs.Bool("dry-run", false, "show the endpoints whose path set would change, drain nothing")
			fs.Bool("force", false, "drain even if it leaves endpoints with no usable plane")
		}, run: drain},
	{name: "undrain", args: "ID", help: "end a drain (operator)", run: undrain},
	{name: "audit", args: "[--limit N]", help: "the audit log, newest first (admin)",
		flags: func(fs *flag.FlagSet) { fs.Int("limit", 50, "entries to show") }, run: listAudit},
	{name: "tokens", help: "API tokens, without their secrets (admin)", run: listTokens},
	{name: "demo", args: "[fail|restore plane P | fail|restore port ENDPOINT P]", help: "bin/demo's fabric only: what is failed; fail or restore a plane or one endpoint's port (operator)", run: demoControl},
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// table writes aligned columns.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) {
	for i, c := range cols {
		cols[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
	}
	fmt.Fprintln(t.w, strings.Join(cols, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// printJSON writes v indented.
func printJSON(out io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", data)
	return err
}

// listInto gets every page of path and decodes the items into T.
func listInto[T any](e *env, path string) ([]json.RawMessage, []T, error) {
	raw, err := e.cli.List(e.ctx, path)
	if err != nil {
		return nil, nil, err
	}
	items := make([]T, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &items[i]); err != nil {
			return nil, nil, fmt.Errorf("fabricctl: %s: an item is not the JSON expected: %w", path, err)
		}
	}
	return raw, items, nil
}

// listed prints raw items as JSON, or a table of items through row.
func listed[T any](e *env, path string, header []string, row func(T) []string) error {
	raw, items, err := listInto[T](e, path)
	if err != nil {
		return err
	}
	if e.json {
		if raw == nil {
			raw = []json.RawMessage{}
		}
		return printJSON(e.out, raw)
	}
	t := newTable(e.out, header...)
	for _, it := range items {
		t.row(row(it)...)
	}
	return t.flush()
}

func pct(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func listPlanes(e *env, _ *flag.FlagSet) error {
	type plane struct {
		Name, State, Reason string
		CapacityRatio       float64 `json:"capacity_ratio"`
		Utilization         float64
		LossRate            float64 `json:"loss_rate"`
		ECNRate             float64 `json:"ecn_rate"`
		LinksUp             int     `json:"links_up"`
		LinksDegraded       int     `json:"links_degraded"`
		LinksDown           int     `json:"links_down"`
		Switches, Endpoints int
		CapacityBps         int64 `json:"capacity_bps"`
		TotalBps            int64 `json:"total_bps"`
		Drained             bool
	}
	return listed(e, "/api/v1/planes", []string{"NAME", "STATE", "CAPACITY", "UTIL", "LOSS", "ECN", "LINKS UP/DEG/DOWN", "REASON"}, func(p plane) []string {
		return []string{p.Name, p.State, pct(p.CapacityRatio), pct(p.Utilization), strconv.FormatFloat(p.LossRate, 'g', 3, 64),
			strconv.FormatFloat(p.ECNRate, 'g', 3, 64), fmt.Sprintf("%d/%d/%d", p.LinksUp, p.LinksDegraded, p.LinksDown), orDash(p.Reason)}
	})
}

func listSwitches(e *env, _ *flag.FlagSet) error {
	type sw struct {
		Name, Plane, State, Reason string
		Reachable                  bool
		LastUpdate                 time.Time `json:"last_update"`
	}
	return listed(e, "/api/v1/switches", []string{"NAME", "PLANE", "STATE", "REACHABLE", "LAST UPDATE", "REASON"}, func(s sw) []string {
		return []string{s.Name, s.Plane, s.State, strconv.FormatBool(s.Reachable), when(s.LastUpdate), orDash(s.Reason)}
	})
}

// query builds ?k=v&... from the named flags that are set.
func query(fs *flag.FlagSet, rename map[string]string, names ...string) string {
	q := url.Values{}
	for _, n := range names {
		if v := fs.Lookup(n).Value.String(); v != "" {
			key := n
			if r, ok := rename[n]; ok {
				key = r
			}
			q.Set(key, v)
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func listLinks(e *env, fs *flag.FlagSet) error {
	type link struct {
		Name, Plane, Endpoint, State, Reason string
	}
	path := "/api/v1/links" + query(fs, nil, "state", "plane", "switch", "endpoint")
	return listed(e, path, []string{"NAME", "PLANE", "ENDPOINT", "STATE", "REASON"}, func(l link) []string {
		return []string{l.Name, l.Plane, l.Endpoint, l.State, orDash(l.Reason)}
	})
}

type port struct {
	Plane, Address, Switch, Interface string
	SpeedBps                          int64 `json:"speed_bps"`
}

func endpoints(e *env, fs *flag.FlagSet) error {
	type endpoint struct {
		Name  string
		Ports []port
		Agent *struct {
			Reporting         bool
			AppliedGeneration uint64 `json:"applied_generation"`
			Version           string
			Errors            []string
		}
	}
	switch fs.NArg() {
	case 0:
		return listed(e, "/api/v1/endpoints", []string{"NAME", "PLANES", "ADDRESSES", "AGENT"}, func(ep endpoint) []string {
			var planes, addrs []string
			for _, p := range ep.Ports {
				planes, addrs = append(planes, p.Plane), append(addrs, p.Address)
			}
			agent := "unknown (etcd unreadable)"
			switch a := ep.Agent; {
			case a == nil:
			case !a.Reporting:
				agent = "not reporting"
			default:
				agent = fmt.Sprintf("generation %d, %s", a.AppliedGeneration, orDash(a.Version))
				if len(a.Errors) > 0 {
					agent += fmt.Sprintf(", %d errors", len(a.Errors))
				}
			}
			return []string{ep.Name, strings.Join(planes, ","), strings.Join(addrs, ","), agent}
		})
	case 1:
		return endpoint1(e, fs.Arg(0))
	default:
		return usagef("endpoints takes at most one name")
	}
}

// endpoint1 shows one endpoint: ports, the agent's status and its path set.
func endpoint1(e *env, name string) error {
	base := "/api/v1/endpoints/" + url.PathEscape(name)
	var ep struct {
		Name  string
		Ports []port
	}
	if err := e.cli.Do(e.ctx, http.MethodGet, base, nil, &ep); err != nil {
		return err
	}
	var status, policy map[string]any
	statusErr := e.cli.Do(e.ctx, http.MethodGet, base+"/status", nil, &status)
	var ae *APIError
	if statusErr != nil && !(errors.As(statusErr, &ae) && ae.Status == http.StatusNotFound) {
		return statusErr
	}
	if err := e.cli.Do(e.ctx, http.MethodGet, base+"/policy", nil, &policy); err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
		return err
	}
	if e.json {
		return printJSON(e.out, map[string]any{"endpoint": ep, "status": status, "policy": policy})
	}
	fmt.Fprintf(e.out, "Endpoint %s\n\n", ep.Name)
	t := newTable(e.out, "PLANE", "ADDRESS", "SWITCH", "INTERFACE", "SPEED")
	for _, p := range ep.Ports {
		t.row(p.Plane, p.Address, p.Switch, p.Interface, bps(p.SpeedBps))
	}
	t.flush()
	fmt.Fprintln(e.out)
	if status == nil {
		fmt.Fprintln(e.out, "Agent: no status (not running, or not connected to etcd)")
	} else {
		var st struct {
			AppliedGeneration uint64    `json:"applied_generation"`
			AppliedAt         time.Time `json:"applied_at"`
			Source, Version   string
			Errors            []string
			Paths             []struct {
				Plane       string
				TxBytes     uint64  `json:"tx_bytes"`
				RxBytes     uint64  `json:"rx_bytes"`
				LossRatio   float64 `json:"loss_ratio"`
				RTTMicros   int64   `json:"rtt_us"`
				Reachable   int     `json:"peers_reachable"`
				Unreachable int     `json:"peers_unreachable"`
			}
		}
		data, _ := json.Marshal(status)
		json.Unmarshal(data, &st)
		fmt.Fprintf(e.out, "Agent: version %s, generation %d applied %s from %s\n", orDash(st.Version), st.AppliedGeneration, when(st.AppliedAt), orDash(st.Source))
		for _, msg := range st.Errors {
			fmt.Fprintf(e.out, "  error: %s\n", msg)
		}
		t := newTable(e.out, "PLANE", "TX", "RX", "LOSS", "RTT", "PEERS REACHABLE/UNREACHABLE")
		for _, p := range st.Paths {
			rtt := "-"
			if p.RTTMicros > 0 {
				rtt = fmt.Sprintf("%d us", p.RTTMicros)
			}
			t.row(p.Plane, bytesOf(p.TxBytes), bytesOf(p.RxBytes), pct(p.LossRatio), rtt, fmt.Sprintf("%d/%d", p.Reachable, p.Unreachable))
		}
		t.flush()
	}
	fmt.Fprintln(e.out)
	if policy == nil {
		fmt.Fprintln(e.out, "Path set: none computed yet")
		return nil
	}
	var pol struct {
		PathSet struct {
			Planes []struct {
				Plane, Address string
				Weight         float64
			}
			Fallback string
		} `json:"path_set"`
		RatePolicy struct {
			Class      string
			EgressBps  int64 `json:"egress_bps"`
			IngressBps int64 `json:"ingress_bps"`
		} `json:"rate_policy"`
	}
	data, _ := json.Marshal(policy)
	json.Unmarshal(data, &pol)
	fallback := ""
	if pol.PathSet.Fallback != "" {
		fallback = " (fallback: " + pol.PathSet.Fallback + ")"
	}
	fmt.Fprintf(e.out, "Path set from the current state%s; rate class %s, egress %s, ingress %s\n", fallback,
		orDash(pol.RatePolicy.Class), bps(pol.RatePolicy.EgressBps), bps(pol.RatePolicy.IngressBps))
	t = newTable(e.out, "PLANE", "ADDRESS", "WEIGHT")
	for _, p := range pol.PathSet.Planes {
		t.row(p.Plane, p.Address, strconv.FormatFloat(p.Weight, 'f', 3, 64))
	}
	return t.flush()
}

// bps shows a rate; 0 is unlimited.
func bps(v int64) string {
	switch {
	case v <= 0:
		return "unlimited"
	case v >= 1e9:
		return strconv.FormatFloat(float64(v)/1e9, 'g', 4, 64) + " Gbit/s"
	default:
		return strconv.FormatFloat(float64(v)/1e6, 'g', 4, 64) + " Mbit/s"
	}
}

func bytesOf(v uint64) string {
	switch {
	case v >= 1<<30:
		return strconv.FormatFloat(float64(v)/(1<<30), 'f', 1, 64) + " GiB"
	case v >= 1<<20:
		return strconv.FormatFloat(float64(v)/(1<<20), 'f', 1, 64) + " MiB"
	default:
		return strconv.FormatUint(v, 10) + " B"
	}
}

type event struct {
	ID                              int64
	At                              time.Time
	SubjectKind                     string `json:"subject_kind"`
	Subject, Kind, From, To, Reason string
	Evidence                        map[string]any
}

func eventRow(ev event) []string {
	change := ev.Kind
	if ev.From != "" || ev.To != "" {
		change = ev.From + " -> " + ev.To
	}
	return []string{when(ev.At), ev.SubjectKind, ev.Subject, change, orDash(ev.Reason)}
}

func listEvents(e *env, fs *flag.FlagSet) error {
	q := url.Values{}
	if s := fs.Lookup("since").Value.String(); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			if d < 0 {
				return usagef("--since %s: a duration back is positive", s)
			}
			q.Set("since", time.Now().Add(-d).UTC().Format(time.RFC3339Nano))
		} else if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			q.Set("since", t.UTC().Format(time.RFC3339Nano))
		} else {
			return usagef("--since %q: want a duration (1h, 30m) or an RFC 3339 time", s)
		}
	}
	if v := fs.Lookup("subject").Value.String(); v != "" {
		q.Set("subject", v)
	}
	if v := fs.Lookup("plane").Value.String(); v != "" {
		q.Set("plane", v)
	}
	if v := fs.Lookup("kind").Value.String(); v != "" {
		q.Set("subject_kind", v)
	}
	follow := fs.Lookup("follow").Value.String() == "true"
	path := func() string {
		if len(q) == 0 {
			return "/api/v1/events"
		}
		return "/api/v1/events?" + q.Encode()
	}
	raw, items, err := listInto[event](e, path())
	if err != nil {
		return err
	}
	var t *table
	if !e.json {
		t = newTable(e.out, "TIME", "KIND", "SUBJECT", "CHANGE", "REASON")
	}
	show := func(raw []json.RawMessage, items []event) error {
		if e.json {
			if !follow { // one array; following, one object a line
				if raw == nil {
					raw = []json.RawMessage{}
				}
				return printJSON(e.out, raw)
			}
			for _, r := range raw {
				fmt.Fprintf(e.out, "%s\n", r)
			}
			return nil
		}
		for _, ev := range items {
			t.row(eventRow(ev)...)
		}
		return t.flush()
	}
	if err := show(raw, items); err != nil || !follow {
		return err
	}
	// Following: the list again from the last id seen, every interval (no
	// gap: ids only grow).
	var last int64
	for _, ev := range items {
		last = max(last, ev.ID)
	}
	q.Del("since")
	tick := time.NewTicker(e.follow)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return nil
		case <-tick.C:
		}
		p := path()
		if last > 0 {
			sep := "?"
			if strings.Contains(p, "?") {
				sep = "&"
			}
			p += sep + "cursor=" + strconv.FormatInt(last, 10)
		}
		raw, items, err := listInto[event](e, p)
		if err != nil {
			if e.ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, ev := range items {
			last = max(last, ev.ID)
		}
		if err := show(raw, items); err != nil {
			return err
		}
	}
}

type drainItem struct {
	ID              int64
	SubjectKind     string `json:"subject_kind"`
	Subject, Reason string
	CreatedBy       string     `json:"created_by"`
	CreatedAt       time.Time  `json:"created_at"`
	RemovedAt       *time.Time `json:"removed_at"`
}

func listDrains(e *env, fs *flag.FlagSet) error {
	path := "/api/v1/drains"
	if fs.Lookup("all").Value.String() == "true" {
		path += "?all=true"
	}
	return listed(e, path, []string{"ID", "SUBJECT", "REASON", "BY", "SINCE", "ENDED"}, func(d drainItem) []string {
		ended := "-"
		if d.RemovedAt != nil {
			ended = when(*d.RemovedAt)
		}
		return []string{strconv.FormatInt(d.ID, 10), d.SubjectKind + " " + d.Subject, d.Reason, d.CreatedBy, when(d.CreatedAt), ended}
	})
}

func drain(e *env, fs *flag.FlagSet) error {
	if fs.NArg() != 2 {
		return usagef("drain takes a kind (plane, switch or link) and a target, like: drain plane p1 --reason maintenance")
	}
	kind, target := fs.Arg(0), fs.Arg(1)
	if kind != "plane" && kind != "switch" && kind != "link" {
		return usagef("drain %s: the kind is plane, switch or link", kind)
	}
	reason := fs.Lookup("reason").Value.String()
	if reason == "" {
		return usagef("drain needs --reason (it lands in the history)")
	}
	q := url.Values{}
	dry := fs.Lookup("dry-run").Value.String() == "true"
	if dry {
		q.Set("dry_run", "true")
	}
	if fs.Lookup("force").Value.String() == "true" {
		q.Set("force", "true")
	}
	path := "/api/v1/drains"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var resp struct {
		Drain  *drainItem `json:"drain"`
		Impact struct {
			Affected []struct {
				Endpoint     string
				PlanesBefore []string `json:"planes_before"`
				PlanesAfter  []string `json:"planes_after"`
				Before       float64  `json:"capacity_before"`
				After        float64  `json:"capacity_after"`
				Stranded     bool
			}
			Stranded []string
		}
	}
	var raw map[string]any
	body := map[string]string{"subject_kind": kind, "subject": target, "reason": reason}
	if err := e.cli.Do(e.ctx, http.MethodPost, path, body, &raw); err != nil {
		return err
	}
	if e.json {
		return printJSON(e.out, raw)
	}
	data, _ := json.Marshal(raw)
	json.Unmarshal(data, &resp)
	if dry {
		fmt.Fprintf(e.out, "Dry run: draining %s %s would change %d endpoints' path sets and strand %d.\n", kind, target, len(resp.Impact.Affected), len(resp.Impact.Stranded))
	} else if resp.Drain != nil {
		fmt.Fprintf(e.out, "Drain %d: %s %s (%s); %d endpoints' path sets change. End it with: fabricctl undrain %d\n",
			resp.Drain.ID, kind, target, reason, len(resp.Impact.Affected), resp.Drain.ID)
	}
	if len(resp.Impact.Affected) == 0 {
		return nil
	}
	t := newTable(e.out, "ENDPOINT", "PLANES BEFORE", "PLANES AFTER", "CAPACITY BEFORE", "CAPACITY AFTER", "STRANDED")
	for _, a := range resp.Impact.Affected {
		t.row(a.Endpoint, strings.Join(a.PlanesBefore, ","), strings.Join(a.PlanesAfter, ","), pct(a.Before), pct(a.After), strconv.FormatBool(a.Stranded))
	}
	return t.flush()
}

func undrain(e *env, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return usagef("undrain takes the drain's id (fabricctl drains lists them)")
	}
	id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
	if err != nil || id <= 0 {
		return usagef("undrain %q: the id is a positive number", fs.Arg(0))
	}
	var raw map[string]any
	if err := e.cli.Do(e.ctx, http.MethodDelete, "/api/v1/drains/"+strconv.FormatInt(id, 10), nil, &raw); err != nil {
		return err
	}
	if e.json {
		if raw == nil {
			raw = map[string]any{"id": id, "ended": true}
		}
		return printJSON(e.out, raw)
	}
	fmt.Fprintf(e.out, "Drain %d ended.\n", id)
	return nil
}

func listAudit(e *env, fs *flag.FlagSet) error {
	type entry struct {
		At                    time.Time
		Actor, Action, Target string
		Role, Result, Method  string
		Status                int
	}
	n, _ := strconv.Atoi(fs.Lookup("limit").Value.String())
	if n < 1 || n > 1000 {
		return usagef("--limit %d: 1 to 1000", n)
	}
	var page struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := e.cli.Do(e.ctx, http.MethodGet, "/api/v1/audit?limit="+strconv.Itoa(n), nil, &page); err != nil {
		return err
	}
	if e.json {
		if page.Items == nil {
			page.Items = []json.RawMessage{}
		}
		return printJSON(e.out, page.Items)
	}
	t := newTable(e.out, "TIME", "ACTOR", "ACTION", "TARGET", "STATUS", "RESULT")
	for _, r := range page.Items {
		var it entry
		if err := json.Unmarshal(r, &it); err != nil {
			return fmt.Errorf("fabricctl: audit: an entry is not the JSON expected: %w", err)
		}
		t.row(when(it.At), it.Actor, it.Action, orDash(it.Target), strconv.Itoa(it.Status), orDash(it.Result))
	}
	return t.flush()
}

func listTokens(e *env, _ *flag.FlagSet) error {
	type token struct {
		ID                 int64
		Name, Role, Prefix string
		CreatedBy          string     `json:"created_by"`
		CreatedAt          time.Time  `json:"created_at"`
		ExpiresAt          *time.Time `json:"expires_at"`
		RevokedAt          *time.Time `json:"revoked_at"`
		LastUsedAt         *time.Time `json:"last_used_at"`
	}
	opt := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return when(*t)
	}
	return listed(e, "/api/v1/tokens", []string{"ID", "NAME", "ROLE", "PREFIX", "CREATED", "EXPIRES", "REVOKED", "LAST USED"}, func(t token) []string {
		return []string{strconv.FormatInt(t.ID, 10), t.Name, t.Role, t.Prefix, when(t.CreatedAt), opt(t.ExpiresAt), opt(t.RevokedAt), opt(t.LastUsedAt)}
	})
}

// demoControl shows or changes what bin/demo's fabric has failed.
func demoControl(e *env, fs *flag.FlagSet) error {
	var raw map[string]any
	switch args := fs.Args(); {
	case len(args) == 0:
		if err := e.cli.Do(e.ctx, http.MethodGet, "/api/v1/demo", nil, &raw); err != nil {
			return err
		}
	case len(args) >= 3 && (args[0] == "fail" || args[0] == "restore"):
		body := map[string]string{}
		switch {
		case args[1] == "plane" && len(args) == 3:
			body["plane"] = args[2]
		case args[1] == "port" && len(args) == 4:
			body["endpoint"], body["plane"] = args[2], args[3]
		default:
			return usagef("demo %s: plane P, or port ENDPOINT P", args[0])
		}
		if err := e.cli.Do(e.ctx, http.MethodPost, "/api/v1/demo/"+args[0], body, &raw); err != nil {
			return err
		}
	default:
		return usagef("demo takes nothing (show), or fail|restore plane P, or fail|restore port ENDPOINT P")
	}
	if e.json {
		return printJSON(e.out, raw)
	}
	var st struct {
		Planes []struct {
			Name      string
			Up        bool
			PortsDown []string `json:"ports_down"`
		}
	}
	data, _ := json.Marshal(raw)
	json.Unmarshal(data, &st)
	t := newTable(e.out, "PLANE", "AT THE SWITCH", "PORTS DOWN")
	for _, p := range st.Planes {
		state := "up"
		if !p.Up {
			state = "down"
		}
		t.row(p.Name, state, orDash(strings.Join(p.PortsDown, ",")))
	}
	return t.flush()
}
