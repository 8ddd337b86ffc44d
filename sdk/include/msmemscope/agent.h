/*
 * The target-side API: what collector code running inside the profiled
 * program calls to record events. Exported by libmsmemscope_agent.so, which
 * the CLI preloads (or the Python package loads) into the target.
 *
 * Every function is safe to call from any thread, at any time, including
 * before the agent is set up and after it shut down (then it records nothing).
 * None of them allocates through malloc, takes a lock on the common path,
 * logs, or throws.
 *
 * Typical hook:
 *
 *     void* real_alloc(size_t n);             // the pool's own allocator
 *     void* my_pool_alloc(size_t n) {
 *         void* p = real_alloc(n);
 *         if (msms_agent_enter()) {            // reentrancy guard + "on" flag
 *             msms_agent_alloc(MSMS_T_PTA, MSMS_DEV_CPU, -1, (uint64_t)p, n, 0, 0);
 *             msms_agent_leave();
 *         }
 *         return p;
 *     }
 */
#ifndef MSMEMSCOPE_AGENT_H
#define MSMEMSCOPE_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this thread may record now (collection on, not inside the agent on
 * this thread); the caller must then call msms_agent_leave(). 0 otherwise. */
int msms_agent_enter(void);
void msms_agent_leave(void);

/* 1 when collection is on (no guard taken). */
int msms_agent_collecting(void);

/* The byte behind msms_agent_collecting(), for callers that test it on
 * every event (the Python profile hook): non-zero while collecting; read it
 * with a relaxed atomic load, e.g. __atomic_load_n(p, __ATOMIC_RELAXED). */
const unsigned char* msms_agent_collecting_flag(void);

/* 1 when the user asked for this event class: "alloc", "free", "launch",
 * "access", "traceback". --level (upstream's data trace level; default op)
 * adds: "op" / "kernel" (that level is on), "op_launch" (launch at op level:
 * framework operator rows, OP_LAUNCH ATEN_START/END), "kernel_launch" (launch
 * at kernel level: KERNEL_LAUNCH rows), "op_access" (access at op level: the
 * framework operators' ACCESS rows). A collector of kernel launches tests
 * "kernel_launch", one of operators "op_launch", as upstream gates them. */
int msms_agent_wants(const char* event_class);

/* Value of a collection option as text ("" when unset): "device", "level"
 * ("op", "kernel" or "op,kernel"),
 * "call_stack", "collect_mode", "steps", "watch" and collector options
 * "<collector>.<key>". Returns the length written (without NUL). */
size_t msms_agent_option(const char* key, char* buf, size_t buf_size);

/* Monotonic clock of the capture (ns). */
uint64_t msms_agent_now(void);

/* A block was allocated (record after the real call). `attrs` is NULL or a
 * "key:value,key:value" list of extra Attr entries; `aux0` is kind-specific
 * (HAL: the flag word). */
void msms_agent_alloc(uint16_t type, uint16_t device_kind, int16_t device_id, uint64_t ptr,
                      uint64_t size, uint64_t aux0, const char* attrs);
/* A host block the dynamic loader allocated (the malloc hook's caller is in
 * ld.so: a thread's TLS, dlopen's maps): recorded as msms_agent_alloc(
 * MSMS_T_HOST, MSMS_DEV_CPU, -1, ptr, size, 0, NULL) does, with a C stack
 * of a few frames whatever --call-stack asks for, so that the leak analysis
 * knows it as the loader's and not as a leak of the program's line that
 * started the thread. (Newer agents only: look it up with dlsym.) */
void msms_agent_alloc_loader(uint64_t ptr, uint64_t size);
/* A HOST block of the malloc family's hooks: recorded as msms_agent_alloc(
 * MSMS_T_HOST, MSMS_DEV_CPU, -1, ptr, size, 0, NULL) does, plus the hook's
 * caller: `caller` its return address, `caller_sp` the stack pointer at the
 * hooked call (the word above the return address; NULL if not known). With
 * Python stacks and no C ones, the block's record then names the native
 * code that asked for it, so that the leak analysis tells a library's
 * one-time set-up from the program's own leak at the same Python line.
 * (Newer agents only: look it up with dlsym.) */
void msms_agent_alloc_host(uint64_t ptr, uint64_t size, uint64_t caller, const uint64_t* caller_sp);
/* A block is about to be freed (record before the real call). */
void msms_agent_free(uint16_t type, uint16_t device_kind, int16_t device_id, uint64_t ptr);

