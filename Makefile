# vpccni — see README.md. Every target works on a fresh Debian 12 machine
# with Go 1.26 once .ci/run (or `make deps`) has installed protoc.

GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.buildVersion=$(VERSION)
GINKGO  := $(GO) tool ginkgo $(if $(CI),--no-color)

# Packages whose tests need no root and no kernel (everything but the
# real-kernel suites, the containerd e2e suite and bench/).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e /integration -e /scenarios/suite -e /kernel/linux -e /internal/testns -e /ipamd/reconcile/realkernel -e /e2e -e /bench/)

.PHONY: all build test unit scenarios explore integration e2e kernel-real replay fuzz vet fmt mocks proto \
        verify-generated deps clean image kind-up kind-load kind-down bench \
        mutants mutants-hand

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/vpc-cni ./plugin/cmd/vpc-cni
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ipamd ./ipamd/cmd/ipamd

## test: everything CI runs.
test: vet verify-generated unit scenarios explore kernel-real integration e2e

unit:
	$(GO) test -race -count=1 $(UNIT_PKGS)

## scenarios: the scenario library as a Ginkgo suite (kernel model, no root).
scenarios:
	$(GINKGO) -r --label-filter="$(LABELS)" --junit-report=scenarios-junit.xml --output-dir=$(BIN) ./scenarios/suite

## kernel-real: the real-kernel tests of kernel/linux and the reconciler (root, namespaces).
kernel-real:
	$(GO) test -count=1 ./kernel/linux/... ./internal/testns/... ./ipamd/reconcile/realkernel/...

## integration: real binaries, real gRPC, network namespaces (root).
integration:
	$(GINKGO) -r -v --junit-report=integration-junit.xml --output-dir=$(BIN) ./integration

## e2e: containerd 1.6 (CNI 1.0.0) and 2.4.2 (CNI 1.1.0, STATUS through
## crictl info) drive vpc-cni + portmap through the CRI (crictl runp, stopp,
## rmp) against ipamd, in a node namespace (root). Needs containerd, runc,
## iptables, crictl ($CRICTL or PATH) and containerd 2.4.2 ($CONTAINERD2_DIR),
## which .ci/run installs; without them it skips, or fails under CI=true.
e2e:
	$(GINKGO) -v --label-filter='!bench' --junit-report=e2e-junit.xml --output-dir=$(BIN) ./e2e

## bench: ADD/DEL latency of vpc-cni (with ipamd --cloud memory) beside
## ptp + host-local (the containernetworking/plugins of go.mod), interleaved,
## through libcni in a node namespace, and vpc-cni's DEL while ipamd is
## SIGSTOPped (root). Prints figures; fails only when something does not
## work. Then containerd 1.6 (crictl runp/stopp/rmp) on two nodes, one with
## vpc-cni, one with ptp, interleaved (needs containerd, runc, crictl as e2e
## does; skips without them). Not part of test.
## BENCH_FLAGS="-n 50 -hang-runs 10 -v", BENCH_CRI_RUNS=20.
BENCH_FLAGS ?=
BENCH_CRI_RUNS ?= 20
CNI_PLUGINS_VERSION = $(shell $(GO) list -m -f '{{.Version}}' github.com/containernetworking/plugins)
bench:
	$(GO) build -o $(BIN)/bench/vpc-cni ./plugin/cmd/vpc-cni
	$(GO) build -o $(BIN)/bench/ipamd ./ipamd/cmd/ipamd
	@# ptp imports modules this go.sum does not list: build it at go.mod's
	@# version with its own module's go.sum (go install pkg@version).
	GOBIN=$(abspath $(BIN)/bench) $(GO) install \
	  github.com/containernetworking/plugins/plugins/main/ptp@$(CNI_PLUGINS_VERSION) \
	  github.com/containernetworking/plugins/plugins/ipam/host-local@$(CNI_PLUGINS_VERSION)
	$(GO) build -o $(BIN)/bench/cnibench ./bench/cmd/cnibench
	$(BIN)/bench/cnibench -bin $(BIN)/bench $(BENCH_FLAGS)
	BENCH_CRI_RUNS=$(BENCH_CRI_RUNS) $(GINKGO) -v --label-filter=bench ./e2e

## explore: the whole fault space of the eviction template (every failpoint
## it reaches x occurrence x crash/error/hang x mode x policy x checkpoint
## kept/lost/corrupt); fails if vpccni's flow is not clean on all of it.
## EXPLORE_FLAGS="--out DIR" (without --no-shrink) writes the counterexamples.
EXPLORE_FLAGS ?= --no-shrink
explore:
	$(GO) run ./scenarios/cmd/replay explore $(EXPLORE_FLAGS) scenarios/library/autoscaler-evicts-aws-node.yaml

