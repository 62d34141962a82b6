package nftables

// Set elements of the nftables backend: what the index's ipset entries become, the
// changes between two such states, and a writer that keeps one refused element
// from holding the others back (the failure contract of executeSets).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// nftElements is the content of the programme's sets: set (full name) -> element
// text (fields joined by " . ") -> fields.
type nftElements map[string]map[string][]string

func (e nftElements) add(set string, fields []string) {
	if e[set] == nil {
		e[set] = map[string][]string{}
	}
	e[set][strings.Join(fields, " . ")] = fields
}

// nftDesiredElements turns set members into the elements of family f's sets. A
// member that cannot be turned is reported and left out; the others are not
// affected.
func nftDesiredElements(f nftFamily, entries []rules.Member) (nftElements, []error) {
	out := nftElements{}
	var errs []error
	var sources [][]string
	for _, e := range entries {
		set, fields, err := nftElement(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if set == "load-balancer-source" {
			sources = append(sources, fields)
			continue
		}
		out.add(f.name(set), fields)
	}
	// Source ranges are one interval set, which refuses overlaps: keep the widest.
	kept, err := nftSourceRanges(sources)
	if err != nil {
		// A bad range: turn the others one by one so only it is left out.
		for _, s := range sources {
			if k, err := nftSourceRanges([][]string{s}); err != nil {
				errs = append(errs, err)
			} else {
				kept = append(kept, k...)
			}
		}
		kept, _ = nftSourceRanges(kept)
	}
	for _, s := range kept {
		out.add(f.name("load-balancer-source"), s)
	}
	return out, errs
}

// nftChange is one element to add or delete.
type nftChange struct {
	add    bool
	set    string
	fields []string
}

func (c nftChange) String() string {
	op := "delete"
	if c.add {
		op = "add"
	}
	return op + " element " + c.set + " { " + strings.Join(c.fields, " . ") + " }"
}

// nftElementChanges lists what turns have into want: deletions first (so a range
// that is narrowed or replaced never overlaps its successor), each part sorted.
func nftElementChanges(have, want nftElements) []nftChange {
	var dels, adds []nftChange
	for set, elems := range have {
		for k, fields := range elems {
			if _, ok := want[set][k]; !ok {
				dels = append(dels, nftChange{set: set, fields: fields})
			}
		}
	}
	for set, elems := range want {
		for k, fields := range elems {
			if _, ok := have[set][k]; !ok {
				adds = append(adds, nftChange{add: true, set: set, fields: fields})
			}
		}
	}
	byText := func(a, b nftChange) int { return strings.Compare(a.String(), b.String()) }
	slices.SortFunc(dels, byText)
	slices.SortFunc(adds, byText)
	return append(dels, adds...)
}

// nftRefused is a change the kernel refused on its own.
type nftRefused struct {
	index  int // in the changes given to nftApplyChanges
	change nftChange
	err    error
}

// errTooManyRefused ends the isolation of refused changes: beyond maxRefused the
// cause is the table or the kernel, not the elements.
var errTooManyRefused = errors.New("too many set elements refused one by one")

// nftApplyChanges writes changes in one transaction. When the kernel refuses it,
// the changes are split in halves and each half sent again, down to single changes,
// so one refused element (an overlapping range, an element someone else deleted)
// never keeps the others out: it is returned with its error, and the rest is
// written. More than maxRefused refusals, or a refusal of the whole with nothing
// to split, is returned as an error.
func nftApplyChanges(ctx context.Context, r nft.Ruleset, changes []nftChange, maxRefused int) ([]nftRefused, error) {
	var refused []nftRefused
	var send func(off int, cs []nftChange) error
	send = func(off int, cs []nftChange) error {
		if len(cs) == 0 {
			return nil
		}
		err := r.Run(ctx, nftChangesTransaction(cs))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		if len(cs) == 1 {
			refused = append(refused, nftRefused{index: off, change: cs[0], err: err})
			if len(refused) > maxRefused {
				return fmt.Errorf("%w (%d): %v", errTooManyRefused, len(refused), err)
			}
			return nil
		}
		mid := len(cs) / 2
		if err := send(off, cs[:mid]); err != nil {
			return err
		}
		return send(off+mid, cs[mid:])
	}
	if err := send(0, changes); err != nil {
		return refused, err
	}
	return refused, nil
}

// nftChangesTransaction is one transaction of changes: one operation for the
// deletions of each set, then one for the additions of each set (a transaction is
// atomic, so only the order within a set counts, and a deletion keeps coming
// before an addition). One operation a change cost 2.7 GiB of allocations and
// as many netlink messages at 250,000 elements.
func nftChangesTransaction(cs []nftChange) *nft.Transaction {
	type group struct {
		add bool
		set string
	}
	var order []group
	elems := map[group][][]string{}
	for _, c := range cs {
		g := group{c.add, c.set}
		if _, ok := elems[g]; !ok {
			order = append(order, g)
		}
		elems[g] = append(elems[g], c.fields)
	}
	// Deletions first, each kind in the order its sets first came.
	slices.SortStableFunc(order, func(a, b group) int {
		switch {
		case a.add == b.add:
			return 0
		case !a.add:
			return -1
		}
		return 1
	})
	tx := nft.NewTransaction()
	for _, g := range order {
		if g.add {
			tx.AddElements(g.set, elems[g]...)
		} else {
			tx.DeleteElements(g.set, elems[g]...)
		}
	}
	return tx
}
