#!/usr/bin/env bash
# Builds the real-kernel tests of the kernel layers as static test binaries
# (build tag vmtest) and runs them all, as root, in one boot of the e2e VM
# (test/e2e/vm/run-in-vm.sh: Debian's kernel with IPVS and the dummy link type,
# which the development host lacks). Every package's whole test suite runs there,
# its host-level tests included, against that kernel.
#
#   hack/vmtest.sh [-run REGEXP] [PACKAGE[:REGEXP]...]
#
# PACKAGE defaults to the kernel layers: ./pkg/util/ipvs ./pkg/util/netlink
# ./pkg/util/conntrack ./pkg/util/sysctl ./pkg/util/nftables (its conformance
# scenarios against the VM's older kernel, beside the host's), ./pkg/util/ipset's
# conformance scenarios with and without its netlink writes (the same), and the VM tests of the command
# (./cmd/kube-proxy/app:^TestVM: --init-only's sysctls; the package's other tests
# read testdata the VM does not have and run on the host). PACKAGE:REGEXP runs
# only that package's tests matching REGEXP. Binaries go to _output/vmtest/.
# Exit status: non-zero when any test binary fails (or the VM does).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
run=
if [[ ${1:-} == -run ]]; then
	run=$2
	shift 2
fi
pkgs=("$@")
((${#pkgs[@]})) || pkgs=(./pkg/util/ipvs ./pkg/util/netlink ./pkg/util/conntrack ./pkg/util/sysctl ./pkg/util/nftables
	'./pkg/util/ipset:^TestIntegration(Conformance|ConformanceNetlink|NetlinkWritesNoProcess)$' ./cmd/kube-proxy/app:^TestVM)

out=_output/vmtest
mkdir -p "$out"
files=()
names=()
runs=()
for p in "${pkgs[@]}"; do
	prun=$run
	if [[ $p == *:* ]]; then
		prun=${p#*:}
		p=${p%%:*}
	fi
	name=$(basename "$p").test
	echo "vmtest: building $p" >&2
	CGO_ENABLED=0 go test -c -tags vmtest -o "$out/$name" "$p"
	files+=("$PWD/$out/$name=/kpi/bin/$name")
	names+=("$name")
	runs+=("$prun")
done

# The VM runs one program: this runner, which runs every binary and reports.
runner=$out/run-vmtests.sh
{
	echo '#!/bin/bash'
	echo 'rc=0'
	for i in "${!names[@]}"; do
		n=${names[$i]}
		printf 'echo "=== vmtest: %s"\n' "$n"
		printf 'if /kpi/bin/%q -test.v -test.count=1' "$n"
		[[ -n ${runs[$i]} ]] && printf ' -test.run %q' "${runs[$i]}"
		printf '; then echo "=== vmtest: %s PASS"; else echo "=== vmtest: %s FAIL"; rc=1; fi\n' "$n" "$n"
	done
	echo 'exit $rc'
} >"$runner"
chmod +x "$runner"

KPI_VM_FILES="${files[*]}${KPI_VM_FILES:+ $KPI_VM_FILES}" exec test/e2e/vm/run-in-vm.sh "$runner"
