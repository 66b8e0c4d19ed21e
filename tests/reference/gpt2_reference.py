#!/usr/bin/env python3
"""From-scratch PyTorch reference for gcompile's GPT-2 training program.

A developer tool (CI has no PyTorch). Three subcommands:

  make     write a seeded llm.c-format checkpoint (version 3, fp32) and a
           seeded token shard, neither of which is in the repo
  run      train a plain PyTorch GPT-2, llm.c's formulation, from that
           checkpoint on that shard with the emitted program's data order and
           llm.c's AdamW written out by hand; print one loss per step
  compare  build the program with gcompile (-D for the dims), run it and the
           reference, print a per-step table with |diff| and PASS/FAIL

Formats (shared/DESIGN.md, "File formats"), little-endian, 256 x int32 header:
  model:  [20240326, 3, maxT, V, L, NH, C, Vp], fp32 params in llm.c order
  tokens: [20240520, 1, ntok], then ntok uint16

Example:
  python3 tests/reference/gpt2_reference.py compare --work /tmp/gcref
"""

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

MODEL_MAGIC, MODEL_VERSION = 20240326, 3
TOKEN_MAGIC, TOKEN_VERSION = 20240520, 1
HEADER_INTS = 256

# Dims of the default shape: small but not trivial, V != Vp on purpose.
DEFAULT_DIMS = dict(L=2, NH=4, C=64, V=500, Vp=512, maxT=64, T=32, B=4)


def param_shapes(d):
    """llm.c's parameter order and layer-stacked shapes."""
    L, C, Vp, maxT = d["L"], d["C"], d["Vp"], d["maxT"]
    return [
        ("wte", (Vp, C)), ("wpe", (maxT, C)),
        ("ln1w", (L, C)), ("ln1b", (L, C)),
        ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)),
        ("attprojw", (L, C, C)), ("attprojb", (L, C)),
        ("ln2w", (L, C)), ("ln2b", (L, C)),
        ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
        ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
        ("lnfw", (C,)), ("lnfb", (C,)),
    ]


# llm.c decays the matrices only (train_gpt2.cu: wte, wpe, qkvw, attprojw,
# fcw, fcprojw), not the biases and layernorm weights; models/gpt2.graph
# marks those `nodecay`.
DECAYED = ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw")


def decay_mask(d):
    """1.0 for every element llm.c decays, 0.0 elsewhere, flat in llm.c order."""
    return np.concatenate([np.full(int(np.prod(shape)), 1.0 if name in DECAYED else 0.0)
                           for name, shape in param_shapes(d)])


# ------------------------------------------------------------------ files

def write_checkpoint(path, d, params):
    hdr = np.zeros(HEADER_INTS, dtype="<i4")
    hdr[:8] = [MODEL_MAGIC, MODEL_VERSION, d["maxT"], d["V"], d["L"], d["NH"], d["C"], d["Vp"]]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        for name, shape in param_shapes(d):
            a = np.ascontiguousarray(params[name], dtype="<f4")
            assert a.shape == shape, (name, a.shape, shape)
            f.write(a.tobytes())


def read_checkpoint(path):
    raw = open(path, "rb").read()
    hdr = np.frombuffer(raw[:HEADER_INTS * 4], dtype="<i4")
    if hdr[0] != MODEL_MAGIC or hdr[1] != MODEL_VERSION:
        sys.exit(f"{path}: not an fp32 llm.c checkpoint (magic {hdr[0]}, version {hdr[1]})")
    maxT, V, L, NH, C, Vp = (int(x) for x in hdr[2:8])
    d = dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)
    flat = np.frombuffer(raw[HEADER_INTS * 4:], dtype="<f4")
    n = sum(int(np.prod(s)) for _, s in param_shapes(d))
    if flat.size != n:
        sys.exit(f"{path}: {flat.size} floats, expected {n}")
    return d, flat.copy()


def write_tokens(path, toks):
    hdr = np.zeros(HEADER_INTS, dtype="<i4")
    hdr[:3] = [TOKEN_MAGIC, TOKEN_VERSION, len(toks)]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(np.asarray(toks, dtype="<u2").tobytes())


