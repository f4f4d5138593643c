#!/usr/bin/env bash
# The SDK end to end, as a third party sees it: install this build into a fresh prefix,
# build the example plugin and the ABI-compatibility plugins out of tree against the
# installed CMake package, build a host program and a plugin with pkg-config alone, then
# discover, run and conform through the installed `dlfuse` CLI. The C++ example plugin,
# both ways, must export dlfuse_plugin_v1 alone although it instantiates std templates.
# usage: sdk_test.sh BUILD_DIR SOURCE_DIR WORK_DIR CMAKE C_COMPILER CXX_COMPILER
set -euo pipefail
build=$1 src=$2 work=$3 cmake=$4 cc=$5 cxx=$6
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
step() { echo "--- sdk: $*"; }
expect() { # expect REGEX TEXT...: the text must match
  local re=$1; shift
  if ! grep -Eq -- "$re" <<<"$*"; then echo "expected /$re/ in:"; echo "$*"; exit 1; fi
}

step "install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/dlfuse/dlfuse.h include/dlfuse/plugin.h include/dlfuse/types.h \
         include/dlfuse/external/dlpack/dlpack.h lib/libdlfuse.so bin/dlfuse \
         lib/cmake/dlfuse/dlfuseConfig.cmake lib/cmake/dlfuse/dlfuseConfigVersion.cmake \
         lib/cmake/dlfuse/DlfusePlugin.cmake lib/cmake/dlfuse/dlfuse_plugin.map lib/pkgconfig/dlfuse.pc; do
  [ -e "$prefix/$f" ] || { echo "missing from the install: $f"; exit 1; }
done
if ls "$prefix"/lib/dlfuse/plugins/libdlfuse_testref* >/dev/null 2>&1; then
  echo "the test plugin must not be installed"; exit 1
fi
cli=$prefix/bin/dlfuse
# Only the installed plugins: nothing from the environment.
unset DLFUSE_PLUGIN_PATH DLFUSE_PREFER
out=$("$cli" list 2>&1)
echo "$out"
for p in "$build"/lib/dlfuse/plugins/libdlfuse_*.so; do
  [ -e "$p" ] || continue
  name=$(basename "$p" .so); name=${name#libdlfuse_}
  [ "$name" = testref ] && continue
  expect "$prefix/lib/dlfuse/plugins/libdlfuse_$name.so" "$out"
done

step "example plugin, out of tree, find_package(dlfuse)"
"$cmake" -S "$src/examples/third_party_plugin" -B "$work/example" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" >"$work/example-configure.log"
"$cmake" --build "$work/example" >"$work/example-build.log"
plugin=$work/example/libdlfuse_example.so
syms=$(nm -D --defined-only "$plugin" | awk '{print $3}')
[ "$syms" = dlfuse_plugin_v1 ] || { echo "exported symbols: expected only dlfuse_plugin_v1, got: $syms"; exit 1; }

step "discovered through DLFUSE_PLUGIN_PATH"
out=$(DLFUSE_PLUGIN_PATH=$work/example "$cli" list)
echo "$out"
expect "^example +1\.0\.0 +available +cpu x1 +$plugin" "$out"
out=$(DLFUSE_PLUGIN_PATH=$work/example "$cli" run add_mul_activation --plugin example --act gelu_erf --multiplier -1.5)
echo "$out"
expect "^example +cpu:0 +add_mul_activation +float32 .* PASS" "$out"

step "conformance of the example plugin"
"$cli" conform "$plugin" >"$work/conform.log" || { tail -40 "$work/conform.log"; exit 1; }
tail -1 "$work/conform.log"
expect "^[1-9][0-9]* passed, 0 failed" "$(tail -1 "$work/conform.log")"

step "pkg-config: a host program and the same plugin, no CMake"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion dlfuse)" = "$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/dlfuse.pc")" ]
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror "$src/tests/sdk/pkgconfig_host.c" -o "$work/pkgconfig_host" \
  $(pkg-config --cflags --libs dlfuse) -lm -Wl,-rpath,"$prefix/lib"
mkdir -p "$work/pc_plugin"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -Wl,--no-undefined \
  "$src/examples/third_party_plugin/example_plugin.c" $(pkg-config --cflags dlfuse) -lm \
  -o "$work/pc_plugin/libdlfuse_example.so"
"$work/pkgconfig_host" "$work/pc_plugin/libdlfuse_example.so"

