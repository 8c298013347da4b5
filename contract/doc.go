// Package contract is what fabricd and the endpoint agents agree on in
// etcd: the keys, the JSON documents under them, their schema version and
// the checks an agent makes before it applies one (docs/etcd-layout.md).
// Both sides import it; it imports nothing of either, so the agent binary
// links no control-plane code.
//
//	var doc contract.EndpointDoc
//	_ = json.Unmarshal(value, &doc)
//	if err := doc.Validate("host-a", 4); err != nil { ... }
package contract