## replay: the main job — replay the whole scenario library on the model,
## then the recorded journals (a real-kernel recording of #2048).
replay:
	$(GO) run ./scenarios/cmd/replay run scenarios/library/*.yaml
	$(GO) run ./scenarios/cmd/replay journal --quiet scenarios/library/journals/*.jsonl

## mutants-hand: the hand-chosen semantic mutants of mutants/hand.txt, each
## applied to a temporary copy of the tree and tested by the packages it
## names (two at a time); exits 1 if any survives. Not part of test.
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

fmt:
	gofmt -w $$(git ls-files '*.go')

## mocks: regenerate the gomock mocks of every seam.
mocks:
	$(GO) tool mockgen -source=kernel/kernel.go -destination=mocks/mock_kernel/mock_kernel.go -package=mock_kernel API,Opener
	$(GO) tool mockgen -source=plugin/driver/driver.go -destination=mocks/mock_driver/mock_driver.go -package=mock_driver Networker
	$(GO) tool mockgen -source=ipamd/rpc/rpc_grpc.pb.go -destination=mocks/mock_rpc/mock_rpc.go -package=mock_rpc CNIBackendClient
	$(GO) tool mockgen -source=cloud/cloud.go -destination=mocks/mock_cloud/mock_cloud.go -package=mock_cloud EC2,Metadata,Provider,Inventory

## proto: regenerate ipamd/rpc from rpc.proto (needs protoc: apt-get install protobuf-compiler).
proto:
	sh ipamd/rpc/gen.sh

## verify-generated: fail when committed generated code is stale.
verify-generated: proto mocks
	@git diff --exit-code --stat -- ipamd/rpc mocks || { echo "generated code is stale: run 'make proto mocks' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- ipamd/rpc mocks)" || { echo "untracked generated files:"; git status --porcelain -- ipamd/rpc mocks; exit 1; }

## Deploying (deploy/, docs/deploying.md): these need Docker, kind and
## kubectl, which `make test` does not; each says what is missing and stops.
IMAGE        ?= vpccni:$(VERSION)
KIND_CLUSTER ?= vpccni
# The image deploy/kubernetes names; kind-load puts $(IMAGE) in its place.
# deploy/deploy_test.go checks that the two agree.
MANIFEST_IMAGE := vpccni:dev
KUBECTL_KIND = kubectl --context kind-$(KIND_CLUSTER)

# need TOOL,WHERE: stop the recipe when TOOL is not on PATH, saying so.
need = command -v $(1) >/dev/null 2>&1 || { echo "make $@: needs $(1), which is not on PATH. $(2)" >&2; exit 1; }
# docker_up: stop the recipe when no Docker daemon answers.
docker_up = docker info >/dev/null 2>&1 || { echo "make $@: docker is installed but no Docker daemon answers (docker info failed): start dockerd or set DOCKER_HOST." >&2; exit 1; }
DOCKER_HINT  = Install Docker: https://docs.docker.com/engine/install/
KIND_HINT    = Install kind: https://kind.sigs.k8s.io/docs/user/quick-start/
KUBECTL_HINT = Install kubectl: https://kubernetes.io/docs/tasks/tools/

## image: the node image (ipamd, vpc-cni, portmap, loopback, the conflist, install-cni.sh).
image:
	@$(call need,docker,$(DOCKER_HINT))
	@$(docker_up)
	docker build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .

## kind-up: a kind cluster without a CNI (one control-plane node, one worker).
kind-up:
	@$(call need,docker,$(DOCKER_HINT))
	@$(call need,kind,$(KIND_HINT))
	@$(docker_up)
	kind create cluster --config deploy/kind.yaml --name $(KIND_CLUSTER)

## kind-load: load $(IMAGE) (make image) into the cluster, apply deploy/kubernetes with it.
kind-load:
	@$(call need,docker,$(DOCKER_HINT))
	@$(call need,kind,$(KIND_HINT))
	@$(call need,kubectl,$(KUBECTL_HINT))
	@$(docker_up)
	kind load docker-image $(IMAGE) --name $(KIND_CLUSTER)
	for f in deploy/kubernetes/*.yaml; do \
	  sed 's|image: $(MANIFEST_IMAGE)$$|image: $(IMAGE)|' "$$f" | $(KUBECTL_KIND) apply -f - || exit 1; \
	done
	$(KUBECTL_KIND) -n kube-system rollout status daemonset/vpccni-node --timeout=180s

kind-down:
	@$(call need,docker,$(DOCKER_HINT))
	@$(call need,kind,$(KIND_HINT))
	kind delete cluster --name $(KIND_CLUSTER)

deps:
	command -v protoc >/dev/null || { apt-get update -qq && apt-get install -y -qq protobuf-compiler; }
	$(GO) mod download

clean:
	rm -rf $(BIN)
