// Attach to a running process (msmemscope --attach=PID, framework/host/attach.h).
//
// The host injects the agent with gdb (dlopen by absolute path) and calls
// msms_agent_attach_running() once, in a thread stopped where it holds no
// allocator lock (at the entry of malloc/free). That call only opens the
// capture, puts the heap hooks in by GOT patching (got_patch.h), turns
// collection on and starts one small thread of the agent's; everything else
// runs on that thread:
//
// * a CPython interpreter (Py_IsInitialized) gets a pending call
//   (Py_AddPendingCall: its main thread runs it between two bytecodes, with
//   the GIL) that imports msmemscope._attach, which starts the Python-side
//   collectors (tensors, operators, Python stacks, optimizer steps) and
//   writes the tensors alive now as shadow rows;
// * detach: the host creates <session>/detach.<pid> (Ctrl-C, --attach-for),
//   or the N-th step since the attach ended (--attach-steps, counted here:
//   collection stops at that step's mark). The Python collectors are taken
//   out (another pending call, waited for at most a few seconds), then
//   collection stops, the stream ends (end kind "unknown": the summary says
//   "detached") and the capture's descriptor and mappings are released, so
//   the host sees the stream complete while the process goes on (also when
//   msmemscope itself is gone, e.g. killed: nobody reads the capture). The GOT
//   hooks stay as pass-throughs (one flag test per call).
//
// Children forked after the attach are not followed (follow_fork=0).
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dir: the session folder; opts: the agent options (MSMEMSCOPE_AGENT_OPTS
 * text); libs: '\n'-separated absolute paths of the collectors' target
 * libraries (the host heap hook is installed; others need LD_PRELOAD);
 * pypath: the folder holding the msmemscope Python package ("" = none);
 * steps: detach after this many steps (0: no limit).
 * host_pid: msmemscope's pid; the agent detaches by itself when it is gone.
 * Returns 0, or an errno: EALREADY when a capture is open already. */
int msms_agent_attach_running(const char* dir, const char* opts, const char* libs, const char* pypath,
                              uint64_t steps, int host_pid);

/* Ends the attach now, on the calling thread (the host's fallback when the
 * agent's thread did not answer a detach request). */
void msms_agent_attach_detach_now(void);

#ifdef __cplusplus
}
#endif

namespace msms::agent {
// msms_agent_step's: false once --attach-steps was reached (no later mark).
bool attach_step_allowed();
// msms_agent_step's: the n-th step mark was written.
void attach_step_done(uint64_t n);
// agent.cpp: stop collection and end the stream as "detached" (no status).
void end_stream_detached();
}  // namespace msms::agent
