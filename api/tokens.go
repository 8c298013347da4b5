package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/multiplane/multiplane/audit"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/internal/page"
)

type createTokenRequest struct {
	Name       string    `json:"name"`
	Role       auth.Role `json:"role"`
	TTLSeconds int64     `json:"ttl_seconds,omitempty"`
}

type createTokenResponse struct {
	auth.Token
	Secret string `json:"token"`
}

// maxTokenTTL bounds ttl_seconds before it becomes a time.Duration (a
// larger value would overflow into the past or into forever).
const maxTokenTTL = int64(auth.MaxTTL / time.Second)

func (s *Server) createToken(c *gin.Context) {
	var req createTokenRequest
	if err := s.readJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	switch {
	case req.Name == "" || len(req.Name) > auth.MaxNameBytes:
		fail(c, badRequest("invalid_field", "name", "name is required (at most %d bytes)", auth.MaxNameBytes))
		return
	}
	if err := checkRange("ttl_seconds", req.TTLSeconds, 0, maxTokenTTL, "0 (no expiry) or a lifetime in seconds up to 10 years"); err != nil {
		fail(c, err)
		return
	}
	p, _ := principal(c)
	secret, tok, err := s.deps.Tokens.Mint(c.Request.Context(), req.Name, req.Role, p.Name, time.Duration(req.TTLSeconds)*time.Second)
	if err != nil {
		fail(c, err)
		return
	}
	c.Set(ctxAuditDetail, gin.H{"token_id": tok.ID, "name": tok.Name, "role": tok.Role})
	c.JSON(http.StatusCreated, createTokenResponse{Token: tok, Secret: secret})
}

func (s *Server) listTokens(c *gin.Context) {
	toks, err := s.deps.Tokens.List(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	list(c, toks, func(t auth.Token) string { return fmt.Sprintf("%020d", t.ID) }, func(auth.Token) bool { return true })
}

func (s *Server) revokeToken(c *gin.Context) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		fail(c, badRequest("invalid_parameter", "id", "token id must be a positive integer"))
		return
	}
	if err := s.deps.Tokens.Revoke(c.Request.Context(), id); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// listAudit pages newest first; the cursor is the id of the last entry.
func (s *Server) listAudit(c *gin.Context) {
	req, err := page.Parse(c.Query("limit"), "")
	if err != nil {
		fail(c, err)
		return
	}
	var before int64
	if cur := c.Query("cursor"); cur != "" {
		if before, err = strconv.ParseInt(cur, 10, 64); err != nil || before <= 0 {
			fail(c, badRequest("invalid_parameter", "cursor", "cursor is not one this API returned"))
			return
		}
	}
	entries, err := s.deps.Audit.List(c.Request.Context(), before, req.Limit)
	if err != nil {
		fail(c, err)
		return
	}
	resp := listResponse[audit.Entry]{Items: entries}
	if len(entries) == req.Limit {
		resp.NextCursor = strconv.FormatInt(entries[len(entries)-1].ID, 10)
	}
	c.JSON(http.StatusOK, resp)
}

// whoAmI is who the request's token is, and what it may do.
type whoAmI struct {
	Name    string   `json:"name"`
	Role    string   `json:"role"`
	TokenID int64    `json:"token_id,omitempty"`
	Can     []string `json:"can"`  // the roles' abilities: view, operate (drains, rate classes), administer (topology, tokens, audit)
	Demo    bool     `json:"demo"` // fabricd has a demo fabric to fail and restore (/api/v1/demo)
}

func (s *Server) whoami(c *gin.Context) {
	p, _ := principal(c)
	w := whoAmI{Name: p.Name, Role: string(p.Role), TokenID: p.TokenID, Can: []string{"view"}, Demo: s.deps.Demo != nil}
	if p.Role.Allows(auth.RoleOperator) {
		w.Can = append(w.Can, "operate")
	}
	if p.Role.Allows(auth.RoleAdmin) {
		w.Can = append(w.Can, "administer")
	}
	c.JSON(http.StatusOK, w)
}
