// Package ipset is the kernel boundary for ipsets: batched transactions applied with
// one `ipset restore` process (or, with NewNetlink, adds and deletes over netlink),
// and a kernel-faithful Fake.
package ipset

import "context"

// Type is an ipset type.
type Type string

const (
	HashIP        Type = "hash:ip"
	HashIPPort    Type = "hash:ip,port"
	HashIPPortIP  Type = "hash:ip,port,ip"
	HashIPPortNet Type = "hash:ip,port,net"
	BitmapPort    Type = "bitmap:port"
)

// Family of a hash set.
const (
	FamilyInet  = "inet"
	FamilyInet6 = "inet6"
)

// Set describes one ipset. Entries are in ipset's own text form:
//
//	hash:ip           10.0.0.1
//	hash:ip,port      10.0.0.1,tcp:80
//	hash:ip,port,ip   10.0.0.1,tcp:80,10.0.0.1
//	hash:ip,port,net  10.0.0.1,tcp:80,10.0.0.0/8
//	bitmap:port       30080
type Set struct {
	Name     string
	Type     Type
	Family   string // hash types only
	HashSize int    // hash types only (default 1024)
	MaxElem  int    // hash types only (default 65536)
	PortMin  int    // bitmap:port only (0)
	PortMax  int    // bitmap:port only (65535)
	Comment  string // set comment (ipset >= 6.x "comment" extension is NOT used for sets)
}

// Interface is what the proxier needs from ipset.
type Interface interface {
	// ListSets returns every set with its header (no entries).
	ListSets(ctx context.Context) ([]*Set, error)
	// ListEntries returns the entries of one set, in the kernel's canonical text form.
	ListEntries(ctx context.Context, set string) ([]string, error)
	// SaveAll returns every set with its entries in one dump (`ipset save`).
	SaveAll(ctx context.Context) (map[string]*SetWithEntries, error)
	// SaveSets returns those of the named sets that exist, with their entries, and
	// reads no other set.
	SaveSets(ctx context.Context, names []string) (map[string]*SetWithEntries, error)
	// Apply runs a transaction as one batch.
	Apply(ctx context.Context, tx *Transaction) error
}

// SetWithEntries is a set header plus its members.
type SetWithEntries struct {
	Set
	Entries []string
}
