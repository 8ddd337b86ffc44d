/* cap_stack: known call chains for C stack tests.
 * main -> level_a -> level_b -> leaf_alloc: malloc(4242) (kept, freed in main)
 * main -> other_path -> leaf_alloc2: malloc(4343), freed there. */
#include <stdlib.h>

__attribute__((noinline)) void* leaf_alloc(void) { return malloc(4242); }
__attribute__((noinline)) void* level_b(void) { return leaf_alloc(); }
__attribute__((noinline)) void* level_a(void) { return level_b(); }
__attribute__((noinline)) void leaf_alloc2(void) {
    void* volatile p = malloc(4343);
    free(p);
}
__attribute__((noinline)) void other_path(void) { leaf_alloc2(); }

int main(void) {
    void* p = level_a();
    other_path();
    free(p);
    return 0;
}
