// Package fleet reads what endpoint agents report in etcd: each agent's
// status (under its lease) and how far the fleet converged on the
// published generation.
//
//	r := fleet.New(cli)
//	st, err := r.Status(ctx, "host-a")
//	conv, err := r.Convergence(ctx, expected)
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/multiplane/multiplane/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNoStatus is returned when an endpoint has no live status.
var ErrNoStatus = errors.New("fleet: no status from this endpoint (agent not running or not connected)")

// Reader reads agents' reports.
type Reader struct{ cli *clientv3.Client }

// New returns a reader.
func New(cli *clientv3.Client) *Reader { return &Reader{cli: cli} }

// Status returns an endpoint's status.
func (r *Reader) Status(ctx context.Context, endpoint string) (contract.StatusDoc, error) {
	var st contract.StatusDoc
	resp, err := r.cli.Get(ctx, contract.KeyStatus(endpoint))
	if err != nil {
		return st, fmt.Errorf("fleet: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return st, fmt.Errorf("%w: %s", ErrNoStatus, endpoint)
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
		return st, fmt.Errorf("fleet: status of %s: %w", endpoint, err)
	}
	return st, nil
}

// Agent is what the list of endpoints shows of each one's agent.
type Agent struct {
	Reporting         bool     `json:"reporting"` // has a live status
	AppliedGeneration uint64   `json:"applied_generation"`
	Version           string   `json:"version,omitempty"`
	Source            string   `json:"source,omitempty"`
	Errors            []string `json:"errors,omitempty"`
}

// Agents reads every agent's status in one request and returns what names
// (the topology's endpoints) have; endpoints without a status are not
// reporting.
func (r *Reader) Agents(ctx context.Context, names []string) (map[string]Agent, error) {
	resp, err := r.cli.Get(ctx, contract.PrefixStatus, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	out := make(map[string]Agent, len(names))
	for _, n := range names {
		out[n] = Agent{}
	}
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), contract.PrefixStatus)
		if _, ok := out[name]; !ok {
			continue // not in the topology
		}
		var st contract.StatusDoc
		if json.Unmarshal(kv.Value, &st) != nil {
			continue
		}
		out[name] = Agent{Reporting: true, AppliedGeneration: st.AppliedGeneration, Version: st.Version, Source: st.Source, Errors: st.Errors}
	}
	return out, nil
}

// Laggard is an endpoint behind the target generation.
type Laggard struct {
	Endpoint          string   `json:"endpoint"`
	AppliedGeneration uint64   `json:"applied_generation"`
	Reporting         bool     `json:"reporting"` // has a live status
	Errors            []string `json:"errors,omitempty"`
}

// View is the fleet's convergence on the published generation.
type View struct {
	TargetGeneration uint64 `json:"target_generation"`
	Endpoints        int    `json:"endpoints"`
	Applied          int    `json:"applied"`
	Reporting        int    `json:"reporting"`
	// Versions counts the reporting agents by the version they run
	// (module version and commit), to follow a rolling upgrade; each
	// endpoint's is in its status.
	Versions map[string]int `json:"versions"`
	Laggards []Laggard      `json:"laggards"`
}

// Bounds of View.Versions: an agent's word is shortened, and past
// maxVersions-1 distinct ones the rest count as "other".
const (
	maxVersions   = 32
	maxVersionLen = 64
)

func (v *View) countVersion(version string) {
	switch {
	case version == "":
		version = "unknown"
	case len(version) > maxVersionLen:
		version = strings.ToValidUTF8(version[:maxVersionLen], "") + "…"
	}
	if _, ok := v.Versions[version]; !ok && len(v.Versions) >= maxVersions-1 { // leaves room for "other"
		version = "other"
	}
	v.Versions[version]++
}

// maxLaggards bounds the list in a View.
const maxLaggards = 100

// Convergence compares the statuses with the generation key; expected are
// the endpoints of the topology (those not reporting are laggards too).
// An endpoint has converged once it applied the configuration of the
// target: its generation is the later of its own document's and the
// planes' (contract.Configuration).
func (r *Reader) Convergence(ctx context.Context, expected []string) (View, error) {
	v := View{Laggards: []Laggard{}, Versions: map[string]int{}}
	s, err := r.read(ctx)
	if err != nil {
		return v, err
	}
	v.TargetGeneration = s.target
	names := slices.Clone(expected)
	slices.Sort(names)
	v.Endpoints = len(names)
	for _, name := range names {
		st, ok := s.statuses[name]
		if ok {
			v.Reporting++
			v.countVersion(st.Version)
		}
		docGen := s.docGen[name]
		need := min(max(docGen, s.planesGen), v.TargetGeneration)
		if ok && st.AppliedGeneration >= need && docGen > 0 {
			v.Applied++
			continue
		}
		if len(v.Laggards) < maxLaggards {
			v.Laggards = append(v.Laggards, Laggard{Endpoint: name, AppliedGeneration: st.AppliedGeneration, Reporting: ok, Errors: st.Errors})
		}
	}
	return v, nil
}

// snapshot is one consistent read of what convergence is judged from.
type snapshot struct {
	target    uint64
	planesGen uint64 // the generation at which the planes last changed
	statuses  map[string]contract.StatusDoc
	docGen    map[string]uint64 // generation of each endpoint's own document
}

// read gets the generation key, every status and every endpoint
// document's generation in one transaction.
func (r *Reader) read(ctx context.Context) (snapshot, error) {
	s := snapshot{statuses: map[string]contract.StatusDoc{}, docGen: map[string]uint64{}}
	resp, err := r.cli.Txn(ctx).Then(
		clientv3.OpGet(contract.KeyGeneration),
		clientv3.OpGet(contract.PrefixStatus, clientv3.WithPrefix()),
		clientv3.OpGet(contract.PrefixEndpoints, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return s, fmt.Errorf("fleet: %w", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var g contract.GenerationDoc
		if err := json.Unmarshal(kvs[0].Value, &g); err != nil {
			return s, fmt.Errorf("fleet: generation key: %w", err)
		}
		s.target, s.planesGen = g.Generation, g.PlanesGeneration
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var st contract.StatusDoc
		if json.Unmarshal(kv.Value, &st) == nil {
			s.statuses[strings.TrimPrefix(string(kv.Key), contract.PrefixStatus)] = st
		}
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		var d struct {
			Generation uint64 `json:"generation"`
		}
		if json.Unmarshal(kv.Value, &d) == nil {
			s.docGen[strings.TrimPrefix(string(kv.Key), contract.PrefixEndpoints)] = d.Generation
		}
	}
	return s, nil
}
