// How a process ended by a signal (issue: a pool's terminate(), a pipeline's
// SIGPIPE, a fault): the agent's handler notes the signal in the capture's
// header, then lets the signal's default action happen. Installed only where
// the program keeps the default disposition, and never visible to it: the
// agent, preloaded, answers the program's sigaction()/signal() (and
// bsd_signal, sysv_signal, sigset, sigignore) for these
// signals as if the default were there (so that code which saves a handler and
// puts it back, or installs its own only over the default, behaves as
// without msmemscope); setting the default keeps the agent's handler, setting
// anything else replaces it. A raw rt_sigaction system call passes by (the
// agent's handler is then replaced without the agent knowing).
#pragma once

namespace msms::agent {

// Once, when the capture opens (the handlers are inherited by a fork).
// Where the agent was not preloaded (--attach, the Python API in a running
// interpreter) its sigaction() does not stand in front of libc's, so only the
// faults' handlers are installed there, as before.
void install_end_signal_handlers();

}  // namespace msms::agent
