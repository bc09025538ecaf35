#!/usr/bin/env bash
# Installs what `make test` needs on a Debian 12 machine, only what is
# missing, and prints one line per tool: found, installed or built. Run it
# through `make tools` (make test does): the Makefile names the pinned
# versions and the paths, once, and passes them here.
#
#   VPCCNI_INSTALL=0   install nothing: a missing tool is an error naming
#                      the command that installs it.
#   CRICTL             where crictl is (built here when missing)
#   GRPC_HEALTH_PROBE  where grpc-health-probe is (built here when missing)
#   KUBE_DIR, ETCD     where the Kubernetes binaries and etcd are (built here)
#   CONTAINERD2_DIR    where containerd 2.4's containerd, shim and ctr are
#   VPCCNI_REFCNI      where the reference plugin (aws-cni) is
#   VPCCNI_REFCNI_SRC  the writable copy of its module it is built in
#   CRICTL_VERSION, GRPC_HEALTH_PROBE_VERSION, CONTAINERD2_VERSION,
#   REFCNI_VERSION, KUBE_VERSION, ETCD_VERSION
#                      the versions built from the Go module proxy (the go
#                      command checks their checksums)
set -euo pipefail
: "${CRICTL:?run through make tools}" "${CONTAINERD2_DIR:?run through make tools}"
: "${CRICTL_VERSION:?run through make tools}" "${CONTAINERD2_VERSION:?run through make tools}"
: "${VPCCNI_REFCNI:?run through make tools}" "${VPCCNI_REFCNI_SRC:?run through make tools}" "${REFCNI_VERSION:?run through make tools}"
: "${GRPC_HEALTH_PROBE:?run through make tools}" "${GRPC_HEALTH_PROBE_VERSION:?run through make tools}"
: "${KUBE_DIR:?run through make tools}" "${KUBE_VERSION:?run through make tools}" "${ETCD:?run through make tools}" "${ETCD_VERSION:?run through make tools}"
install="${VPCCNI_INSTALL:-1}"
GO="${GO:-go}"
status=0

say() { printf 'tools: %-12s %s\n' "$1" "$2"; }
missing() { # name, what installs it
	local why="not installed"
	[ "$install" = 0 ] && why="VPCCNI_INSTALL=0, so not installed"
	say "$1" "MISSING ($why); install it: make tools VPCCNI_INSTALL=1, or: $2" >&2
	status=1
}

say go "found $(command -v "$GO") ($("$GO" env GOVERSION))"

# Debian's packages: the command each provides, and the package.
# containerd brings ctr and containerd-shim-runc-v2 too; the e2e suite runs
# Debian's containerd 1.6 (nothing starts by itself: there is no systemd).
# podman (4.3, with conmon and containers-common; runc is its OCI runtime)
# is the e2e suite's strict libcni caller: its spec-format specs run it.
# chromium is the html suite's real browser: it opens replay's HTML report
# headless (through chromedp) and checks what it shows.
apt_tools="protoc:protobuf-compiler ip:iproute2 containerd:containerd runc:runc iptables:iptables podman:podman chromium:chromium"
need_pkgs=()
for t in $apt_tools; do
	command -v "${t%%:*}" >/dev/null || need_pkgs+=("${t##*:}")
done
if [ "${#need_pkgs[@]}" -gt 0 ] && [ "$install" != 0 ]; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "tools: cannot install ${need_pkgs[*]} (needs root and apt-get): apt-get install ${need_pkgs[*]}" >&2
		exit 1
	fi
	log=$(mktemp)
	# Other users of the machine may hold dpkg's lock: wait for it.
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get -o DPkg::Lock::Timeout=300 update -qq &&
		apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need_pkgs[@]}"; } >"$log" 2>&1; then
		cat "$log" >&2
		echo "tools: apt-get install ${need_pkgs[*]} failed" >&2
		exit 1
	fi
	rm -f "$log"
