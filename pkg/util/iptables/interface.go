// Package iptables is the kernel boundary for iptables: iptables-restore --noflush
// batches and iptables-save dumps for IPv4 and IPv6 (legacy or nft backend), jump
// rules in built-in chains, and a kernel-faithful Fake.
package iptables

import (
	"bytes"
	"context"
)

// Protocol is the IP family an Interface programs.
type Protocol string

const (
	ProtocolIPv4 Protocol = "IPv4"
	ProtocolIPv6 Protocol = "IPv6"
)

// Table is an iptables table.
type Table string

const (
	TableNAT    Table = "nat"
	TableFilter Table = "filter"
	TableMangle Table = "mangle"
)

// Chain is an iptables chain name.
type Chain string

const (
	ChainPrerouting  Chain = "PREROUTING"
	ChainInput       Chain = "INPUT"
	ChainForward     Chain = "FORWARD"
	ChainOutput      Chain = "OUTPUT"
	ChainPostrouting Chain = "POSTROUTING"
)

// RulePosition says where EnsureRule inserts a missing rule.
type RulePosition string

const (
	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"
)

// RestoreFlags control iptables-restore.
type FlushFlag bool
type CounterFlag bool

const (
	NoFlushTables  FlushFlag   = false
	FlushTables    FlushFlag   = true
	NoRestoreCount CounterFlag = false
	RestoreCount   CounterFlag = true
)

// Interface is what the proxier needs from iptables for one IP family.
type Interface interface {
	Protocol() Protocol
	// EnsureChain creates a chain if missing; reports whether it existed.
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	FlushChain(ctx context.Context, table Table, chain Chain) error
	DeleteChain(ctx context.Context, table Table, chain Chain) error
	ChainExists(ctx context.Context, table Table, chain Chain) (bool, error)
	// EnsureRule adds the rule (args as for `iptables -A CHAIN args...`) if missing;
	// reports whether it existed.
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	DeleteRule(ctx context.Context, table Table, chain Chain, args ...string) error
	// SaveInto writes `iptables-save -t table` output into buf.
	SaveInto(ctx context.Context, table Table, buf *bytes.Buffer) error
	// RestoreAll feeds data (possibly several tables, each ending in COMMIT) to one
	// iptables-restore run; each table commits atomically.
	RestoreAll(ctx context.Context, data []byte, flush FlushFlag, counters CounterFlag) error
}
