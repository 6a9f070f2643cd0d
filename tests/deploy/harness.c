/* A C program that runs a model exported by `kiln compile --c-api`, with no Python.

   Build: cc -O2 -DKILN_PREFIX=model -DKILN_HEADER='"model.h"' -I DIR harness.c \
             -L DIR -lmodel -Wl,-rpath,DIR -o harness
   Usage: harness DIR THREADS MODE [WEIGHTS_FILE]
     MODE run:      read DIR/in<k>.bin, run, write DIR/out<k>.bin and DIR/maps.txt (this
                    process's memory maps, taken while the thread pool is alive)
     MODE bench:N   run N times after a warm-up; print the median microseconds of one run
     MODE errors:   call the API wrongly on purpose; print "<case> <code> <message>" lines
   Exit status 0 on success; messages on stderr otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include KILN_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define API(name) CAT(KILN_PREFIX, name)

static void* read_file(const char* path, size_t want) {
    FILE* f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    void* buf = aligned_alloc(64, want ? (want + 63) / 64 * 64 : 64);
    size_t got = fread(buf, 1, want, f);
    if (got != want || fgetc(f) != EOF) {
        fprintf(stderr, "%s: expected %zu bytes\n", path, want); exit(2);
    }
    fclose(f);
    return buf;
}

static void write_file(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) { fprintf(stderr, "cannot write %s\n", path); exit(2); }
    fclose(f);
}

static void copy_maps(const char* path) {
    FILE* in = fopen("/proc/self/maps", "r");
    FILE* out = fopen(path, "w");
    if (!in || !out) { fprintf(stderr, "cannot copy /proc/self/maps\n"); exit(2); }
    char line[4096];
    while (fgets(line, sizeof line, in)) fputs(line, out);
    fclose(in);
    fclose(out);
}

/* the Threads: line of /proc/self/status */
static int thread_count(void) {
    FILE* f = fopen("/proc/self/status", "r");
    char line[512];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0) n = atoi(line + 8);
    if (f) fclose(f);
    return n;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static void report(const char* what, int32_t code) {
    printf("%s %d %s\n", what, code, API(_error_message)(code));
}

