package nftables

import (
	"net/netip"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
)

// member is the member of set written in its entry form (the tests' shorthand).
func member(set rules.Set, text string) rules.Member {
	m, err := rules.ParseEntry(set, text)
	if err != nil {
		panic(err)
	}
	return m
}

// outFilter is the out-filter rule that drops addr's own access to its virtual server.
func outFilter(addr string, proto uint8, port uint16) rules.OutFilter {
	a := rules.Addr16(netip.MustParseAddr(addr))
	return rules.OutFilter{Source: a, VAddr: a, Proto: proto, Port: port}
}
