# vpccni — see README.md. Every target works on a fresh Debian 12 machine
# with Go 1.26: `make test` installs what it needs first (`make tools`).

GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.buildVersion=$(VERSION)
GINKGO  := $(GO) tool ginkgo $(if $(CI),--no-color)

# Packages whose tests need no root and no kernel (everything but the
# real-kernel suites, the containerd e2e suite and bench/).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e /integration -e /scenarios/suite -e /kernel/linux -e /internal/testsupport/testns -e /internal/testsupport/refcni -e /ipamd/reconcile/realkernel -e /e2e -e /bench/ -e /scenarios/explore/budget)

.PHONY: all build test unit scenarios explore integration e2e kernel-real replay fuzz vet fmt mocks proto \
        verify-generated tools deps clean image kind-up kind-load kind-down bench \
        mutants mutants-hand explore-random soak html fleet

all: build

# Static, as the image ships them (and as upstream ships CNI plugins): a
# dynamically linked plugin spends most of a millisecond in the loader on
# every call.
build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/vpc-cni ./plugin/cmd/vpc-cni
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ipamd ./ipamd/cmd/ipamd
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/vpccni-node ./node/cmd/vpccni-node
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/vpccni-audit ./audit/cmd/vpccni-audit

## tools: install what the suites need, only what is missing (one line per
## tool: found, installed or built): protoc, ip, containerd, runc, iptables,
## podman
## from Debian (apt-get, root); crictl, containerd 2.4.2 and the reference
## plugin (aws/amazon-vpc-cni-k8s's aws-cni, for the interop suite and
## make bench) built from the Go module proxy at the versions below into
## $(TOOLS_CACHE), once.
## VPCCNI_INSTALL=0 installs nothing: a missing tool then stops here, named
## with the command that installs it.
VPCCNI_INSTALL      ?= 1
CRICTL_VERSION      := v1.37.0
GRPC_HEALTH_PROBE_VERSION := v0.4.63
CONTAINERD2_VERSION := v2.4.2
KUBE_VERSION        := v1.37.2
ETCD_VERSION        := v3.7.3
REFCNI_VERSION      := v1.23.2
TOOLS_CACHE         ?= $(or $(XDG_CACHE_HOME),$(or $(HOME),/root)/.cache)/vpccni-tools
# The e2e suite reads these two (set either to use a build of your own).
export CRICTL          ?= $(TOOLS_CACHE)/crictl-$(CRICTL_VERSION)/crictl
export GRPC_HEALTH_PROBE ?= $(TOOLS_CACHE)/grpc-health-probe-$(GRPC_HEALTH_PROBE_VERSION)/grpc-health-probe
export CONTAINERD2_DIR ?= $(TOOLS_CACHE)/containerd-$(CONTAINERD2_VERSION)
# The integration suite's API-server specs and the e2e suite's kubelet node
# read these two.
export KUBE_DIR ?= $(TOOLS_CACHE)/kubernetes-$(KUBE_VERSION)
export ETCD     ?= $(TOOLS_CACHE)/etcd-$(ETCD_VERSION)/etcd
# The interop suite and make bench read these two: the reference plugin and
# the writable copy of its module it was built from (the interop suite
# builds its checkpoint generator there).
export VPCCNI_REFCNI     ?= $(TOOLS_CACHE)/amazon-vpc-cni-k8s-$(REFCNI_VERSION)/aws-cni
export VPCCNI_REFCNI_SRC ?= $(TOOLS_CACHE)/amazon-vpc-cni-k8s-$(REFCNI_VERSION)/src
tools:
	@VPCCNI_INSTALL=$(VPCCNI_INSTALL) CRICTL_VERSION=$(CRICTL_VERSION) GRPC_HEALTH_PROBE_VERSION=$(GRPC_HEALTH_PROBE_VERSION) \
	  CONTAINERD2_VERSION=$(CONTAINERD2_VERSION) KUBE_VERSION=$(KUBE_VERSION) ETCD_VERSION=$(ETCD_VERSION) \
	  REFCNI_VERSION=$(REFCNI_VERSION) GO="$(GO)" tools/install.sh

## deps: the old name of tools.
deps: tools

