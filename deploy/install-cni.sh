#!/bin/sh
# install-cni.sh: the install-cni init container of the vpccni-node
# DaemonSet (deploy/kubernetes/daemonset.yaml). It puts the vpc-cni plugin
# and its conflist on the node, where the container runtime looks for them.
#
# - vpc-cni is always installed: it must match the ipamd of this pod.
# - portmap and loopback (the runtime needs both: portmap is chained in the
#   conflist, loopback brings up lo) are installed only when the node has
#   none; a copy someone else installed is left alone.
# - The conflist is installed under its own name; other files in the conf
#   directory are never touched.
#
# Every file lands atomically: it is copied next to its destination under a
# temporary name and renamed over it, so a runtime that executes the plugin
# or reads the conflist at that moment sees the old file or the new one,
# never half of one (and a running vpc-cni is never written over).
#
# The DaemonSet sets every variable below; none has a default, so a
# manifest that forgets one fails here, naming it, instead of installing
# into the wrong place.
set -eu

: "${IMAGE_CNI_BIN_DIR:?the image directory holding vpc-cni, portmap and loopback}"
: "${IMAGE_CNI_CONFLIST:?the conflist in the image}"
: "${HOST_CNI_BIN_DIR:?the node CNI bin directory, as mounted in this container}"
: "${HOST_CNI_NET_DIR:?the node CNI conf directory, as mounted in this container}"

tmp=""
trap 'if [ -n "$tmp" ]; then rm -f "$tmp"; fi' EXIT

# install_file SRC DST MODE
install_file() {
	tmp="$2.vpccni-install.$$"
	cp "$1" "$tmp"
	chmod "$3" "$tmp"
	mv -f "$tmp" "$2"
	tmp=""
	echo "install-cni: installed $2"
}

for dir in "$HOST_CNI_BIN_DIR" "$HOST_CNI_NET_DIR"; do
	if [ ! -d "$dir" ]; then
		echo "install-cni: $dir is not a directory: is its hostPath volume mounted?" >&2
		exit 1
	fi
done

install_file "$IMAGE_CNI_BIN_DIR/vpc-cni" "$HOST_CNI_BIN_DIR/vpc-cni" 0755
for plugin in portmap loopback; do
	if [ -e "$HOST_CNI_BIN_DIR/$plugin" ]; then
		echo "install-cni: keeping the node's $HOST_CNI_BIN_DIR/$plugin"
	else
		install_file "$IMAGE_CNI_BIN_DIR/$plugin" "$HOST_CNI_BIN_DIR/$plugin" 0755
	fi
done
install_file "$IMAGE_CNI_CONFLIST" "$HOST_CNI_NET_DIR/$(basename "$IMAGE_CNI_CONFLIST")" 0644
