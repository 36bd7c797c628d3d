#!/usr/bin/env bash
# Installs the Debian packages dtrain needs; only what is missing.
#   scripts/install-deps.sh demo   the build and `make demo` (scripts/demo.sh): compiler, cmake,
#                                  ninja, the libraries the binary links, Open MPI, Fashion-MNIST
#   scripts/install-deps.sh test   (default) adds what only the tests use: Debian's PyTorch for
#                                  the reference tests, clang for fuzzing, Prometheus, Chromium,
#                                  a one-node Slurm with munge, the fortunes corpus
# No service is left enabled to start at boot: during the install a policy-rc.d forbids starting
# any (exit 101), and afterwards every unit and init script of the listed packages is disabled
# (also on a re-run where nothing is missing). Tests start what they need themselves.
set -euo pipefail
set_=${1:-test}

demo=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-dev libopenblas-openmp-dev libdnnl-dev libcjson-dev libxxhash-dev
  libpcre2-dev zlib1g-dev libyaml-dev
  libopenmpi-dev openmpi-bin
  libcurl4-openssl-dev
  libssl-dev # libcrypto: SHA-256 of S3 request bodies (storage_s3.c)
  libsqlite3-dev # the experiment store (src/track/)
  libmicrohttpd-dev # build: the monitoring server (src/serve/: /metrics, dashboard)
  libcairo2-dev # build: `dtrain runs plot` charts (src/cli/plot_axes.c)
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev # encoded-image datasets (src/data/image_codec.c)
  dataset-fashion-mnist # the demo's data
)
test=(
  python3 python3-venv python3-numpy python3-torch python3-torchvision # reference tests
  fortunes # the Llama tests' corpus
  clang libomp-dev # make fuzz / fuzz-smoke: libFuzzer, OpenMP for clang (tests/fuzz/)
  prometheus chromium # tests/serve/ scrapes with Prometheus, loads the dashboard headless
  slurmd slurmctld slurm-client munge # a one-node Slurm for `srun` (tests/launch/srun.sh)
)
case $set_ in
  demo) pkgs=("${demo[@]}") ;;
  test) pkgs=("${demo[@]}" "${test[@]}") ;;
  --list-demo) printf '%s\n' "${demo[@]}"; exit 0 ;;
  --list-test) printf '%s\n' "${demo[@]}" "${test[@]}"; exit 0 ;;
  *) echo "install-deps: unknown set '$set_' (demo or test)" >&2; exit 2 ;;
esac

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi

# Units and init scripts that the listed packages ship, disabled so nothing starts at boot.
disable_services() {
  local p f u
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || continue
    while read -r f; do
      case $f in
        /lib/systemd/system/*.service|/lib/systemd/system/*.socket|/lib/systemd/system/*.timer|\
        /usr/lib/systemd/system/*.service|/usr/lib/systemd/system/*.socket|/usr/lib/systemd/system/*.timer)
          u=${f##*/}
          [[ $u == *@* ]] && continue
          $SUDO systemctl disable --quiet "$u" 2>/dev/null ||
            $SUDO deb-systemd-helper disable "$u" 2>/dev/null || true
          $SUDO rm -f /etc/systemd/system/*.wants/"$u" ;;
        /etc/init.d/*)
          $SUDO update-rc.d "${f##*/}" disable >/dev/null 2>&1 || true ;;
      esac
    done < <(dpkg -L "$p" 2>/dev/null)
  done
}

missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$st" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  if [[ -n $SUDO ]] && ! command -v sudo >/dev/null; then
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d: no service is started by a package's postinst (invoke-rc.d honours it).
  prc=/usr/sbin/policy-rc.d had=0
  [[ -e $prc ]] && had=1 && $SUDO cp -p "$prc" "$prc.dtrain-saved"
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$prc" >/dev/null && $SUDO chmod 755 "$prc"
  restore() { if ((had)); then $SUDO mv -f "$prc.dtrain-saved" "$prc"; else $SUDO rm -f "$prc"; fi; }
  trap restore EXIT
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
disable_services
exit 0
