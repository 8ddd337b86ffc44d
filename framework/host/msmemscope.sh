#!/bin/bash
# msmemscope: the command on the user's PATH (<prefix>/bin/msmemscope).
#
#   msmemscope [options] [--] program [args]   runs the host binary beside this
#                                              file (bin/msmemscope.bin) by exec:
#                                              same arguments, process, signals
#                                              and exit status
#   source msmemscope --load-api-env           puts msmemscope's hook libraries
#                                              on LD_PRELOAD and its library
#                                              folder on LD_LIBRARY_PATH in the
#                                              calling shell (the upstream way
#                                              of preparing the Python API)
#   source msmemscope --unload-api-env         removes exactly those entries
#
# Safe to run as root: the binary is found only through this file's own
# resolved location (no PATH lookup, no environment variable names it), and
# the entries it adds name only files of the same tree.
# Sourcing works from bash and zsh; running works from any POSIX shell. Run
# directly it starts under bash, not /bin/sh: dash refuses to run any script
# when fewer than 11 descriptors are allowed (it moves the script's to 10),
# and a program run with `ulimit -n 6` must still be profiled.

# Where this file is, and whether it is being sourced.
_msms_self=$0
_msms_sourced=0
if [ -n "${BASH_VERSION:-}" ]; then
    eval '_msms_self=${BASH_SOURCE[0]}'
    [ "$_msms_self" != "$0" ] && _msms_sourced=1
elif [ -n "${ZSH_VERSION:-}" ]; then
    eval '_msms_self=${(%):-%x}'
    case ${ZSH_EVAL_CONTEXT:-} in *:file*) _msms_sourced=1 ;; esac
fi

