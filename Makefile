# trustplane: make run starts a one-node cluster, make test runs the tests.

GO       ?= go
BIN      := bin/trustplane
DATA_DIR ?= ./trustplane-data
LISTEN   ?= 127.0.0.1:6443
PKGS     := ./...

# VERSION is the release the tree builds (package trustplane, CHANGELOG.md);
# COMMIT, stamped into every binary the Makefile builds, is the commit it
# was built from, "-dirty" when tracked files differ from it.
VERSION  := $(shell cat VERSION)
COMMIT   := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
STAMP    := -X github.com/trustplane/trustplane.commit=$(COMMIT)

# Everything is built without cgo: the binary is static (the container image
# needs that), and the image, the end-to-end tests and make build share one
# build cache. Only the race detector needs cgo; its tests turn it back on.
export CGO_ENABLED ?= 0

.PHONY: all build image release upgrade-test run cluster cluster-stop reference reference-build reference-stop e2e-reference fleet-test conformance conformance-build compare scale test test-unit test-e2e test-failpoints test-deploy deploy-prebuild lint bench fuzz chaos chaos-short chaos-bin rotation clean

all: build

build:
	$(GO) build -ldflags "$(STAMP)" -o $(BIN) ./cmd/trustplane

# run builds and starts one node with the default data dir; it prints how to
# point kubectl at it once ready (the kubeconfig is $(DATA_DIR)/admin.kubeconfig).
run: build
	$(BIN) serve --data-dir $(DATA_DIR) --listen $(LISTEN)

# cluster starts three local nodes (data in ./trustplane-cluster) and prints a
# kubeconfig per node; cluster-stop stops exactly those processes.
cluster: build
	scripts/cluster.sh start

cluster-stop:
	scripts/cluster.sh stop

# reference builds upstream etcd, kube-apiserver and kube-controller-manager
# at the versions reference/go.mod pins (its own module) into bin/reference
# and starts them on loopback, the side trustplane bench compares with;
# reference-stop stops exactly those processes (docs/BENCHMARKS.md). Not
# part of make test.
reference: reference-build
	scripts/reference.sh start

# The kube binaries get the version stamps upstream's build gives them
# (hack/lib/version.sh), read from reference/go.mod, so /version and
# kubectl version say v1.33.13 rather than v0.0.0-master.
reference-build:
	cd reference && v=$$($(GO) list -m -f '{{.Version}}' k8s.io/kubernetes) && \
	minor=$${v#v1.} && minor=$${minor%%.*} && \
	x="" && for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do \
		x="$$x -X $$p.gitVersion=$$v -X $$p.gitMajor=1 -X $$p.gitMinor=$$minor -X $$p.gitTreeState=archive"; \
	done && \
	$(GO) build -ldflags "$$x" -o ../bin/reference/ ./cmd/etcd ./cmd/kube-apiserver \
		./cmd/kube-controller-manager ./cmd/reference-certs

reference-stop:
	scripts/reference.sh stop

# e2e-reference runs the end-to-end suite against the reference
# (TRUSTPLANE_E2E_KUBECONFIG, e2e/doc.go), starting it first unless it
# runs; scenarios that need a trustplane process of their own skip, and
# those checking trustplane's own behaviour skip naming it. The objects a
# run creates stay in the reference's etcd: for a fresh one, make
# reference-stop and remove $(REFERENCE_RUN) first. E2E_ARGS pass on to
# go test (-run ...). Not part of make test (docs/COMPATIBILITY.md).
REFERENCE_RUN = $(or $(REFERENCE_DIR),bin/reference/run)
e2e-reference:
	scripts/reference.sh status > /dev/null 2>&1 || scripts/reference.sh start
	TRUSTPLANE_E2E_KUBECONFIG=$(abspath $(REFERENCE_RUN))/admin.kubeconfig TRUSTPLANE_E2E_CA_DIR=$(abspath $(REFERENCE_RUN))/pki \
		$(GO) test -count=1 -v -timeout 40m ./e2e/ $(E2E_ARGS)

# fleet-test runs the end-to-end tests with a real kube-apiserver v1.33
# (etcd and kube-apiserver from bin/reference, on free loopback ports, one
# per test) as a relying party of trustplane, as an issuer trustplane
# trusts, and as an API server signing through trustplane external-signer:
# its token webhook, each side's JWT authenticator trusting the other's
# ServiceAccount issuer, signing-key rotations, trustplane stopped
# (e2e/e2e_fleet_reference_test.go, e2e_fleet_signer_reference_test.go);
# and kube-controller-manager as the controller plane of a
# --controllers=false node (e2e_fleet_kcm_reference_test.go).
# Not part of make test: a cold build of kube-apiserver and etcd takes
# about eight minutes on 2 cores, beyond make test's budget.
fleet-test: build reference-build
	TRUSTPLANE_REFERENCE_BIN=$(abspath bin/reference) $(GO) test -count=1 -v -timeout 20m -run 'TestFleetReference' ./e2e/

# conformance builds kube's upstream end-to-end suite, bin/e2e.test
# (k8s.io/kubernetes/test/e2e at the version conformance/go.mod pins, its
# own module), and runs the specs that need no nodes, kubelet or pods
# against a fresh one-node and a fresh three-node cluster on free loopback
# ports (scripts/conformance.sh; the selection is in conformance/). Reports
# go to bin/conformance; the summary, with the reason for each failure, to
# docs/conformance/results.md. Not part of make test: a cold build of
# e2e.test takes a long while, the run about an hour.
conformance: build conformance-build
	scripts/conformance.sh run
	mkdir -p docs/conformance && cp bin/conformance/results.md docs/conformance/results.md

conformance-build:
	scripts/conformance.sh build

# compare runs trustplane bench against a fresh trustplane node and a fresh
# reference in alternating rounds (ROUNDS, default 3; BENCH_ARGS pass on)
# and prints the ratios of the medians (scripts/compare.sh). Not part of
# make test; it needs both at rest to be fair, so nothing else should run.
compare: build reference-build
	scripts/compare.sh

# scale measures how costs grow with the work (scripts/scale.sh): creates,
# gets and memory against objects stored (OBJECTS), list time against list
# size (LIST_SIZES), watch delivery against watchers (WATCHERS), snapshot,
# restore and a new node's catch-up at the largest store; SVG plots and JSON
# in SCALE_DIR. Outside make test: the default sizes take about an hour.
scale: build
	scripts/scale.sh

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)