/* While collection is off (--collect-mode=deferred before start(), or after
 * stop()) msms_agent_enter() returns 0; a memory hook then calls these
 * instead (no guard taken), and the blocks still live when collection
 * starts are written then as MALLOC rows with Attr shadow:true, so that
 * their FREE pairs with a MALLOC and the leak report knows them.
 * msms_agent_off_alloc returns 1 when the block was remembered. Both do
 * nothing while collecting, inside the agent, or with no stream open. */
int msms_agent_off_alloc(uint16_t type, uint16_t device_kind, int16_t device_id, uint64_t ptr, uint64_t size);
void msms_agent_off_free(uint16_t type, uint64_t ptr);
/* msms_agent_off_free with the block's device: a device block that a
 * collection range recorded and the program freed while collection was off
 * gets its FREE (Attr shadow:true) on that device when collection starts
 * again; msms_agent_off_free knows no device and keeps that only for HOST
 * blocks. (Newer agents only: look it up with dlsym.) */
void msms_agent_off_free_device(uint16_t type, uint16_t device_kind, int16_t device_id, uint64_t ptr);
/* msms_agent_off_alloc with the Attr extras the block's MALLOC carries when
 * collecting (`attrs`, msms_agent_alloc's "key:value,..." text; NULL or ""
 * for none): its shadow MALLOC carries them after shadow:true, so that the
 * host, the sinks and the analyzers know it as they know a block recorded
 * in a range (driver, alloc_type; virtual:true, a mapping of memory another
 * block accounts for, which the host then counts once). The agent keeps up
 * to 62 distinct texts of at most 191 characters for the process's life;
 * past that a block's shadow MALLOC carries shadow:true alone, and one
 * whose text says virtual:true carries shadow:true,virtual:true (counted
 * twice otherwise). (Newer agents only: look it up with dlsym.) */
int msms_agent_off_alloc_attrs(uint16_t type, uint16_t device_kind, int16_t device_id, uint64_t ptr, uint64_t size,
                               const char* attrs);

/* The calling thread enters / leaves the import of a Python module (the
 * Python package's CLI boot calls these around the import machinery when
 * host_heap.python_imports=fold, the default). Scopes nest. While one is
 * open and collection is on, HOST blocks the thread allocates are only
 * remembered, for their whole life (their frees are not written either);
 * those still live are written together as one block, the imports' heap: a
 * MALLOC at 0xffff800000000000 with Attr shadow:true,import:true,blocks:N
 * and no stacks, written again (FREE, MALLOC) when an outermost scope ends
 * and the figures changed, and at exit. (Newer agents only: look them up
 * with dlsym.) */
void msms_agent_import_enter(void);
void msms_agent_import_leave(void);
/* The interpreter starts its shutdown (after the program's atexit
 * handlers): from now on HOST frees are written without stacks. */
void msms_agent_import_finalizing(void);

/* The interpreter's start-up is over (the program's first line is next, or
 * the Python package's boot is done): its HOST blocks no longer get a
 * start-up C stack (taken from the agent's start in a CPython interpreter
 * when no C stacks were asked for, so that what the start-up keeps is known
 * by its site). _paused(1): the program's own code runs inside the start-up
 * (its sitecustomize), _paused(0): it is done. (Newer agents only: look
 * them up with dlsym.) */
void msms_agent_python_started(void);
void msms_agent_python_startup_paused(int paused);

/* Any other event. `name` and `attrs` may be NULL. */
void msms_agent_event(uint16_t kind, uint16_t type, uint16_t device_kind, int16_t device_id,
                      uint64_t ptr, uint64_t size, uint64_t aux0, uint64_t aux1, const char* name,
                      const char* attrs);

/* The Python side's collection range: start()/stop() (also used by
 * --collect-mode=deferred). Emits SYSTEM START_TRACE / STOP_TRACE. */
void msms_agent_start(void);
void msms_agent_stop(void);
/* The Python API's next range with changed collection options (config()
 * between two ranges): the agent's options are replaced by `options` (the
 * same "key=value;..." text the host passes at attach; what the process
 * itself was told, its host's pid, is kept), then collection starts with
 * START_TRACE carrying `attrs` (may be NULL). (Newer agents only: look it
 * up with dlsym.) */
void msms_agent_start_with(const char* options, const char* attrs);

/* Called while collection starts (msms_agent_start), right after the shadow
 * MALLOC of each host heap block allocated while it was off, with the
 * block's address: a collector whose pool carves its blocks out of the host
 * heap (the Python package's PyTorch CPU pool) writes that block's own
 * shadow MALLOC then, as its live hook writes a block right after the
 * malloc it came from, so that the host counts those bytes once (a host
 * heap peak of the pool's bytes twice otherwise). NULL: none. */
typedef void (*msms_shadow_host_observer)(uint64_t ptr);
void msms_agent_set_shadow_host_observer(msms_shadow_host_observer fn);

