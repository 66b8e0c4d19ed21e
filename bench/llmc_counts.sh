#!/bin/sh
# llmc_counts.sh [B T] — kernel launches and bytes moved per training step of
# llm.c's train_gpt2.cu (GPT-2 124M, bf16), worked out by hand from its
# kernels: the default build (no cuDNN: attention as permute, two cuBLAS
# matmuls, softmax, unpermute), recompute=1 (GELU recomputed in backward),
# gelu_fusion=0, one GPU, no gradient accumulation, grad-norm every step,
# bf16 parameters and gradients, fp32 master weights and AdamW state (one
# adamw launch per parameter tensor, 16). A cudaMemset counts as a launch.
#
# Bytes, by the rule gcompile's op_bytes uses: each kernel reads each of its
# inputs once and writes each output once (a += output: read and written);
# a matmul reads A and B and writes D (reading C too when it accumulates);
# scratch and L2 reuse are ignored. H100 figures where a launch shape
# depends on the device (matmul_backward_bias: 2 kernels when grid_size_y > 1).
set -eu
B=${1:-8} T=${2:-1024}
awk -v B="$B" -v T="$T" 'BEGIN {
    C = 768; NH = 12; L = 12; Vp = 50304; P = 124475904
    BT = B * T
    X = BT * C * 2            # a (B,T,C) bf16 tensor
    A = B * NH * T * T * 2    # the (B,NH,T,T) attention matrix
    LG = BT * Vp * 2          # the logits
    ST = BT * 4 * 2           # layernorm mean + rstd (fp32)
    W = Vp * C * 2            # wte (bf16)
    # kernel(name, launches, bytes)
    # ---- forward
    k("encoder_forward", 1, 3 * X + BT * 4)
    k("layernorm_forward (ln1 of layer 0)", 1, 2 * X + 4 * C + ST)
    for (l = 0; l < L; l++) {
        k("matmul qkv + bias", 1, X + 6 * C * C + 6 * C + 3 * X)
        k("attention: permute", 1, 6 * X)
        k("attention: matmul q k^T", 1, 2 * X + A)
        k("attention: softmax_forward", 1, 2 * A)
        k("attention: matmul att v", 1, A + 2 * X)
        k("attention: unpermute", 1, 2 * X)
        k("matmul attproj + bias", 1, 2 * X + 2 * C * C + 2 * C)
        k("fused_residual_forward (ln2)", 1, 4 * X + 4 * C + ST)
        k("matmul fc + bias (pre-gelu)", 1, X + 8 * C * C + 8 * C + 4 * X)
        k("gelu_forward", 1, 8 * X)
        k("matmul fcproj + bias", 1, 4 * X + 8 * C * C + 2 * C + X)
        k("fused_residual_forward (next ln1 / lnf)", 1, 4 * X + 4 * C + ST)
    }
    k("matmul classifier", 1, X + W + LG)
    # ---- backward
    k("fused_classifier (loss + dlogits in place)", 1, 2 * LG + BT * 8)
    k("memset dresidual", 1, X)
    k("matmul_backward classifier: dinp", 1, LG + W + X)
    k("matmul_backward classifier: dwte (+=)", 1, LG + X + 2 * W)
    k("layernorm_backward lnf (memset + kernel)", 2, 4 * X + ST + 8 * C)
    for (l = 0; l < L; l++) {
        k("gelu_forward (recompute)", 1, 8 * X)
        k("fcproj: bias grad (kernel9 + reduce)", 2, X + 4 * C)
        k("fcproj: dinp", 1, X + 8 * C * C + 4 * X)
        k("fcproj: gelu_backward_inplace", 1, 12 * X)
        k("fcproj: dweight (+=)", 1, 5 * X + 16 * C * C)
        k("fc: bias grad", 2, 4 * X + 16 * C)
        k("fc: dinp", 1, 4 * X + 8 * C * C + X)
        k("fc: dweight (+=)", 1, 5 * X + 16 * C * C)
        k("layernorm_backward ln2", 2, 4 * X + ST + 8 * C)
        k("attproj: bias grad", 2, X + 4 * C)
        k("attproj: dinp", 1, 2 * X + 2 * C * C)
        k("attproj: dweight (+=)", 1, 2 * X + 4 * C * C)
        k("attention: unpermute backward", 1, 2 * X)
        k("attention: matmul datt", 1, 2 * X + A)
        k("attention: matmul dv", 1, A + 2 * X)
        k("attention: softmax_autoregressive_backward", 1, 3 * A)
        k("attention: matmul dq", 1, A + 2 * X)
        k("attention: matmul dk", 1, A + 2 * X)
        k("attention: permute backward", 1, 6 * X)
        k("qkv: bias grad", 2, 3 * X + 12 * C)
        k("qkv: dinp", 1, 3 * X + 6 * C * C + X)
        k("qkv: dweight (+=)", 1, 4 * X + 12 * C * C)
        k("layernorm_backward ln1", 2, 4 * X + ST + 8 * C)
    }
    k("encoder_backward (wte, wpe)", 2, 4 * X + BT * 4)
    k("global_sum_deterministic (loss)", 1, BT * 4)
    # ---- update
    k("global_norm_squared + global_sum", 2, 2 * P)
    k("adamw_update (16 parameter tensors)", 16, 28 * P)
    k("zero_grad (memset grads, losses)", 2, 2 * P + BT * 4)
    printf "llm.c train_gpt2.cu, GPT-2 124M bf16, B=%d T=%d: %d launches/step, %.0f bytes moved/step (%.2f GB)\n", B, T, nl, nb, nb / 1e9
}
function k(name, n, bytes) { nl += n; nb += bytes }'
