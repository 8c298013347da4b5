package api

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/enrollment"
)

type createEnrollmentTokenRequest struct {
	Endpoint   string `json:"endpoint"`
	TTLSeconds int64  `json:"ttl_seconds,omitempty"`
}

type createEnrollmentTokenResponse struct {
	enrollment.Token
	Secret        string `json:"token"`
	CAFingerprint string `json:"ca_fingerprint"`
}

// enrollingRole is the audit role of an endpoint that enrolls or renews.
const enrollingRole = "endpoint"

func (s *Server) enrollment(c *gin.Context) (*enrollment.Service, bool) {
	if s.deps.Enrollment == nil {
		fail(c, enrollment.ErrDisabled)
		return nil, false
	}
	return s.deps.Enrollment, true
}

func (s *Server) createEnrollmentToken(c *gin.Context) {
	var req createEnrollmentTokenRequest
	if err := s.readJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	if req.Endpoint == "" {
		fail(c, badRequest("invalid_field", "endpoint", "endpoint is required"))
		return
	}
	if err := checkRange("ttl_seconds", req.TTLSeconds, 0, int64(enrollment.MaxTokenTTL/time.Second),
		"0 (the default, 1 hour) or a lifetime in seconds up to 7 days"); err != nil {
		fail(c, err)
		return
	}
	svc, ok := s.enrollment(c)
	if !ok {
		return
	}
	p, _ := principal(c)
	secret, tok, err := svc.MintToken(c.Request.Context(), req.Endpoint, time.Duration(req.TTLSeconds)*time.Second, p.Name)
	if err != nil {
		fail(c, err)
		return
	}
	c.Set(ctxAuditDetail, gin.H{"token_id": tok.ID, "endpoint": tok.Endpoint, "expires_at": tok.ExpiresAt})
	c.JSON(http.StatusCreated, createEnrollmentTokenResponse{Token: tok, Secret: secret, CAFingerprint: svc.CAFingerprint()})
}

func (s *Server) listEnrollmentTokens(c *gin.Context) {
	svc, ok := s.enrollment(c)
	if !ok {
		return
	}
	limit := 100
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			fail(c, badRequest("invalid_parameter", "limit", "limit must be 1 to 1000"))
			return
		}
		limit = n
	}
	toks, err := svc.Tokens(c.Request.Context(), limit)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, listResponse[enrollment.Token]{Items: toks})
}

type enrollRequest struct {
	Name string `json:"name"`
	CSR  string `json:"csr" limit:"text"`
}

// enroll trades a bootstrap token (the bearer) for credentials. It needs
// TLS: the token and the etcd URLs must not cross the network in clear.
// Refused tokens count against the address's failed-authentication
// budget, like bad API tokens, and are audited in the anonymous summary.
func (s *Server) enroll(c *gin.Context) {
	svc, ok := s.enrollment(c)
	if !ok {
		return
	}
	if c.Request.TLS == nil {
		fail(c, &Error{Status: http.StatusForbidden, Code: "tls_required", Message: "enrollment needs fabricd's API over TLS (fabricd --tls)"})
		return
	}
	client := c.ClientIP()
	if err := s.reserveAuth(c, client); err != nil {
		fail(c, err)
		return
	}
	secret, _ := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	secret = strings.TrimSpace(secret)
	if !enrollment.WellFormedToken(secret) {
		fail(c, enrollment.ErrInvalidToken)
		return
	}
	req, ok := s.enrollBody(c)
	if !ok {
		return
	}
	creds, err := svc.Enroll(c.Request.Context(), secret, req.Name, req.CSR)
	if err != nil {
		fail(c, err)
		return
	}
	s.authLimiter.refund(client)
	c.Set(ctxPrincipal, auth.Principal{Name: "enrollment:" + req.Name, Role: enrollingRole})
	c.Set(ctxAuditDetail, gin.H{"endpoint": creds.Endpoint, "expires_at": creds.ExpiresAt})
	c.JSON(http.StatusOK, creds)
}

// renew issues new credentials to the holder of a current client
// certificate, shown in the TLS handshake.
func (s *Server) renew(c *gin.Context) {
	svc, ok := s.enrollment(c)
	if !ok {
		return
	}
	if c.Request.TLS == nil || len(c.Request.TLS.VerifiedChains) == 0 {
		fail(c, &Error{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: "renewal needs the endpoint's current client certificate over TLS"})
		return
	}
	cert := c.Request.TLS.VerifiedChains[0][0]
	req, ok := s.enrollBody(c)
	if !ok {
		return
	}
	if req.Name != "" && req.Name != cert.Subject.CommonName {
		fail(c, badRequest("invalid_field", "name", "name %q is not the certificate's %q", req.Name, cert.Subject.CommonName))
		return
	}
	creds, err := svc.Renew(c.Request.Context(), cert, req.CSR)
	if err != nil {
		fail(c, err)
		return
	}
	c.Set(ctxPrincipal, auth.Principal{Name: "endpoint:" + creds.Endpoint, Role: enrollingRole})
	c.Set(ctxAuditDetail, gin.H{"endpoint": creds.Endpoint, "expires_at": creds.ExpiresAt})
	c.JSON(http.StatusOK, creds)
}

func (s *Server) enrollBody(c *gin.Context) (enrollRequest, bool) {
	var req enrollRequest
	if err := s.readJSON(c, &req); err != nil {
		fail(c, err)
		return req, false
	}
	if req.CSR == "" {
		fail(c, badRequest("invalid_field", "csr", "csr (a PEM certificate request) is required"))
		return req, false
	}
	return req, true
}

type revokeCredentialsResponse struct {
	Endpoint            string `json:"endpoint"`
	RevokedCertificates int    `json:"revoked_certificates"`
}

func (s *Server) revokeCredentials(c *gin.Context) {
	svc, ok := s.enrollment(c)
	if !ok {
		return
	}
	name := c.Param("name")
	n, err := svc.Revoke(c.Request.Context(), name)
	if err != nil {
		fail(c, err)
		return
	}
	c.Set(ctxAuditDetail, gin.H{"endpoint": name, "revoked_certificates": n})
	c.JSON(http.StatusOK, revokeCredentialsResponse{Endpoint: name, RevokedCertificates: n})
}
