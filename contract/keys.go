package contract

// Keys of the etcd layout (docs/etcd-layout.md).
const (
	Prefix          = "/multiplane/v1/"
	KeyGeneration   = Prefix + "fabric/generation"
	KeyPlanes       = Prefix + "fabric/planes"
	KeyPorts        = Prefix + "fabric/ports"
	PrefixEndpoints = Prefix + "endpoints/"
	PrefixDirectory = Prefix + "directory/"
	PrefixStatus    = Prefix + "status/"
	PrefixLeader    = Prefix + "leader/"
	// Sharded telemetry (package shard): live replicas, each switch's
	// owner, and the owner's view of the switch.
	PrefixReplicas    = Prefix + "shard/replicas/"
	PrefixOwners      = Prefix + "shard/owners/"
	PrefixSwitchViews = Prefix + "shard/switches/"
)

// KeyEndpoint is the key of an endpoint's document.
func KeyEndpoint(name string) string { return PrefixEndpoints + name }

// KeyDirectory is the key of an endpoint's directory entry.
func KeyDirectory(name string) string { return PrefixDirectory + name }

// KeyStatus is the key of an endpoint's status.
func KeyStatus(name string) string { return PrefixStatus + name }
