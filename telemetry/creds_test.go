package telemetry

import (
	"errors"
	"strings"
	"testing"

	"github.com/multiplane/multiplane/planes"
)

func TestPasswordRules(t *testing.T) {
	t.Setenv("FABRICD_GNMI_SW0", "pw0")
	t.Setenv("FABRICD_DATABASE_SECRET", "db-secret-value")
	t.Setenv("FABRICD_GNMI_", "bare")
	tlsCfg := &planes.TLSConfig{}
	tests := []struct {
		name   string
		target planes.GNMITarget
		want   string // password, or
		err    string // an ErrCredentials containing this
	}{
		{"none", planes.GNMITarget{TLS: tlsCfg}, "", ""},
		{"over tls", planes.GNMITarget{TLS: tlsCfg, Username: "u", PasswordEnv: "FABRICD_GNMI_SW0"}, "pw0", ""},
		{"plaintext allowed", planes.GNMITarget{Insecure: true, Username: "u", PasswordEnv: "FABRICD_GNMI_SW0", AllowPlaintextPassword: true}, "pw0", ""},
		{"plaintext not allowed", planes.GNMITarget{Insecure: true, Username: "u", PasswordEnv: "FABRICD_GNMI_SW0"}, "", "without TLS"},
		{"outside the prefix", planes.GNMITarget{TLS: tlsCfg, Username: "u", PasswordEnv: "FABRICD_DATABASE_SECRET"}, "", "does not start with FABRICD_GNMI_"},
		{"outside the prefix, plaintext allowed", planes.GNMITarget{Insecure: true, Username: "u", PasswordEnv: "HOME", AllowPlaintextPassword: true}, "", "does not start with"},
		{"the prefix alone", planes.GNMITarget{TLS: tlsCfg, Username: "u", PasswordEnv: "FABRICD_GNMI_"}, "", "does not start with"},
		{"unset", planes.GNMITarget{TLS: tlsCfg, Username: "u", PasswordEnv: "FABRICD_GNMI_NOPE"}, "", "is not set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pw, err := password(tc.target)
			if tc.err == "" {
				if err != nil || pw != tc.want {
					t.Fatalf("password = %q, %v; want %q", pw, err, tc.want)
				}
				return
			}
			if !errors.Is(err, ErrCredentials) || !strings.Contains(err.Error(), tc.err) || pw != "" {
				t.Fatalf("password = %q, %v; want ErrCredentials containing %q", pw, err, tc.err)
			}
			if strings.Contains(err.Error(), "db-secret-value") {
				t.Fatal("the refused variable's value is in the error")
			}
		})
	}
}
