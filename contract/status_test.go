package contract

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseStatus(t *testing.T) {
	good := StatusDoc{Schema: SchemaVersion, Endpoint: "host-a", AppliedGeneration: 3, Paths: []PathStatus{
		{Plane: "p0", LossRatio: 0.01, RTTMicros: 40, PeersReachable: 1, PeersUnreachable: 1,
			Peers: []PeerPath{{Address: "10.0.0.2", Reachable: false}, {Address: "fd00::3", Reachable: true}}},
	}}
	data, _ := json.Marshal(good)
	st, err := ParseStatus("host-a", data)
	if err != nil || st.Paths[0].PeersUnreachable != 1 || st.Paths[0].Peers[1].Address != "fd00::3" {
		t.Fatalf("ParseStatus(good) = %+v, %v", st, err)
	}
	edit := func(f func(*StatusDoc)) []byte {
		d := good
		d.Paths = []PathStatus{good.Paths[0]}
		d.Paths[0].Peers = append([]PeerPath(nil), good.Paths[0].Peers...)
		f(&d)
		b, _ := json.Marshal(d)
		return b
	}
	manyPeers := make([]PeerPath, MaxPeersPerPlane+1)
	for i := range manyPeers {
		manyPeers[i].Address = "10.0.0.1"
	}
	for name, bad := range map[string][]byte{
		"not JSON":          []byte(`{"schema":`),
		"too large":         []byte(`{"schema":"1.1","endpoint":"host-a","version":"` + strings.Repeat("x", MaxStatusBytes) + `"}`),
		"newer major":       edit(func(d *StatusDoc) { d.Schema = "3.0" }),
		"another endpoint":  edit(func(d *StatusDoc) { d.Endpoint = "host-b" }),
		"too many paths":    edit(func(d *StatusDoc) { d.Paths = make([]PathStatus, MaxStatusPaths+1) }),
		"too many peers":    edit(func(d *StatusDoc) { d.Paths[0].Peers = manyPeers }),
		"loss over 1":       edit(func(d *StatusDoc) { d.Paths[0].LossRatio = 1.5 }),
		"negative RTT":      edit(func(d *StatusDoc) { d.Paths[0].RTTMicros = -1 }),
		"negative count":    edit(func(d *StatusDoc) { d.Paths[0].PeersReachable = -1 }),
		"huge count":        edit(func(d *StatusDoc) { d.Paths[0].PeersUnreachable = 1 << 30 }),
		"peer not an IP":    edit(func(d *StatusDoc) { d.Paths[0].Peers[0].Address = "host-b" }),
		"peer with a port":  edit(func(d *StatusDoc) { d.Paths[0].Peers[0].Address = "10.0.0.2:4793" }),
		"NaN loss (string)": []byte(`{"schema":"1.1","endpoint":"host-a","paths":[{"plane":"p0","loss_ratio":"NaN"}]}`),
	} {
		if _, err := ParseStatus("host-a", bad); !errors.Is(err, ErrInvalidDocument) {
			t.Errorf("%s: ParseStatus = %v, want ErrInvalidDocument", name, err)
		}
	}
}
