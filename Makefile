# dtrain: the two commands.
#   make demo   install what is missing, build, run a small real training job
#   make test   install what is missing, build, run every test (and the unit tests again under
#               AddressSanitizer + UndefinedBehaviorSanitizer)
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= 2
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")


.PHONY: all deps venv build demo test test-slow test-asan bench format clean

all: build

deps:
	@scripts/install-deps.sh

# The reference libraries for parity tests (PyPI, in a venv outside the checkout).
venv: deps
	@scripts/setup-venv.sh

build: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

# Pretrain a 3M-parameter Llama on fortunes, LoRA-finetune it on 2 MPI workers (~4 min).
.PHONY: lora-demo
lora-demo: build
	scripts/lora_demo.sh $(BUILD)

# DT_GRAPH_POISON=1: every op's output is filled with NaN before it runs, so a kernel reading
# memory it should only write fails its test instead of passing on whatever the memory held.
test: build venv
	cd $(BUILD) && DT_GRAPH_POISON=1 ctest --output-on-failure -j $(JOBS) -LE slow
	$(MAKE) test-asan

# Tests too long for CI (label slow), e.g. the full ResNet-18 Fashion-MNIST example to >= 92%.
test-slow: build venv
	cd $(BUILD) && DT_GRAPH_POISON=1 ctest --output-on-failure -L slow

# Unit tests under ASan + UBSan (the parity and benchmark-sized tests run in the main pass).
test-asan: deps
	@test -f $(ASAN_BUILD)/CMakeCache.txt || cmake -S . -B $(ASAN_BUILD) $(GEN) -DCMAKE_BUILD_TYPE=Debug -DDT_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 DT_GRAPH_POISON=1 \
	  ctest --output-on-failure -j $(JOBS) -L unit -LE slow

bench: build
	@for s in bench/*.sh; do echo "== $$s"; bash $$s $(BUILD); done

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
