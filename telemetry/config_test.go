package telemetry

import (
	"flag"
	"testing"
	"time"
)

func TestRegisterFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--telemetry-sample-interval=250ms", "--telemetry-backoff-max=5s"}); err != nil {
		t.Fatal(err)
	}
	c, err := c.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.SampleInterval != 250*time.Millisecond || c.SilenceTimeout != 750*time.Millisecond || c.BackoffMax != 5*time.Second || c.BackoffMin != DefaultBackoffMin {
		t.Fatalf("%+v", c)
	}
}
