/* ckpt.c — checkpoints a run writes: the llm.c model file after training
 * (--save).
 */
#include <stdio.h>

#include "gc_runtime_internal.h"

int gcrt_save_final(gcrt_run *st)
{
    const gc_program *p = st->prog;
    char err[512];
    if (p->nparam_elems)
        gc_device_download(st->params, st->ctx.region[GC_REGION_PARAMS], (size_t)p->nparam_elems * 4);
    if (gcrt_ckpt_save(st->o.save, p, st->params, err, sizeof err) != 0)
        return gcrt_errorf("%s", err);
    printf("saved %s (%lld bytes)\n", st->o.save, GCRT_HEADER_BYTES + 4LL * p->nparam_elems);
    return 0;
}