# The real folder of this file (symlinks followed), printed on stdout.
# Only shell built-ins, and readlink from /usr/bin or /bin for a symlink.
_msms_real_dir() {
    _msms_p=$1
    _msms_n=0
    while [ -L "$_msms_p" ]; do
        _msms_n=$((_msms_n + 1))
        [ "$_msms_n" -gt 40 ] && return 1
        if [ -x /usr/bin/readlink ]; then _msms_l=$(/usr/bin/readlink -- "$_msms_p") || return 1
        elif [ -x /bin/readlink ]; then _msms_l=$(/bin/readlink -- "$_msms_p") || return 1
        else return 1
        fi
        case $_msms_l in
            /*) _msms_p=$_msms_l ;;
            *) case $_msms_p in */*) _msms_p=${_msms_p%/*}/$_msms_l ;; *) _msms_p=$_msms_l ;; esac ;;
        esac
    done
    case $_msms_p in */*) _msms_d=${_msms_p%/*} ;; *) _msms_d=. ;; esac
    [ -n "$_msms_d" ] || _msms_d=/
    (cd -P -- "$_msms_d" 2>/dev/null && pwd -P)
}

# The host's malloc in transparent huge pages, decided here as the host
# decides it (host_malloc_huge_pages, framework/util/host_process.h), so that
# it starts once instead of executing itself a second time: GLIBC_TUNABLES
# with glibc.malloc.hugetlb=1 added, and the user's value (=VALUE, or - when
# unset) in MSMEMSCOPE_HOST_TUNABLES, which the host puts back before it
# starts anything. Left to the host when any fact is unknown here.
_msms_host_huge_pages() {
    [ "${MSMEMSCOPE_HUGE_PAGES:-}" = 0 ] && return 0
    [ -n "${MSMEMSCOPE_HOST_TUNABLES+x}" ] && return 0
    case ${GLIBC_TUNABLES:-} in *glibc.malloc.hugetlb*) return 0 ;; esac
    _msms_thp=
    { read -r _msms_thp </sys/kernel/mm/transparent_hugepage/enabled; } 2>/dev/null
    case $_msms_thp in '' | *'[never]'*) return 0 ;; esac
    # No address-space limit (ulimit -v): this shell's own, read without a
    # process (the host binary inherits it).
    _msms_as=
    { while read -r _msms_w1 _msms_w2 _msms_w3 _msms_w4 _msms_rest; do
        if [ "$_msms_w1 $_msms_w2 $_msms_w3" = "Max address space" ]; then _msms_as=$_msms_w4; break; fi
    done </proc/self/limits; } 2>/dev/null
    [ "$_msms_as" = unlimited ] || return 0
    if [ -n "${GLIBC_TUNABLES+x}" ]; then MSMEMSCOPE_HOST_TUNABLES="=$GLIBC_TUNABLES"; else MSMEMSCOPE_HOST_TUNABLES=-; fi
    if [ -n "${GLIBC_TUNABLES:-}" ]; then GLIBC_TUNABLES="$GLIBC_TUNABLES:glibc.malloc.hugetlb=1"
    else GLIBC_TUNABLES=glibc.malloc.hugetlb=1
    fi
    export MSMEMSCOPE_HOST_TUNABLES GLIBC_TUNABLES
}

if [ "$_msms_sourced" = 0 ]; then
    case ${1:-} in
        --load-api-env | --unload-api-env)
            echo "msmemscope: error: $1 must be sourced (from bash or zsh), so that it changes the calling shell's environment: source $_msms_self $1" >&2
            return 2 2>/dev/null || exit 2 ;;
    esac
    # This file is no link (as installed): its folder as named, without a
    # command substitution (a process of its own, ~5 ms on a VM, on every run).
    _msms_bin=
    case $_msms_self in
        */*) [ ! -L "$_msms_self" ] && [ -x "${_msms_self%/*}/msmemscope.bin" ] && _msms_bin=${_msms_self%/*} ;;
    esac
    [ -n "$_msms_bin" ] || _msms_bin=$(_msms_real_dir "$_msms_self" 2>/dev/null) || _msms_bin=
    if [ -z "$_msms_bin" ]; then
        # No descriptor left for a command substitution (ulimit -n): the
        # folder as named, when the host binary is there.
        case $_msms_self in */*) [ -x "${_msms_self%/*}/msmemscope.bin" ] && _msms_bin=${_msms_self%/*} ;; esac
    fi
    if [ -z "$_msms_bin" ]; then
        echo "msmemscope: error: cannot find the folder of $_msms_self (the host binary msmemscope.bin is looked up beside it)" >&2
        exit 70
    fi
    _msms_host_huge_pages
    exec "$_msms_bin/msmemscope.bin" "$@"
    exit 126
fi

# ---- sourced -----------------------------------------------------------------

# $2 with every ':'-separated entry of $1 for which `_msms_ours ENTRY` holds
# removed; prints the result.
_msms_strip() {
    _msms_out=
    _msms_rest=$2:
    while [ -n "$_msms_rest" ]; do
        _msms_e=${_msms_rest%%:*}
        _msms_rest=${_msms_rest#*:}
        if ! "$1" "$_msms_e"; then
            if [ -z "$_msms_out" ]; then _msms_out=$_msms_e; else _msms_out=$_msms_out:$_msms_e; fi
        fi
    done
    printf '%s' "$_msms_out"
}
_msms_is_lib() { [ "$1" = "$_msms_lib" ] || [ "$1" = "$_msms_lib/" ]; }
_msms_under_lib() { case $1 in "$_msms_lib"/*) return 0 ;; esac; return 1; }
_msms_has() { case ":$2:" in *":$1:"*) return 0 ;; esac; return 1; }

_msms_api_env() {
    _msms_bin=$(_msms_real_dir "$_msms_self") || _msms_bin=
    if [ -z "$_msms_bin" ]; then
        echo "msmemscope: error: cannot find the folder of $_msms_self" >&2
        return 1
    fi
    _msms_lib=${_msms_bin%/*}/lib/msmemscope
    if [ ! -d "$_msms_lib/agent" ]; then
        echo "msmemscope: error: $_msms_lib/agent is missing: this msmemscope installation is incomplete" >&2
        return 1
    fi
    case $1 in
    --load-api-env)
        # The hook libraries the Python API cannot install by itself (device
        # runtimes, mstx); the host heap hooks are patched in by the package.
        _msms_added=0
        _msms_new=
        for _msms_so in libmsms_hal_hook.so libmsms_mstx_hook.so libmsms_kernel_launch_hook.so libmsms_cuda_hook.so; do
            _msms_f=$_msms_lib/agent/$_msms_so
            [ -f "$_msms_f" ] || continue
            if ! _msms_has "$_msms_f" "${LD_PRELOAD:-}"; then
                if [ -z "$_msms_new" ]; then _msms_new=$_msms_f; else _msms_new=$_msms_new:$_msms_f; fi
                _msms_added=$((_msms_added + 1))
            fi
        done
        if [ -n "$_msms_new" ]; then
            if [ -z "${LD_PRELOAD:-}" ]; then LD_PRELOAD=$_msms_new; else LD_PRELOAD=$_msms_new:$LD_PRELOAD; fi
            export LD_PRELOAD
        fi
        if ! _msms_has "$_msms_lib" "${LD_LIBRARY_PATH:-}"; then
            if [ -z "${LD_LIBRARY_PATH:-}" ]; then LD_LIBRARY_PATH=$_msms_lib; else LD_LIBRARY_PATH=$_msms_lib:$LD_LIBRARY_PATH; fi
            export LD_LIBRARY_PATH
            _msms_added=$((_msms_added + 1))
        fi
        if [ "$_msms_added" = 0 ]; then
            echo "msmemscope: the API environment was already loaded ($_msms_lib)"
        else
            echo "msmemscope: API environment loaded: LD_PRELOAD and LD_LIBRARY_PATH name $_msms_lib (undo: source msmemscope --unload-api-env)"
        fi
        ;;
    --unload-api-env)
        _msms_removed=0
        if [ -n "${LD_PRELOAD+x}" ]; then
            _msms_new=$(_msms_strip _msms_under_lib "$LD_PRELOAD")
            if [ "$_msms_new" != "$LD_PRELOAD" ]; then
                _msms_removed=1
                if [ -z "$_msms_new" ]; then unset LD_PRELOAD; else LD_PRELOAD=$_msms_new; export LD_PRELOAD; fi
            fi
        fi
        if [ -n "${LD_LIBRARY_PATH+x}" ]; then
            _msms_new=$(_msms_strip _msms_is_lib "$LD_LIBRARY_PATH")
            if [ "$_msms_new" != "$LD_LIBRARY_PATH" ]; then
                _msms_removed=1
                if [ -z "$_msms_new" ]; then unset LD_LIBRARY_PATH; else LD_LIBRARY_PATH=$_msms_new; export LD_LIBRARY_PATH; fi
            fi
        fi
        if [ "$_msms_removed" = 0 ]; then
            echo "msmemscope: the API environment was not loaded: nothing of $_msms_lib in LD_PRELOAD or LD_LIBRARY_PATH"
        else
            echo "msmemscope: API environment unloaded: $_msms_lib removed from LD_PRELOAD and LD_LIBRARY_PATH"
        fi
        ;;
    *)
        echo "msmemscope: error: sourced, msmemscope takes --load-api-env or --unload-api-env (got '${1:-}'); run it to profile a program" >&2
        return 2 ;;
    esac
    return 0
}

_msms_rc=0
_msms_api_env "$@" || _msms_rc=$?
unset -f _msms_real_dir _msms_strip _msms_is_lib _msms_under_lib _msms_has _msms_api_env _msms_host_huge_pages
unset _msms_self _msms_sourced _msms_p _msms_n _msms_l _msms_d _msms_bin _msms_lib _msms_added _msms_so _msms_f \
    _msms_removed _msms_new _msms_out _msms_rest _msms_e
eval "unset _msms_rc; return $_msms_rc"
