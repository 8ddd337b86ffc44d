// The pool's own function, for a collector's hook (its target-side library).
//
// Under the CLI the hook library is preloaded and dlsym(RTLD_NEXT, name) is
// the next definition. Under the Python API (msmemscope.start() without the
// CLI) the package loads the hook library into the running process and
// patches the callers' GOT slots to it (issue #29 item 7): RTLD_NEXT then
// finds nothing, because the library is nobody's dependency. next_definition
// tries RTLD_NEXT, then every loaded object (dl_iterate_phdr) other than the
// hook's own, and returns the first definition of `name` that is not `self`.
//
//     extern "C" void* mypool_alloc(size_t n);   // the pool's function (C linkage)
//     using alloc_fn = void* (*)(size_t);
//     void* mypool_alloc(size_t n) {              // the hook: the same name, C linkage from above
//         static auto next = msmemscope::next_definition<alloc_fn>("mypool_alloc", &mypool_alloc);
//         void* p = next(n);
//         // ... record p, n ...
//         return p;
//     }
//
// Call it once (a function-local static), not on every call: it takes the
// loader's lock.
#pragma once

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>
#include <link.h>

namespace msmemscope {

namespace detail {
struct NextSearch {
    const char* name;
    const void* self;
    const char* self_path;
    void* found;
};
inline int next_in_object(struct dl_phdr_info* info, size_t, void* data) {
    auto* s = static_cast<NextSearch*>(data);
    if (s->found || !info->dlpi_name || !info->dlpi_name[0]) return 0;
    if (s->self_path && __builtin_strcmp(info->dlpi_name, s->self_path) == 0) return 0;
    void* h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return 0;
    void* f = dlsym(h, s->name);
    dlclose(h);
    if (f && f != s->self) s->found = f;
    return 0;
}
}  // namespace detail

template <class F>
F next_definition(const char* name, F self) {
    const void* me = reinterpret_cast<const void*>(self);
    void* f = dlsym(RTLD_NEXT, name);
    if (f && f != me) return reinterpret_cast<F>(f);
    Dl_info info{};
    detail::NextSearch s{name, me, dladdr(me, &info) ? info.dli_fname : nullptr, nullptr};
    dl_iterate_phdr(&detail::next_in_object, &s);
    return reinterpret_cast<F>(s.found);
}

}  // namespace msmemscope
