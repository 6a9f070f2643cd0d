/* Two threads run the same model at once, each with its own workspace and outputs, as the
   header allows: every run must give the bytes a lone run gives.
   Build as harness.c (-DKILN_PREFIX, -DKILN_PREFIX_UPPER, -DKILN_HEADER) plus -lpthread.
   Usage: concurrent DIR THREADS RUNS (inputs DIR/in<k>.bin); prints "ok" or what differed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include KILN_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define API(name) CAT(KILN_PREFIX, name)
enum { NI = CAT(KILN_PREFIX_UPPER, _NUM_INPUTS), NO = CAT(KILN_PREFIX_UPPER, _NUM_OUTPUTS) };

static const void* inputs[NI > 0 ? NI : 1];
static void* expected[NO > 0 ? NO : 1];
static int runs;

static void* run_many(void* arg) {
    void* outputs[NO > 0 ? NO : 1];
    for (int k = 0; k < NO; ++k) outputs[k] = malloc(API(_output_bytes)[k] + 1);
    void* workspace = malloc(API(_workspace_bytes)() + 1);
    long bad = 0;
    for (int i = 0; i < runs; ++i) {
        if (API(_run)(inputs, outputs, workspace) != 0) { bad = 1000000; break; }
        for (int k = 0; k < NO; ++k)
            bad += memcmp(outputs[k], expected[k], API(_output_bytes)[k]) != 0;
    }
    (void)arg;
    return (void*)bad;
}

int main(int argc, char** argv) {
    if (argc < 4) return 2;
    char path[4096];
    for (int k = 0; k < NI; ++k) {
        size_t n = API(_input_bytes)[k];
        void* buf = malloc(n + 1);
        snprintf(path, sizeof path, "%s/in%d.bin", argv[1], k);
        FILE* f = fopen(path, "rb");
        if (!f || fread(buf, 1, n, f) != n) { fprintf(stderr, "bad %s\n", path); return 2; }
        fclose(f);
        inputs[k] = buf;
    }
    runs = atoi(argv[3]);
    if (API(_set_num_threads)(atoi(argv[2]))) return 2;
    for (int k = 0; k < NO; ++k) expected[k] = malloc(API(_output_bytes)[k] + 1);
    void* workspace = malloc(API(_workspace_bytes)() + 1);
    if (API(_run)(inputs, expected, workspace)) return 2;
    pthread_t a, b;
    void *ra, *rb;
    pthread_create(&a, NULL, run_many, NULL);
    pthread_create(&b, NULL, run_many, NULL);
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    if (ra || rb) { printf("differed: %ld %ld\n", (long)ra, (long)rb); return 1; }
    printf("ok\n");
    return API(_shutdown)();
}