def read_tokens(path):
    raw = open(path, "rb").read()
    hdr = np.frombuffer(raw[:HEADER_INTS * 4], dtype="<i4")
    if hdr[0] != TOKEN_MAGIC or hdr[1] != TOKEN_VERSION:
        sys.exit(f"{path}: not a token shard")
    ntok = int(hdr[2])
    toks = np.frombuffer(raw[HEADER_INTS * 4:], dtype="<u2")
    if toks.size != ntok:
        sys.exit(f"{path}: header says {ntok} tokens, file holds {toks.size}")
    return toks.astype(np.int64)


# ------------------------------------------------------------------ make

def make_params(d, seed, wscale=1.0):
    """GPT-2-like init, but with every parameter kind non-trivial: layernorm
    weights ~1 with noise, biases small random, so every gradient matters.
    wscale multiplies the std of every weight matrix (wte, wpe, qkvw,
    attprojw, fcw, fcprojw): > 1 drives activations (GELU inputs, attention
    scores, logits) to O(1) and the loss away from ln(V), which makes the
    check sensitive to small formula differences."""
    rng = np.random.default_rng(seed)
    L, V = d["L"], d["V"]
    res = 0.02 / math.sqrt(2 * L)
    spec = dict(
        wte=("n", 0.02), wpe=("n", 0.01),
        ln1w=("one", 0.1), ln1b=("n", 0.02),
        qkvw=("n", 0.02), qkvb=("n", 0.02),
        attprojw=("n", res), attprojb=("n", 0.02),
        ln2w=("one", 0.1), ln2b=("n", 0.02),
        fcw=("n", 0.02), fcb=("n", 0.02),
        fcprojw=("n", res), fcprojb=("n", 0.02),
        lnfw=("one", 0.1), lnfb=("n", 0.02),
    )
    params = {}
    for name, shape in param_shapes(d):
        kind, s = spec[name]
        if name in ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"):
            s *= wscale
        a = rng.normal(0.0, s, size=shape)
        if kind == "one":
            a = a + 1.0
        params[name] = a.astype(np.float32)
    params["wte"][V:] = 0.0  # padded vocab rows are zero, as llm.c writes them
    return params


def make_tokens(V, ntok, seed):
    """A learnable but non-trivial sequence: a sparse random Markov chain
    (each token has 4 likely successors) with 10% uniform noise. Covers the
    whole range [0, V), V-1 included."""
    rng = np.random.default_rng(seed + 1)
    succ = rng.integers(0, V, size=(V, 4))
    toks = np.empty(ntok, dtype=np.int64)
    t = int(rng.integers(0, V))
    for i in range(ntok):
        toks[i] = t
        if rng.random() < 0.1:
            t = int(rng.integers(0, V))
        else:
            t = int(succ[t, rng.integers(0, 4)])
    toks[rng.integers(0, ntok)] = V - 1
    toks[rng.integers(0, ntok)] = 0
    return toks


def cmd_make(a):
    d = dims_from_args(a)
    os.makedirs(os.path.dirname(os.path.abspath(a.model)), exist_ok=True)
    write_checkpoint(a.model, d, make_params(d, a.seed, a.wscale))
    ntok = a.ntok if a.ntok else default_ntok(d)
    write_tokens(a.tokens, make_tokens(d["V"], ntok, a.seed))
    print(f"wrote {a.model} ({sum(int(np.prod(s)) for _, s in param_shapes(d))} params) "
          f"and {a.tokens} ({ntok} tokens)")


def default_ntok(d):
    # 11.7 batches: the loader wraps to 0 after batch 11, so a 20-step run
    # exercises the wrap.
    return int(d["B"] * d["T"] * 11.7)


# ------------------------------------------------------------------ run

