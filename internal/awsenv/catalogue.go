package awsenv

// Containers of the reference's DaemonSet.
const (
	Node = "aws-node"
	Init = "aws-vpc-cni-init"
)

// Reasons shared by several variables.
const (
	notCustomNetworking = "custom networking (ENIConfig): vpccni gives pods addresses of the node's own subnets only"
	notEgressPlugin     = "the egress plugin (IPv6 pods reaching IPv4 and the reverse): vpccni ships no egress plugin"
)

// catalogue is every variable the reference reads in its shipped code or
// documents, with the reference's default.
var catalogue = []Var{
	// The warm pool (ipamd/warmpool).
	{Name: "WARM_ENI_TARGET", Container: Node, Default: "1", Kind: KindInt, Status: Supported,
		Note: "free ENIs' worth of addresses ipamd keeps (--warm-eni-target)"},
	{Name: "WARM_IP_TARGET", Container: Node, Default: "0", Kind: KindInt, Status: Supported,
		Note: "free addresses ipamd keeps; set, it overrides WARM_ENI_TARGET (--warm-ip-target)"},
	{Name: "MINIMUM_IP_TARGET", Container: Node, Default: "0", Kind: KindInt, Status: Supported,
		Note: "addresses ipamd holds in all at least (--minimum-ip-target)"},
	{Name: "WARM_PREFIX_TARGET", Container: Node, Default: "0", Kind: KindInt, Status: Supported,
		Note: "free /28 prefixes ipamd keeps with prefix delegation (--warm-prefix-target)"},
	{Name: "MAX_ENI", Container: Node, Default: "-1", Kind: KindInt, Status: Supported,
		Note: "caps the ENIs attached below the instance's limit (--max-eni)"},
	{Name: "ENABLE_PREFIX_DELEGATION", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "/28 prefixes (IPv4) or a /80 (IPv6) per ENI instead of single addresses (--enable-prefix-delegation)"},
	{Name: "IP_COOLDOWN_PERIOD", Container: Node, Default: "30", Kind: KindInt, Status: Supported,
		Note: "seconds a released address rests before another pod gets it (--ip-cooldown)"},

	// Address families and pod ENIs.
	{Name: "ENABLE_IPv4", Container: Node, Default: "true", Kind: KindBool, Status: Supported,
		Note: "IPv4 pods; exactly one of ENABLE_IPv4 and ENABLE_IPv6 is true, as in the reference (the reference's code defaults it to false, its manifest and documentation to true)"},
	{Name: "ENABLE_IPv6", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "IPv6 pods from the primary ENI's delegated prefix (--ipv6); read by the init container too"},
	{Name: "ENABLE_POD_ENI", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "security groups for pods: branch ENIs on a trunk, VLAN per pod (--enable-pod-eni)"},
	{Name: "POD_SECURITY_GROUP_ENFORCING_MODE", Container: Node, Default: "strict", Kind: KindString, Status: Supported,
		Note: "the conflist's podSGEnforcingMode, written by vpccni-node run: strict or standard (refused otherwise, with ENABLE_POD_ENI off too)"},

	// Files, sockets, endpoints.
	{Name: "AWS_VPC_K8S_CNI_BACKING_STORE", Container: Node, Default: "/var/run/aws-node/ipam.json", Kind: KindString, Status: Supported,
		Note: "ipamd's checkpoint file (--checkpoint)"},
	{Name: "INTROSPECTION_BIND_ADDRESS", Container: Node, Default: "127.0.0.1:61679", Kind: KindString, Status: Supported,
		Note: "introspection's listen address, loopback only unless --allow-nonloopback-introspection (--introspection-address)"},
	{Name: "DISABLE_INTROSPECTION", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "no introspection server (--disable-introspection)"},
	{Name: "DISABLE_METRICS", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "no metrics server on :61678 (--disable-metrics)"},
	{Name: "AWS_VPC_K8S_CNI_VETHPREFIX", Container: Node, Default: "eni", Kind: KindString, Status: Supported,
		Note: "the host veths' name prefix ipamd recognises pods by (--veth-prefix); the conflist's vethPrefix is the plugin's"},
	{Name: "AWS_EC2_ENDPOINT", Container: Node, Default: "", Kind: KindString, Status: Supported,
		Note: "a custom EC2 endpoint (--ec2-endpoint)"},

	// Logs.
	{Name: "AWS_VPC_K8S_CNI_LOGLEVEL", Container: Node, Default: "Debug", Kind: KindString, Status: Supported,
		Note: "ipamd's log level, debug, info, warn, error or fatal in any case (--log-level); unset, info; a name the reference would read as debug is refused"},
	{Name: "AWS_VPC_K8S_CNI_LOG_FILE", Container: Node, Default: "/host/var/log/aws-routed-eni/ipamd.log", Kind: KindString, Status: Supported,
		Note: "ipamd's log: stderr, stdout (any case) or an absolute path, rotated as the reference rotates it: at 100 MB, 5 kept, 30 days, gzipped (--log-file); unset, stderr"},
	{Name: "AWS_VPC_K8S_PLUGIN_LOG_FILE", Container: Node, Default: "/var/log/aws-routed-eni/plugin.log", Kind: KindString, Status: Supported,
		Note: "the conflist's pluginLogFile, written by vpccni-node run: an absolute path, or stderr (the runtime's); stdout is refused as in the reference"},
	{Name: "AWS_VPC_K8S_PLUGIN_LOG_LEVEL", Container: Node, Default: "Debug", Kind: KindString, Status: Supported,
		Note: "the conflist's pluginLogLevel, written by vpccni-node run: debug, info, warn or error, in any case"},

	// MTU and the init container.
	{Name: "AWS_VPC_ENI_MTU", Container: Node, Default: "9001", Kind: KindInt, Status: Supported,
		Note: "the MTU of every ENI's link, the primary's too (--eni-mtu; 576 to 9001, 1280 to 9001 on IPv6); the pods' MTU too when POD_MTU is unset (vpccni-node run's conflist)"},
	{Name: "POD_MTU", Container: Node, Default: "9001", Kind: KindInt, Status: Supported,
		Note: "the conflist's mtu, written by vpccni-node run: the MTU of both veth ends of every pod (576 to 9001, 1280 to 9001 on IPv6)"},
	{Name: "DISABLE_TCP_EARLY_DEMUX", Container: Init, Default: "false", Kind: KindBool, Status: Supported,
		Note: "vpccni-node init sets net/ipv4/tcp_early_demux to 0, else 1 (left out on a kernel without it)"},
	{Name: "HOST_CNI_BIN_PATH", Container: Node, Default: "/host/opt/cni/bin", Kind: KindString, Status: Supported,
		Note: "where vpccni-node init installs the CNI plugins and run installs vpc-cni"},
	{Name: "HOST_CNI_CONFDIR_PATH", Container: Node, Default: "/host/etc/cni/net.d", Kind: KindString, Status: Supported,
		Note: "where vpccni-node run writes 10-aws.conflist once ipamd answers its health check"},
	{Name: "ENABLE_BANDWIDTH_PLUGIN", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "vpccni-node run chains the bandwidth plugin after portmap"},
	{Name: "DISABLE_POD_V6", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "vpccni-node run chains the tuning plugin turning IPv6 off in the pods (all, default, lo)"},

	// SNAT, connmark and the rules around them.
	{Name: "AWS_VPC_K8S_CNI_EXTERNALSNAT", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "ipamd --external-snat: no AWS-SNAT-CHAIN-0 or AWS-CONNMARK-CHAIN-0 (package hostnat)"},
	{Name: "AWS_VPC_K8S_CNI_RANDOMIZESNAT", Container: Node, Default: "prng", Kind: KindString, Status: Supported,
		Note: "ipamd --randomize-snat: prng, hashrandom or none; any other value is refused"},
	{Name: "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", Container: Node, Default: "", Kind: KindString, Status: Supported,
		Note: "ipamd --exclude-snat-cidrs: a CIDR that does not parse or is IPv6 is refused (the reference logs and skips it)"},
	{Name: "AWS_VPC_K8S_CNI_CONNMARK", Container: Node, Default: "0x80", Kind: KindString, Status: Supported,
		Note: "ipamd --connmark: 1 to 0xffffffff; out of range is refused (the reference logs and takes 0x80)"},
	{Name: "AWS_VPC_CNI_NODE_PORT_SUPPORT", Container: Node, Default: "true", Kind: KindBool, Status: Supported,
		Note: "ipamd --node-port-support: the mangle connmark rules and rule 1024 (package hostnat)"},
	{Name: "AWS_EXTERNAL_SERVICE_CIDRS", Container: Node, Default: "", Kind: KindString, Status: Planned,
		Note: "the `to CIDR lookup main` rules at priority 1535 are not built yet"},

	// EC2 and the API server.
	{Name: "DISABLE_NETWORK_RESOURCE_PROVISIONING", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "no warm pool: the ENIs and addresses attached at start are the pool (--disable-provisioning); unlike the reference, ipamd does not pick up ENIs attached later until it restarts"},
	{Name: "ADDITIONAL_ENI_TAGS", Container: Node, Default: "{}", Kind: KindJSON, Status: Supported,
		Note: "a JSON object of tags put on every ENI ipamd creates; a key with k8s.amazonaws.com or aws: is refused (the reference drops it with a warning)"},
	{Name: "CLUSTER_NAME", Container: Node, Default: "", Kind: KindString, Status: Supported,
		Note: "tags every ENI ipamd creates with cluster.k8s.amazonaws.com/name"},
	{Name: "MANAGE_UNTAGGED_ENI", Container: Node, Default: "true", Kind: KindBool, Status: Planned,
		Note: "ipamd manages every ENI it finds; leaving untagged ones alone is not built yet"},
	{Name: "AWS_MANAGE_ENIS_NON_SCHEDULABLE", Container: Node, Default: "false", Kind: KindBool, Status: Planned,
		Note: "ipamd does not watch the node's schedulability yet"},
	{Name: "DISABLE_LEAKED_ENI_CLEANUP", Container: Node, Default: "false", Kind: KindBool, Status: Supported,
		Note: "no sweep for leaked ENIs (`--leaked-eni-sweep-interval 0`); vpccni sweeps at start and every 5 minutes, the reference every hour ([ipamd.md](ipamd.md#leaked-enis))"},
	{Name: "ANNOTATE_POD_IP", Container: Node, Default: "false", Kind: KindBool, Status: Planned,
		Note: "annotating pods with their address is not built yet"},
	{Name: "CLUSTER_ENDPOINT", Container: Node, Default: "", Kind: KindString, Status: Planned,
		Note: "the API server is reached through --kubeconfig or in-cluster config only"},
	{Name: "HTTP_TIMEOUT", Container: Node, Default: "10", Kind: KindInt, Status: Planned,
		Note: "the AWS SDK's HTTP timeout is its own default"},

	// Informational: read by the reference for labels and user agents.
	{Name: "VPC_CNI_VERSION", Container: Node, Default: "", Kind: KindString, Status: Informational,
		Note: "the reference's version string for its user agents; vpccni logs it at start and uses its own build version"},
	{Name: "MY_NODE_NAME", Container: Node, Default: "", Kind: KindString, Status: Informational,
		Note: "the node's name (downward API); logged at start"},
	{Name: "MY_POD_NAME", Container: Node, Default: "", Kind: KindString, Status: Informational,
		Note: "ipamd's own pod's name (downward API); logged at start"},
	{Name: "AWS_VPC_K8S_CNI_CONFIGURE_RPFILTER", Container: Node, Default: "", Kind: KindString, Status: Informational,
		Note: "deprecated and ignored by the reference too (its init sets rp_filter=2 regardless)"},
	{Name: "ENABLE_NFTABLES", Container: Node, Default: "", Kind: KindString, Status: Informational,
		Note: "deprecated and ignored by the reference too (it detects the iptables backend)"},

	// Exempt: features vpccni leaves out on purpose.
	{Name: "NETWORK_POLICY_ENFORCING_MODE", Container: Node, Default: "standard", Kind: KindString, Status: Exempt,
		Note: "network policy: vpccni ships no network policy agent (the reference's aws-eks-nodeagent container)"},
	{Name: "ENABLE_MULTI_NIC", Container: Node, Default: "false", Kind: KindBool, Status: Exempt,
		Note: "multi-NIC: vpccni manages network card 0 only"},
	{Name: "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", Container: Node, Default: "false", Kind: KindBool, Status: Exempt, Note: notCustomNetworking},
	{Name: "ENI_CONFIG_ANNOTATION_DEF", Container: Node, Default: "k8s.amazonaws.com/eniConfig", Kind: KindString, Status: Exempt, Note: notCustomNetworking},
	{Name: "ENI_CONFIG_LABEL_DEF", Container: Node, Default: "k8s.amazonaws.com/eniConfig", Kind: KindString, Status: Exempt, Note: notCustomNetworking},
	{Name: "ENABLE_SUBNET_DISCOVERY", Container: Node, Default: "true", Kind: KindBool, Status: Exempt,
		Note: "subnet discovery: new ENIs go in the primary ENI's subnet"},
	{Name: "ENABLE_IMDS_ONLY_MODE", Container: Node, Default: "false", Kind: KindBool, Status: Exempt,
		Note: "IMDS-only mode: ipamd needs the EC2 API to provision"},
	{Name: "ENABLE_V4_EGRESS", Container: Node, Default: "true", Kind: KindBool, Status: Exempt, Note: notEgressPlugin},
	{Name: "ENABLE_V6_EGRESS", Container: Node, Default: "false", Kind: KindBool, Status: Exempt, Note: notEgressPlugin},
	{Name: "AWS_VPC_K8S_EGRESS_V4_PLUGIN_LOG_FILE", Container: Node, Default: "/var/log/aws-routed-eni/egress-v4-plugin.log", Kind: KindString, Status: Exempt, Note: notEgressPlugin},
	{Name: "AWS_VPC_K8S_EGRESS_V6_PLUGIN_LOG_FILE", Container: Node, Default: "/var/log/aws-routed-eni/egress-v6-plugin.log", Kind: KindString, Status: Exempt, Note: notEgressPlugin},
}