# test is what CI runs: lint, unit tests (race detector on the concurrent
# core), and end-to-end tests against the real binary.
test: lint test-unit test-e2e test-failpoints test-deploy chaos-short

# The race detector runs on the concurrent core (fsm, cluster, watchcache:
# raft, apply and the watch fan-out) and on internal/ (the connection
# tables every port shares, failpoints, ports), whose dependencies are small. The
# rest runs without it: a race build of kube's and client-go's packages
# would add ten minutes to a cold make test for packages (pure patch
# functions, certificates, the bench and chaos harnesses) whose own
# concurrency is a mutex or two.
test-unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 ./fsm/... ./cluster/... ./watchcache/... ./internal/...
	$(GO) test -count=1 . ./certs/... ./apply/... ./chaos/... ./bench/... ./api/...

# test-e2e starts compiling the deploy module (helm, kube's validation) in
# the background first: the end-to-end tests leave most of the CPU idle,
# and a cold build of that module takes minutes. test-deploy then finds it
# built; its log is bin/deploy-prebuild.log.
test-e2e:
	@mkdir -p bin && ( $(MAKE) --no-print-directory deploy-prebuild > bin/deploy-prebuild.log 2>&1 & )
	$(GO) test -count=1 -timeout 20m ./cmd/... ./e2e/...

deploy-prebuild:
	cd deploy && $(GO) vet ./... && $(GO) tool -n helm > /dev/null && \
		$(GO) test -c -o /dev/null ./chart/ && $(GO) test -c -o /dev/null ./image/

# test-failpoints runs the tests that need the storage failpoints (a
# -tags failpoints build of the packages and of the binary).
test-failpoints:
	$(GO) test -tags failpoints -count=1 ./internal/failpoint/
	$(GO) test -tags failpoints -count=1 -run Failpoint ./cluster/ ./e2e/

# image builds the container image without a Docker engine (deploy/image):
# a static Linux binary for IMAGE_ARCH, then a docker-load tarball
# (bin/trustplane-image.tar) and an OCI layout (bin/trustplane-oci), both
# tagged IMAGE_TAG. deploy/Dockerfile builds the same image with Docker.
IMAGE_ARCH    ?= $(shell $(GO) env GOARCH)
IMAGE_VERSION ?= $(if $(findstring -dev,$(VERSION)),$(VERSION)-$(COMMIT),$(VERSION))
IMAGE_TAG     ?= trustplane:$(IMAGE_VERSION)
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -ldflags "-s -w $(STAMP)" -o bin/trustplane-linux-$(IMAGE_ARCH) ./cmd/trustplane
	rm -rf bin/trustplane-oci bin/trustplane-image.tar
	cd deploy && $(GO) run ./cmd/trustplane-image --binary ../bin/trustplane-linux-$(IMAGE_ARCH) --arch $(IMAGE_ARCH) \
		--version $(IMAGE_VERSION) --tag $(IMAGE_TAG) --tar ../bin/trustplane-image.tar --oci ../bin/trustplane-oci

