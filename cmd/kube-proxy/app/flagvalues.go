package app

import (
	"fmt"
	"net"

	"k8s.io/kube-proxy/config/v1alpha1"
)

// pflag.Value adapters for the v1alpha1 fields whose flags upstream types as
// "ip", "ipport", "ProxyMode" and "LocalMode" (shown in --help).

type ipValue struct{ val *string }

func (v ipValue) String() string { return *v.val }
func (v ipValue) Type() string   { return "ip" }
func (v ipValue) Set(s string) error {
	if net.ParseIP(s) == nil {
		return fmt.Errorf("%q is not a valid IP address", s)
	}
	*v.val = s
	return nil
}

// ipPortValue accepts "IP", "IP:port" or "" (which disables the server).
type ipPortValue struct{ val *string }

func (v ipPortValue) String() string { return *v.val }
func (v ipPortValue) Type() string   { return "ipport" }
func (v ipPortValue) Set(s string) error {
	if s == "" {
		*v.val = ""
		return nil
	}
	if net.ParseIP(s) != nil {
		*v.val = s
		return nil
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil || net.ParseIP(host) == nil {
		return fmt.Errorf("%q is not in a valid format (ip or ip:port)", s)
	}
	*v.val = s
	return nil
}

type proxyModeValue struct{ val *v1alpha1.ProxyMode }

func (v proxyModeValue) String() string     { return string(*v.val) }
func (v proxyModeValue) Type() string       { return "ProxyMode" }
func (v proxyModeValue) Set(s string) error { *v.val = v1alpha1.ProxyMode(s); return nil }

type localModeValue struct{ val *v1alpha1.LocalMode }

func (v localModeValue) String() string     { return string(*v.val) }
func (v localModeValue) Type() string       { return "LocalMode" }
func (v localModeValue) Set(s string) error { *v.val = v1alpha1.LocalMode(s); return nil }
