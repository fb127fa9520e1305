#!/usr/bin/env bash
# Install the coding-agent CLIs that the tests drive (tests/clis/package-lock.json: Claude Code,
# Codex, Gemini CLI) and the MCP filesystem server (@modelcontextprotocol/server-filesystem) into a
# cache folder outside the repository, and print that folder.
#
#   ${APPROVALS_CLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/approvals-clis}/<first 12 hex of sha256(package-lock.json)>
#
# Idempotent: a finished install leaves a `.built` stamp and later runs only print the folder.
# A changed lock gets a new folder. npm's own output goes to stderr; stdout is the folder alone,
# so `export APPROVALS_CLIS_DIR="$(bash tests/clis/install.sh)"` works.
#
# Install scripts are not run (--ignore-scripts), whatever the npm version: npm 11 holds them
# back for approval anyway, and the ones in this tree (Claude Code's postinstall that copies its
# native binary, keytar's and node-pty's native builds) would otherwise reach for the network.
# Claude Code's native binary ships in the optional package @anthropic-ai/claude-code-<platform>;
# this script links it (and the other CLIs' entry points) into <folder>/bin.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock="$here/package-lock.json"
hash="$(sha256sum "$lock" | cut -c1-12)"
cache="${APPROVALS_CLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/approvals-clis}"
dir="$cache/$hash"

if [[ ! -f "$dir/.built" ]]; then
    command -v npm >/dev/null || { echo "install.sh: npm is needed (apt-get install nodejs npm)" >&2; exit 1; }
    mkdir -p "$cache"
    part="$(mktemp -d "$cache/.$hash.XXXXXX")"
    trap 'rm -rf "$part"' EXIT
    cp "$here/package.json" "$lock" "$part/"
    echo "install.sh: npm ci into $dir" >&2
    (cd "$part" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=warn) >&2

    mkdir -p "$part/bin"
    # Claude Code: the native binary of this platform (glibc or musl Linux, macOS).
    native=""
    for candidate in "$part"/node_modules/@anthropic-ai/claude-code-*/claude; do
        [[ -x "$candidate" ]] && { native="$candidate"; break; }
    done
    if [[ -n "$native" ]]; then
        ln -s "../${native#"$part"/}" "$part/bin/claude"
    else
        echo "install.sh: no native Claude Code binary for this platform was installed" >&2
    fi
    [[ -e "$part/node_modules/.bin/codex" ]] && ln -s ../node_modules/.bin/codex "$part/bin/codex"
    [[ -e "$part/node_modules/.bin/gemini" ]] && ln -s ../node_modules/.bin/gemini "$part/bin/gemini"
    # the MCP server the gateway's tests put it in front of
    [[ -e "$part/node_modules/.bin/mcp-server-filesystem" ]] \
        && ln -s ../node_modules/.bin/mcp-server-filesystem "$part/bin/mcp-server-filesystem"
    chmod 755 "$part"
    touch "$part/.built"

    rm -rf "$dir"
    mv "$part" "$dir"
    trap - EXIT
fi
echo "$dir"
