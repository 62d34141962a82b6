package sysctl

import (
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
)

// Fake holds sysctls in memory. As in /proc/sys, only sysctls that exist can be
// read or written: seed them with NewFake; others fail with IsNotFound.
type Fake struct {
	mu     sync.Mutex
	values map[string]int
	writes int
}

var _ Interface = &Fake{}

// NewFake returns a Fake holding the given sysctls.
func NewFake(initial map[string]int) *Fake {
	f := &Fake{values: map[string]int{}}
	for k, v := range initial {
		f.values[k] = v
	}
	return f
}

func (f *Fake) GetSysctl(name string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	if !ok {
		return 0, fmt.Errorf("reading sysctl %s: %w", name, fs.ErrNotExist)
	}
	return v, nil
}

func (f *Fake) SetSysctl(name string, value int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.values[name]; !ok {
		return fmt.Errorf("writing sysctl %s=%d: %w", name, value, fs.ErrNotExist)
	}
	f.values[name] = value
	f.writes++
	return nil
}

// Writes returns how many successful SetSysctl calls were made.
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// Dump prints "name = value" lines sorted by name.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.values))
	for k := range f.values {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s = %d\n", k, f.values[k])
	}
	return b.String()
}