## test: everything CI runs: the tools, then every suite of TEST_SUITES
## (all of them, even after one fails, so the summary is complete), then
## the summary of $(REPORTS): one line per suite with its passed, failed and
## skipped counts, the skips' reasons and the failures under it, and last
## "N passed, M failed, K skipped". Fails if any suite failed.
# Each suite is a target; :gotest or :ginkgo names the report it leaves
# (a suite without one counts as one step that passed or failed).
TEST_SUITES = vet verify-generated unit:gotest scenarios:ginkgo explore explore-random:gotest kernel-real:gotest integration:ginkgo e2e:ginkgo html:gotest mutants-hand
REPORTS     := $(BIN)/reports
# gotest runs `go test -json`: it keeps the JSON for the summary and prints
# what plain `go test` would (package lines, failing tests' output, skips).
TESTSUMMARY  := $(BIN)/testsummary
GOTEST       = $(TESTSUMMARY) gotest -o $(REPORTS)/$@.gotest.json -- $(GO) test -json
GINKGO_JSON  = --json-report=reports/$@.ginkgo.json
test: tools $(TESTSUMMARY)
	@rm -rf $(REPORTS); mkdir -p $(REPORTS)
	@trap 'exit 130' INT TERM; status=0; for s in $(TEST_SUITES); do t=$${s%%:*}; \
	  echo "== make $$t"; $(MAKE) --no-print-directory $$t; rc=$$?; echo $$rc > $(REPORTS)/$$t.exit; \
	  [ $$rc = 0 ] || status=1; \
	done; \
	$(TESTSUMMARY) report -dir $(REPORTS) $(TEST_SUITES) || status=1; \
	exit $$status

# Always asked for: go build knows whether it is up to date (a fraction of
# a second when it is).
.PHONY: $(TESTSUMMARY)
$(TESTSUMMARY):
	@$(GO) build -o $@ ./tools/testsummary

unit: $(TESTSUMMARY)
	@mkdir -p $(REPORTS)
	$(GOTEST) -race -count=1 $(UNIT_PKGS)

## scenarios: the scenario library as a Ginkgo suite (kernel model, no root).
scenarios:
	@mkdir -p $(REPORTS)
	$(GINKGO) -r --label-filter="$(LABELS)" --junit-report=scenarios-junit.xml $(GINKGO_JSON) --output-dir=$(BIN) ./scenarios/suite

## kernel-real: the real-kernel tests of kernel/linux and the reconciler
## (root, namespaces; without root they fail). Kernel features this machine
## lacks (VLAN links) are skipped, with the reason.
kernel-real: $(TESTSUMMARY)
	@mkdir -p $(REPORTS)
	$(GOTEST) -count=1 ./kernel/linux/... ./internal/testsupport/testns/... ./internal/testsupport/refcni/... ./ipamd/reconcile/realkernel/...

## integration: real binaries, real gRPC, network namespaces (root). Its
## interop specs run the reference plugin ($(VPCCNI_REFCNI), make tools)
## beside vpc-cni against ipamd; without it they fail, naming make tools.
integration:
	@mkdir -p $(REPORTS)
	$(GINKGO) -r -v --junit-report=integration-junit.xml $(GINKGO_JSON) --output-dir=$(BIN) ./integration

## e2e: containerd 1.6 (CNI 1.0.0) and 2.4.2 (CNI 1.1.0, STATUS through
## crictl info) drive vpc-cni + portmap through the CRI (crictl runp, stopp,
## rmp) against ipamd, in a node namespace (root); podman 4.3 runs, stops and
## removes containers on vpc-cni (resultFormat spec); kubelet, a real control
## plane and deploy/'s aws-node DaemonSet run pods and the #2048 drain (label
## kubelet). Needs containerd, runc, iptables, podman, crictl ($CRICTL),
## containerd 2.4.2 ($CONTAINERD2_DIR), the Kubernetes binaries ($KUBE_DIR),
## etcd ($ETCD) and grpc-health-probe ($GRPC_HEALTH_PROBE), which `make tools`
## installs; without them it fails, naming what is missing.
e2e:
	@mkdir -p $(REPORTS)
	$(GINKGO) -v --label-filter='!bench' --junit-report=e2e-junit.xml $(GINKGO_JSON) --output-dir=$(BIN) ./e2e

