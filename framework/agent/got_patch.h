// GOT patching: installs hook functions into a process that is already
// running (the Python package's mode, where nothing was preloaded), the way
// memray attaches: the GOT slots (R_*_JUMP_SLOT / R_*_GLOB_DAT) that the
// loaded objects use to call e.g. malloc are overwritten with the hook's
// address. Objects loaded later are patched too: `dlopen` itself is hooked.
//
// Exported by libmsmemscope_agent.so as plain C (the Python extension finds
// it with dlsym); links libc and libdl only, never allocates through malloc.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct msms_got_hook {
    const char* name;   /* symbol whose GOT slots are replaced, e.g. "malloc" */
    void* replacement;  /* the hook */
    void** previous;    /* out (may be NULL): what the hook should call next */
} msms_got_hook;

/* Installs a set of hooks (kept for objects loaded later).
 *   only_library: NULL = every loaded object except the agent, libc, the
 *     dynamic loader, the vdso and the objects whose path contains one of
 *     the `skip` substrings ('\n'-separated, may be NULL); otherwise only the
 *     objects whose path contains this substring.
 *   *previous gets, for a global set, the definition the process would use
 *   without hooks (RTLD_DEFAULT, i.e. libc's); for a library set, the
 *   replacement of an earlier global set for the same name if any, else the
 *   RTLD_DEFAULT definition.
 * Returns the number of GOT slots written (>= 0) or -errno. At most 16 sets. */
int msms_agent_got_install(const char* only_library, const msms_got_hook* hooks, uint32_t n, const char* skip);

/* For a hook library loaded this way whose hook must call the one installed
 * before it (dlsym: msmemscope/dlsym_hook.hpp's trampolines, chained as they
 * are under LD_PRELOAD): the replacement of `name` in the latest global set
 * installed before the set whose replacement lies in the object containing
 * `caller` (any address in the hook library). NULL when there is none (the
 * caller then uses the libc definition) or the caller's object installed no
 * such set. Takes the loader's lock (dladdr): call it once, not per call. */
void* msms_agent_got_previous(const char* name, const void* caller);

/* Re-applies every installed set to objects not patched yet (called by the
 * dlopen hook; also callable after a dlopen the hook could not see). */
void msms_agent_got_refresh(void);

/* A collector's target-side library (its hooks), loaded into a process that
 * was started without it (the Python API without the CLI, --attach): the
 * library is dlopen'ed (RTLD_NOW | RTLD_LOCAL) and each function it exports
 * (defined, global or weak, default visibility, not starting with '_' or
 * "msms_") becomes a global hook set, as LD_PRELOAD would have interposed
 * it. The hooks find the real functions themselves (msmemscope/hook_next.hpp,
 * or RTLD_NOLOAD of the library they wrap). `skip` as for
 * msms_agent_got_install (the library itself is always skipped).
 * names_out (may be NULL): the names installed, '\n'-separated.
 * Returns the number of names installed (0: the library exports none and
 * was not loaded) or -errno; error_out (may be NULL) says why in words. */
int msms_agent_got_install_library(const char* path, const char* skip, char* names_out, size_t names_cap,
                                   char* error_out, size_t error_cap);

/* Restores nothing: patches stay for the life of the process (collection
 * is turned off by the agent's "on" flag instead). */

#ifdef __cplusplus
}
#endif
