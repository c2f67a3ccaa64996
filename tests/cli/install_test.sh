#!/usr/bin/env bash
# Installs the build into a temporary prefix and runs the installed binary; then packages it
# with cpack and checks the .deb: it holds /usr/bin/sluice and depends on the Debian runtime
# libraries the binary links. Usage: install_test.sh BUILD_DIR SHARED_DIR
set -euo pipefail
build="$1"
shared="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -x "$tmp/prefix/bin/sluice"
test -f "$tmp/prefix/share/doc/sluice/README.md"
version="$("$tmp/prefix/bin/sluice" --version)"
[[ "$version" == sluice\ * ]] || { echo "unexpected --version: $version"; exit 1; }
model="$shared/testdata/models/stories260K.gguf"
if [ -f "$model" ]; then
  out="$("$tmp/prefix/bin/sluice" run "$model" -p "Once upon a time" -n 8 --temp 0 2>/dev/null)"
  [ -n "$out" ] || { echo "the installed sluice generated nothing"; exit 1; }
elif [ "${CI:-}" = "true" ]; then
  echo "CI=true: $model is missing"; exit 1
fi

(cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg" >/dev/null)
deb="$(ls "$tmp"/pkg/sluice_*.deb)"
contents="$(dpkg-deb -c "$deb")"
echo "$contents" | grep ' ./usr/bin/sluice$' >/dev/null || { echo "no /usr/bin/sluice in $deb"; exit 1; }
depends="$(dpkg-deb -f "$deb" Depends)"
for lib in libpcre2-8-0 libcurl4 libc6; do
  [[ "$depends" == *"$lib"* ]] || { echo "Depends lacks $lib: $depends"; exit 1; }
done
echo "installed and packaged: $(basename "$deb"); Depends: $depends"
