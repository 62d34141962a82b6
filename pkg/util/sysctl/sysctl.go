// Package sysctl reads and writes /proc/sys settings under a root that tests redirect.
package sysctl

// Interface reads and writes integer sysctls by their slash-separated name,
// e.g. "net/ipv4/vs/conntrack".
type Interface interface {
	GetSysctl(name string) (int, error)
	SetSysctl(name string, value int) error
}
