# moat — build, test, install.  `make` builds build/moat; `make check` runs every test.
CC      ?= cc
PREFIX  ?= /usr/local
BUILD   := build
comma   := ,
empty   :=
space   := $(empty) $(empty)
PKGS    := libseccomp libcap libcjson libnl-3.0 zlib
# zlib: E2B's gzip uploads (src/serve/e2b_envd.c)
# libcurl: headers at build time, loaded with dlopen only by the remote
# providers, so a sandbox start does not load its ~30 libraries
CURL_CFLAGS := $(shell pkg-config --cflags libcurl 2>/dev/null)

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(CURL_CFLAGS)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -pthread -ldl -lm
# The moat binary links libseccomp, libcap and libnl-3 statically when their archives are
# installed (Debian's -dev packages ship them): loading shared libraries (mappings,
# symbol binding) cost most of a millisecond of every run here.
# The price: a security update of those libraries needs a rebuild of moat
# (`moat version` names what it was built with). STATIC_DEPS=no links them shared.
# cJSON stays shared (Debian ships no archive); libmoat.a and the tests are unchanged.
STATIC_DEPS ?= yes
STATIC_LIBS := seccomp cap nl-3
ifeq ($(STATIC_DEPS),yes)
STATIC_MISSING := $(strip $(foreach l,$(STATIC_LIBS),$(if $(wildcard $(shell $(CC) \
                  -print-file-name=lib$(l).a)),,$(l))))
endif
ifneq ($(STATIC_MISSING),)
$(warning no static archive for: $(STATIC_MISSING); moat links all of $(STATIC_LIBS) shared)
endif
ifeq ($(STATIC_DEPS)$(STATIC_MISSING),yes)
MOAT_LIBS := -Wl,-Bstatic $(addprefix -l,$(STATIC_LIBS)) -Wl,-Bdynamic \
             $(shell pkg-config --libs libcjson zlib 2>/dev/null) -pthread -ldl -lm
else
MOAT_LIBS := $(PKG_LIBS)
endif
# libnftnl builds the sandbox's nftables batch at build time (tools/nftgen.c);
# the unit tests decode it with the same library. moat itself links neither.
NFT_CFLAGS := $(shell pkg-config --cflags libnftnl libmnl 2>/dev/null)
NFT_LIBS   := $(shell pkg-config --libs libnftnl libmnl 2>/dev/null)
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

WARN    := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wno-unused-parameter
CFLAGS  ?= -O2 -g
ALL_CFLAGS = -std=gnu11 $(WARN) $(CPPFLAGS) $(CFLAGS) -D_GNU_SOURCE -fstack-protector-strong \
             -D_FORTIFY_SOURCE=2 -pthread -Iinclude -Isrc $(PKG_CFLAGS)
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
TSAN    := -fsanitize=thread -fno-omit-frame-pointer