fi
for t in $apt_tools; do
	name=${t%%:*} pkg=${t##*:}
	if ! p=$(command -v "$name"); then
		missing "$name" "apt-get install $pkg"
	elif [[ " ${need_pkgs[*]} " == *" $pkg "* ]]; then
		say "$name" "installed $p (apt: $pkg)"
	else
		say "$name" "found $p"
	fi
done

# build NAME DIR CMD...: run the go install CMD with GOBIN=DIR, one
# process at a time (other worktrees share the cache dir), quietly unless
# it fails; prints the rest of NAME's line.
build() {
	local name=$1 dir=$2 start=$SECONDS log
	shift 2
	mkdir -p "$dir"
	log=$(mktemp)
	printf 'tools: %-12s building into %s ... ' "$name" "$dir"
	if ! (flock 9 && env GOBIN="$dir" "$@") 9>"$dir/.lock" >"$log" 2>&1; then
		echo "failed"
		cat "$log" >&2
		rm -f "$log"
		return 1
	fi
	rm -f "$log"
	echo "built in $((SECONDS - start)) s"
}

# crictl, the CRI client of the e2e suite, is not in Debian 12. Not a
# go.mod tool on purpose: cri-tools would pull Kubernetes' and
# OpenTelemetry's modules into the project's dependency graph, where they
# could raise versions the shipped binaries link.
crictl_cmd="$GO install sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
if [ -x "$CRICTL" ]; then
	say crictl "found $CRICTL"
elif [ "$install" = 0 ]; then
	missing crictl "GOBIN=$(dirname "$CRICTL") $crictl_cmd"
elif [ "$(basename "$CRICTL")" != crictl ]; then
	missing crictl "$crictl_cmd (CRICTL=$CRICTL must be named crictl to be built there)"
else
	build crictl "$(dirname "$CRICTL")" $crictl_cmd || exit 1
fi

# grpc-health-probe, the reference DaemonSet's readiness and liveness probe
# of ipamd (-addr=unix:///var/run/aws-node/ipamd.sock), for the integration
# suite's probe specs. Static, like the image's copy. Not a go.mod tool
# either: its gRPC and SPIFFE modules could raise versions the shipped
# binaries link.
ghp_cmd="$GO install github.com/grpc-ecosystem/grpc-health-probe@$GRPC_HEALTH_PROBE_VERSION"
if [ -x "$GRPC_HEALTH_PROBE" ]; then
	say grpc-health-probe "found $GRPC_HEALTH_PROBE"
elif [ "$install" = 0 ]; then
	missing grpc-health-probe "CGO_ENABLED=0 GOBIN=$(dirname "$GRPC_HEALTH_PROBE") $ghp_cmd"
elif [ "$(basename "$GRPC_HEALTH_PROBE")" != grpc-health-probe ]; then
	missing grpc-health-probe "$ghp_cmd (GRPC_HEALTH_PROBE=$GRPC_HEALTH_PROBE must be named grpc-health-probe to be built there)"
else
	build grpc-health-probe "$(dirname "$GRPC_HEALTH_PROBE")" env CGO_ENABLED=0 $ghp_cmd || exit 1
fi

# containerd 2.4, for the e2e suite's CNI 1.1 specs (Debian's 1.6 speaks
# CNI 1.0.0 only): static, without the btrfs, devmapper and zfs
# snapshotters (they need C libraries; the suite uses overlayfs). Not a
# go.mod tool either, for the same reason as crictl. The dir is never put
# on PATH: containerd finds its shim on PATH, so the suite starts each
# containerd with its own dir first.
c2="github.com/containerd/containerd/v2/cmd"
c2_cmd="$GO install -tags no_btrfs,no_devmapper,no_zfs $c2/containerd@$CONTAINERD2_VERSION $c2/containerd-shim-runc-v2@$CONTAINERD2_VERSION $c2/ctr@$CONTAINERD2_VERSION"
have_c2=1
for b in containerd containerd-shim-runc-v2 ctr; do
	[ -x "$CONTAINERD2_DIR/$b" ] || have_c2=0
done
if [ "$have_c2" = 1 ]; then
	say containerd2 "found $CONTAINERD2_DIR"
elif [ "$install" = 0 ]; then
	missing containerd2 "CGO_ENABLED=0 GOBIN=$CONTAINERD2_DIR $c2_cmd"
else
	build containerd2 "$CONTAINERD2_DIR" env CGO_ENABLED=0 $c2_cmd || exit 1
fi

# locked_build NAME DIR WHAT STEPS: runs the shell function STEPS in a
# subshell holding DIR/.lock (other worktrees share the cache), quietly
# unless it fails; prints the rest of NAME's line. Each step of STEPS
# ends in `|| return 1`: errexit does not hold inside an `if` condition.
locked_build() {
	local name=$1 dir=$2 what=$3 steps=$4 start=$SECONDS log
	mkdir -p "$dir"
	printf 'tools: %-12s building %s into %s ... ' "$name" "$what" "$dir"
	log=$(mktemp)
	if ! (flock 9 && "$steps") 9>"$dir/.lock" >"$log" 2>&1; then
		echo "failed"
		cat "$log" >&2
		rm -f "$log"
		exit 1
	fi
	rm -f "$log"
	echo "built in $((SECONDS - start)) s"
}

# The reference plugin, aws/amazon-vpc-cni-k8s's cmd/routed-eni-cni-plugin,
# for the interop suite and make bench. go install refuses its module (it
# has replace directives), so its zip is downloaded (checksummed by the go
# command), copied somewhere writable and built there; the copy is kept
# beside the binary, for the interop suite's checkpoint generator. Static,
# so it runs in the suite's jail (internal/testsupport/refcni); version stamped like a
# release build (its ClientVersion on the wire). Never committed.
ref_mod="github.com/aws/amazon-vpc-cni-k8s@$REFCNI_VERSION"
build_refcni() {
	local mod
	mod=$("$GO" mod download -json "$ref_mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || return 1
	[ -d "$mod" ] || { echo "go mod download gave no Dir"; return 1; }
	rm -rf "$VPCCNI_REFCNI_SRC.tmp" || return 1
	cp -r "$mod" "$VPCCNI_REFCNI_SRC.tmp" || return 1
	chmod -R u+w "$VPCCNI_REFCNI_SRC.tmp" || return 1
	(cd "$VPCCNI_REFCNI_SRC.tmp" && GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" build -ldflags "-X main.version=$REFCNI_VERSION" \
		-o "$VPCCNI_REFCNI.tmp" ./cmd/routed-eni-cni-plugin) || return 1
	rm -rf "$VPCCNI_REFCNI_SRC" || return 1
	mv "$VPCCNI_REFCNI_SRC.tmp" "$VPCCNI_REFCNI_SRC" || return 1
	mv "$VPCCNI_REFCNI.tmp" "$VPCCNI_REFCNI"
}
if [ -x "$VPCCNI_REFCNI" ] && [ -d "$VPCCNI_REFCNI_SRC" ]; then
	say aws-cni "found $VPCCNI_REFCNI"
elif [ "$install" = 0 ]; then
	missing aws-cni "make tools (downloads $ref_mod and builds ./cmd/routed-eni-cni-plugin into $(dirname "$VPCCNI_REFCNI"))"
else
	locked_build aws-cni "$(dirname "$VPCCNI_REFCNI")" "$ref_mod" build_refcni
fi

# The Kubernetes binaries and etcd: kube-apiserver and etcd for the
# integration suite's specs against a real API server (label k8s); with
# kubelet, kube-controller-manager and kube-scheduler, a single-node
# cluster for the e2e suite's kubelet specs. go install refuses
# k8s.io/kubernetes (its go.mod replaces its staging modules with
# ./staging paths, which its module zip does not hold), so a scratch
# module requires it and replaces each staging module with its published
# v0.x release, read from the module's own go.mod; the missing binaries
# are built in one go build, which shares their packages. etcd's server is
# a library (etcdmain): a scratch main calls it. All static, built once
# into the cache (about 15 and 3 minutes cold on 2 cores).
kube_bins="kube-apiserver kubelet kube-controller-manager kube-scheduler"
kube_missing=""
for b in $kube_bins; do
	[ -x "$KUBE_DIR/$b" ] || kube_missing="$kube_missing $b"
done
kube_missing="${kube_missing# }"
build_kube() {
	local gomod scratch="$KUBE_DIR/.scratch" staging="v0.${KUBE_VERSION#v1.}" pkgs="" b
	gomod=$("$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p') || return 1
	[ -f "$gomod" ] || { echo "go mod download gave no GoMod"; return 1; }
	rm -rf "$scratch" && mkdir -p "$scratch/out" || return 1
	{
		printf 'module vpccni.local/kubebuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
		grep -oE 'k8s.io/[a-z0-9-]+ => ./staging' "$gomod" | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
		printf ')\n'
	} >"$scratch/go.mod" || return 1
	# Another worktree may have built some while this one waited for the lock.
	kube_missing=""
	for b in $kube_bins; do
		[ -x "$KUBE_DIR/$b" ] || kube_missing="$kube_missing $b"
	done
	for b in $kube_missing; do
		pkgs="$pkgs k8s.io/kubernetes/cmd/$b"
	done
	[ -n "$pkgs" ] || return 0
	# shellcheck disable=SC2086 # one word per package
	(cd "$scratch" && GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" build -trimpath -o "$scratch/out/" $pkgs) || return 1
	for b in $kube_missing; do
		mv "$scratch/out/$b" "$KUBE_DIR/$b" || return 1
	done
	rm -rf "$scratch"
}
build_etcd() {
	local scratch
	scratch="$(dirname "$ETCD")/.scratch"
	rm -rf "$scratch" && mkdir -p "$scratch" || return 1
	printf 'module vpccni.local/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$scratch/go.mod" || return 1
	printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >"$scratch/main.go" || return 1
	(cd "$scratch" && GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" build -trimpath -o "$ETCD.tmp" .) || return 1
	mv "$ETCD.tmp" "$ETCD" || return 1
	rm -rf "$scratch"
}
if [ -z "$kube_missing" ]; then
	say kubernetes "found $KUBE_DIR ($kube_bins)"
elif [ "$install" = 0 ]; then
	missing kubernetes "make tools (builds k8s.io/kubernetes@$KUBE_VERSION's $kube_missing into $KUBE_DIR)"
else
	locked_build kubernetes "$KUBE_DIR" "k8s.io/kubernetes@$KUBE_VERSION's $kube_missing" build_kube
fi
if [ -x "$ETCD" ]; then
	say etcd "found $ETCD"
elif [ "$install" = 0 ]; then
	missing etcd "make tools (builds go.etcd.io/etcd/server/v3@$ETCD_VERSION's etcdmain into $ETCD)"
else
	locked_build etcd "$(dirname "$ETCD")" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" build_etcd
fi
exit $status
