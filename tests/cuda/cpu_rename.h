/* cpu_rename.h — force-included (-include) when tests/cuda compiles
 * runtime/kernels_cpu.c into the same program as the CUDA kernels: the CPU
 * kernels become cpu_<name>, the reference the CUDA ones are compared with. */
#define gc_matmul cpu_matmul
#define gc_matmul_bias cpu_matmul_bias
#define gc_matmul_bias_gelu cpu_matmul_bias_gelu
#define gc_matmul_dgelu cpu_matmul_dgelu
#define gc_matmul_dgelu_bgrad cpu_matmul_dgelu_bgrad
#define gc_reduce_rows cpu_reduce_rows
#define gc_embedding_fwd cpu_embedding_fwd
#define gc_embedding_bwd cpu_embedding_bwd
#define gc_layernorm_fwd cpu_layernorm_fwd
#define gc_add_layernorm_fwd cpu_add_layernorm_fwd
#define gc_layernorm_bwd cpu_layernorm_bwd
#define gc_permute cpu_permute
#define gc_softmax_fwd cpu_softmax_fwd
#define gc_softmax_bwd cpu_softmax_bwd
#define gc_causal_mask_fwd cpu_causal_mask_fwd
#define gc_causal_mask_bwd cpu_causal_mask_bwd
#define gc_crossentropy_fwd cpu_crossentropy_fwd
#define gc_crossentropy_bwd cpu_crossentropy_bwd
#define gc_fill cpu_fill
#define gc_adamw cpu_adamw
#define gc_poison cpu_poison
#define gc_adamw_multi cpu_adamw_multi
#define gc_attention_fwd cpu_attention_fwd
#define gc_attention_bwd cpu_attention_bwd
#define gc_attention_gqa_fwd cpu_attention_gqa_fwd
#define gc_attention_gqa_bwd cpu_attention_gqa_bwd
#define gc_classifier cpu_classifier
#define gc_rmsnorm_fwd cpu_rmsnorm_fwd
#define gc_add_rmsnorm_fwd cpu_add_rmsnorm_fwd
#define gc_rmsnorm_bwd cpu_rmsnorm_bwd
#define gc_rope cpu_rope
#define gc_swiglu_bwd cpu_swiglu_bwd
