#!/usr/bin/env bash
# Bundles the Debian libraries that scripts/gpu-check.sh needs, for a GPU machine with no network
# and none of them installed (docs/gpu.md, "The GPU check").
#
#   scripts/gpu-bundle.sh [DIR]            (default: .gpu-deps in the repository root)
#
# Run it on a Debian 12 machine with apt (no root needed: nothing is installed). It downloads
# (apt-get download) the -dev packages that the library and the device tests build against, plus
# every library package they need at run time, recursively (not the C library, the compiler's
# runtime or the other -dev packages: see `base` below), unpacks them with dpkg -x into DIR/root,
# drops what the build does not read (documentation, man pages, static .a archives, CMake
# package files), and packs DIR/root into DIR/carry/root.tar.xz, the one file to carry to the GPU
# machine. DIR ignores itself (DIR/.gitignore is "*"), so git and the device copy leave it out
# unless it is carried. MPI is not bundled: gpu-check.sh configures without it. Cairo is not
# bundled either: only the dtrain CLI links it, and gpu-check.sh builds the library and the
# device tests alone (-DDT_CLI=OFF).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$repo/.gpu-deps}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# What CMakeLists.txt's find_* calls look for (headers, the .so link names, .pc files), and
# pkg-config itself, which the image may lack.
dev=(
  libopenblas-openmp-dev libdnnl-dev libcjson-dev libpcre2-dev libxxhash-dev libyaml-dev
  zlib1g-dev libcurl4-openssl-dev libssl-dev libsqlite3-dev libmicrohttpd-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev
  pkgconf pkgconf-bin libpkgconf3
)
# Present on any glibc image with a C compiler (the GPU machine's own, which is newer than
# Debian 12's); bundling these would shadow the machine's own C library and compiler runtime.
base=" libc6 libc6-dev libgcc-s1 libstdc++6 libgomp1 gcc-12-base libcrypt1 libcrypt-dev
  linux-libc-dev libnsl-dev libtirpc-dev debconf dpkg perl-base tar "

command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  { echo "gpu-bundle: needs apt-get and dpkg (a Debian 12 machine)" >&2; exit 1; }

# The closure: the -dev packages above and, recursively, the run-time packages they depend on.
# A -dev package reached only as a dependency (libgnutls28-dev from libmicrohttpd-dev, say) is
# not followed: its headers are not read. Of alternatives (a | b) the first is taken; a virtual
# package alone (<name>) is skipped.
declare -A seen=()
queue=("${dev[@]}")
for p in "${dev[@]}"; do seen[$p]=1; done
while ((${#queue[@]})); do
  p=${queue[0]}
  queue=("${queue[@]:1}")
  while read -r d; do
    [[ -z $d || -n ${seen[$d]:-} || $base == *" $d "* ]] && continue
    [[ $d == *-dev ]] && continue
    seen[$d]=1
    queue+=("$d")
  done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
             --no-replaces --no-enhances "$p" 2>/dev/null |
           awk '/^ *\|(Pre)?Depends:/ { if (!alt) print $2; alt = 1; next }
                /^ *(Pre)?Depends:/ { if (!alt && $2 !~ /^</) print $2; alt = 0 }')
done
pkgs=("${!seen[@]}")
echo "gpu-bundle: ${#pkgs[@]} packages"

# DIR/debs is kept between runs: only packages not downloaded yet are fetched.
rm -rf "$dir/root" "$dir/carry"
mkdir -p "$dir/debs" "$dir/root" "$dir/carry"
printf '*\n' >"$dir/.gitignore"
get=()
for p in "${pkgs[@]}"; do
  compgen -G "$dir/debs/${p}_*.deb" >/dev/null || get+=("$p")
done
if ((${#get[@]})) &&
  ! (cd "$dir/debs" && apt-get download -q "${get[@]}" >"$dir/download.log" 2>&1); then
  echo "gpu-bundle: apt-get download failed (see $dir/download.log; apt-get update first?)" >&2
  tail -3 "$dir/download.log" >&2
  exit 1
fi
for p in "${pkgs[@]}"; do dpkg -x "$(compgen -G "$dir/debs/${p}_*.deb" | head -1)" "$dir/root"; done
r=${dir:?}/root
# One library folder: Debian 12 packages still put some libraries in /lib (zlib, pcre2).
if [[ -d $r/lib ]]; then
  cp -a "$r/lib/." "$r/usr/lib/"
  rm -rf "${r:?}/lib"
fi
# Absolute symbolic links (libz.so -> /lib/...) would point into the GPU machine's own /.
while read -r l; do
  t=$(readlink "$l")
  ln -sf "$(realpath -m --relative-to="$(dirname "$l")" "$r/usr/${t#/usr/}")" "$l"
done < <(find "$r" -type l -lname '/*')
rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/info" "$r/usr/share/lintian" \
  "$r/usr/share/bug" "$r/usr/share/locale" "$r/usr/lib/x86_64-linux-gnu/cmake" \
  "$r/usr/lib/x86_64-linux-gnu/openblas-openmp/cmake" "${r:?}/etc"
find "$r" -name '*.a' -delete
# OpenBLAS's reference-BLAS and LAPACK faces: dtrain links libopenblas itself.
rm -f "$r"/usr/lib/x86_64-linux-gnu/openblas-openmp/lib{blas,lapack}.so* \
  "$r"/usr/lib/x86_64-linux-gnu/openblas-openmp/pkgconfig/{blas,lapack}-openblas.pc
# The names that update-alternatives would make at install time (dpkg -x runs no scripts).
ob=usr/lib/x86_64-linux-gnu/openblas-openmp
ln -sf openblas-openmp/cblas.h "$r/usr/include/x86_64-linux-gnu/cblas.h"
ln -sf openblas-openmp/libopenblas.so.0 "$r/usr/lib/x86_64-linux-gnu/libopenblas.so.0"
[[ -e $r/$ob/libopenblas.so ]] || { echo "gpu-bundle: $ob/libopenblas.so missing" >&2; exit 1; }
# Absolute symbolic links would point into this machine's / on the GPU machine.
if find "$r" -type l -lname '/*' | grep -q .; then
  echo "gpu-bundle: absolute links left in $r:" >&2
  find "$r" -type l -lname '/*' >&2
  exit 1
fi
tar -C "$dir" -cJf "$dir/carry/root.tar.xz" root
printf '%s\n' "${pkgs[@]}" | sort >"$dir/carry/packages.txt"

rel=${dir#"$repo"/}
echo "gpu-bundle: $(du -sh "$r" | cut -f1) unpacked in $r," \
  "$(du -sh "$dir/carry" | cut -f1) to carry in $dir/carry"
if [[ $rel == /* ]]; then
  echo "gpu-bundle: $dir is outside the repository; the device copy takes only paths inside it"
else
  echo "carry: [\"$rel/carry\"]"
  echo "command: scripts/gpu-check.sh \"\$OUT\""
  echo "(gpu-check.sh unpacks $rel/carry/root.tar.xz into $rel/root and uses it)"
fi
