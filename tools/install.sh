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
#   KUBE_DIR, ETCD     where kube-apiserver and etcd are (built here)
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
apt_tools="protoc:protobuf-compiler ip:iproute2 containerd:containerd runc:runc iptables:iptables podman:podman"
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

# The reference plugin, aws/amazon-vpc-cni-k8s's cmd/routed-eni-cni-plugin,
# for the interop suite and make bench. go install refuses its module (it
# has replace directives), so its zip is downloaded (checksummed by the go
# command), copied somewhere writable and built there; the copy is kept
# beside the binary, for the interop suite's checkpoint generator. Static,
# so it runs in the suite's jail (internal/refcni); version stamped like a
# release build (its ClientVersion on the wire). Never committed.
ref_mod="github.com/aws/amazon-vpc-cni-k8s@$REFCNI_VERSION"
ref_dir=$(dirname "$VPCCNI_REFCNI")
if [ -x "$VPCCNI_REFCNI" ] && [ -d "$VPCCNI_REFCNI_SRC" ]; then
	say aws-cni "found $VPCCNI_REFCNI"
elif [ "$install" = 0 ]; then
	missing aws-cni "make tools (downloads $ref_mod and builds ./cmd/routed-eni-cni-plugin into $ref_dir)"
else
	mkdir -p "$ref_dir"
	printf 'tools: %-12s building %s into %s ... ' aws-cni "$ref_mod" "$ref_dir"
	start=$SECONDS
	log=$(mktemp)
	if ! (
		flock 9
		set -e
		mod=$("$GO" mod download -json "$ref_mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$mod" ] || { echo "go mod download gave no Dir"; exit 1; }
		rm -rf "$VPCCNI_REFCNI_SRC.tmp"
		cp -r "$mod" "$VPCCNI_REFCNI_SRC.tmp"
		chmod -R u+w "$VPCCNI_REFCNI_SRC.tmp"
		cd "$VPCCNI_REFCNI_SRC.tmp"
		GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" build -ldflags "-X main.version=$REFCNI_VERSION" \
			-o "$VPCCNI_REFCNI.tmp" ./cmd/routed-eni-cni-plugin
		rm -rf "$VPCCNI_REFCNI_SRC"
		mv "$VPCCNI_REFCNI_SRC.tmp" "$VPCCNI_REFCNI_SRC"
		mv "$VPCCNI_REFCNI.tmp" "$VPCCNI_REFCNI"
	) 9>"$ref_dir/.lock" >"$log" 2>&1; then
		echo "failed"
		cat "$log" >&2
		rm -f "$log"
		exit 1
	fi
	rm -f "$log"
	echo "built in $((SECONDS - start)) s"
fi
# kube-apiserver and etcd, for the integration suite's specs against a
# real API server (label k8s). go install refuses k8s.io/kubernetes (its
# go.mod replaces its staging modules with ./staging paths, which its
# module zip does not hold), so a scratch module requires it and replaces
# each staging module with its published v0.x release, read from the
# module's own go.mod. etcd's server is a library (etcdmain): a scratch
# main calls it. Both static, both built once into the cache (about 12
# and 3 minutes cold on 2 cores).
kube_dir="$KUBE_DIR" etcd_bin="$ETCD"
if [ -x "$kube_dir/kube-apiserver" ]; then
	say kube-apiserver "found $kube_dir/kube-apiserver"
elif [ "$install" = 0 ]; then
	missing kube-apiserver "make tools (builds k8s.io/kubernetes@$KUBE_VERSION's cmd/kube-apiserver into $kube_dir)"
else
	mkdir -p "$kube_dir"
	printf 'tools: %-12s building k8s.io/kubernetes@%s cmd/kube-apiserver into %s ... ' kube-apiserver "$KUBE_VERSION" "$kube_dir"
	start=$SECONDS
	log=$(mktemp)
	if ! (
		flock 9
		set -e
		gomod=$("$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
		[ -f "$gomod" ] || { echo "go mod download gave no GoMod"; exit 1; }
		staging="v0.${KUBE_VERSION#v1.}"
		scratch="$kube_dir/.scratch"
		rm -rf "$scratch"
		mkdir -p "$scratch"
		{
			printf 'module vpccni.local/kubebuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
			grep -oE 'k8s.io/[a-z0-9-]+ => ./staging' "$gomod" | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
			printf ')\n'
		} >"$scratch/go.mod"
		cd "$scratch"
		GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" build -trimpath -o "$kube_dir/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
		mv "$kube_dir/kube-apiserver.tmp" "$kube_dir/kube-apiserver"
		cd / && rm -rf "$scratch"
	) 9>"$kube_dir/.lock" >"$log" 2>&1; then
		echo "failed"
		cat "$log" >&2
		rm -f "$log"
		exit 1
	fi
	rm -f "$log"
	echo "built in $((SECONDS - start)) s"
fi
if [ -x "$etcd_bin" ]; then
	say etcd "found $etcd_bin"
elif [ "$install" = 0 ]; then
	missing etcd "make tools (builds go.etcd.io/etcd/server/v3@$ETCD_VERSION's etcdmain into $etcd_bin)"
else
	etcd_dir=$(dirname "$etcd_bin")
	mkdir -p "$etcd_dir"
	printf 'tools: %-12s building go.etcd.io/etcd/server/v3@%s into %s ... ' etcd "$ETCD_VERSION" "$etcd_bin"
	start=$SECONDS
	log=$(mktemp)
	if ! (
		flock 9
		set -e
		scratch="$etcd_dir/.scratch"
		rm -rf "$scratch"
		mkdir -p "$scratch"
		printf 'module vpccni.local/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$scratch/go.mod"
		printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >"$scratch/main.go"
		cd "$scratch"
		GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" build -trimpath -o "$etcd_bin.tmp" .
		mv "$etcd_bin.tmp" "$etcd_bin"
		cd / && rm -rf "$scratch"
	) 9>"$etcd_dir/.lock" >"$log" 2>&1; then
		echo "failed"
		cat "$log" >&2
		rm -f "$log"
		exit 1
	fi
	rm -f "$log"
	echo "built in $((SECONDS - start)) s"
fi
exit $status