LIB_SRCS := $(sort $(filter-out src/cli/% src/main.c src/agent/main.c,$(wildcard src/*/*.c)))
CLI_SRCS := src/main.c $(sort $(wildcard src/cli/*.c))
AGENT    := runtime/bin/moat-agent
GEN_SRC  := $(BUILD)/gen/embedded.c
EMBEDDED := policies/default.json policies/zygote.json rootfs/default.plan
# the seccomp BPF cache is keyed on a digest of the policy compiler's sources
SECCOMP_COMPILER := src/seccomp/policy.c src/seccomp/compile.c src/seccomp/internal.h

NFT_SRC  := $(BUILD)/gen/nft_batch.c

LIB_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(BUILD)/obj/gen/embedded.o \
            $(BUILD)/obj/gen/nft_batch.o
CLI_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(CLI_SRCS))
SAN_LIB_OBJS := $(patsubst src/%.c,$(BUILD)/san/%.o,$(LIB_SRCS)) $(BUILD)/san/gen/embedded.o \
                $(BUILD)/san/gen/nft_batch.o
TSAN_LIB_OBJS := $(patsubst src/%.c,$(BUILD)/tsan/%.o,$(LIB_SRCS)) $(BUILD)/tsan/gen/embedded.o \
                 $(BUILD)/tsan/gen/nft_batch.o

UNIT_SRCS  := $(sort $(wildcard tests/unit/*.c)) tests/fixture_path.c
INTEG_SRCS := $(sort $(wildcard tests/integration/*.c tests/security/*.c)) tests/harness.c \
              tests/fixture_path.c
THREAD_SRCS := tests/threads/test_threads.c
# one object per test source, each with its .d (-MMD -MP): a test binary is
# rebuilt when a header one of its sources includes changes (src/*/internal.h,
# tests/harness.h, ...), not only when a .c does
UNIT_OBJS   := $(patsubst tests/%.c,$(BUILD)/tests/san/%.o,$(UNIT_SRCS))
INTEG_OBJS  := $(patsubst tests/%.c,$(BUILD)/tests/obj/%.o,$(INTEG_SRCS))
THREAD_OBJS := $(patsubst tests/%.c,$(BUILD)/tests/tsan/%.o,$(THREAD_SRCS))

.PHONY: all node-deps deps layers seccomp-evidence check-workloads check check-build check-unit check-integration check-node check-mcp check-e2b mcp check-python check-threads check-vm check-k8s install \
        uninstall man check-install check-systemd deb check-deb clean bench bench-egress bench-serve bench-kv bench-zygote bench-cluster check-cluster timeline soak soak-short fuzz fuzz-build \
        fuzz-toolchain
# NODE_DEPS=no: leave clients/node alone (the Debian package vendors build/mcp instead)
NODE_DEPS ?= yes
all: $(BUILD)/moat $(BUILD)/moat-zygote.so $(BUILD)/moat.bash $(AGENT) $(if $(filter yes,$(NODE_DEPS)),node-deps)

# moat mcp from the source tree (it runs clients/node/mcp.js): the MCP SDK in
# clients/node/node_modules, by npm ci --omit=dev from the committed lock, when
# node_modules is missing or older than the lock. Never fails the build: without
# npm, or offline, one line says how to get MCP and the rest is built as ever.
# (.ci/run then runs a full npm ci there for the tests' dev dependencies.)
node-deps:
	@if ! command -v npm >/dev/null 2>&1; then \
	    echo "make: moat mcp needs clients/node's modules and npm is not installed:" \
	        "apt-get install npm (tools/deps.sh does), then make again"; \
	elif [ ! -d clients/node/node_modules ] || \
	     [ clients/node/package-lock.json -nt clients/node/node_modules ]; then \
	    mkdir -p $(BUILD); \
	    if (cd clients/node && npm ci --omit=dev --ignore-scripts --no-audit --no-fund) \
	        >$(BUILD)/npm-ci.log 2>&1; then \
	        touch clients/node/node_modules; \
	        echo "make: clients/node: npm ci --omit=dev from the lock (moat mcp runs from this tree)"; \
	    else \
	        echo "make: clients/node: npm ci --omit=dev failed (offline? $(BUILD)/npm-ci.log):" \
	            "moat mcp will not run until it succeeds; everything else is built"; \
	    fi; \
	fi

deps:
	@sh tools/deps.sh

$(BUILD)/embed: tools/embed.c src/core/sha256.c src/core/sha256.h
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(WARN) -O1 -Isrc -o $@ tools/embed.c src/core/sha256.c

$(GEN_SRC): $(BUILD)/embed $(EMBEDDED) $(SECCOMP_COMPILER)
	@mkdir -p $(@D)
	$(BUILD)/embed $@ moat_embedded_default_policy=policies/default.json \
	    moat_embedded_zygote_policy=policies/zygote.json \
	    moat_embedded_rootfs_plan=rootfs/default.plan \
	    'moat_embedded_seccomp_compiler#$(subst $(space),$(comma),$(strip $(SECCOMP_COMPILER)))'

$(BUILD)/nftgen: tools/nftgen.c src/net/nft.h
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(WARN) -O1 -Isrc $(NFT_CFLAGS) -o $@ tools/nftgen.c $(NFT_LIBS)

$(NFT_SRC): $(BUILD)/nftgen
	@mkdir -p $(@D)
	$(BUILD)/nftgen $@

# libmoat's objects are position-independent: moat-zygote.so is linked from
# them too (a PIE links them as well as -fPIE ones)
$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -c -o $@ $<
$(BUILD)/san/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(SAN) -c -o $@ $<
$(BUILD)/tsan/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(TSAN) -c -o $@ $<

$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -MMD -MP -c -o $@ $<
$(BUILD)/san/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(SAN) -MMD -MP -c -o $@ $<
$(BUILD)/tsan/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(TSAN) -MMD -MP -c -o $@ $<

$(BUILD)/libmoat.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libmoat-san.a: $(SAN_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libmoat-tsan.a: $(TSAN_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

# the live sandboxes' in-sandbox agent (docs/SANDBOXES.md), static so that
# it runs in any prepared root; in the runtime dir (bound at
# /opt/moat/runtime in every sandbox), gitignored
$(AGENT): src/agent/main.c src/agent/proto.c src/agent/proto.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O2 -D_GNU_SOURCE -Isrc -static -s -o $@ src/agent/main.c src/agent/proto.c

$(BUILD)/moat: $(CLI_OBJS) $(BUILD)/libmoat.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -Wl,-z,relro,-z,now -o $@ $(CLI_OBJS) $(BUILD)/libmoat.a \
	    $(MOAT_LIBS)

# The zygote's side of a run (src/pool/zygote.c) as a shared object an
# interpreter loads (runtime/python/moat_zygote.py, docs/design/pool-zygote.md):
# libmoat's objects it needs, its dependencies shared, only moat_zygote_*
# exported.
$(BUILD)/moat-zygote.so: $(BUILD)/libmoat.a src/pool/zygote.map
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -shared -Wl,-z,relro,-z,now -Wl,-z,defs \
	    -Wl,--version-script=src/pool/zygote.map -Wl,--exclude-libs,ALL -o $@ \
	    $(BUILD)/obj/pool/zygote.o $(BUILD)/libmoat.a $(PKG_LIBS)

# Unit tests: pure logic, built with AddressSanitizer and UBSan.
$(BUILD)/tests/san/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(SAN) $(CHECK_CFLAGS) $(NFT_CFLAGS) -Itests -MMD -MP -c -o $@ $<
# the CLI's option parser (tests/unit/test_cliopts.c): the CLI is not in libmoat
UNIT_CLI_OBJS := $(BUILD)/san/cli/opts.o
$(BUILD)/test-unit: $(UNIT_OBJS) $(UNIT_CLI_OBJS) $(BUILD)/libmoat-san.a
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(UNIT_OBJS) $(UNIT_CLI_OBJS) \
	    $(BUILD)/libmoat-san.a $(PKG_LIBS) $(CHECK_LIBS) $(NFT_LIBS)

# Integration and security tests: run build/moat for real, as root and as uid 65534.
$(BUILD)/tests/obj/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -Itests -MMD -MP -c -o $@ $<
# (the zygote tests load moat-zygote.so from beside $MOAT_BIN)
$(BUILD)/test-integration: $(INTEG_OBJS) $(BUILD)/libmoat.a | $(BUILD)/moat-zygote.so
	$(CC) $(ALL_CFLAGS) -o $@ $(INTEG_OBJS) \
	    $(BUILD)/libmoat.a $(PKG_LIBS) $(CHECK_LIBS)

# libmoat from 8 threads at once in one process, under ThreadSanitizer: any
# race report fails (exit 66), and so do a hung run, a leaked fd, a child
# left to reap or a cgroup leaf left behind. As root and as uid 65534.
$(BUILD)/tests/tsan/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(TSAN) $(CHECK_CFLAGS) -MMD -MP -c -o $@ $<
$(BUILD)/test-threads: $(THREAD_OBJS) $(BUILD)/libmoat-tsan.a
	$(CC) $(ALL_CFLAGS) $(TSAN) -o $@ $(THREAD_OBJS) \
	    $(BUILD)/libmoat-tsan.a $(PKG_LIBS) $(CHECK_LIBS)

# Landlock alone: libmoat with the test-only MOAT_TEST_NO_MOUNT_WALL plan
# (the root stays writable), so that only Landlock can refuse (tests/landlock).
$(BUILD)/nowall/plan.o: src/ns/plan.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -DMOAT_TEST_NO_MOUNT_WALL -c -o $@ $<
$(BUILD)/test-landlock: tests/landlock/test_landlock.c $(BUILD)/nowall/plan.o $(BUILD)/libmoat.a
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -o $@ tests/landlock/test_landlock.c \
	    $(BUILD)/nowall/plan.o $(BUILD)/libmoat.a $(PKG_LIBS) $(CHECK_LIBS)

# An OCI/containerd seccomp profile applied as an outer filter (no_new_privs,
# then exec), the way a runtime applies a pod's Localhost profile; refuses
# what it does not understand (tests/deploy/oci-seccomp.c)
$(BUILD)/oci-seccomp: tests/deploy/oci-seccomp.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(PKG_LIBS)

check-threads: $(BUILD)/test-threads
	TSAN_OPTIONS="halt_on_error=1 exitcode=66 $(TSAN_OPTIONS)" $(BUILD)/test-threads

check-unit: $(BUILD)/test-unit
	$(BUILD)/test-unit

check-integration: $(BUILD)/moat $(BUILD)/test-integration
	MOAT_BIN=$(CURDIR)/$(BUILD)/moat $(BUILD)/test-integration

# The layer table of docs/ARCHITECTURE.md (tools/layers.txt) held against the
# includes and, over the built objects, the calls (tools/layers.sh).
layers: $(LIB_OBJS) $(CLI_OBJS)
	@bash tools/layers.sh $(BUILD)

CHECK_BINS = $(BUILD)/moat $(BUILD)/test-unit $(BUILD)/test-threads $(BUILD)/test-integration \
       $(BUILD)/test-landlock $(BUILD)/oci-seccomp
check: $(CHECK_BINS)
	@bash tools/check.sh $(BUILD)
# what make check runs, built and nothing run (.ci/run builds it with -j2
# beside the program: make check alone builds its binaries one at a time)
check-build: $(CHECK_BINS)

# deploy/kubernetes without a cluster (docs/kubernetes.md): the manifests
# checked offline, then the pod's seccomp profile proven with moat beneath it
# (the tool's refusals, each addition needed, and the K8S_SUITES integration
# suites with every moat under the profile). make check runs the same with
# its own shorter list (tools/check.sh).
# seccomp_escape is left out: its --seccomp-log tests cannot pass under an
# outer filter that refuses a call first (docs/kubernetes.md)
K8S_SUITES ?= isolation runner limits escape network kv serve requests outputs argv egress
check-k8s: $(BUILD)/moat $(BUILD)/test-integration $(BUILD)/oci-seccomp
	@rc=0; /usr/bin/python3 tests/deploy/check-manifests.py $(BUILD) || rc=1; \
	    bash tests/deploy/seccomp.sh $(BUILD) $(K8S_SUITES) || rc=1; exit $$rc

# The limits and runner suites again on a pure cgroup v2 kernel under qemu
# (tools/vm/README.md), in one boot; this machine's cgroups are v1. An entry
# SUITE/CASE runs one tcase: pool_session_cgroup is what a session's cgroup
# does (memory held across steps, the kill of its tree) on cgroup v2
# (serve_sessions/serve_sessions_cpu is not here: a session's driver does
# not start in the VM yet, docs/testing.md)
# An entry is a suite, suite/tcase (CK_RUN_CASE) or suite:test,test
# (MOAT_TESTS): the runner suite's tests that take a path of their own on
# cgroup v2 (the timeout's cgroup.kill, the tree's kill, the limits and
# their fallback, an adopted pid 1 moved into its leaves, the zygote's
# children, every language under v2's memory accounting); its pipe, exit
# code, signal and record tests take none and run in make check only
# (docs/testing.md, "CI's time by stage")
VM_RUNNER_TESTS = every_language_runs,timeout_kills,daemon_does_not_outlive_run,$\
	timeout_kills_process_tree,limits_fallback_reported,adopted_pid1_is_locked_down,$\
	adopted_pid1_gets_limits_and_timeout,zygote_child_is_a_locked_down_python,$\
	zygote_children_share_nothing
VM_SUITES ?= limits runner:$(VM_RUNNER_TESTS) systemd pool_session/pool_session_cgroup
# Two moat serve nodes in network namespaces, one Redis, HAProxy (root; part of make check)
check-cluster: $(BUILD)/moat
	rc=0; bash tests/cluster/two-node.sh $(BUILD)/moat || rc=1; \
	bash tests/cluster/live.sh $(BUILD)/moat || rc=1; exit $$rc

check-vm: $(BUILD)/moat $(BUILD)/test-integration
	tools/vm/run-vm.sh -- env MOAT_BIN=$(CURDIR)/$(BUILD)/moat sh -c \
	    'rc=0; for s in $(VM_SUITES); do c=; t=; case $$s in */*) c=$${s#*/}; s=$${s%%/*};; \
	     *:*) t=$${s#*:}; s=$${s%%:*};; esac; \
	     env CK_TAP_LOG_FILE_NAME=- CK_RUN_SUITE=$$s $${c:+CK_RUN_CASE=$$c} $${t:+MOAT_TESTS=$$t} \
	     $(BUILD)/test-integration || rc=1; \
	     done; exit $$rc'

# Delegation from systemd (src/cgroups/systemd.c) on a real one: the same VM
# with systemd as PID 1 (tools/vm/README.md), uid 65534 lingering; the suites
# run rootless in a logind session, not delegated (tests/systemd/check.sh),
# and the limits suite then demands cgroup-v2 for every rootless limit.
# Under TCG: about 1 minute with the systemd suite alone, 4.5 with limits
# (the host at load 3); twice that while another VM shares the CPUs.
SYSTEMD_SUITES ?= systemd limits
check-systemd: $(BUILD)/moat $(BUILD)/test-integration
	MOAT_VM_SYSTEMD=1 tools/vm/run-vm.sh -- sh tests/systemd/check.sh $(BUILD) $(SYSTEMD_SUITES)

# The evidence behind the default seccomp policy (policies/evidence/README.md):
# every workload of tests/workloads bare and inside moat, compared test by test
# (make check runs the fast set: make check-workloads), then the workloads
# traced with strace inside moat as root and rootless, which rewrites
# policies/evidence/calls/ and union.txt. Slow (an hour or more), needs strace
# and libpython3.11-testsuite (golang-go for the Go workload); not part of make check.
seccomp-evidence: $(BUILD)/moat
	@rc=0; python3 tests/workloads/run.py $(BUILD)/moat all || rc=1; \
	    sh policies/evidence/run.sh $(BUILD)/moat || rc=1; exit $$rc

# tests/workloads alone (WORKLOADS=all for the whole set)
WORKLOADS ?= fast
check-workloads: $(BUILD)/moat
	python3 tests/workloads/run.py $(BUILD)/moat $(WORKLOADS)

# Figures, not tests: moat vs bare, unshare, ns-floor and bubblewrap, back to back and
# spaced 100 ms, root and rootless; the clients' run() through the user service, moat exec
# and bare python3 (bench/modes.sh, bench/README.md).
bench: $(BUILD)/moat
	sh bench/modes.sh $(BUILD)/moat

# Bulk egress throughput (moat vs pasta vs bare) and 256 parallel connections,
# in network namespaces of its own (root).
bench-egress: $(BUILD)/moat
	sh bench/egress.sh $(CURDIR)/$(BUILD)/moat

# moat serve: latency and throughput of scripts and handlers at 1, 2 and 8
# clients, beside moat exec spawned per request (bench/README.md).
bench-serve: $(BUILD)/moat
	sh bench/serve.sh $(CURDIR)/$(BUILD)/moat

# The key-value store from inside a sandbox: p50/p90/p99 of set and get
# through the Python shim, SQLite and Redis (bench/kv.sh)
bench-kv: $(BUILD)/moat
	sh bench/kv.sh $(CURDIR)/$(BUILD)/moat

# Zygote-per-language prototype for the warm pool (issue 15): per-request CPU
# and wall of a forked, re-namespaced, locked-down child vs moat run vs bare
# python3 (bench/zygote/README.md). Figures only; not part of make check.
ZYG := $(BUILD)/zygote
$(ZYG)/libzyg.so: bench/zygote/zyg.c
	@mkdir -p $(ZYG)
	$(CC) -std=gnu11 $(WARN) -O2 -g -fPIC -shared -D_GNU_SOURCE -o $@ $<
$(ZYG)/zyg-outer: bench/zygote/outer.c
	@mkdir -p $(ZYG)
	$(CC) -std=gnu11 $(WARN) -O2 -g -D_GNU_SOURCE -o $@ $<
$(ZYG)/bpfdump: bench/zygote/bpfdump.c $(BUILD)/libmoat.a
	@mkdir -p $(ZYG)
	$(CC) $(ALL_CFLAGS) $(PKG_CFLAGS) -o $@ $< $(BUILD)/libmoat.a $(PKG_LIBS)
$(ZYG)/moat-default.bpf: $(ZYG)/bpfdump
	$(ZYG)/bpfdump $@
$(ZYG)/ready: $(ZYG)/libzyg.so $(ZYG)/zyg-outer $(ZYG)/moat-default.bpf bench/zygote/zygote.py runtime/python/moat_pool.py
	cp bench/zygote/zygote.py runtime/python/moat_pool.py $(ZYG)/
	chmod a+rX $(ZYG) $(ZYG)/*
	touch $@
bench-zygote: $(BUILD)/moat $(ZYG)/ready
	/usr/bin/python3 bench/zygote/bench.py --moat $(CURDIR)/$(BUILD)/moat --zdir $(CURDIR)/$(ZYG) $(ZYG_ARGS)

# Two moat serve nodes behind HAProxy against one node, 8 clients (bench/cluster.sh; root)
bench-cluster: $(BUILD)/moat
	bash bench/cluster.sh $(CURDIR)/$(BUILD)/moat

# Where start-up time goes, step by step: an instrumented build (src/core/stamp.h).
timeline:
	$(MAKE) BUILD=build-timeline CFLAGS="-O2 -g -DMOAT_TIMELINE" build-timeline/moat
	sh bench/timeline.sh build-timeline/moat

# Soak (tests/soak/): the mix of soak.c, N runs sequentially and N 8 at a
# time through moat exec, and N through moat_run from 8 threads in one
# process, as root and as uid 65534 (when run as root); fails on any failed
# run and on anything left behind (processes, cgroup leaves, mounts, network
# namespaces, /tmp names, seccomp cache files, the library's fds and heap).
# soak-short is the variant CI runs.
SOAK_RUNS ?= 10000
SOAK_SHORT_RUNS ?= 200
SOAK_DEPS := $(BUILD)/moat $(BUILD)/soak/execsoak $(BUILD)/soak/libsoak

$(BUILD)/soak/execsoak: tests/soak/execsoak.c tests/soak/soak.c tests/soak/soak.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -o $@ tests/soak/execsoak.c tests/soak/soak.c $(PKG_LIBS)

$(BUILD)/soak/libsoak: tests/soak/libsoak.c tests/soak/soak.c tests/soak/soak.h $(BUILD)/libmoat.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -o $@ tests/soak/libsoak.c tests/soak/soak.c $(BUILD)/libmoat.a $(PKG_LIBS)

soak: $(SOAK_DEPS)
	bash tests/soak/soak.sh --build $(BUILD) $(SOAK_RUNS)

soak-short: $(SOAK_DEPS)
	bash tests/soak/soak.sh --build $(BUILD) $(SOAK_SHORT_RUNS)

# Fuzzing: one libFuzzer harness per parser of bytes a sandboxed program, a
# client or a policy author controls (tests/fuzz/*.c, seeds in
# tests/fuzz/corpus/NAME/). clang-14 with libFuzzer, ASan and UBSan; libmoat
# is compiled again with the same flags under build/fuzz/. `make fuzz` runs
# each harness for FUZZ_SECS seconds and prints its final libFuzzer stats
# (cov, ft, exec/s); a crash, leak, UB report or timeout fails it
# (reproducer under build/fuzz/crashes/). Not part of make check.
FUZZ_CC    ?= clang-14
FUZZ_SECS  ?= 10
FUZZ_SAN   := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS = -std=gnu11 $(WARN) -O1 -g -D_GNU_SOURCE -pthread -Iinclude -Isrc $(PKG_CFLAGS) $(FUZZ_SAN)
FUZZ_NAMES := $(sort $(basename $(notdir $(wildcard tests/fuzz/*.c))))
FUZZ_BINS  := $(addprefix $(BUILD)/fuzz/bin/,$(FUZZ_NAMES))
FUZZ_LIB_OBJS := $(patsubst src/%.c,$(BUILD)/fuzz/obj/%.o,$(LIB_SRCS)) \
                 $(BUILD)/fuzz/obj/gen/embedded.o $(BUILD)/fuzz/obj/gen/nft_batch.o

fuzz-toolchain:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "make fuzz: $(FUZZ_CC) not found" \
	    "(apt-get install -y clang-14 libfuzzer-14-dev; tools/deps.sh installs them)" >&2; exit 1; }

$(BUILD)/fuzz/obj/gen/%.o: $(BUILD)/gen/%.c | fuzz-toolchain
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<
$(BUILD)/fuzz/obj/%.o: src/%.c | fuzz-toolchain
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<
$(BUILD)/fuzz/libmoat-fuzz.a: $(FUZZ_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/fuzz/bin/%: tests/fuzz/%.c tests/fuzz/fuzz.h $(BUILD)/fuzz/libmoat-fuzz.a
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Itests -o $@ $< $(BUILD)/fuzz/libmoat-fuzz.a $(PKG_LIBS)

fuzz-build: $(FUZZ_BINS)

fuzz: $(FUZZ_BINS)
	@sh tools/fuzz.sh $(BUILD)/fuzz $(FUZZ_SECS) $(FUZZ_NAMES)

check-node: $(BUILD)/moat
	MOAT_BIN=$(CURDIR)/$(BUILD)/moat node --test clients/node/test/

# moat mcp through the MCP SDK's client, root and uid 65534 (needs npm ci in clients/node)
check-mcp: $(BUILD)/moat
	bash tests/mcp/run.sh $(BUILD)

# the unmodified e2b SDK (npm, tests/e2b's lockfile) against moat serve, root and uid 65534
check-e2b: $(BUILD)/moat
	bash tests/e2b/run.sh $(BUILD)

# the Python client (clients/python), root and uid 65534
check-python: $(BUILD)/moat
	bash clients/python/tests/run.sh $(BUILD)
	bash clients/python/tests/install.sh $(BUILD)

# make install [PREFIX=/usr/local] [DESTDIR=...] [APPARMOR=auto|yes|no]: the binary,
# the runtime shims (found by the binary at ../share/moat/runtime), a copy of the
# default policy, moat(1), bash completion and the AppArmor profile (apparmor/moat:
# `userns,` for /usr/bin/moat and /usr/local/bin/moat, for Ubuntu's user-namespace
# restriction). The profile always goes to $(DATADIR)/moat/apparmor/moat; into
# $(SYSCONFDIR)/apparmor.d/moat, where AppArmor loads it at boot, with APPARMOR=yes,
# or with auto (the default) when this host's AppArmor knows the userns rule
# (/etc/apparmor.d/abi/4.0): an older parser (Debian 12: AppArmor 3.0) rejects the
# profile, and apparmor.service would fail at every boot. Installed for real
# (no DESTDIR) on a host where AppArmor is on, the profile is loaded at once.
# The per-user service (deploy/systemd: moat.socket, moat.service) goes to
# $(USERUNITDIR); a user turns it on with `systemctl --user enable --now moat.socket`.
# make uninstall removes what make install put there (same PREFIX and DESTDIR).
SYSCONFDIR ?= /etc
BINDIR     ?= $(PREFIX)/bin
DATADIR    ?= $(PREFIX)/share
LIBDIR     ?= $(PREFIX)/lib
MANDIR     ?= $(DATADIR)/man
USERUNITDIR ?= $(LIBDIR)/systemd/user
APPARMOR   ?= auto
AA_ETC := $(if $(filter yes,$(APPARMOR)),yes,$(if $(filter auto,$(APPARMOR)),$(if \
          $(wildcard /etc/apparmor.d/abi/4.0),yes),))
# the Python client (clients/python): under PREFIX=/usr into Debian's path for packages,
# /usr/lib/python3/dist-packages; under another PREFIX into the site directory the host's
# python3 reads there (/usr/local/lib/python3.X/dist-packages on Debian)
PYTHON3    ?= $(firstword $(wildcard /usr/bin/python3) python3)
PY_MINOR    = $(if $(filter /usr,$(PREFIX)),,$(shell $(PYTHON3) -c \
              'import sys; print(".%d" % sys.version_info[1])' 2>/dev/null))
PYTHONDIR  ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python3$(PY_MINOR)/dist-packages)
PY_FILES   := $(sort $(wildcard clients/python/moat_sandbox/*.py)) clients/python/moat_sandbox/py.typed
RUNTIME_FILES := $(sort $(shell find runtime -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
                 ! -path 'runtime/bin/*' \
                 2>/dev/null))

$(BUILD)/moat.1: docs/moat.1.scd
	@command -v scdoc >/dev/null 2>&1 || { echo "make: the man page needs scdoc" \
	    "(apt-get install scdoc; tools/deps.sh installs it)" >&2; exit 1; }
	@mkdir -p $(@D)
	scdoc < $< > $@.tmp && mv $@.tmp $@
man: $(BUILD)/moat.1

# the bash completion: the template with the option tables' functions (moat
# __options bash) in place of its line @OPTION_TABLES@
$(BUILD)/moat.bash: completions/moat.bash.in $(BUILD)/moat
	$(BUILD)/moat __options bash > $@.tables
	sed -e '/^@OPTION_TABLES@$$/{r $@.tables' -e 'd}' $< > $@.tmp && rm -f $@.tables && mv $@.tmp $@

# moat mcp's server (clients/node/mcp.js) with its production node_modules, made by
# npm ci --omit=dev from the committed lock (the npm registry, or npm's cache, must be
# reachable); installed under $(LIBDIR)/moat/mcp, where moat mcp finds it
MCP_FILES := mcp.js index.js live.js package.json package-lock.json
$(BUILD)/mcp/.stamp: $(addprefix clients/node/,$(MCP_FILES))
	@command -v npm >/dev/null 2>&1 || { echo "make: moat mcp's server needs npm" \
	    "(apt-get install npm; tools/deps.sh installs it)" >&2; exit 1; }
	rm -rf $(BUILD)/mcp && mkdir -p $(BUILD)/mcp
	cp $(addprefix clients/node/,$(MCP_FILES)) $(BUILD)/mcp/
	cd $(BUILD)/mcp && npm ci --omit=dev --ignore-scripts --no-audit --no-fund
	touch $@
mcp: $(BUILD)/mcp/.stamp

install: $(BUILD)/moat $(BUILD)/moat.1 $(BUILD)/moat.bash $(BUILD)/moat-zygote.so $(BUILD)/mcp/.stamp $(AGENT)
	install -D -m 0755 $(BUILD)/moat $(DESTDIR)$(BINDIR)/moat
	install -d -m 0755 $(DESTDIR)$(LIBDIR)/moat/mcp
	cp -R --no-preserve=ownership $(BUILD)/mcp/node_modules $(DESTDIR)$(LIBDIR)/moat/mcp/
	chmod -R u=rwX,go=rX $(DESTDIR)$(LIBDIR)/moat/mcp/node_modules
	for f in $(MCP_FILES); do install -m 0644 $(BUILD)/mcp/$$f $(DESTDIR)$(LIBDIR)/moat/mcp/$$f || exit 1; done
	chmod 0755 $(DESTDIR)$(LIBDIR)/moat/mcp/mcp.js
	install -D -m 0644 $(BUILD)/moat-zygote.so $(DESTDIR)$(LIBDIR)/moat/moat-zygote.so
	install -D -m 0644 policies/default.json $(DESTDIR)$(DATADIR)/moat/policies/default.json
	@for f in $(RUNTIME_FILES); do \
	    echo "install -D -m 0644 $$f $(DESTDIR)$(DATADIR)/moat/$$f"; \
	    install -D -m 0644 "$$f" "$(DESTDIR)$(DATADIR)/moat/$$f" || exit 1; done
	install -D -m 0755 $(AGENT) $(DESTDIR)$(DATADIR)/moat/$(AGENT)
	install -D -m 0644 apparmor/moat $(DESTDIR)$(DATADIR)/moat/apparmor/moat
	install -D -m 0644 $(BUILD)/moat.1 $(DESTDIR)$(MANDIR)/man1/moat.1
	install -D -m 0644 $(BUILD)/moat.bash $(DESTDIR)$(DATADIR)/bash-completion/completions/moat
	install -D -m 0644 deploy/systemd/moat.socket $(DESTDIR)$(USERUNITDIR)/moat.socket
	sed 's|@BINDIR@|$(BINDIR)|g' deploy/systemd/moat.service.in > $(BUILD)/moat.service
	install -D -m 0644 $(BUILD)/moat.service $(DESTDIR)$(USERUNITDIR)/moat.service
	install -d -m 0755 $(DESTDIR)$(PYTHONDIR)/moat_sandbox
	install -m 0644 $(PY_FILES) $(DESTDIR)$(PYTHONDIR)/moat_sandbox/
ifeq ($(AA_ETC),yes)
	install -D -m 0644 apparmor/moat $(DESTDIR)$(SYSCONFDIR)/apparmor.d/moat
	@if [ -z "$(DESTDIR)" ] && aa-enabled --quiet 2>/dev/null; then \
	    echo "apparmor_parser -r $(SYSCONFDIR)/apparmor.d/moat"; \
	    apparmor_parser -r $(SYSCONFDIR)/apparmor.d/moat || \
	    echo "make install: warning: the AppArmor profile did not load" >&2; fi
else ifeq ($(APPARMOR),auto)
	@if [ -d /etc/apparmor.d ]; then echo "make install: note: the AppArmor profile is not put" \
	    "into $(SYSCONFDIR)/apparmor.d: this host's AppArmor predates the userns rule (no" \
	    "/etc/apparmor.d/abi/4.0) and would fail to load it; APPARMOR=yes puts it there" \
	    "anyway" >&2; fi
endif
	@case "$(BINDIR)" in /usr/bin|/usr/local/bin) ;; *) echo "make install: note: the AppArmor" \
	    "profile attaches to /usr/bin/moat and /usr/local/bin/moat, not to $(BINDIR)/moat" >&2;; esac

uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -f $(SYSCONFDIR)/apparmor.d/moat ] && \
	    aa-enabled --quiet 2>/dev/null; then \
	    echo "apparmor_parser -R $(SYSCONFDIR)/apparmor.d/moat"; \
	    apparmor_parser -R $(SYSCONFDIR)/apparmor.d/moat || true; fi
	rm -f $(DESTDIR)$(SYSCONFDIR)/apparmor.d/moat
	rm -f $(DESTDIR)$(BINDIR)/moat $(DESTDIR)$(MANDIR)/man1/moat.1 \
	    $(DESTDIR)$(DATADIR)/bash-completion/completions/moat \
	    $(DESTDIR)$(USERUNITDIR)/moat.socket $(DESTDIR)$(USERUNITDIR)/moat.service
	rm -rf $(DESTDIR)$(DATADIR)/moat $(DESTDIR)$(LIBDIR)/moat $(DESTDIR)$(PYTHONDIR)/moat_sandbox

# The Debian package (debian/): libseccomp and libcap linked shared, built in a
# copy of the tree under $(BUILD)/deb with DEB_BUILD_OPTIONS=nocheck (the unit
# tests are check-unit's; DEB_CHECK=yes runs them there too); the .deb lands
# in $(BUILD)/ (tools/build-deb.sh).
deb:
	sh tools/build-deb.sh $(BUILD)

# make deb, then the package installed with apt into a clean Debian 12 chroot
# (debootstrap minbase, cached as a tarball under /var/tmp) and run there:
# moat doctor and one sandboxed run (tests/install/deb.sh; root)
check-deb: deb
	bash tests/install/deb.sh $(BUILD)

# make install into a scratch DESTDIR, checked file by file, then run from there
# (tests/install/check.sh); also syntax-checks the AppArmor profile
check-install: $(BUILD)/moat $(BUILD)/moat.1
	bash tests/install/check.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-timeline $(AGENT)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
