package nftables

import (
	"context"
	"sort"
	"strings"
)

// Fake holds a set of tables, as the kernel would.
type Fake struct {
	Tables map[Table]bool
}

// NewFake returns a Fake holding tables.
func NewFake(tables ...Table) *Fake {
	f := &Fake{Tables: map[Table]bool{}}
	for _, t := range tables {
		f.Tables[t] = true
	}
	return f
}

func (f *Fake) DeleteTable(_ context.Context, t Table) (bool, error) {
	if !f.Tables[t] {
		return false, nil
	}
	delete(f.Tables, t)
	return true, nil
}

// Dump lists the tables, one "table FAMILY NAME" per line, sorted.
func (f *Fake) Dump() string {
	var lines []string
	for t := range f.Tables {
		lines = append(lines, "table "+t.String())
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
