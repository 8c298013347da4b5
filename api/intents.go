package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/multiplane/multiplane/intents"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy"
)

type drainRequest struct {
	TargetKind policy.DrainKind `json:"subject_kind"`
	Target     string           `json:"subject"`
	Reason     string           `json:"reason" limit:"text"`
}

// checkTarget rejects drains of things the topology does not have.
func checkTarget(t *planes.Topology, kind policy.DrainKind, target string) error {
	var names []string
	switch kind {
	case policy.DrainPlane:
		for _, p := range t.Planes {
			names = append(names, p.Name)
		}
	case policy.DrainSwitch:
		for _, s := range t.Switches {
			names = append(names, s.Name)
		}
	case policy.DrainLink:
		for _, l := range t.Links() {
			names = append(names, l.Name)
		}
	default:
		return badRequest("invalid_field", "subject_kind", "subject_kind must be plane, switch or link")
	}
	if target == "" {
		return badRequest("invalid_field", "subject", "subject is required")
	}
	if !slices.Contains(names, target) {
		return badRequest("invalid_field", "subject", "the topology has no %s %q", kind, target)
	}
	return nil
}

func boolQuery(c *gin.Context, name string) (bool, error) {
	v := c.Query(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("invalid_parameter", name, "%s must be true or false", name)
	}
	return b, nil
}

// createDrain adds a drain; ?dry_run=true only reports its impact, and a
// drain that would strand an endpoint is refused (409) unless ?force=true.
func (s *Server) createDrain(c *gin.Context) {
	var req drainRequest
	if err := s.readJSON(c, &req); err != nil {
		if e, ok := err.(*Error); ok && (e.Field == "target_kind" || e.Field == "target") {
			e.Message += "; a drain names what it drains as subject_kind and subject, as events do"
		}
		fail(c, err)
		return
	}
	dryRun, err := boolQuery(c, "dry_run")
	if err != nil {
		fail(c, err)
		return
	}
	force, err := boolQuery(c, "force")
	if err != nil {
		fail(c, err)
		return
	}
	if req.Reason == "" {
		fail(c, badRequest("invalid_field", "reason", "reason is required (it lands in the history)"))
		return
	}
	in, err := s.deps.PolicyInput(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	if err := checkTarget(in.Topology, req.TargetKind, req.Target); err != nil {
		fail(c, err)
		return
	}
	c.Set(ctxAuditTarget, string(req.TargetKind)+"="+req.Target)
	want := policy.Drain{Kind: req.TargetKind, Target: req.Target}
	drained := slices.ContainsFunc(in.Intents.Drains, func(d policy.Drain) bool { return d.Kind == want.Kind && d.Target == want.Target })
	if drained && !dryRun {
		fail(c, fmt.Errorf("%w: %s %s", intents.ErrDrained, req.TargetKind, req.Target))
		return
	}
	impact := policy.WhatIf(in, s.deps.PolicyConfig, want)
	if dryRun {
		c.JSON(http.StatusOK, gin.H{"dry_run": true, "impact": impact})
		return
	}
	if len(impact.Stranded) > 0 && !force {
		fail(c, &Error{Status: http.StatusConflict, Code: "would_strand", Field: "target",
			Message: fmt.Sprintf("draining %s %s would leave %d endpoints with no usable plane (%v); add ?force=true to drain anyway",
				req.TargetKind, req.Target, len(impact.Stranded), head(impact.Stranded, 5)),
			Details: impact})
		return
	}
	p, _ := principal(c)
	d, err := s.deps.Intents.AddDrain(c.Request.Context(), req.TargetKind, req.Target, req.Reason, p.Name)
	if err != nil {
		fail(c, err)
		return
	}
	s.intentsChanged(c.Request.Context())
	c.Set(ctxAuditDetail, gin.H{"drain_id": d.ID, "subject_kind": d.Kind, "subject": d.Target, "forced": force && len(impact.Stranded) > 0})
	c.JSON(http.StatusCreated, gin.H{"drain": d, "impact": impact})
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

func (s *Server) intentsChanged(ctx context.Context) {
	if s.deps.OnIntents != nil {
		s.deps.OnIntents(ctx)
	}
}

func (s *Server) listDrains(c *gin.Context) {
	all, err := boolQuery(c, "all")
	if err != nil {
		fail(c, err)
		return
	}
	ds, err := s.deps.Intents.Drains(c.Request.Context(), all)
	if err != nil {
		fail(c, err)
		return
	}
	list(c, ds, func(d intents.Drain) string { return fmt.Sprintf("%020d", d.ID) }, func(intents.Drain) bool { return true })
}

func (s *Server) deleteDrain(c *gin.Context) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		fail(c, badRequest("invalid_parameter", "id", "drain id must be a positive integer"))
		return
	}
	p, _ := principal(c)
	if err := s.deps.Intents.RemoveDrain(c.Request.Context(), id, p.Name); err != nil {
		fail(c, err)
		return
	}
	s.intentsChanged(c.Request.Context())
	c.Status(http.StatusNoContent)
}

