// Package e2enetwork is upstream's e2e suite (k8s.io/kubernetes/test/e2e
// v1.37.2) with only its network specs linked in: test/e2e/network and, through
// the e2e package itself, test/e2e/common (common/network's pod-to-pod
// checks; common/node and common/storage come along, unused by a network
// focus). `go test -c` of this package makes e2e-network.test, which
// test/conformance/build.sh builds for `make test`'s conformance step: the
// same specs, suite set-up (e2e.RunE2ETests: wait for the nodes and
// kube-system, then ginkgo with the framework's config and JUnit report) and
// flags as the whole e2e.test, in about half its cold build time, since the
// storage, apps, node, dra, kubectl, auth... suites are not compiled.
//
// TestMain mirrors what upstream's test/e2e/e2e_test.go does before ginkgo
// runs: register the framework's flags, parse them, add the embedded test
// files, finish the framework's configuration. Written here because upstream's
// is in a _test.go file of another package, which Go cannot import.
package e2enetwork

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/component-base/version"
	conformancetestdata "k8s.io/kubernetes/test/conformance/testdata"
	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	"k8s.io/kubernetes/test/e2e/invariants/logcheck"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// The feature and label constants, frozen before the specs use them.
	_ "k8s.io/kubernetes/test/e2e/feature"
	// The specs: [sig-network] (test/e2e/network and its subpackages).
	_ "k8s.io/kubernetes/test/e2e/network"

	// The framework's optional parts, configured as in e2e.test.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

func TestMain(m *testing.M) {
	showVersion := flag.CommandLine.Bool("version", false, "Print the Kubernetes version this suite is built from and exit.")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	logcheck.RegisterFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get())
		os.Exit(0)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %q\n", flag.Args())
		os.Exit(1)
	}
	for _, fs := range []testfiles.FileSource{
		e2etestingmanifests.GetE2ETestingManifestsFS(),
		testfixtures.GetTestFixturesFS(),
		conformancetestdata.GetConformanceTestdataFS(),
	} {
		testfiles.AddFileSource(fs)
	}
	framework.AfterReadingAllFlags(&framework.TestContext)
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
