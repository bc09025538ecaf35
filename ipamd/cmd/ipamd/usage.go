package main

// usage is ipamd --help. The %s are the default socket and the memory
// cloud's known instance types.
const usage = `Usage: ipamd [flags]

ipamd is vpccni's IP address management daemon, the job the aws-node pod
does in the reference AWS VPC CNI. It keeps the node's pool of pod
addresses (secondary IPv4 addresses or /28 prefixes of the instance's
ENIs, or /128s of the primary ENI's IPv6 prefix) at its warm targets,
hands them to the vpc-cni plugin over gRPC (service rpc.CNIBackend,
wire-compatible with the reference) on a Unix socket only root and its
group may use (mode 0660), beside the standard gRPC health service,
SERVING for "" and "grpc.health.v1.aws-node".

Every assignment and release is written to a checkpoint file in the
reference's format (vpc-cni-ipam/1) before the plugin is answered, so a
restarted ipamd remembers its pods. On start it restores the checkpoint,
configures each ENI's table and rule 32765, drains the release queue
(the directory release-queue beside the socket, where a DEL that tore its
pod down but could not reach ipamd leaves a record: each address is
released if that very sandbox still holds it), and reconciles: allocations
whose pod's host veth is gone are released, and pod rules 512/1536 (and
prio-10 iif rules of branch pods) that belong to no allocation are removed
— only rules whose selector is exactly a pool address, in a pod table.
SIGTERM or SIGINT stops it gracefully: no new calls, calls in flight
finish, the checkpoint is written, the socket removed, exit 0.

Environment variables of the reference are read as the flags' defaults;
a flag given on the command line wins. A switch is read as the
reference reads it (strconv.ParseBool: 1, t, T, TRUE, true, True and
their false counterparts); a value that does not read is a usage error
naming the variable, where the reference would silently take its
default. At start ipamd logs, once each, the reference's settings it
does not honour (set but not supported, or not supported yet) and any
unknown AWS_VPC_*, WARM_* or ENABLE_* variable: docs/settings.md lists
every one of them and what it does here.

Serving:
  --socket PATH
        Unix socket to serve on (default %s). Its directory is created
        (mode 0755) if missing; a socket file left by a killed ipamd is
        replaced.
  --reject-version-mismatch
        Refuse calls from a plugin whose ClientVersion is not this build's
        version, with FailedPrecondition "wrong client version", as the
        reference does. Off by default: any version is accepted and logged.
  --introspection-address HOST:PORT|unix:PATH   (INTROSPECTION_BIND_ADDRESS)
        JSON introspection over HTTP (default 127.0.0.1:61679): /v1/enis,
        /v1/allocations, /v1/pool, /v1/ipamd-env-settings. Only a loopback
        address is accepted: the allocations name every pod on the node.
  --allow-nonloopback-introspection
        Accept a non-loopback --introspection-address anyway.
  --disable-introspection   (DISABLE_INTROSPECTION=true)
  --metrics-address HOST:PORT   (METRICS_BIND_ADDRESS)
        Prometheus metrics at /metrics (default :61678, as the reference):
        the reference's awscni_* series under their names, types and
        labels (docs/settings.md lists which), and vpccni_* ones: pool
        targets, add/del requests by result, reconciler removals,
        checkpoint writes, warm-pool actions, EC2 latency histograms.
  --disable-metrics   (DISABLE_METRICS=true)

State:
  --checkpoint PATH   (AWS_VPC_K8S_CNI_BACKING_STORE)
        The checkpoint file (default /var/run/aws-node/ipam.json), written
        atomically (temp file, fsync, rename, directory fsync), mode 0600.
        Concurrent calls share one write. A missing file means a fresh
        node: ipamd still adopts, as recovered allocations, the addresses
        the kernel shows pods using (a host veth with a /32 or /128 route),
        so it never hands a live pod's address to another.
  --recover-from-kernel   (VPCCNI_RECOVER_FROM_KERNEL=true)
        When the checkpoint is corrupt or of an unknown version, move it
        aside (<file>.unreadable-<unix time>) and rebuild the allocations
        from the pods' host veths and routes. Without it ipamd refuses to
        start and says what is wrong with the file, which it leaves alone.
  --ip-cooldown DURATION   (IP_COOLDOWN_PERIOD, in seconds)
        How long a released address rests before it is handed out again
        (default 30s; 0 to 1h).
  --reconcile=false
        Turn the reconciler off (the reference has none).
  --reconcile-interval DURATION
        Period of the reconciler (default 1m; 1s to 24h).
  --reconcile-grace DURATION
        An allocation younger than this is never released as gone: an ADD
        assigns the address before it creates the veth and the host route
        (default 1m; 30s to 24h: the plugin alone may wait 10s for IPv6
        duplicate address detection, and an address released in that
        window is handed out twice).
  --veth-prefix PREFIX   (AWS_VPC_K8S_CNI_VETHPREFIX)
        The plugin's host veth prefix (default eni), by which recovery
        recognises pods; "vlan" (strict branch pods) is always recognised.

Cloud and pool:
  --cloud memory|aws
        Where the instance and its addresses come from (default memory).
        "aws": EC2 and the instance metadata service through the AWS SDK
        (credentials and region from the usual chain; region from IMDS if
        unset). "memory": an in-memory EC2 that calls no AWS API; ipamd
        then makes stand-in links for the ENIs it attaches (a veth pair
        eth<N>/vpc<N> with the ENI's MAC) — only inside a network
        namespace other than the machine's own: there it leaves the
        kernel alone and neither configures ENIs nor reconciles.
  --instance-type TYPE
        Instance type of the memory cloud (default m5.large). Known: %s.
  --memory-start full|fresh
        The memory cloud's instance at start (default full): "full" has
        every ENI attached with every address (ENI N in 10.0.N+1.0/24);
        "fresh" is a newly launched instance, the primary ENI alone with
        no secondary address, and the warm pool grows it.
  --eni-mtu N   (AWS_VPC_ENI_MTU, default 9001)
        MTU of every ENI's link, the primary's too (576 to 9001 on an IPv4
        node, 1280 to 9001 on IPv6; 0 leaves the links' MTU alone). The
        pods' veths take theirs from the conflist's mtu (POD_MTU).
  --region REGION   (AWS_REGION)
  --ec2-endpoint URL   (AWS_EC2_ENDPOINT)
        EC2 endpoint override, for testing against a stand-in.
  ADDITIONAL_ENI_TAGS (a JSON object) and CLUSTER_NAME (as the tag
        cluster.k8s.amazonaws.com/name) tag every ENI ipamd creates, beside
        its own node.k8s.amazonaws.com/instance_id, vpccni/managed and
        vpccni/created-at.
  --warm-eni-target N   (WARM_ENI_TARGET, default 1)
  --warm-ip-target N   (WARM_IP_TARGET)
  --minimum-ip-target N   (MINIMUM_IP_TARGET)
  --warm-prefix-target N   (WARM_PREFIX_TARGET)
  --enable-prefix-delegation   (ENABLE_PREFIX_DELEGATION=true)
  --max-eni N   (MAX_ENI)
        Ranges: WARM_ENI_TARGET 0-100, WARM_IP_TARGET and MINIMUM_IP_TARGET
        0-10000, WARM_PREFIX_TARGET 0-1000, MAX_ENI -1-100 (0 or -1: the
        instance's limit). A value out of range stops ipamd at start,
        naming the flag, the value and the range.
        The warm pool, as in the reference: with neither WARM_IP_TARGET nor
        MINIMUM_IP_TARGET set, keep WARM_ENI_TARGET whole ENIs' worth of
        free addresses; otherwise keep WARM_IP_TARGET free and at least
        MINIMUM_IP_TARGET in all. Addresses over target go back to EC2 at
        most every 30s; after InsufficientFreeAddressesInSubnet the pool
        does not grow for 2 minutes. Prefix delegation gets /28s (16
        addresses) instead of single addresses. With WARM_ENI_TARGET alone
        an ENI is filled whole (a new ENI comes with all its addresses);
        otherwise a step asks for what is short.
  --disable-provisioning   (DISABLE_NETWORK_RESOURCE_PROVISIONING=true)
        No warm pool: the ENIs and addresses attached at start are the
        pool, and ipamd attaches, assigns and gives back nothing (the
        targets above are then unused). ENIs or addresses attached later
        by something else are seen at the next start.
  --leaked-eni-sweep-interval DURATION   (0 with DISABLE_LEAKED_ENI_CLEANUP=true)
        How often ipamd deletes ENIs leaked in EC2: available (attached to
        nothing), created by vpccni (tag vpccni/managed) in this cluster,
        and older than --leaked-eni-min-age. An ipamd that died between
        creating and attaching an ENI, or a node terminated before its new
        ENI was marked DeleteOnTermination, leaves one holding a subnet's
        addresses; any node may delete it. The first sweep runs at start.
        Default 5m; 1m to 24h; 0 turns it off.
  --leaked-eni-min-age DURATION
        An available ENI younger than this is spared: another node may be
        between creating and attaching it (default 2m; 1m to 24h).
  --ipv6   (ENABLE_IPv6=true)
        IPv6 mode: hand pods /128 addresses from the primary ENI's
        delegated IPv6 prefix (the reference's ENABLE_IPv6 with prefix
        delegation); no further ENI is attached. ENABLE_IPv4, when set,
        must be the opposite (the reference refuses both and neither).

Host SNAT and node ports (IPv4; the reference's iptables rules, through
the iptables command, kept at start and with every reconcile pass):
  --external-snat   (AWS_VPC_K8S_CNI_EXTERNALSNAT=true)
        Something outside the node translates pod egress (a NAT gateway
        the pods' subnets route to): no AWS-SNAT-CHAIN-0 and no
        AWS-CONNMARK-CHAIN-0. Off by default: traffic leaving the VPC
        is SNATed to the primary ENI's address, except to the VPC's CIDRs
        and --exclude-snat-cidrs, out of a branch ENI's VLAN or to a local
        address, and its connections are marked so replies route by the
        main table (rule 1024, fwmark MARK/MARK lookup main).
  --randomize-snat prng|hashrandom|none   (AWS_VPC_K8S_CNI_RANDOMIZESNAT)
        SNAT port choice: --random-fully (default prng; --random where
        iptables lacks it), --random, or neither.
  --exclude-snat-cidrs CIDR,...   (AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS)
        IPv4 destinations never SNATed, beside the VPC's own CIDRs.
  --connmark MARK   (AWS_VPC_K8S_CNI_CONNMARK)
        The connection mark (default 0x80; 1 to 0xffffffff, in Go's
        number syntax). kube-proxy uses 0xc000, Calico 0xffff0000.
  --node-port-support=false   (AWS_VPC_CNI_NODE_PORT_SUPPORT)
        On by default: a connection that comes in on the primary ENI to a
        local address (a NodePort) is marked, so the pod's replies leave
        by the primary ENI and not by the pod's own.
  --iptables COMMAND
        The iptables command (default: iptables on PATH). vpccni-node run
        passes iptables-legacy or iptables-nft, whichever the node uses.
        Rules in PREROUTING and POSTROUTING carrying the reference's
        comments, and chains AWS-SNAT-CHAIN-N and AWS-CONNMARK-CHAIN-N,
        are aws-node's: a stale or duplicated one is deleted, nothing else
        is touched. With --cloud memory outside a named network namespace
        ipamd leaves iptables alone, as it leaves the kernel.

Security groups for pods:
  --enable-pod-eni   (ENABLE_POD_ENI=true)
        Before giving a pod an address, ipamd asks the pod-ENI source
        whether the pod has a branch ENI: a pod whose first container has a
        vpc.amazonaws.com/pod-eni* limit, described by its
        vpc.amazonaws.com/pod-eni annotation. Such a pod gets its branch
        ENI's address, VLAN id, MAC and gateway and the trunk ENI's link
        index, for the plugin to build a VLAN link on the trunk; it takes
        no address from the pool. The trunk ENI is found in ipamd's own
        network namespace by its MAC; a branch pod whose trunk link cannot
        be found is refused (Success=false), and the log says why. With
        --cloud memory the instance gets a trunk ENI in its last ENI slot
        (device 2 of an m5.large), which carries no pod addresses. On DEL
        of a pod ipamd holds no address for, ipamd asks the source again: a
        branch pod's VLAN and address come back, a pod the API server no
        longer has is a success with nothing to tear down.
  --pod-eni-source kubernetes|static
        Where --enable-pod-eni learns about branch pods (default
        kubernetes). "kubernetes" GETs the pod from the API server on
        every ADD (and on a DEL the pool cannot answer), with the
        in-cluster service account, or with --kubeconfig; ipamd refuses
        to start when it has neither. "static" reads --pod-eni-file
        once, at startup, for use with --cloud memory and tests.
  --kubeconfig PATH
        Kubeconfig file for --pod-eni-source kubernetes.
  --pod-eni-file PATH
        JSON file for --pod-eni-source static: an object mapping
        "namespace/name" to one element of the annotation, e.g.
          {"default/web": {"eniId": "eni-0a1b2c3d4e5f60718",
            "ifAddress": "0a:1b:2c:3d:4e:5f", "privateIp": "192.168.5.20",
            "vlanID": 7, "subnetCidr": "192.168.5.0/24"}}
        (ipv6Addr and subnetV6Cidr for --ipv6). Pods it does not name
        are regular pods. Unknown fields, a vlanID outside 1..4094, a MAC
        or address that does not parse stop ipamd at startup.

Logs:
  --log-level LEVEL   (AWS_VPC_K8S_CNI_LOGLEVEL)
        debug, info, warn, error or fatal, in any case (default info).
  --log-file stderr|stdout|PATH   (AWS_VPC_K8S_CNI_LOG_FILE)
        Where the logs go (default stderr). A file (an absolute path; its
        directory is created) rotates as the reference's ipamd.log does:
        at 100 MB, the last 5 kept for 30 days, gzipped. Mode 0600.
  --log-format FORMAT
        text or json (default text).

  --version
        Print the build version and exit.
  -h, --help
        Print this help and exit.

Exit status: 0 after SIGTERM/SIGINT (or --help, --version), 1 when the
daemon cannot start (socket, checkpoint, cloud, pod-ENI source), 2 for a
usage error.
`
