package contract

import (
	"errors"
	"testing"
)

func TestCheckSchema(t *testing.T) {
	for v, want := range map[string][2]bool{ // CheckSchema, CheckReportSchema
		"": {false, true}, "1.0": {false, true}, "1.12": {false, true},
		"2.0": {true, true}, "2.7": {true, true},
		"3.0": {false, false}, "0.9": {false, false}, "1": {false, false}, "1.x": {false, false},
		"v1.0": {false, false}, "2.0.1": {false, false}, "-1.0": {false, false},
	} {
		for i, check := range []func(string) error{CheckSchema, CheckReportSchema} {
			err := check(v)
			if (err == nil) != want[i] {
				t.Errorf("check %d (%q) = %v, want ok %v", i, v, err, want[i])
			}
			if err != nil && !errors.Is(err, ErrSchema) {
				t.Errorf("check %d (%q) = %v, not ErrSchema", i, v, err)
			}
		}
	}
}

func TestValidateRefusesNewerMajor(t *testing.T) {
	d := EndpointDoc{Schema: "3.0", Generation: 1, Endpoint: "a", PathSet: PathSet{Planes: []PlanePath{
		{Plane: "p0", Index: 0, Address: "10.0.0.1", Weight: 1, Entropy: 1}}}}
	if err := d.Validate("a", 1); !errors.Is(err, ErrInvalidDocument) || !errors.Is(err, ErrSchema) {
		t.Fatalf("Validate = %v, want ErrInvalidDocument and ErrSchema", err)
	}
	for _, v := range []string{"1.1", SchemaVersion} { // a saved 1.x configuration still loads
		d.Schema = v
		if err := d.Validate("a", 1); err != nil {
			t.Fatalf("Validate(%s) = %v", v, err)
		}
	}
}
