/*
 * icount: a QEMU TCG plugin (qemu-user 7.2 and later) that counts the guest
 * instructions a run executes, in total and per function.
 *
 *   qemu-aarch64 -plugin ./libicount.so,outfile=counts.txt -cpu max ml run ...
 *
 * At exit it writes `outfile` (default: stderr through qemu's log):
 *   total <N>
 *   <N>\t<symbol>      one line per function that ran, any order
 * Symbols are the guest executable's own (qemu_plugin_insn_symbol, mangled
 * as in its symbol table); code outside it (the dynamic loader, libc when
 * linked dynamically) is counted under "?".
 *
 * Counting is per translation block: when a block is translated, each run
 * of its instructions that belongs to one function gets an inline
 * "add <run length>" on that function's counter, executed every time the
 * block runs. Inline additions are not atomic: count a single-threaded run
 * (the harness runs `ml` with --threads 1), and the total is exact and the
 * same on every run of the same binary and inputs.
 *
 * Debian ships no header for the plugin API, so the handful of declarations
 * it needs are written out below, as QEMU's include/qemu/qemu-plugin.h
 * (API version 1, QEMU 7.2) defines them; later versions keep them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 = 0 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

#define QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
QEMU_PLUGIN_EXPORT int qemu_plugin_version = 1;

extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
extern void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                                     void *ptr, uint64_t imm);
extern void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
extern const char *qemu_plugin_insn_symbol(const struct qemu_plugin_insn *insn);
extern void qemu_plugin_outs(const char *string);

/* One counter per function, in a hash table keyed by the symbol string
 * qemu hands out (its own, stable for the run). Entries never move, so
 * their counters can be inline-add targets. */
struct entry {
    const char *symbol; /* NULL: free slot */
    uint64_t count;
};

#define SLOTS (1u << 16) /* ml has a few thousand functions */
static struct entry table[SLOTS];
static struct entry unknown = {"?", 0};
static char *outfile;

static struct entry *lookup(const char *symbol)
{
    if (symbol == NULL || symbol[0] == '\0') {
        return &unknown;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *c = symbol; *c; c++) {
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    }
    for (uint32_t i = 0; i < SLOTS; i++) {
        struct entry *e = &table[(h + i) & (SLOTS - 1)];
        if (e->symbol == NULL) {
            e->symbol = symbol;
            return e;
        }
        if (e->symbol == symbol || strcmp(e->symbol, symbol) == 0) {
            return e;
        }
    }
    return &unknown; /* table full: still counted in the total */
}

static void translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    size_t start = 0;
    struct entry *run = NULL;
    for (size_t i = 0; i < n; i++) {
        struct entry *e = lookup(qemu_plugin_insn_symbol(qemu_plugin_tb_get_insn(tb, i)));
        if (e != run) {
            if (run != NULL) {
                qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &run->count, i - start);
            }
            run = e;
            start = i;
        }
    }
    if (run != NULL) {
        qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &run->count, n - start);
    }
}

static void report(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    uint64_t total = unknown.count;
    for (uint32_t i = 0; i < SLOTS; i++) {
        total += table[i].count;
    }
    FILE *f = outfile ? fopen(outfile, "w") : NULL;
    char line[4096];
    snprintf(line, sizeof line, "total %llu\n", (unsigned long long)total);
    if (f) {
        fputs(line, f);
    } else {
        qemu_plugin_outs(line);
    }
    for (uint32_t i = 0; i <= SLOTS; i++) {
        const struct entry *e = i < SLOTS ? &table[i] : &unknown;
        if (e->symbol == NULL || e->count == 0) {
            continue;
        }
        snprintf(line, sizeof line, "%llu\t%s\n", (unsigned long long)e->count, e->symbol);
        if (f) {
            fputs(line, f);
        } else {
            qemu_plugin_outs(line);
        }
    }
    if (f) {
        fclose(f);
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "arg=", 4) == 0) { /* qemu before 6.1 wrapped arguments */
            a += 4;
        }
        if (strncmp(a, "outfile=", 8) == 0) {
            outfile = strdup(a + 8);
        } else {
            fprintf(stderr, "icount: unknown argument %s (expected outfile=PATH)\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, translate);
    qemu_plugin_register_atexit_cb(id, report, NULL);
    return 0;
}
