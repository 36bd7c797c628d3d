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

# The seed system's evaluation, measured here (< 45 min): writes docs/evaluation.md and its
# charts from scratch (scripts/evaluate.py; Ray Train from PyPI via scripts/setup-ray.sh).
.PHONY: evaluate
evaluate: build venv
	scripts/setup-ray.sh
	python3 scripts/evaluate.py --build $(BUILD) --work eval-out

bench: build
	@for s in bench/*.sh; do echo "== $$s"; bash $$s $(BUILD); done

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

# Fuzzing (tests/fuzz/, docs/security.md): libFuzzer targets for every parser of outside input,
# built with clang in their own build directory (library under ASan + UBSan + coverage).
#   make fuzz-smoke   every target for a few seconds after replaying the regression inputs (CI)
#   make fuzz         FUZZ_SECONDS per target (default 600), one target at a time
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 5

.PHONY: fuzz-build fuzz-smoke fuzz
fuzz-build: deps
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || cmake -S . -B $(FUZZ_BUILD) $(GEN) -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDT_FUZZ=ON
	cmake --build $(FUZZ_BUILD) --target fuzz_all -j $(JOBS)

fuzz-smoke: fuzz-build
	tests/fuzz/run.sh -b $(FUZZ_BUILD) -t $(FUZZ_SMOKE_SECONDS)

fuzz: fuzz-build
	tests/fuzz/run.sh -b $(FUZZ_BUILD) -t $(FUZZ_SECONDS)
