package config

import _ "embed"

// AllFieldsExample is a KubeProxyConfiguration with every v1alpha1 field set to a
// valid non-default value (testdata/all-fields.yaml). Tests in other packages use
// it without depending on the source tree being present (the VM runs only the
// test binary).
//
//go:embed testdata/all-fields.yaml
var AllFieldsExample []byte
