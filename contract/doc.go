// Package contract is what fabricd and the endpoint agents agree on in
// etcd: the keys, the JSON documents under them, their schema version and
// the checks an agent makes before it applies one (docs/etcd-layout.md).
// Both sides import it; it imports nothing of either, so the agent binary
// links no control-plane code.
//
//	var spec contract.EndpointSpec // endpoints/host-a
//	_ = json.Unmarshal(value, &spec)
//	if err := spec.Validate("host-a", 4); err != nil { ... }
//	cfg := contract.Configuration(spec, gen) // with the generation key's planes
package contract
