package contract

import "time"

// Enrollment over fabricd's REST API (docs/deploy.md): an endpoint posts
// an EnrollRequest to PathEnroll with its bootstrap token as bearer, or
// to PathRenew with its current client certificate, and gets its
// credentials back.
const (
	PathEnroll = "/api/v1/enroll"
	PathRenew  = "/api/v1/enroll/renew"
)

// EnrollRequest carries the endpoint's certificate request (PEM, Common
// Name = Name); its private key never leaves the host.
type EnrollRequest struct {
	Name string `json:"name"`
	CSR  string `json:"csr"`
}

// Credentials are what an enrolled endpoint needs to reach etcd.
type Credentials struct {
	Endpoint      string    `json:"endpoint"`
	Certificate   string    `json:"certificate"` // PEM, CN = Endpoint, client authentication
	CA            string    `json:"ca"`          // PEM, the CA of fabricd's API and etcd
	CAFingerprint string    `json:"ca_fingerprint"`
	EtcdEndpoints []string  `json:"etcd_endpoints"`
	EtcdUser      string    `json:"etcd_user"`
	ExpiresAt     time.Time `json:"expires_at"`
}
