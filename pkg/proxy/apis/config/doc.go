// Package config loads, defaults, validates and writes the upstream
// KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) that this daemon
// accepts unchanged. Decoding is strict: an unknown or duplicated field is an error
// that names the field and the file, so a typo never silently falls back to a
// default.
package config