def gpt2_loss(torch, F, P, d, inp, tgt):
    """llm.c's GPT-2 forward; P maps names to views of the flat parameters."""
    B, T = inp.shape
    L, NH, C, V = d["L"], d["NH"], d["C"], d["V"]
    hs = C // NH
    eps = 1e-5
    x = P["wte"][inp] + P["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), P["ln1w"][l], P["ln1b"][l], eps)
        qkv = h @ P["qkvw"][l].t() + P["qkvb"][l]                   # (B,T,3C)
        q, k, v = qkv.view(B, T, 3, NH, hs).permute(2, 0, 3, 1, 4)  # (B,NH,T,hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        y = y @ P["attprojw"][l].t() + P["attprojb"][l]
        x = x + y
        h = F.layer_norm(x, (C,), P["ln2w"][l], P["ln2b"][l], eps)
        h = F.gelu(h @ P["fcw"][l].t() + P["fcb"][l], approximate="tanh")
        h = h @ P["fcprojw"][l].t() + P["fcprojb"][l]
        x = x + h
    x = F.layer_norm(x, (C,), P["lnfw"], P["lnfb"], eps)
    logits = x @ P["wte"].t()                                        # (B,T,Vp)
    return F.cross_entropy(logits[..., :V].reshape(B * T, V), tgt.reshape(B * T))


def lr_at(i, steps, lr, warmup, schedule, final_frac):
    """llm.c's get_learning_rate; i is the 0-based step (docs/training.md)."""
    if i < warmup:
        return lr * (i + 1) / warmup
    if schedule == "constant" or steps <= warmup:
        return lr
    f = (i - warmup) / (steps - warmup)
    lo = lr * final_frac
    if schedule == "cosine":
        return lo + (0.5 + 0.5 * math.cos(math.pi * f)) * (lr - lo)
    return lr - f * (lr - lo)


def reference_losses(model, tokens, B, T, steps, lr, beta1=0.9, beta2=0.999, eps=1e-8,
                     wd=0.0, dtype="fp32", threads=1, verbose=False, warmup=0,
                     schedule="constant", final_frac=0.0, grad_clip=0.0):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.backends.mkldnn.enabled = False  # plain ATen CPU kernels
    tdt = {"fp32": torch.float32, "fp64": torch.float64}[dtype]

    d, flat_np = read_checkpoint(model)
    d.update(B=B, T=T)
    toks = torch.from_numpy(read_tokens(tokens))
    if T > d["maxT"]:
        sys.exit(f"T={T} > maxT={d['maxT']}")
    if toks.numel() < B * T + 1:
        sys.exit(f"{tokens}: {toks.numel()} tokens, need at least B*T+1 = {B * T + 1}")

    flat = torch.from_numpy(flat_np).to(tdt).requires_grad_(True)
    m = torch.zeros_like(flat, requires_grad=False)
    dmask = torch.from_numpy(decay_mask(d)).to(tdt)
    v = torch.zeros_like(flat, requires_grad=False)

    def views(t):
        P, off = {}, 0
        for name, shape in param_shapes(d):
            n = int(np.prod(shape))
            P[name] = t[off:off + n].view(shape)
            off += n
        return P

    # Scalars in the parameter dtype; bias corrections 1 - beta^t computed in
    # that dtype too (the program uses powf in float).
    sc = lambda x: torch.tensor(x, dtype=tdt)
    b1, b2, ob1, ob2 = sc(beta1), sc(beta2), sc(1.0) - sc(beta1), sc(1.0) - sc(beta2)
    teps, twd = sc(eps), sc(wd)

    BT, ntok, pos = B * T, toks.numel(), 0
    losses = []
    for step in range(1, steps + 1):
        chunk = toks[pos:pos + BT + 1]
        inp, tgt = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        pos += BT
        if pos + BT + 1 > ntok:
            pos = 0

        if flat.grad is not None:
            flat.grad = None
        t0 = time.time()
        loss = gpt2_loss(torch, F, views(flat), d, inp, tgt)
        loss.backward()
        g = flat.grad.detach()
        with torch.no_grad():
            # schedule: double, rounded once to the parameter dtype (the program: float)
            tlr = sc(float(np.float32(lr_at(step - 1, steps, lr, warmup, schedule, final_frac)))
                     if dtype == "fp32" else lr_at(step - 1, steps, lr, warmup, schedule, final_frac))
            # clipping by the global norm, summed in double like the program
            norm = float(g.double().pow(2).sum().sqrt())
            if grad_clip > 0 and norm > grad_clip:
                g = g * sc(float(np.float32(grad_clip / norm)) if dtype == "fp32" else grad_clip / norm)
            # llm.c's AdamW, written out.
            c1 = sc(1.0) - b1 ** step
            c2 = sc(1.0) - b2 ** step
            m.mul_(b1).add_(ob1 * g)
            v.mul_(b2).add_(ob2 * g * g)
            mhat = m / c1
            vhat = v / c2
            flat.sub_(tlr * (mhat / (vhat.sqrt() + teps) + twd * dmask * flat))
        losses.append(float(loss.item()))
        if verbose:
            print(f"step {step:4d} | loss {losses[-1]:.9g} | {1e3 * (time.time() - t0):.1f} ms",
                  file=sys.stderr)
    return losses


def cmd_run(a):
    losses = reference_losses(a.model, a.tokens, a.B, a.T, a.steps, a.lr, a.beta1, a.beta2,
                              a.eps, a.weight_decay, a.dtype, a.threads, a.verbose, **sched_opts(a))
    for i, l in enumerate(losses, 1):
        print(f"{i} {l:.9g}")


# ------------------------------------------------------------------ compare

def read_norms(path):
    """The logged grad_norm of every step (None where not measured)."""
    out = {}
    with open(path) as f:
        for line in f:
            o = json.loads(line) if line.strip() else {}
            if "loss" in o and o.get("step", 0) >= 1:
                out[o["step"]] = o.get("grad_norm")
    return [out[k] for k in sorted(out)]


def read_log(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            o = json.loads(line)
            if "loss" in o and o.get("step", 0) >= 1:
                # %.9g of a float: round back to that float exactly
                out[o["step"]] = float(np.float32(o["loss"]))
    return [out[k] for k in sorted(out)]


def cmd_compare(a):
    import torch

    d = dims_from_args(a)
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    model = a.model or os.path.join(work, "model.bin")
    tokens = a.tokens or os.path.join(work, "tokens.bin")
    if not (a.model and a.tokens):
        write_checkpoint(model, d, make_params(d, a.seed, a.wscale))
        write_tokens(tokens, make_tokens(d["V"], a.ntok or default_ntok(d), a.seed))
    else:
        md, _ = read_checkpoint(model)
        d.update(md)

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    gcompile = a.gcompile
    if not gcompile:
        # build-ref, brought up to date: a stale gcompile next to a newer
        # runtime makes programs that refuse to start.
        build = os.path.join(repo, "build-ref")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", repo, "-B", build, "-DGC_ONLY_TESTS=runtime"],
                           check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", build, "-j2", "--target", "gcompile", "gcrt"],
                       check=True, stdout=subprocess.DEVNULL)
        gcompile = os.path.join(build, "gcompile")
    graph = os.path.join(repo, "models", "gpt2.graph")
    exe = os.path.join(work, "train")
    cmd = [gcompile, graph, "--target", "cpu", "-o", exe]
    if a.schedule:
        cmd += ["--schedule", a.schedule]   # fused-opt (the default) clips with a norm pass
    for k in ("B", "T", "maxT", "V", "Vp", "L", "NH", "C"):
        cmd += ["-D", f"{k}={d[k]}"]
    cmd += a.extra
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)

    log = os.path.join(work, "train.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [exe, "--init", model, "--data", tokens, "--steps", str(a.steps), "--lr", repr(a.lr),
           "--log", log, "--threads", str(a.threads)]
    cmd += ["--beta1", repr(a.beta1), "--beta2", repr(a.beta2), "--eps", repr(a.eps),
            "--weight-decay", repr(a.weight_decay), "--warmup", str(a.warmup),
            "--lr-schedule", a.lr_schedule, "--lr-final-frac", repr(a.lr_final_frac),
            "--grad-clip", repr(a.grad_clip)]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL if not a.verbose else None)
    t_prog = time.time() - t0
    prog = read_log(log)

    t0 = time.time()
    opt = dict(beta1=a.beta1, beta2=a.beta2, eps=a.eps, wd=a.weight_decay, **sched_opts(a))
    ref = reference_losses(model, tokens, d["B"], d["T"], a.steps, a.lr, **opt,
                           dtype="fp32", threads=1, verbose=a.verbose)
    t_ref = time.time() - t0
    ref64 = None
    if a.fp64:
        ref64 = reference_losses(model, tokens, d["B"], d["T"], a.steps, a.lr, **opt,
                                 dtype="fp64", threads=1)

    if len(prog) != a.steps:
        sys.exit(f"program logged {len(prog)} steps, expected {a.steps}")
    if a.against == "fp64" and not ref64:
        sys.exit("--against fp64 needs --fp64")
    against = ref64 if a.against == "fp64" else ref
    print(f"\ndims: " + " ".join(f"{k}={d[k]}" for k in ("B", "T", "maxT", "V", "Vp", "L", "NH", "C"))
          + f" | steps {a.steps} | lr {a.lr} | eps {a.eps:g} | wd {a.weight_decay} | torch {torch.__version__} | "
          f"program {t_prog:.1f} s, reference {t_ref:.1f} s")
    head = f"{'step':>4}  {'gcompile':>12}  {'torch fp32':>12}  {'|diff|':>9}"
    if ref64:
        head += f"  {'torch fp64':>12}  {'|prog-64|':>9}  {'|32-64|':>9}"
    print(head + "  result")
    worst, ok = 0.0, True
    for i in range(a.steps):
        diff = abs(prog[i] - against[i])
        worst = max(worst, diff)
        good = diff <= a.tol
        ok &= good
        row = f"{i + 1:>4}  {prog[i]:>12.7f}  {ref[i]:>12.7f}  {diff:>9.2e}"
        if ref64:
            row += (f"  {ref64[i]:>12.7f}  {abs(prog[i] - ref64[i]):>9.2e}"
                    f"  {abs(ref[i] - ref64[i]):>9.2e}")
        print(row + ("  PASS" if good else "  FAIL"))
    if a.grad_clip > 0:
        norms = [n for n in read_norms(log) if isinstance(n, (int, float))]
        clipped = sum(n > a.grad_clip for n in norms)
        print(f"gradient norms {min(norms):.3g}-{max(norms):.3g}: clipped at {clipped} of {a.steps} steps"
              if norms else "gradient norms: not logged")
        if a.min_clipped and clipped < a.min_clipped:
            print(f"FAIL: clipping active at {clipped} steps, fewer than --min-clipped {a.min_clipped}")
            ok = False
    print(f"max |diff| against torch {a.against} = {worst:.3e} (tolerance {a.tol:g}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


# ------------------------------------------------------------------ cli

def sched_opts(a):
    return dict(warmup=a.warmup, schedule=a.lr_schedule, final_frac=a.lr_final_frac, grad_clip=a.grad_clip)


def sched_args(q):
    q.add_argument("--warmup", type=int, default=0, help="warmup steps (program's --warmup)")
    q.add_argument("--lr-schedule", choices=["constant", "cosine", "linear"], default="constant")
    q.add_argument("--lr-final-frac", type=float, default=0.0)
    q.add_argument("--grad-clip", type=float, default=0.0,
                   help="clip by global norm (a fused-opt program with a norm pass)")


def dims_from_args(a):
    d = dict(DEFAULT_DIMS)
    if getattr(a, "config", None) == "gpt2_124M":
        d.update(L=12, NH=12, C=768, V=50257, Vp=50304, maxT=1024, T=64, B=4)
    for kv in getattr(a, "D", None) or []:
        k, _, val = kv.partition("=")
        if k not in d:
            sys.exit(f"-D {kv}: unknown dim (known: {', '.join(d)})")
        d[k] = int(val)
    if d["C"] % d["NH"] or d["T"] > d["maxT"] or d["V"] > d["Vp"]:
        sys.exit(f"bad dims {d}")
    return d


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def dims_opts(q):
        q.add_argument("--config", choices=["small", "gpt2_124M"], default="small",
                       help="small: " + " ".join(f"{k}={v}" for k, v in DEFAULT_DIMS.items()))
        q.add_argument("-D", action="append", metavar="NAME=V", help="override one dim")
        q.add_argument("--seed", type=int, default=20261202)
        q.add_argument("--ntok", type=int, default=0, help="shard length (default 11.7 batches)")
        q.add_argument("--wscale", type=float, default=1.0,
                       help="multiply the init std of the weight matrices (default 1)")

    q = sub.add_parser("make", help="write a seeded checkpoint and token shard")
    dims_opts(q)
    q.add_argument("--model", required=True)
    q.add_argument("--tokens", required=True)
    q.set_defaults(fn=cmd_make)

    q = sub.add_parser("run", help="train the PyTorch reference; print 'step loss' lines")
    q.add_argument("--model", required=True)
    q.add_argument("--tokens", required=True)
    q.add_argument("-B", type=int, required=True)
    q.add_argument("-T", type=int, required=True)
    q.add_argument("--steps", type=int, default=20)
    q.add_argument("--lr", type=float, default=1e-3)
    q.add_argument("--beta1", type=float, default=0.9)
    q.add_argument("--beta2", type=float, default=0.999)
    q.add_argument("--eps", type=float, default=1e-8)
    q.add_argument("--weight-decay", type=float, default=0.0)
    q.add_argument("--dtype", choices=["fp32", "fp64"], default="fp32")
    sched_args(q)
    q.add_argument("--threads", type=int, default=1)
    q.add_argument("-v", "--verbose", action="store_true")
    q.set_defaults(fn=cmd_run)

    q = sub.add_parser("compare", help="build + run the program and the reference; table")
    dims_opts(q)
    q.add_argument("--work", default="/tmp/gcref", help="scratch folder (default /tmp/gcref)")
    q.add_argument("--model", help="use this checkpoint instead of making one (with --tokens)")
    q.add_argument("--tokens")
    q.add_argument("--gcompile", help="use this gcompile as is (default: configure/build "
                                      "<repo>/build-ref first, then use its gcompile)")
    q.add_argument("--steps", type=int, default=20)
    q.add_argument("--lr", type=float, default=1e-3)
    q.add_argument("--tol", type=float, default=1e-4)
    q.add_argument("--beta1", type=float, default=0.9)
    q.add_argument("--beta2", type=float, default=0.999)
    q.add_argument("--eps", type=float, default=1e-8,
                   help="AdamW eps for both; a large one (e.g. 1 with --lr 1) makes the "
                        "update ~ lr*m, so gradient magnitudes show in the losses")
    q.add_argument("--weight-decay", type=float, default=0.0,
                   help="AdamW weight decay for both (default 0, as the acceptance check)")
    q.add_argument("--threads", type=int, default=2, help="threads of the program (default 2)")
    q.add_argument("--fp64", action="store_true", help="also run the reference in fp64")
    q.add_argument("--against", choices=["fp32", "fp64"], default="fp32",
                   help="the reference column --tol applies to (fp64 needs --fp64)")
    q.add_argument("--schedule", choices=["plain", "fused-opt"],
                   help="compile with this --schedule (default: the compiler's, fused-opt, which "
                        "clips with a norm pass)")
    q.add_argument("--min-clipped", type=int, default=0,
                   help="with --grad-clip: FAIL unless the logged norm exceeds the clip at this many steps")
    q.add_argument("--extra", action="append", default=[], metavar="ARG",
                   help="one more gcompile argument (repeatable), e.g. --extra=--no-fuse")
    sched_args(q)
    q.add_argument("-v", "--verbose", action="store_true")
    q.set_defaults(fn=cmd_compare)

    a = p.parse_args()
    sys.exit(a.fn(a) or 0)


if __name__ == "__main__":
    main()
