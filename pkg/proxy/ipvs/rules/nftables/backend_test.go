package nftables

import (
	"testing"
)

// TestNFTEntryIsTheInverseOfNFTElement: every element that stands for one ipset
// entry reads back as that entry; source ranges and elements no entry makes do not.
func TestNFTEntryIsTheInverseOfNFTElement(t *testing.T) {
	n := 0
	for _, byBase := range nftSampleEntries {
		for base, entries := range byBase {
			info, _ := nftSetFor(base)
			for _, entry := range entries {
				set, fields, err := nftElement(member(base, entry))
				if err != nil || set != info.name {
					t.Fatalf("%s %q: %s %v", base, entry, set, err)
				}
				got, ok := nftEntry(info, fields)
				if base.SourceRange() {
					if ok {
						t.Errorf("source range %q read back as entry %v", entry, got)
					}
					continue
				}
				if !ok || got != member(base, entry) {
					t.Errorf("%s %q read back as %v, %v", base, entry, got, ok)
				}
				n++
			}
		}
	}
	if n < 15 {
		t.Errorf("only %d entries checked", n)
	}
	for _, c := range []struct {
		set    string
		fields []string
	}{
		{"node-port", []string{"sctp", "30080"}},
		{"health-check-node-port", []string{"udp", "31000"}},
		{"cluster-ip", []string{"10.96.0.1", "tcp"}},
		{"ipvs-ips", []string{"10.96.0.1", "tcp", "80"}},
	} {
		for _, info := range nftSetTable {
			if info.name == c.set {
				if e, ok := nftEntry(info, c.fields); ok {
					t.Errorf("%s %q read back as entry %v", c.set, c.fields, e)
				}
			}
		}
	}
}
