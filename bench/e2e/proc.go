package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/planes"
)

// cpuSeconds is a process's user+system CPU time.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start at ") ".
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

// rssBytes is a process's resident set.
func rssBytes(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}

// metric reads one sample (summing label sets) from fabricd's /metrics.
func metric(ctx context.Context, fd *fabricdproc.Proc, name string) (float64, error) {
	body, err := scrape(ctx, fd)
	if err != nil {
		return 0, err
	}
	return sumMetric(bytes.NewReader(body), name)
}

// scrape returns fabricd's /metrics answer.
func scrape(ctx context.Context, fd *fabricdproc.Proc) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", fd.URL()+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func sumMetric(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	total, found := 0.0, false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("metric %s not exported", name)
	}
	return total, sc.Err()
}

// sseEvent is a state change read from fabricd's stream.
type sseEvent struct {
	At                             time.Time // arrival at the benchmark
	Stamped                        time.Time // when fabricd's health engine made the change
	SubjectKind, Subject, From, To string
}

func streamEvents(ctx context.Context, fd *fabricdproc.Proc) (<-chan sseEvent, error) {
	resp, err := fd.Do(ctx, "GET", "/api/v1/stream", nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("stream: %s", resp.Status)
	}
	out := make(chan sseEvent, 1024)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "state_change":
				now := time.Now()
				var e struct {
					At          time.Time
					SubjectKind string `json:"subject_kind"`
					Subject     string
					From, To    string
				}
				if jsonUnmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e) == nil {
					select {
					case out <- sseEvent{At: now, Stamped: e.At, SubjectKind: e.SubjectKind, Subject: e.Subject, From: e.From, To: e.To}:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	return out, nil
}

// system is a fleet of emulated switches and a fabricd collecting from them.
type system struct {
	fleet *gnmisim.Fleet
	topo  *planes.Topology
	fd    *fabricdproc.Proc
}

func (s *system) close() {
	if s.fd != nil {
		s.fd.Stop()
	}
	s.fleet.Close()
}

// startSystem starts the fleet, writes its topology and starts fabricd on it
// in a fresh data directory under workDir, with more flags in args.
func startSystem(ctx context.Context, fc gnmisim.FleetConfig, fabricdBin, workDir, name string, args ...string) (*system, error) {
	fleet, err := gnmisim.StartFleet(fc)
	if err != nil {
		return nil, err
	}
	s := &system{fleet: fleet, topo: fleet.Topology()}
	dataDir := filepath.Join(workDir, name)
	os.RemoveAll(dataDir)
	topoFile := filepath.Join(dataDir, "topology.json")
	data, _ := json.Marshal(s.topo)
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		s.close()
		return nil, err
	}
	if err := os.WriteFile(topoFile, data, 0o644); err != nil {
		s.close()
		return nil, err
	}
	s.fd, err = fabricdproc.Start(ctx, fabricdproc.Options{Bin: fabricdBin, DataDir: dataDir,
		Args: append([]string{"--topology", topoFile, "--log-level", "warn", "--health-flap-damping=false",
			"--telemetry-sample-interval", fc.Tick.String()}, args...)})
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// histogramQuantile estimates a quantile of a Prometheus histogram from
// fabricd's /metrics, interpolating linearly inside the bucket.
func histogramQuantile(ctx context.Context, fd *fabricdproc.Proc, name string, q float64) (float64, error) {
	body, err := scrape(ctx, fd)
	if err != nil {
		return 0, err
	}
	type bucket struct{ le, n float64 }
	var buckets []bucket
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+`_bucket{le="`)
		if !ok {
			continue
		}
		leStr, val, _ := strings.Cut(rest, `"} `)
		le, err1 := strconv.ParseFloat(leStr, 64)
		n, err2 := strconv.ParseFloat(val, 64)
		if leStr == "+Inf" {
			le, err1 = math.Inf(1), nil
		}
		if err1 == nil && err2 == nil {
			buckets = append(buckets, bucket{le, n})
		}
	}
	if len(buckets) == 0 || buckets[len(buckets)-1].n == 0 {
		return 0, fmt.Errorf("histogram %s is empty", name)
	}
	rank := q * buckets[len(buckets)-1].n
	prevLe, prevN := 0.0, 0.0
	for _, b := range buckets {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return prevLe, nil
			}
			return prevLe + (b.le-prevLe)*(rank-prevN)/math.Max(b.n-prevN, 1), nil
		}
		prevLe, prevN = b.le, b.n
	}
	return prevLe, nil
}
