/* The bundled example: a small "training loop" in C on the cpu device.
 * Each step allocates activations and a gradient buffer, frees them, and one
 * cache buffer per step is kept on purpose (a leak for the demo to find). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 8

static void* layer_forward(size_t n) {
    float* act = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; ++i) act[i] = (float)i * 0.5f;
    return act;
}

int main(void) {
    void* weights = malloc(64 * 1024);
    void* cache[STEPS];
    memset(weights, 0, 64 * 1024);
    for (int step = 0; step < STEPS; ++step) {
        void* a1 = layer_forward(4096);
        void* a2 = layer_forward(2048);
        void* grad = calloc(4096, sizeof(float));
        cache[step] = malloc(1000 + step); /* kept: grows every step */
        free(grad);
        free(a2);
        free(a1);
    }
    printf("demo: trained %d steps\n", STEPS);
    free(weights);
    return 0;
}
