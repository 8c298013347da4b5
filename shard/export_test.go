package shard

// OwnerFor exposes the rendezvous choice to the tests.
var OwnerFor = owner