func (s *Server) listRateClasses(c *gin.Context) {
	cs, err := s.deps.Intents.Classes(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	// The default class applies to every unassigned endpoint: listed even
	// when no operator defined it (then unlimited).
	if !slices.ContainsFunc(cs, func(rc policy.RateClass) bool { return rc.Name == policy.DefaultClass }) {
		cs = append(cs, policy.RateClass{Name: policy.DefaultClass})
	}
	list(c, cs, func(rc policy.RateClass) string { return rc.Name }, func(policy.RateClass) bool { return true })
}

type rateClassRequest struct {
	EgressBps  *int64 `json:"egress_bps"`
	IngressBps *int64 `json:"ingress_bps"`
	Priority   *int64 `json:"priority"`
}

// Ranges of a rate class: rates up to 100 Tbit/s (0 = unlimited), and
// eight priorities as in IEEE 802.1p traffic classes.
const (
	maxRateBps  = 100e12
	maxPriority = 7
)

func (s *Server) putRateClass(c *gin.Context) {
	var req rateClassRequest
	if err := s.readJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	name := c.Param("name")
	if !planes.ValidName(name) {
		fail(c, badRequest("invalid_parameter", "name", "rate class name %s: letters, digits, '.', '_', '-'; at most 63", quoteBounded(name)))
		return
	}
	if req.EgressBps == nil && req.IngressBps == nil && req.Priority == nil {
		fail(c, badRequest("invalid_json", "", "give at least one of egress_bps, ingress_bps and priority (0 = unlimited rates)"))
		return
	}
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	egress, ingress, prio := val(req.EgressBps), val(req.IngressBps), val(req.Priority)
	for _, err := range []error{
		checkRange("egress_bps", egress, 0, maxRateBps, "0 (unlimited) or a rate in bit/s"),
		checkRange("ingress_bps", ingress, 0, maxRateBps, "0 (unlimited) or a rate in bit/s"),
		checkRange("priority", prio, 0, maxPriority, "a traffic class"),
	} {
		if err != nil {
			fail(c, err)
			return
		}
	}
	rc := policy.RateClass{Name: name, EgressBps: egress, IngressBps: ingress, Priority: int(prio)}
	if err := s.deps.Intents.PutClass(c.Request.Context(), rc); err != nil {
		fail(c, err)
		return
	}
	s.intentsChanged(c.Request.Context())
	c.JSON(http.StatusOK, rc)
}

func (s *Server) deleteRateClass(c *gin.Context) {
	if err := s.deps.Intents.DeleteClass(c.Request.Context(), c.Param("name")); err != nil {
		fail(c, err)
		return
	}
	s.intentsChanged(c.Request.Context())
	c.Status(http.StatusNoContent)
}

type assignRequest struct {
	Class string `json:"class"`
}

func (s *Server) assignRateClass(c *gin.Context) {
	var req assignRequest
	if err := s.readJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	if req.Class == "" {
		fail(c, badRequest("invalid_field", "class", "class is required (DELETE removes an assignment)"))
		return
	}
	if err := s.deps.Intents.Assign(c.Request.Context(), c.Param("name"), req.Class); err != nil {
		fail(c, err)
		return
	}
	s.intentsChanged(c.Request.Context())
	c.JSON(http.StatusOK, gin.H{"endpoint": c.Param("name"), "class": req.Class})
}

func (s *Server) unassignRateClass(c *gin.Context) {
	if err := s.deps.Intents.Assign(c.Request.Context(), c.Param("name"), ""); err != nil {
		fail(c, err)
		return
	}
	s.intentsChanged(c.Request.Context())
	c.Status(http.StatusNoContent)
}

// endpointPolicy computes an endpoint's path set and rate policy now.
func (s *Server) endpointPolicy(c *gin.Context) {
	in, err := s.deps.PolicyInput(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	getByName(c, "endpoint", policy.Compute(in, s.deps.PolicyConfig).Endpoints,
		func(ep policy.EndpointPolicy) string { return ep.Endpoint }, func(ep policy.EndpointPolicy) any { return ep })
}

func (s *Server) endpointStatus(c *gin.Context) {
	st, err := s.deps.Fleet.Status(c.Request.Context(), c.Param("name"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

func (s *Server) convergence(c *gin.Context) {
	snap, ok := s.snapshot(c)
	if !ok {
		return
	}
	names := make([]string, len(snap.Topology.Endpoints))
	for i, e := range snap.Topology.Endpoints {
		names[i] = e.Name
	}
	v, err := s.deps.Fleet.Convergence(c.Request.Context(), names)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}
