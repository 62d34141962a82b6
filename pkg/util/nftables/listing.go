package nftables

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/nftables/userdata"
)

func userdataComment(c string) []byte { return userdata.AppendString(nil, userdata.TypeComment, c) }

// The canonical form of a table, which the Fake's Dump prints and ParseListing
// makes of `nft list table` output, so the two can be compared line by line:
//
//	table inet kube-proxy-ipvs
//	chain NAME [type T hook H priority P policy accept]
//	rule CHAIN <the rule as nft lists it>
//	set NAME type K[ . K...][ flags interval][ comment "C"]
//	element SET <the element as nft lists it>[ timeout T]
//
// Chains and sets are sorted by name; each chain is followed by its rules in
// order, each set by its elements, sorted.
type canonChain struct {
	header string
	rules  []string
}

type canonSet struct {
	header string
	elems  []string
}

func canonical(table string, chains map[string]*canonChain, sets map[string]*canonSet) string {
	var b strings.Builder
	b.WriteString("table " + table + "\n")
	for _, n := range slices.Sorted(maps.Keys(chains)) {
		c := chains[n]
		b.WriteString("chain " + n + c.header + "\n")
		for _, r := range c.rules {
			b.WriteString("rule " + n + " " + r + "\n")
		}
	}
	for _, n := range slices.Sorted(maps.Keys(sets)) {
		s := sets[n]
		b.WriteString("set " + n + s.header + "\n")
		for _, e := range slices.Sorted(slices.Values(s.elems)) {
			b.WriteString("element " + n + " " + e + "\n")
		}
	}
	return b.String()
}

func chainHeader(c Chain) string {
	if !c.base() {
		return ""
	}
	return fmt.Sprintf(" type %s hook %s priority %s policy accept", c.Type, c.Hook, priorityString(c.Hook, c.Priority))
}

func setHeader(s Set) string {
	h := " type " + s.typeString()
	if f := s.flags(); f != "" {
		h += " flags " + f
	}
	if s.Comment != "" {
		h += " comment " + quote(s.Comment)
	}
	return h
}

// withoutExpiry drops what an element's " expires 1m59s988ms" says: the time left
// changes from one listing to the next, its timeout does not.
func withoutExpiry(e string) string {
	before, after, ok := strings.Cut(e, " expires ")
	if !ok {
		return e
	}
	if _, rest, more := strings.Cut(after, " "); more {
		return before + " " + rest
	}
	return before
}

// ParseListing turns the output of `nft list table FAMILY NAME` into the canonical
// form above. It knows the constructs this package writes and refuses others, so
// a table someone changed by hand is reported, not misread.
func ParseListing(listing string) (string, error) {
	var table string
	chains := map[string]*canonChain{}
	sets := map[string]*canonSet{}
	var curChain *canonChain
	var curSet *canonSet
	inElements := false
	lines := strings.Split(listing, "\n")
	for n, raw := range lines {
		line := strings.TrimSpace(raw)
		bad := func(why string) error {
			return fmt.Errorf("nft listing line %d %q: %s", n+1, raw, why)
		}
		// elements reads one line of an element list ("a, b," ... "c }") and says
		// whether the list goes on.
		elements := func(part string) bool {
			done := strings.HasSuffix(part, "}")
			for _, e := range strings.Split(strings.TrimSuffix(part, "}"), ",") {
				if e = strings.TrimSpace(e); e != "" {
					curSet.elems = append(curSet.elems, withoutExpiry(e))
				}
			}
			return !done
		}
		if inElements {
			inElements = elements(line)
			continue
		}
		switch {
		case line == "":
		case strings.HasPrefix(line, "table ") && strings.HasSuffix(line, " {") && table == "":
			table = strings.TrimSuffix(strings.TrimPrefix(line, "table "), " {")
		case strings.HasPrefix(line, "chain ") && strings.HasSuffix(line, " {"):
			name := strings.TrimSuffix(strings.TrimPrefix(line, "chain "), " {")
			curChain = &canonChain{}
			chains[name] = curChain
		case strings.HasPrefix(line, "set ") && strings.HasSuffix(line, " {"):
			name := strings.TrimSuffix(strings.TrimPrefix(line, "set "), " {")
			curSet = &canonSet{}
			sets[name] = curSet
		case line == "}":
			// Closes a chain, a set or the table.
			curChain, curSet = nil, nil
		case curSet != nil:
			switch {
			case strings.HasPrefix(line, "type "), strings.HasPrefix(line, "flags "), strings.HasPrefix(line, "comment "):
				curSet.header += " " + line
			case strings.HasPrefix(line, "elements = {"):
				inElements = elements(strings.TrimPrefix(line, "elements = {"))
			default:
				return "", bad("unknown set attribute")
			}
		case curChain != nil:
			if strings.HasPrefix(line, "type ") && strings.Contains(line, " hook ") {
				// "type nat hook prerouting priority dstnat; policy accept;"
				h := strings.ReplaceAll(strings.TrimSuffix(line, ";"), ";", "")
				curChain.header = " " + h
				continue
			}
			curChain.rules = append(curChain.rules, line)
		default:
			return "", bad("outside any chain or set")
		}
	}
	if table == "" {
		return "", fmt.Errorf("nft listing without a table")
	}
	return canonical(table, chains, sets), nil
}
