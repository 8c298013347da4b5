package version

import "testing"

func TestLinkerValuesFillWhatBuildInfoLacks(t *testing.T) {
	// go test binaries have no VCS stamp and "(devel)" as module version.
	module, commit = "v9.8.7", "0123456789ab"
	t.Cleanup(func() { module, commit = "", "" })
	i := Get()
	if i.Module != "v9.8.7" || i.Commit != "0123456789ab" {
		t.Fatalf("Get() = %+v", i)
	}
	if got, want := i.Short(), "v9.8.7 0123456789ab"; got != want {
		t.Fatalf("Short() = %q, want %q", got, want)
	}
	i.Modified = true
	if got, want := i.String(), "v9.8.7, commit 0123456789ab (modified), "+i.GoVersion; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func TestUnknownCommitSaysSo(t *testing.T) {
	i := Info{Module: "(devel)", GoVersion: "go1"}
	if got, want := i.String(), "(devel), commit unknown, go1"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := i.Short(); got != "(devel)" {
		t.Fatalf("Short() = %q", got)
	}
}
