package contract

import (
	"errors"
	"testing"
)

func TestCheckSchema(t *testing.T) {
	for v, ok := range map[string]bool{
		"": true, "1.0": true, "1.12": true,
		"2.0": false, "0.9": false, "1": false, "1.x": false, "v1.0": false, "1.0.1": false, "-1.0": false,
	} {
		err := CheckSchema(v)
		if (err == nil) != ok {
			t.Errorf("CheckSchema(%q) = %v, want ok %v", v, err, ok)
		}
		if err != nil && !errors.Is(err, ErrSchema) {
			t.Errorf("CheckSchema(%q) = %v, not ErrSchema", v, err)
		}
	}
}

func TestValidateRefusesNewerMajor(t *testing.T) {
	d := EndpointDoc{Schema: "2.0", Generation: 1, Endpoint: "a", PathSet: PathSet{Planes: []PlanePath{
		{Plane: "p0", Index: 0, Address: "10.0.0.1", Weight: 1, Entropy: 1}}}}
	if err := d.Validate("a", 1); !errors.Is(err, ErrInvalidDocument) || !errors.Is(err, ErrSchema) {
		t.Fatalf("Validate = %v, want ErrInvalidDocument and ErrSchema", err)
	}
	d.Schema = SchemaVersion
	if err := d.Validate("a", 1); err != nil {
		t.Fatalf("Validate = %v", err)
	}
}