# release builds a release into bin/release/v$(VERSION): the static
# binaries and the images (docker-load tarballs) for linux/amd64 and
# linux/arm64, and SHA256SUMS of them. A release is built from a clean
# tree whose HEAD is tagged v$(VERSION) (docs/OPERATIONS.md, Releases);
# RELEASE_SNAPSHOT=1 builds one from any tree, named by its commit.
RELEASE_ARCHES ?= amd64 arm64
RELEASE_NAME   := $(if $(RELEASE_SNAPSHOT),$(VERSION)-$(COMMIT),$(VERSION))
RELEASE_DIR    := bin/release/v$(RELEASE_NAME)
release:
	@if [ -z "$(RELEASE_SNAPSHOT)" ]; then \
		case "$(VERSION)" in *-dev) echo "release: VERSION is $(VERSION), a development version (RELEASE_SNAPSHOT=1 builds a snapshot)" >&2; exit 1;; esac; \
		case "$(COMMIT)" in *-dirty|unknown) echo "release: the tree is not a clean checkout" >&2; exit 1;; esac; \
		[ "$$(git tag --points-at HEAD | grep -x "v$(VERSION)")" = "v$(VERSION)" ] || { echo "release: HEAD is not tagged v$(VERSION)" >&2; exit 1; }; \
	fi
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	for arch in $(RELEASE_ARCHES); do \
		$(MAKE) --no-print-directory image IMAGE_ARCH=$$arch IMAGE_VERSION=$(RELEASE_NAME) IMAGE_TAG=trustplane:v$(RELEASE_NAME) && \
		cp bin/trustplane-linux-$$arch $(RELEASE_DIR)/trustplane-linux-$$arch && \
		cp bin/trustplane-image.tar $(RELEASE_DIR)/trustplane-image-linux-$$arch.tar || exit 1; \
	done
	cp CHANGELOG.md $(RELEASE_DIR)/
	cd $(RELEASE_DIR) && sha256sum trustplane-* > SHA256SUMS
	@echo "release v$(RELEASE_NAME) in $(RELEASE_DIR)"

# upgrade-test upgrades three nodes of an earlier build to this tree one at
# a time (leader last), rolls one back and forward again, under the chaos
# workload and its checkers, then restores each build's backup with the
# other (scripts/upgrade-test.sh; about 5 minutes, not part of make test).
# UPGRADE_FROM is the earlier build: the previous release, v0.1.0, by its
# commit (a clone need not carry the tag). UPGRADE_FROM=f833d04... runs
# the same test from the last build before versioned formats, across the
# internal RPC's version 2 (docs/OPERATIONS.md).
UPGRADE_FROM ?= 2be71e543db143eced461aafabd9fde12f45186b
upgrade-test:
	UPGRADE_FROM=$(UPGRADE_FROM) scripts/upgrade-test.sh

# test-deploy runs the tests of the deploy module (its own go.mod): the Helm
# chart and the container image (the one make image just wrote).
test-deploy: image
	cd deploy && $(GO) vet ./...
	cd deploy && TRUSTPLANE_IMAGE_TAR=$(CURDIR)/bin/trustplane-image.tar $(GO) test -count=1 -timeout 15m ./...

# bench runs the benchmarks recorded in docs/BENCHMARKS.md.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 5s ./fsm/
	$(GO) test -run '^$$' -bench . -benchtime 10s -timeout 30m ./e2e/

# fuzz runs every fuzz target for FUZZTIME (default 30s) each, one after
# another with one worker; plain go test (CI) runs only their seed corpora.
FUZZTIME ?= 30s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# chaos runs "trustplane chaos local": three nodes of a binary built with
# the storage failpoints, a workload, and every fault in turn, then the
# checkers (docs/CHAOS.md). chaos-short is the CI run; chaos runs
# CHAOS_DURATION (30m by default). The report and history go to OUT.
CHAOS_DURATION ?= 30m
CHAOS_SHORT    ?= 150s
CHAOS_ARGS     ?=
chaos-bin:
	$(GO) build -tags failpoints -o bin/trustplane-failpoints ./cmd/trustplane

chaos-short: chaos-bin
	bin/trustplane-failpoints chaos local --duration $(CHAOS_SHORT) --out chaos-report-short $(CHAOS_ARGS)

chaos: chaos-bin
	bin/trustplane-failpoints chaos local --duration $(CHAOS_DURATION) --out chaos-report $(CHAOS_ARGS)

# rotation is the long run of issue 29: every trust root rotated online in
# turn (a whole rotation, an abort after start, an abort after promote),
# the leader killed in the middle of one, with kills and partitions between
# rotations, under the chaos workload and its checkers (docs/CHAOS.md).
ROTATION_DURATION ?= 10m
rotation: chaos-bin
	bin/trustplane-failpoints chaos local --faults rotate,kill,rotate,leader-kill,rotate,partition --duration $(ROTATION_DURATION) --out rotation-report $(CHAOS_ARGS)

clean:
	rm -rf bin chaos-report chaos-report-short rotation-report