## bench: ADD/DEL of vpc-cni and of the reference plugin (aws-cni, make
## tools builds it), both against ipamd --cloud memory, beside ptp +
## host-local (the containernetworking/plugins of go.mod): interleaved,
## through libcni in a node namespace, the plugin process alone timed
## (docs/benchmarks.md), at 1, 30, 110 and 250 pods on the node: medians,
## p95, CPU per call and ratios at 1 and 110 pods, the cost curve, also as
## JSON in $(BIN)/bench/cnibench.json; then vpc-cni's DEL while ipamd is
## SIGSTOPped (root). Prints figures; fails only when something does not
## work. Then containerd 1.6 (crictl runp/stopp/rmp) on two nodes, one with
## vpc-cni, one with ptp, interleaved (needs containerd, runc, crictl as
## e2e does). Not part of test.
## BENCH_FLAGS="-n 50 -pods 1,110 -hang-runs 10 -v", BENCH_CRI_RUNS=20.
BENCH_FLAGS ?=
BENCH_CRI_RUNS ?= 20
CNI_PLUGINS_VERSION = $(shell $(GO) list -m -f '{{.Version}}' github.com/containernetworking/plugins)
bench: tools
	@# Every plugin static, as each project ships it (the reference is
	@# built so by make tools).
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/bench/vpc-cni ./plugin/cmd/vpc-cni
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/bench/ipamd ./ipamd/cmd/ipamd
	@# ptp imports modules this go.sum does not list: build it at go.mod's
	@# version with its own module's go.sum (go install pkg@version).
	CGO_ENABLED=0 GOBIN=$(abspath $(BIN)/bench) $(GO) install \
	  github.com/containernetworking/plugins/plugins/main/ptp@$(CNI_PLUGINS_VERSION) \
	  github.com/containernetworking/plugins/plugins/ipam/host-local@$(CNI_PLUGINS_VERSION)
	$(GO) build -o $(BIN)/bench/cnibench ./bench/cmd/cnibench
	$(BIN)/bench/cnibench -bin $(BIN)/bench -ref $(VPCCNI_REFCNI) -json $(BIN)/bench/cnibench.json $(BENCH_FLAGS)
	BENCH_CRI_RUNS=$(BENCH_CRI_RUNS) $(GINKGO) -v --label-filter=bench ./e2e

## explore: the whole fault space of the eviction template (every failpoint
## it reaches x occurrence x crash/error/hang x mode x policy x checkpoint
## kept/lost/corrupt); fails if vpccni's flow is not clean on all of it.
## EXPLORE_FLAGS="--out DIR" (without --no-shrink) writes the counterexamples.
EXPLORE_FLAGS ?= --no-shrink
explore:
	$(GO) run ./scenarios/cmd/replay explore $(EXPLORE_FLAGS) scenarios/library/autoscaler-evicts-aws-node.yaml

## explore-random: the randomized explorer's fixed budget (one committed
## seed, 3000 generated timelines over the four modes, about 30 s here):
## fails with each distinct failure shrunk to a scenario file, written to
## $(BIN)/explore-random, that `replay run` reproduces.
explore-random: $(TESTSUMMARY)
	@mkdir -p $(REPORTS)
	VPCCNI_EXPLORE_OUT=$(abspath $(BIN))/explore-random $(GOTEST) -count=1 ./scenarios/explore/budget

## html: replay's HTML report opened in a real headless Chromium (Debian's
## chromium, driven by chromedp; built with -tags browser): no console
## error, no fetch, the #2048 cell of ref-v1.11 showing web-1's leaked rules
## 512 and 1536 and web-2's misroute, vpccni's cell clean; the checks fail
## on a page drawn without the leak marking. The page and its screenshot
## stay in $(BIN)/html.
html: $(TESTSUMMARY)
	@mkdir -p $(REPORTS)
	VPCCNI_BROWSER_OUT=$(abspath $(BIN))/html $(GOTEST) -tags browser -count=1 -run TestBrowser ./scenarios/report/htmlreport

## soak: the randomized explorer for as long as asked, with a fresh seed
## it prints first (replay explore --random --seed N gives the same run).
## SOAK_FOR=30m (default), SOAK_OUT=$(BIN)/soak for the counterexamples.
SOAK_FOR ?= 30m
SOAK_OUT ?= $(BIN)/soak
soak:
	$(GO) run ./scenarios/cmd/replay explore --random --for $(SOAK_FOR) --out $(SOAK_OUT)

