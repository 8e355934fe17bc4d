#!/usr/bin/env bash
# Sourced by the build-*.sh scripts: one copy of each Go-built tool per machine
# and pin, outside the checkout. The scripts already skip a build when .run/
# holds binaries from the same inputs (their stamp); this keeps the binaries
# for a clean checkout too (CI, a second clone, a worktree), where .run/ is
# empty and even a warm Go build cache spends minutes linking kube-apiserver,
# the control-plane binaries, promtool and helm.
#
# The cache lives in $WATCHMUX_TOOL_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/watchmux/tools), one directory per tool and
# stamp (the hash of every input of the build: go.mod, go.sum, the sources it
# builds, go version); WATCHMUX_TOOL_CACHE=off turns it off. The newest three
# stamps of a tool are kept, so changing a pin and back costs nothing.

tool_cache_base() {
  local base="${WATCHMUX_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/watchmux/tools}"
  [[ $base == off ]] && return 1
  echo "$base"
}

# tool_cache_restore <tool> <stamp> <dest dir> <file...>: copies the cached
# files into <dest dir>; succeeds only if every one was there.
tool_cache_restore() {
  local tool="$1" stamp="$2" dest="$3" base f
  shift 3
  base="$(tool_cache_base)" || return 1
  local dir="$base/$tool-$stamp"
  [[ -f $dir/.complete ]] || return 1
  for f in "$@"; do [[ -x $dir/$f ]] || return 1; done
  mkdir -p "$dest"
  for f in "$@"; do
    # A copy, not a link: the next build writes over .run/bin in place.
    cp -f "$dir/$f" "$dest/$f.tmp.$$" && mv -f "$dest/$f.tmp.$$" "$dest/$f"
  done
  echo "tool-cache: $tool restored from $dir"
}

# tool_cache_save <tool> <stamp> <src dir> <file...>: keeps the files for the
# next checkout. A failure to save (a read-only home, a full disk) is not the
# build's failure.
tool_cache_save() {
  local tool="$1" stamp="$2" src="$3" base f
  shift 3
  base="$(tool_cache_base)" || return 0
  local dir="$base/$tool-$stamp" tmp
  [[ -f $dir/.complete ]] && return 0
  mkdir -p "$base" 2>/dev/null || return 0
  tmp="$(mktemp -d "$base/.$tool.XXXXXX" 2>/dev/null)" || return 0
  for f in "$@"; do cp -f "$src/$f" "$tmp/$f" 2>/dev/null || { rm -rf "$tmp"; return 0; }; done
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir" 2>/dev/null || { rm -rf "$tmp"; return 0; }
  # Bounded: the three newest stamps of this tool stay.
  ls -1dt "$base/$tool"-* 2>/dev/null | tail -n +4 | xargs -r rm -rf
  echo "tool-cache: $tool kept in $dir"
}
