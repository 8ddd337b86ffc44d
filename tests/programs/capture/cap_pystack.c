/* cap_pystack: installs a Python-stack provider through the agent's C API
 * (what the Python package does) and allocates 5151 bytes under a fake
 * three-frame Python stack, then 5252 bytes under a one-frame stack. The
 * agent is found with dlsym (it is preloaded by the CLI). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef uint64_t (*intern_fn)(const char*);
typedef uint32_t (*provider_fn)(uint64_t*, uint32_t);
typedef void (*set_provider_fn)(provider_fn);

static intern_fn g_intern;
static int g_phase;

static uint32_t provider(uint64_t* out, uint32_t max) {
    static const char* deep[] = {"train.py(30): step", "model.py(12): forward", "layers.py(7): alloc"};
    static const char* shallow[] = {"main.py(1): <module>"};
    const char** f = g_phase == 0 ? deep : shallow;
    uint32_t n = g_phase == 0 ? 3 : 1;
    if (n > max) n = max;
    for (uint32_t i = 0; i < n; ++i) out[i] = g_intern(f[i]);
    return n;
}

int main(void) {
    g_intern = (intern_fn)dlsym(RTLD_DEFAULT, "msms_agent_intern");
    set_provider_fn set = (set_provider_fn)dlsym(RTLD_DEFAULT, "msms_agent_set_python_stack_provider");
    if (!g_intern || !set) return 3;
    set(provider);
    void* volatile a = malloc(5151);
    g_phase = 1;
    void* volatile b = malloc(5252);
    free(a);
    free(b);
    return 0;
}