## fleet: the day-long fleet, scenarios/fleets/autoscaler-1000-nodes-day.yaml
## (1,000 nodes of 110 pods, 24 simulated hours, the autoscaler draining
## with aws-node evicted first), under vpccni's flow and ref-v1.11's: each
## run's time, CNI calls per second and memory, its findings, and the JSON
## report in $(BIN)/fleet/day.json, with a CPU profile beside it. Not part
## of make test (docs/fleet.md, "Cost"). FLEET_FILE and FLEET_FLAGS
## (e.g. --policy default) change what runs.
FLEET_FILE ?= scenarios/fleets/autoscaler-1000-nodes-day.yaml
FLEET_FLAGS ?=
fleet:
	mkdir -p $(BIN)/fleet
	$(GO) run ./scenarios/cmd/replay fleet $(FLEET_FLAGS) --json $(BIN)/fleet/day.json --cpuprofile $(BIN)/fleet/cpu.prof $(FLEET_FILE)

## replay: the main job — replay the whole scenario library on the model
## (the headline incident first), then the recorded journals (a real-kernel
## recording of #2048), in one report that ends on its table and a total
## line, and writes the same as one HTML page, $(BIN)/replay.html (its path
## printed last). REPLAY_FLAGS=--quiet prints only the table and the total.
REPLAY_FLAGS ?=
replay:
	$(GO) run ./scenarios/cmd/replay run $(REPLAY_FLAGS) --html $(BIN)/replay.html scenarios/library/*.yaml scenarios/library/journals/*.jsonl

## mutants-hand: the hand-chosen semantic mutants of mutants/hand.txt, each
## applied to a temporary copy of the tree and tested by the packages it
## names (two at a time); exits 1 if any survives. The last suite of test.
MUTANTS_FLAGS ?= -j 2
mutants-hand:
	$(GO) run ./mutants/cmd/mutants $(MUTANTS_FLAGS) -list mutants/hand.txt

## mutants: gremlins over GREMLINS_PKGS (in a copy of the tree; JSON reports
## in $(BIN)/mutants), then mutants-hand. Slow: not part of test.
GREMLINS_VERSION ?= v0.6.0
GREMLINS_PKGS    ?= ./plugin/driver,./ipamd/datastore,./ipamd/reconcile,./plugin
mutants:
	@status=0; \
	$(GO) run ./mutants/cmd/mutants -gremlins $(GREMLINS_PKGS) -gremlins-version $(GREMLINS_VERSION) -gremlins-out $(BIN)/mutants || status=1; \
	$(GO) run ./mutants/cmd/mutants $(MUTANTS_FLAGS) -list mutants/hand.txt || status=1; \
	exit $$status

## fuzz: every fuzz target for FUZZTIME each, one `go test -fuzz` per target
## (go test fuzzes one target per package at a time); all run even when one
## fails, and a failing input is written to its package's testdata/fuzz/.
## Not part of test: CI runs the seed corpora as ordinary tests in unit.
FUZZTIME ?= 10s
# A new input is minimised before it joins the corpus; the default 60s lets
# the scenario library's 2 KB seeds use up a short run doing only that.
FUZZMINIMIZETIME ?= 2s
FUZZ_TARGETS = ./plugin:FuzzLoadNetConf ./plugin:FuzzLoadK8sArgs ./plugin:FuzzDecodeCleanupState \
	./scenarios/spec:FuzzParse ./ipamd:FuzzHandlers ./ipamd/datastore:FuzzStore ./ipamd/checkpoint:FuzzRead \
	./plugin/journal:FuzzRead ./scenarios/playback:FuzzPlay
fuzz:
	@failed=""; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg || failed="$$failed $$name"; \
	done; \
	test -z "$$failed" || { echo "fuzz targets that failed:$$failed"; exit 1; }

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags browser ./scenarios/report/htmlreport

fmt:
	gofmt -w $$(git ls-files '*.go')

## mocks: regenerate the gomock mocks of every seam.
mocks:
	$(GO) tool mockgen -source=kernel/kernel.go -destination=mocks/mock_kernel/mock_kernel.go -package=mock_kernel API,Opener
	$(GO) tool mockgen -source=plugin/driver/driver.go -destination=mocks/mock_driver/mock_driver.go -package=mock_driver Networker
	$(GO) tool mockgen -source=ipamd/rpc/client.go -destination=mocks/mock_rpc/mock_rpc.go -package=mock_rpc CNIBackendClient
	$(GO) tool mockgen -source=cloud/cloud.go -destination=mocks/mock_cloud/mock_cloud.go -package=mock_cloud EC2,Metadata,Provider,Inventory

## proto: regenerate ipamd/rpc and ipamd/rpc/rpcgrpc from their .proto files
## (needs protoc: make tools).
proto:
	@$(call need,protoc,Run make tools (or apt-get install protobuf-compiler).)
	sh ipamd/rpc/gen.sh

## verify-generated: fail when committed generated code is stale.
verify-generated: proto mocks
	@git diff --exit-code --stat -- ipamd/rpc mocks || { echo "generated code is stale: run 'make proto mocks' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- ipamd/rpc mocks)" || { echo "untracked generated files:"; git status --porcelain -- ipamd/rpc mocks; exit 1; }

## Deploying (deploy/, docs/deploying.md): these need Docker, kind and
## kubectl, which `make test` does not; each says what is missing and stops.
IMAGE        ?= vpccni:$(VERSION)
INIT_IMAGE   ?= vpccni-init:$(VERSION)
KIND_CLUSTER ?= vpccni
# The images deploy/kubernetes names; kind-load puts $(IMAGE) and
# $(INIT_IMAGE) in their place. go test ./deploy/ checks that they agree.
MANIFEST_IMAGE      := vpccni:dev
MANIFEST_INIT_IMAGE := vpccni-init:dev
KUBECTL_KIND = kubectl --context kind-$(KIND_CLUSTER)

# need TOOL,WHERE: stop the recipe when TOOL is not on PATH, saying so.
need = command -v $(1) >/dev/null 2>&1 || { echo "make $@: needs $(1), which is not on PATH. $(2)" >&2; exit 1; }
# docker_up: stop the recipe when no Docker daemon answers.
docker_up = docker info >/dev/null 2>&1 || { echo "make $@: docker is installed but no Docker daemon answers (docker info failed): start dockerd or set DOCKER_HOST." >&2; exit 1; }
DOCKER_HINT  = Install Docker: https://docs.docker.com/engine/install/
KIND_HINT    = Install kind: https://kind.sigs.k8s.io/docs/user/quick-start/
KUBECTL_HINT = Install kubectl: https://kubernetes.io/docs/tasks/tools/

## image: the two node images (deploy/Dockerfile): $(INIT_IMAGE) for the
## aws-vpc-cni-init container and $(IMAGE) for aws-node.
image:
	@$(call need,docker,$(DOCKER_HINT))
	@$(docker_up)
	docker build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) --target init -t $(INIT_IMAGE) .
	docker build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .

## kind-up: a kind cluster without a CNI (one control-plane node, one worker).
kind-up:
	@$(call need,docker,$(DOCKER_HINT))
	@$(call need,kind,$(KIND_HINT))
	@$(docker_up)
	kind create cluster --config deploy/kind.yaml --name $(KIND_CLUSTER)

## kind-load: load $(IMAGE) and $(INIT_IMAGE) (make image) into the cluster, apply deploy/kubernetes with them.
kind-load:
	@$(call need,docker,$(DOCKER_HINT))
	@$(call need,kind,$(KIND_HINT))
	@$(call need,kubectl,$(KUBECTL_HINT))
	@$(docker_up)
	kind load docker-image $(IMAGE) $(INIT_IMAGE) --name $(KIND_CLUSTER)
	for f in deploy/kubernetes/*.yaml; do \
	  sed -e 's|image: $(MANIFEST_IMAGE)$$|image: $(IMAGE)|' -e 's|image: $(MANIFEST_INIT_IMAGE)$$|image: $(INIT_IMAGE)|' "$$f" | $(KUBECTL_KIND) apply -f - || exit 1; \
	done
	$(KUBECTL_KIND) -n kube-system rollout status daemonset/aws-node --timeout=180s

kind-down:
	@$(call need,docker,$(DOCKER_HINT))
	@$(call need,kind,$(KIND_HINT))
	kind delete cluster --name $(KIND_CLUSTER)

clean:
	rm -rf $(BIN)
