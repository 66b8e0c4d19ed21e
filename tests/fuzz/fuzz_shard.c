/* fuzz_shard.c — the runtime's token-shard readers: gcrt_shard_open (the
 * llm.c tokens file: header, exact size, every token < V) on any bytes, then
 * a few batches; and gcrt_shard_from_text (byte-level tokens) on the same
 * bytes. Any input either opens or returns a one-line error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gc_runtime_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    /* need and V from the first bytes, so small and large ones are tried */
    long need = size > 0 ? 2 + data[0] % 64 : 9, V = size > 1 ? (data[1] % 2 ? 50257 : 256) : 256;
    char err[512] = "";
    for (int kind = 0; kind < 2; kind++) {
        gcrt_shard s;
        err[0] = '\0';
        int rc = kind == 0 ? gcrt_shard_open(&s, path, need, V, err, sizeof err)
                           : gcrt_shard_from_text(&s, "fuzz.txt", (const char *)data, size, need, V, err, sizeof err);
        if (rc != 0) {
            if (!err[0])
                abort();            /* an error must say why */
            continue;
        }
        long BT = need - 1;         /* the trainer's contract: need = B*T + 1 */
        int32_t *in = malloc((size_t)BT * sizeof *in), *tg = malloc((size_t)BT * sizeof *tg);
        for (int b = 0; b < 3; b++) {
            gcrt_shard_next(&s, in, tg, BT);
            for (long i = 0; i < BT; i++)
                if (in[i] < 0 || in[i] >= V || tg[i] < 0 || tg[i] >= V)
                    abort();
        }
        if (gcrt_shard_nbatches(&s, BT) < 1)
            abort();
        free(in);
        free(tg);
        gcrt_shard_close(&s);
    }
    return 0;
}