step "C++ example plugin, out of tree, find_package(dlfuse): exports dlfuse_plugin_v1 alone"
only_entry() { # only_entry SO: its one defined dynamic symbol is dlfuse_plugin_v1
  local syms
  syms=$(nm -D --defined-only "$1" | awk '{print $3}')
  [ "$syms" = dlfuse_plugin_v1 ] || { echo "$1 exports more than dlfuse_plugin_v1:"; nm -DC --defined-only "$1"; exit 1; }
}
"$cmake" -S "$src/examples/cxx_plugin" -B "$work/cxx" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" >"$work/cxx-configure.log"
"$cmake" --build "$work/cxx" >"$work/cxx-build.log" || { cat "$work/cxx-build.log"; exit 1; }
cxxplugin=$work/cxx/libdlfuse_cxx_example.so
# The test means something only if the plugin does make std template instances.
# (Into a variable first: grep -q ending the pipe early would fail it under pipefail.)
all_syms=$(nm -C "$cxxplugin")
grep -q 'std::vector<double' <<<"$all_syms" || { echo "no std::vector<double> in $cxxplugin"; exit 1; }
only_entry "$cxxplugin"
out=$(DLFUSE_PLUGIN_PATH=$work/cxx "$cli" run add_mul_activation --plugin cxx_example --dtype f64 --act silu)
echo "$out"
expect "^cxx_example +cpu:0 +add_mul_activation +float64 .* PASS" "$out"
"$cli" conform "$cxxplugin" >"$work/cxx-conform.log" || { tail -40 "$work/cxx-conform.log"; exit 1; }
expect "^[1-9][0-9]* passed, 0 failed" "$(tail -1 "$work/cxx-conform.log")"
# Its own op (ABI 1.2) is listed with its schema.
out=$(DLFUSE_PLUGIN_PATH=$work/cxx "$cli" list)
expect "cxx_example_outer \(cxx_example\): x, y -> out; SCALE" "$out"

step "C++ plugin without CMake (docs/plugin-guide.md): the version script is what hides std::"
mkdir -p "$work/cxx_pc"
map=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --variable=plugin_version_script dlfuse)
[ -f "$map" ] || { echo "pkg-config plugin_version_script: no file at '$map'"; exit 1; }
# shellcheck disable=SC2046
"$cxx" -std=c++17 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -Wl,--no-undefined \
  -Wl,--version-script="$map" "$src/examples/cxx_plugin/cxx_plugin.cpp" \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags dlfuse) -o "$work/cxx_pc/libdlfuse_cxx_example.so"
only_entry "$work/cxx_pc/libdlfuse_cxx_example.so"
# Without it, -fvisibility=hidden alone leaks libstdc++'s instances (the reason it exists).
# shellcheck disable=SC2046
"$cxx" -std=c++17 -shared -fPIC -fvisibility=hidden -Wl,--no-undefined "$src/examples/cxx_plugin/cxx_plugin.cpp" \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags dlfuse) -o "$work/cxx_pc/leaky.so"
leaky=$(nm -DC --defined-only "$work/cxx_pc/leaky.so")
grep -q 'std::' <<<"$leaky" || echo "note: this compiler hid std:: instances even without the version script"

step "ABI stability: frozen 1.0 layout; 1.0, 1.1 and future 1.x plugins load; ABI 2 is refused"
"$cmake" -S "$src/tests/sdk/abi_compat" -B "$work/abi" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" >"$work/abi-configure.log"
"$cmake" --build "$work/abi" >"$work/abi-build.log" || { cat "$work/abi-build.log"; exit 1; }
d=$work/abi/plugins
# An explicitly named plugin that is refused makes `list` exit 1, and is still listed.
rc=0
out=$("$cli" list --plugin "$d/libdlfuse_compat_v1_0.so" --plugin "$d/libdlfuse_compat_v1_1.so" \
      --plugin "$d/libdlfuse_compat_v1_next.so" --plugin "$d/libdlfuse_compat_v2.so") || rc=$?
echo "$out"
[ "$rc" = 1 ] || { echo "dlfuse list with a refused plugin: expected exit 1, got $rc"; exit 1; }
expect "^compat_v1_0 +1\.0\.0 +available" "$out"
expect "^compat_v1_1 +1\.0\.0 +available" "$out"
expect "^compat_v1_next +1\.0\.0 +available" "$out"
expect "^compat_v2 +- +unavailable .*built for dlfuse ABI 2\.[0-9]+; this libdlfuse speaks ABI 1\.[0-9]+ \(majors must match\)" "$out"
for v in v1_0 v1_1 v1_next; do
  out=$("$cli" run add_mul_activation --dtype f64 --plugin "$d/libdlfuse_compat_$v.so" --shape 48,40)
  expect "^compat_$v +cpu:0 +add_mul_activation +float64 .* PASS" "$out"
done
echo "--- sdk: all checks passed"
