package integration

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
)

// configuration reads an endpoint's document and the generation key at one
// revision and resolves them as the endpoint's agent does; it returns the
// configuration, the own document's generation and the generation key's.
func configuration(ctx context.Context, cli *clientv3.Client, endpoint string) (contract.EndpointDoc, uint64, contract.GenerationDoc, error) {
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(contract.KeyEndpoint(endpoint)), clientv3.OpGet(contract.KeyGeneration)).Commit()
	if err != nil {
		return contract.EndpointDoc{}, 0, contract.GenerationDoc{}, err
	}
	spec, gen := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(spec) == 0 || len(gen) == 0 {
		return contract.EndpointDoc{}, 0, contract.GenerationDoc{}, fmt.Errorf("%s: document or generation key missing", endpoint)
	}
	var s contract.EndpointSpec
	var g contract.GenerationDoc
	if err := json.Unmarshal(spec[0].Value, &s); err != nil {
		return contract.EndpointDoc{}, 0, g, err
	}
	if err := json.Unmarshal(gen[0].Value, &g); err != nil {
		return contract.EndpointDoc{}, 0, g, err
	}
	return contract.Configuration(s, g), s.Generation, g, nil
}