int main(int argc, char** argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s DIR THREADS MODE [WEIGHTS]\n", argv[0]); return 2; }
    const char* dir = argv[1];
    const char* mode = argv[3];
    char path[4096];
    if (API(_abi_version)() != CAT(KILN_PREFIX_UPPER, _ABI_VERSION)) {
        fprintf(stderr, "ABI version mismatch\n"); return 2;
    }
#if !CAT(KILN_PREFIX_UPPER, _WEIGHTS_EMBEDDED)
    if (argc < 5) { fprintf(stderr, "this model's weights are in a side file: pass it\n"); return 2; }
    {
        void* blob = read_file(argv[4], CAT(KILN_PREFIX_UPPER, _WEIGHTS_BYTES));
        int32_t rc = API(_set_weights)(blob, CAT(KILN_PREFIX_UPPER, _WEIGHTS_BYTES));
        if (rc) { report("set_weights", rc); return 1; }
    }
#endif
    int32_t rc = API(_set_num_threads)(atoi(argv[2]));
    if (rc) { report("set_num_threads", rc); return 1; }

    enum { NI = CAT(KILN_PREFIX_UPPER, _NUM_INPUTS), NO = CAT(KILN_PREFIX_UPPER, _NUM_OUTPUTS) };
    const void* inputs[NI > 0 ? NI : 1];
    void* outputs[NO > 0 ? NO : 1];
    size_t in_bytes[NI > 0 ? NI : 1], out_bytes[NO > 0 ? NO : 1];
    for (int k = 0; k < NI; ++k) {
        snprintf(path, sizeof path, "%s/in%d.bin", dir, k);
        in_bytes[k] = API(_input_bytes)[k];
        inputs[k] = read_file(path, in_bytes[k]);
    }
    for (int k = 0; k < NO; ++k) {
        out_bytes[k] = API(_output_bytes)[k];
        outputs[k] = aligned_alloc(64, out_bytes[k] ? (out_bytes[k] + 63) / 64 * 64 : 64);
    }
    size_t ws_bytes = API(_workspace_bytes)();
    void* workspace = ws_bytes ? malloc(ws_bytes) : NULL;

    if (strcmp(mode, "run") == 0) {
        rc = API(_run_checked)(inputs, in_bytes, outputs, out_bytes, workspace, ws_bytes);
        if (rc) { report("run", rc); return 1; }
        for (int k = 0; k < NO; ++k) {
            snprintf(path, sizeof path, "%s/out%d.bin", dir, k);
            write_file(path, outputs[k], out_bytes[k]);
        }
        snprintf(path, sizeof path, "%s/maps.txt", dir);
        copy_maps(path);
        printf("threads %d\n", thread_count());
        rc = API(_shutdown)();
        if (rc) { report("shutdown", rc); return 1; }
        /* the workers have left the pool; give them a moment to leave the process */
        for (int i = 0; i < 200 && thread_count() > 1; ++i) {
            struct timespec pause = {0, 5000000};
            nanosleep(&pause, NULL);
        }
        printf("threads_after_shutdown %d\n", thread_count());
        printf("ok\n");
        return 0;
    }
    if (strncmp(mode, "bench:", 6) == 0) {
        int n = atoi(mode + 6);
        double* t = malloc(sizeof(double) * (n > 0 ? n : 1));
        rc = API(_run)(inputs, outputs, workspace);
        if (rc) { report("run", rc); return 1; }
        for (int i = 0; i < n; ++i) {
            double start = now_us();
            API(_run)(inputs, outputs, workspace);
            t[i] = now_us() - start;
        }
        qsort(t, n, sizeof(double), cmp_double);
        printf("median_us %.3f\n", t[n / 2]);
        API(_shutdown)();
        return 0;
    }
    if (strcmp(mode, "errors") == 0) {
        report("null_inputs", API(_run)(NULL, outputs, workspace));
        report("null_outputs", API(_run)(inputs, NULL, workspace));
        if (NI > 0) {
            const void* saved = inputs[0];
            inputs[0] = NULL;
            report("null_entry", API(_run)(inputs, outputs, workspace));
            inputs[0] = saved;
        }
        report("null_workspace", API(_run)(inputs, outputs, ws_bytes ? NULL : workspace));
        if (NI > 0) {
            in_bytes[0] -= 1;
            report("input_size", API(_run_checked)(inputs, in_bytes, outputs, out_bytes,
                                                   workspace, ws_bytes));
            in_bytes[0] += 1;
        }
        out_bytes[0] += 4;
        report("output_size", API(_run_checked)(inputs, in_bytes, outputs, out_bytes,
                                                workspace, ws_bytes));
        out_bytes[0] -= 4;
        report("workspace_size", API(_run_checked)(inputs, in_bytes, outputs, out_bytes,
                                                   workspace, ws_bytes ? ws_bytes - 1 : 0));
        report("null_sizes", API(_run_checked)(inputs, NULL, outputs, out_bytes, workspace,
                                               ws_bytes));
        if (NI > 0) {
            void* saved = outputs[0];
            outputs[0] = (void*)inputs[0];
            report("overlap", API(_run)(inputs, outputs, workspace));
            outputs[0] = saved;
        }
        report("threads_zero", API(_set_num_threads)(0));
        report("good_run", API(_run)(inputs, outputs, workspace));
        report("shutdown", API(_shutdown)());
        report("run_after_shutdown", API(_run)(inputs, outputs, workspace));
        report("checked_after_shutdown", API(_run_checked)(inputs, in_bytes, outputs,
                                                           out_bytes, workspace, ws_bytes));
        report("threads_after_shutdown", API(_set_num_threads)(2));
        report("unknown_code", 12345);
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
