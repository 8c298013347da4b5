// Package planes is the fabric model: planes, switches, endpoints with one
// port per plane, and the links that cable them together, plus the health
// states they move through.
//
// A fabric is declared in a topology document (YAML or JSON, see
// docs/topology.md). ParseTopology decodes and validates one strictly: every
// error names the field path and the line it is on, and a document with any
// error is rejected whole.
//
//	topo, err := planes.ParseTopology(data)
//	var verr *planes.ValidationError
//	if errors.As(err, &verr) {
//		for _, fe := range verr.Fields { fmt.Println(fe.Line, fe.Field, fe.Message) }
//	}
package planes