/* Marks the end of a step: SYSTEM STEP with an increasing step number
 * (returned). */
uint64_t msms_agent_step(void);

/* Stack providers. A provider writes up to max interned-frame values of the
 * calling thread's current stack into out and returns how many. Python
 * collectors install one for Python frames; each value must be a string id
 * from msms_agent_intern(). */
typedef uint32_t (*msms_stack_provider)(uint64_t* out, uint32_t max);
void msms_agent_set_python_stack_provider(msms_stack_provider fn);

/* Interns a NUL-terminated string; returns its id (0 on failure). */
uint64_t msms_agent_intern(const char* s);

/* ---- control (used by the CLI's environment and the Python package) ----
 * The agent activates itself when loaded with MSMEMSCOPE_SESSION set (the CLI
 * does that). A process that loaded the agent without it (Python started
 * without the CLI) attaches explicitly: session_dir is the folder the host
 * watches, options is the same "key=value;key=value" text the CLI passes in
 * MSMEMSCOPE_AGENT_OPTS. Returns 0 on success, else an errno-like code. */
int msms_agent_attach(const char* session_dir, const char* options);
/* Ends this process's stream now (as at exit): writes the end record, which
 * says the exit status is not known. */
void msms_agent_detach(void);
/* As msms_agent_detach, with how the process ends as far as the caller can
 * tell: end_kind 1 (exit, end_code its status) or 3 (a fatal signal,
 * end_code its number); any other end_kind: not known (as msms_agent_detach). */
void msms_agent_detach_ended(uint32_t end_kind, int32_t end_code);
/* 1 when a capture stream is open in this process. */
int msms_agent_attached(void);

/* ---- appended: fast paths for the Python package ----
 * A Python call that returns now and began at start_ns (from
 * msms_agent_now()): recorded as PY_TRACE PY_CALL, device NA, aux0 = start,
 * Name = name, in a compact record. `cache` is two words the caller keeps per
 * name (zero-initialised, never shared between names): the name's id in this
 * thread's stream is kept there, so later calls skip interning. Records
 * nothing when no stream is open; the caller checks collection. */
void msms_agent_py_call(uint64_t start_ns, const char* name, uint64_t cache[2]);

/* msms_agent_event() with an interned name: `name_cache` as above. */
void msms_agent_event_cached(uint16_t kind, uint16_t type, uint16_t device_kind, int16_t device_id,
                             uint64_t ptr, uint64_t size, uint64_t aux0, uint64_t aux1, const char* name,
                             uint64_t name_cache[2], const char* attrs);

/* A framework operator's row (OP_LAUNCH ATEN_START / ATEN_END, or ACCESS of
 * one of its tensors) with an interned name (`name_cache` as above). Such
 * rows carry the Python stack (when Python stacks are collected; never a C
 * stack), as upstream writes them. `stack` is two words the caller keeps per
 * operator call, zeroed when the call starts: the first row takes the
 * stack and keeps its id there, the call's other rows reuse it (NULL: each
 * row takes its own). (Newer agents only: look it up with dlsym.) */
void msms_agent_op_event(uint16_t kind, uint16_t type, uint16_t device_kind, int16_t device_id, uint64_t ptr,
                         uint64_t size, const char* name, uint64_t name_cache[2], const char* attrs,
                         uint64_t stack[2]);

/* A stack provider that names its answers (newer agents only: look the
 * setter up with dlsym). As msms_stack_provider, with *token in and out: on
 * entry, the token of the answer the caller holds from this provider on
 * this thread (0: none); on return, the token of this answer (0: unnamed).
 * A nonzero token names one answer -- its values, in order, for the same
 * max -- for the life of the process, and is never reused. When this
 * answer's token is the one the caller gave, the provider may return
 * MSMS_STACK_SAME and write nothing: most allocations are made where the
 * one before was, and the caller then reuses what it made of that answer.
 * Installing one takes the place of the plain provider (NULL: removes it). */
#define MSMS_STACK_SAME 0xFFFFFFFFu
typedef uint32_t (*msms_stack_provider_named)(uint64_t* out, uint32_t max, uint64_t* token);
void msms_agent_set_python_stack_provider_named(msms_stack_provider_named fn);

/* The Python stack of an allocation that failed for lack of memory (an
 * OOM_DETAIL event): consulted at such a failure only, whatever Python
 * stacks were asked for, with up to max(50, the Python depth asked for)
 * frames (newer agents only: look the setter up with dlsym). Called on the
 * failing thread, which may not hold the GIL. NULL: removes it. */
void msms_agent_set_python_oom_stack_provider(msms_stack_provider fn);

#ifdef __cplusplus
}
#endif
#endif
