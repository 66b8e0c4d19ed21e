/* loader.c — the training data of a run: which tokens each step trains on,
 * and where that stream stands (saved in a checkpoint, restored on resume).
 *
 * One shard (--data FILE, or the built-in corpus) read sequentially in
 * batches of B*T+1 tokens that advance by B*T and wrap (llm.c's loader).
 */
#include <stdio.h>

#include "gc_runtime_internal.h"

int gcrt_data_open(gcrt_run *st)
{
    const gc_program *p = st->prog;
    char err[512];
    int rc;
    if (st->o.data) {
        rc = gcrt_shard_open(&st->train, st->o.data, st->BT + 1, p->V, err, sizeof err);
    } else {
        if (p->V < 256)
            return gcrt_errorf("the built-in corpus is byte-level and needs V >= 256, but this program has V = %ld; "
                          "pass --data FILE or compile with V >= 256", p->V);
        size_t n;
        const char *text = gcrt_corpus(&n);
        rc = gcrt_shard_from_text(&st->train, "built-in corpus", text, n, st->BT + 1, p->V, err, sizeof err);
    }
    if (rc == 0 && st->o.val_data) {
        rc = gcrt_shard_open(&st->val, st->o.val_data, st->BT + 1, p->V, err, sizeof err);
        st->have_val = rc == 0;
    }
    if (rc != 0)
        return gcrt_errorf("%s", err);
    printf("data: %s (%ld tokens, %ld batches of B*T = %ld)\n", st->train.name, st->train.ntok,
           gcrt_shard_nbatches(&st->train, st->BT), st->BT);
    if (st->have_val)
        printf("val data: %s (%ld tokens, %ld batches)\n", st->val.name, st->val.ntok,
               gcrt_shard_nbatches(&st->val, st->BT));
    return 0;
}

void gcrt_data_next(gcrt_run *st)
{
    gcrt_shard_next(&st->train, st->inputs, st->targets, st->BT);
}

void gcrt_data_position(const gcrt_run *st, gcrt_state *s)
{
    s->data_epoch = 0;
    s->data_pos = st->train.pos;
}

int gcrt_data_seek(gcrt_run *st, const gcrt_state *s)
{
    if (s->data_pos + st->BT + 1 > st->train.ntok)
        return gcrt_errorf("resume: the checkpoint's data position %lld lies past the last batch of %s (%ld tokens); "
                           "resume with the --data it was trained on", s->data_pos, st->train.name, st->train.ntok);
    st->train.pos = (long)s->data_pos;
    return 0;
}
